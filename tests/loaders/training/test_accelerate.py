"""make_loader under Hugging Face Accelerate: a real 2-process run on the CPU (torchrun, gloo on
127.0.0.1) of tests/loaders/training/accelerate_job.py.

``accelerator.prepare`` returns our loader unchanged (it wraps only torch DataLoaders, so the
data is split over the ranks once, by the loader); the two ranks cover every sample exactly once
per epoch; ``register_for_checkpointing(loader)`` + ``save_state`` after batch 1 of epoch 0, then
``load_state`` into a new loader resumes with exactly the batches the uninterrupted run
delivered from there on.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.loaders.training.jobs import check_runs, read_log, run_job

pytest.importorskip(
    "accelerate", reason="accelerate is not installed (pip install -e '.[accelerate]')"
)
pytestmark = [pytest.mark.slow, pytest.mark.full]


def test_accelerate_prepare_checkpoint_and_resume(learnable_dataset: Path, tmp_path: Path) -> None:
    run_job("accelerate_job.py", tmp_path, learnable_dataset)
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
    check_runs(tmp_path, learnable_dataset, resumed_after=(0, 1))  # saved after batch 1
