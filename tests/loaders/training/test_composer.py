"""make_loader under MosaicML Composer's own Trainer on the CPU: two short epochs, a checkpoint
after batch 2 of epoch 0, and a new Trainer resumed from it (``load_path``).

Skipped here: Composer cannot be installed beside torch 2.14.1 (mosaicml 0.32.1, the latest,
requires torch<2.7.1), so this test has not run yet; it is the README's Composer snippet in
executable form, for an environment where both install.

Composer 0.32 reaches a loader only through ``torch.utils.data.DataLoader`` (its
``_dataset_of`` and its ``DistributedSampler.set_epoch`` call check for that type): it neither
reshuffles ours nor saves its position by itself. The callback below does both: ``set_epoch``
at every epoch start, the loader's state inside Composer's checkpoint (callbacks' state dicts
are saved with it), and on resume it tells Composer the loader resumes itself, so Composer does
not replay the epoch's first batches.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from loaders import make_loader

composer = pytest.importorskip(
    "composer",
    reason="Composer is not installable here: mosaicml 0.32.1 (the latest) requires "
    "torch<2.7.1 and this project pins torch 2.14.1",
)

BATCH, EPOCHS = 30, 2  # 120 samples, one rank: 4 batches per epoch


def _plain(data: Path, epoch: int) -> list[list[str]]:
    loader = make_loader(data, BATCH, image_size=16, num_workers=1, seed=0)
    loader.set_epoch(epoch)
    return [list(b["keys"]) for b in loader]


class LoaderState(composer.Callback):
    """make_loader under Composer: reshuffle every epoch, resume mid-epoch exactly."""

    def __init__(self, loader) -> None:
        self.loader = loader
        self.resumed = False

    def fit_start(self, state, logger) -> None:
        if self.resumed:  # the loader continues where it stopped: no batches to skip
            state.dataset_resumption["train"] = True

    def epoch_start(self, state, logger) -> None:
        self.loader.set_epoch(int(state.timestamp.epoch))

    def state_dict(self) -> dict:
        return {"loader": self.loader.state_dict()}

    def load_state_dict(self, state: dict) -> None:
        self.loader.load_state_dict(state["loader"])
        self.resumed = True


class KeysSeen(composer.Callback):
    def __init__(self) -> None:
        self.seen: list[tuple[int, int, list[str]]] = []

    def after_dataloader(self, state, logger) -> None:
        t = state.timestamp
        self.seen.append((int(t.epoch), int(t.batch_in_epoch), list(state.batch["keys"])))


def _trainer(data: Path, folder: Path, **kwargs):
    import torch
    from composer import DataSpec, Trainer
    from composer.models import ComposerModel

    class Tiny(ComposerModel):
        def __init__(self) -> None:
            super().__init__()
            self.net = torch.nn.Linear(3, 3)

        def forward(self, batch):
            return self.net(batch["pixel_values"].float().mean(dim=(2, 3)) / 255)

        def loss(self, outputs, batch):
            return torch.nn.functional.cross_entropy(outputs, batch["labels"])

    loader = make_loader(data, BATCH, image_size=16, num_workers=1, seed=0)
    keys = KeysSeen()
    spec = DataSpec(
        loader,
        num_samples=len(loader) * BATCH,
        get_num_samples_in_batch=lambda batch: len(batch["keys"]),
    )
    trainer = Trainer(
        model=Tiny(),
        train_dataloader=spec,
        max_duration=f"{EPOCHS}ep",
        callbacks=[LoaderState(loader), keys],
        device="cpu",
        save_folder=str(folder),
        save_filename="ba{batch}.pt",
        save_interval="2ba",
        **kwargs,
    )
    return trainer, keys


def test_composer_trainer_reshuffles_and_resumes_mid_epoch(
    learnable_dataset: Path, tmp_path: Path
) -> None:
    first, keys = _trainer(learnable_dataset, tmp_path / "first")
    first.fit()
    assert [(e, b) for e, b, _ in keys.seen] == [(e, b) for e in range(EPOCHS) for b in range(4)]
    for epoch in range(EPOCHS):  # set_epoch reached the loader, through the callback
        assert [k for e, _, k in keys.seen if e == epoch] == _plain(learnable_dataset, epoch)
    first.close()
    resumed, again = _trainer(
        learnable_dataset, tmp_path / "second", load_path=str(tmp_path / "first" / "ba2.pt")
    )
    resumed.fit()
    assert again.seen == [s for s in keys.seen if (s[0], s[1]) >= (0, 2)]
