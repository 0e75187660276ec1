"""Every sample's length in tokens, known before the epoch is planned: what makes packing a pure
function of the plan (docs/design/packing.md).

A sample's length is its text's tokens plus each image's placeholder tokens, which depend only
on the image's output size (the native rule computes it from the header; a recipe's size is
fixed): :func:`sample_lengths` reads the text members and the image headers once, never
decoding pixels, and keeps the result per host (``lengths-<key>.npy`` in the loader's
``cache_dir``, else ``$WDSTOOL_CACHE``, else ``~/.cache/wdstool``), keyed by the data set's identity, the tokenizer,
the image rule and the settings that change a length.
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
import tempfile
import time
from typing import Any

import numpy as np

from loaders.interleaved.output import Interleaved
from loaders.interleaved.sample_parts import sample_content, without_images_from
from loaders.plan import Slice
from loaders.read import SourceReader, read_slices
from loaders.source_table import cache_folder
from wdstool.base.errors import ConfigError, SampleError
from wdstool.format.decode import header_size
from wdstool.format.images import MAX_PIXELS

log = logging.getLogger(__name__)


def _key(reader: SourceReader, spec: Interleaved, size: Any) -> str:
    fn = spec.image_tokens
    what = {
        "data": reader.index.identity,
        "tokenizer": spec.tokenizer.fingerprint if spec.tokenizer is not None else None,
        "native": repr(spec.native),
        "model": repr(spec.model) if spec.model is not None else None,
        "size": size,
        "max_images": spec.max_images,
        "image_tokens": None if fn is None else f"{fn.__module__}.{fn.__qualname__}",
    }
    if spec.chat is not None:  # a conversation's length is its rendering's
        template = spec.chat.template or (spec.tokenizer.chat_template if spec.tokenizer else "")
        what["chat"] = hashlib.sha256((template or "").encode()).hexdigest()
    return hashlib.sha256(json.dumps(what, sort_keys=True).encode()).hexdigest()[:24]


def sample_lengths(
    reader: SourceReader, spec: Interleaved, size: Any, *, skip_bad: bool = False
) -> np.ndarray:
    """Tokens of every sample of ``reader``'s source, in shard order (int64). ``size``: the
    recipe's output size (h, w) where images go through a recipe (None with the native
    rule). A bad sample is a SampleError, or with ``skip_bad`` a length of 1 (it is replaced
    when read)."""
    if spec.tokenizer is None:
        raise ConfigError("Interleaved(packing=...) needs tokenizer=: lengths are in tokens")
    if spec.native is None and size is None and spec.model is None:
        raise ConfigError(
            "Interleaved(packing=...): give native=NativeResolution(...) or a transform of one "
            "output size, so that each image's tokens are known before it is decoded"
        )
    path = cache_folder(reader.access.cache_dir) / f"lengths-{_key(reader, spec, size)}.npy"
    if path.exists():
        return np.load(path, allow_pickle=False)  # type: ignore[no-any-return]
    t0 = time.perf_counter()
    sizes = reader.index.sizes
    slices = [Slice(i, 0, n) for i, n in enumerate(sizes) if n]
    out = np.empty(sum(sizes), dtype=np.int64)
    at = 0
    for loc in read_slices(slices, reader.index, reader.access, reader.keep):
        try:
            out[at] = _length(loc.sample, loc.url, spec, size)
        except SampleError:
            if not skip_bad:
                raise
            out[at] = 1
        at += 1
    if at != len(out):
        raise ConfigError(f"{reader.index.urls[0]}: read {at} samples, the index says {len(out)}")
    path.parent.mkdir(parents=True, exist_ok=True)
    with tempfile.NamedTemporaryFile(dir=path.parent, suffix=".tmp", delete=False) as f:
        np.save(f, out, allow_pickle=False)
    os.replace(f.name, path)
    log.info(
        "token lengths of %d samples computed in %.1f s, kept in %s",
        len(out),
        time.perf_counter() - t0,
        path,
    )
    return out


def _length(sample: Any, url: str, spec: Interleaved, size: Any) -> int:
    where = f"{url}: sample {sample.key!r}"
    content, datas = sample_content(sample, url, spec)
    most = spec.max_images
    if most is not None and len(datas) > most:
        datas = datas[:most]
        content = without_images_from(content, most)
    counts = []
    for data in datas:
        if spec.native is not None:
            w, h = header_size(data, max_pixels=MAX_PIXELS, where=where)
            oh, ow = spec.native.size(h, w, where)
        elif spec.model is not None:  # a fixed-size encoder: as many tokens whatever the size
            oh = ow = 0
        else:
            oh, ow = (size, size) if isinstance(size, int) else size
        counts.append(spec.tokens_of(oh, ow))
    return int(spec.encode(content, counts, where).length)


__all__ = ["sample_lengths"]
