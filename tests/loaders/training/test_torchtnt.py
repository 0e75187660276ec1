"""make_loader under torchtnt: ``train(unit, loader)`` on 2 CPU ranks (torchrun, gloo on
127.0.0.1) of tests/loaders/training/torchtnt_job.py, checkpointing with torchtnt's own
``DistributedCheckpointSaver`` every 2 steps (intra-epoch: the loader is Stateful, so torchtnt
saves its state with the unit's), then restoring the checkpoint of step 2 into a new unit and
loader: the resumed run trains on exactly the batches the uninterrupted one did. ``set_epoch``
reaches the loader through the unit's ``on_train_epoch_start``.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.loaders.training.jobs import check_runs, run_job

pytest.importorskip("torchtnt", reason="torchtnt is not installed (pip install -e '.[torchtnt]')")
pytestmark = [pytest.mark.slow, pytest.mark.full]


def test_torchtnt_train_checkpoints_mid_epoch_and_resumes_exactly(
    learnable_dataset: Path, tmp_path: Path
) -> None:
    run_job("torchtnt_job.py", tmp_path, learnable_dataset)
    check_runs(tmp_path, learnable_dataset, resumed_after=(0, 1))  # saved after 2 steps
