"""The kinds of output behind one interface: each names its batch keys (none a field may
take), the loader picks the first that applies, and a new kind is one class and one
registration: the dataset, pool, delivery and loader take it without a change."""

from __future__ import annotations

import random
import tarfile
from typing import Any

import pytest
import torch

import loaders.kinds as kinds
from loaders import make_loader
from loaders.config import LoaderConfig
from loaders.delivery import BatchMeta, Slot
from loaders.kinds import KINDS, OutputKind, kind_for
from loaders.kinds.base import NextSample, image_part
from loaders.kinds.clip import ClipKind
from loaders.kinds.encoded import EncodedKind
from loaders.kinds.image import ImageKind
from loaders.kinds.views import ViewsKind
from loaders.read import Located
from loaders.recipe import Seeder
from loaders.schema import RESERVED
from tests.loaders.kinds import golden
from wdstool.base.errors import ConfigError

IMAGES = str(golden.DATA / golden.IMAGES)


def test_every_kind_fills_only_reserved_keys() -> None:
    for kind in KINDS:
        assert kind.pixel_key in kind.keys, kind.name
        # input_ids: what a tokenizer makes, which a fields_fn may make too (a packed loader,
        # the one kind filling it, takes no fields)
        keys = set(kind.keys) - {"input_ids"}
        assert keys <= RESERVED, (kind.name, keys - RESERVED)


@pytest.mark.parametrize(
    ("kw", "kind"),
    [
        ({}, ImageKind),
        ({"output": "encoded"}, EncodedKind),
        ({"views": [(None, 2)]}, ViewsKind),
    ],
)
def test_the_loader_makes_the_first_kind_that_applies(kw: dict[str, Any], kind: type) -> None:
    if "views" in kw:
        from torchvision.transforms import v2

        kw = {"views": [(v2.RandomResizedCrop(16), 2)]}
    loader = make_loader(IMAGES, batch_size=4, num_workers=0, rank=0, world_size=1, **kw)
    assert loader.dataset.kind is kind is kind_for(loader.config)
    assert set(kind.batch_keys(loader.config)) <= set(next(iter(loader)))


def test_a_clips_loader_is_the_clip_kind() -> None:
    from loaders import Clips

    src = str(golden.DATA / golden.VIDEOS)
    loader = make_loader(src, batch_size=2, clips=Clips(frames=2), image_size=16, num_workers=0)
    assert loader.dataset.kind is ClipKind
    assert set(ClipKind.batch_keys(loader.config)) <= set(next(iter(loader)))


class Nbytes:
    """A new kind's own settings object (as ``loaders.Clips`` is the clip kind's)."""


class NbytesKind(OutputKind):
    """A kind made here: each sample's image size in bytes, as ``nbytes`` int64 [B]."""

    name = "nbytes"
    pixel_key = "nbytes"
    keys = ("nbytes",)

    @staticmethod
    def applies(config: LoaderConfig) -> bool:
        return isinstance(config.sample, Nbytes)

    def decode(
        self, loc: Located, rng: random.Random, seeder: Seeder, where: str
    ) -> tuple[Any, dict[str, Any] | None]:
        return len(image_part(loc)), None

    def fill(self, next_sample: NextSample, n: int, out: Slot, meta: BatchMeta) -> dict[str, Any]:
        sizes = torch.empty(n, dtype=torch.int64)
        for i in range(n):
            got = next_sample()
            sizes[i] = got.payload
            meta.add(i, got)
        return {"nbytes": sizes}


@pytest.mark.parametrize("workers", [0, 2])
def test_a_new_kind_is_one_class_and_one_registration(
    workers: int, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Its settings object comes through make_loader's ``output``: no keyword of its own."""

    class NbytesKindHere(NbytesKind):
        settings = Nbytes

    monkeypatch.setattr(kinds, "KINDS", (NbytesKindHere, *KINDS))
    kw: dict[str, Any] = dict(batch_size=4, num_workers=workers, rank=0, world_size=1)
    plain = make_loader(IMAGES, **kw)
    loader = make_loader(IMAGES, output=Nbytes(), **kw)
    assert loader.dataset.kind is NbytesKindHere
    want = {}
    for path in sorted(golden.DATA.glob("images-*.tar")):
        with tarfile.open(path) as tar:
            for m in tar.getmembers():
                if m.name.endswith(".jpg"):
                    want[m.name[: -len(".jpg")]] = m.size
    got = {}
    batches = list(loader)
    assert len(batches) == len(loader) == len(plain)
    for batch, ref in zip(batches, plain, strict=True):
        assert batch["keys"] == ref["keys"]  # the same plan, the same order
        assert torch.equal(batch["labels"], ref["labels"])
        got.update(zip(batch["keys"], batch["nbytes"].tolist(), strict=True))
    assert got == want


def test_output_takes_a_kinds_settings_object() -> None:
    from loaders import Clips

    src = str(golden.DATA / golden.VIDEOS)
    kw: dict[str, Any] = dict(batch_size=2, image_size=16, num_workers=0, rank=0, world_size=1)
    by_output = make_loader(src, output=Clips(frames=2), **kw)
    by_clips = make_loader(src, clips=Clips(frames=2), **kw)
    assert by_output.dataset.kind is ClipKind
    for a, b in zip(by_output, by_clips, strict=True):
        assert a["keys"] == b["keys"] and torch.equal(a["video"], b["video"])
    with pytest.raises(ConfigError, match="not both"):
        make_loader(src, output=Clips(), clips=Clips(), **kw)
    with pytest.raises(ConfigError, match=r"output=<.*Nbytes.*loaders\.Clips"):
        make_loader(src, output=Nbytes(), **kw)  # a settings object no kind registered
