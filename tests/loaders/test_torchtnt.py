"""make_loader under torchtnt: ``train(unit, loader)`` on 2 CPU ranks (torchrun, gloo on
127.0.0.1) of tests/loaders/torchtnt_job.py, checkpointing with torchtnt's own
``DistributedCheckpointSaver`` every 2 steps (intra-epoch: the loader is Stateful, so torchtnt
saves its state with the unit's), then restoring the checkpoint of step 2 into a new unit and
loader: the resumed run trains on exactly the batches the uninterrupted one did.
"""

from __future__ import annotations

from collections import Counter
from pathlib import Path

import pytest

from tests.loaders.conftest import shard_keys
from tests.loaders.jobs import batches, run_job
from tests.loaders.test_lightning import _plain

pytest.importorskip(
    "torchtnt", reason="torchtnt is not installed (pip install 'wdstool[torchtnt]')"
)
pytestmark = pytest.mark.slow

EPOCHS = 2  # 120 samples / 2 ranks / batch 15 = 4 batches per epoch


def test_torchtnt_train_checkpoints_mid_epoch_and_resumes_exactly(
    learnable_dataset: Path, tmp_path: Path
) -> None:
    run_job("torchtnt_job.py", tmp_path, learnable_dataset)
    everything = Counter(k for ks in shard_keys(learnable_dataset) for k in ks)
    for rank in range(2):
        got = batches(tmp_path, rank)
        assert [(e, s) for e, s, _ in got] == [(e, s) for e in range(EPOCHS) for s in range(4)]
        for epoch in range(EPOCHS):  # set_epoch reached the loader (the unit's epoch hook)
            assert [k for e, _, k in got if e == epoch] == _plain(learnable_dataset, rank, epoch)
        after = [b for b in got if (b[0], b[1]) > (0, 1)]
        assert batches(tmp_path, rank, "resumed") == after  # from batch 2 of epoch 0 on
    for epoch in range(EPOCHS):  # both ranks: every sample exactly once
        seen = Counter(
            k for r in range(2) for e, _, ks in batches(tmp_path, r) if e == epoch for k in ks
        )
        assert seen == everything
