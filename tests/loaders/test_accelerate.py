"""make_loader under Hugging Face Accelerate: a real 2-process run on the CPU (torchrun, gloo on
127.0.0.1) of tests/loaders/accelerate_job.py.

``accelerator.prepare`` returns our loader unchanged (it wraps only torch DataLoaders, so the
data is split over the ranks once, by the loader); the two ranks cover every sample exactly once
per epoch; ``register_for_checkpointing(loader)`` + ``save_state`` after batch 1 of epoch 0, then
``load_state`` into a new loader resumes with exactly the batches the uninterrupted run
delivered from there on.
"""

from __future__ import annotations

from collections import Counter
from pathlib import Path

import pytest

from tests.loaders.conftest import shard_keys
from tests.loaders.jobs import batches, read_log, run_job
from tests.loaders.test_lightning import _plain

pytest.importorskip(
    "accelerate", reason="accelerate is not installed (pip install 'wdstool[accelerate]')"
)
pytestmark = pytest.mark.slow

EPOCHS = 2  # 120 samples / 2 ranks / batch 15 = 4 batches per epoch


def test_accelerate_prepare_checkpoint_and_resume(learnable_dataset: Path, tmp_path: Path) -> None:
    run_job("accelerate_job.py", tmp_path, learnable_dataset)
    everything = Counter(k for ks in shard_keys(learnable_dataset) for k in ks)
    for rank in range(2):
        start = {
            "prepared_is_loader": True,  # Accelerate left it alone: no second sharding
            "batch_size": 15,  # an int, as DeepSpeed's "auto" micro-batch needs
            "world_size": 2,
            "loader_rank": rank,
            "loader_world": 2,
            "len": 4,  # also after load_state: len counts the whole epoch
        }
        assert read_log(tmp_path, rank)[0] == read_log(tmp_path, rank, "resumed")[0] == start
        got = batches(tmp_path, rank)
        assert [(e, s) for e, s, _ in got] == [(e, s) for e in range(EPOCHS) for s in range(4)]
        for epoch in range(EPOCHS):  # the rank's share, as a plain loop over make_loader gets it
            assert [k for e, _, k in got if e == epoch] == _plain(learnable_dataset, rank, epoch)
        after = [b for b in got if (b[0], b[1]) > (0, 1)]
        assert batches(tmp_path, rank, "resumed") == after  # from batch 2 of epoch 0 on
    for epoch in range(EPOCHS):  # both ranks: every sample exactly once
        seen = Counter(
            k for r in range(2) for e, _, ks in batches(tmp_path, r) if e == epoch for k in ks
        )
        assert seen == everything
