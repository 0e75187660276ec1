"""A torchrun job (2 ranks, gloo, the CPU) training on a Hub data set read in place over hf://."""

from __future__ import annotations

import json
from pathlib import Path

import pyarrow.parquet as pq
import pytest

from tests.support.parquet import hub_split
from tests.support.torchrun import torchrun
from tests.support.webserver import WebServer

pytestmark = [pytest.mark.slow, pytest.mark.full]  # make test-full: make test stays <= 10 min


def test_two_ranks_train_on_a_hub_split_read_in_place(tmp_path: Path, monkeypatch) -> None:
    """Equal steps on both ranks, each row at most once per epoch (all but each rank's dropped
    partial batch), the classes from the ClassLabel; the host's two ranks list the repository
    once (one asks the Hub's API, the other takes its listing) and fetch the image and label
    chunks once an epoch."""
    rows = hub_split(tmp_path, "train", files=3, rows=60, group=20)
    asked = 0
    for f in sorted((tmp_path / "data").glob("train-*.parquet")):
        md = pq.read_metadata(f)
        for g in range(md.num_row_groups):
            rg = md.row_group(g)
            cols = [rg.column(j) for j in range(rg.num_columns)]
            asked += sum(c.total_compressed_size for c in cols if c.path_in_schema != "text")
    out = tmp_path / "report"
    with WebServer(tmp_path) as srv:
        monkeypatch.setenv("HF_ENDPOINT", srv.url)
        torchrun(
            2,
            "--data",
            "hf://datasets/someone/pets#train",
            "--device",
            "cpu",
            "--epochs",
            "2",
            "--batch-size",
            "8",
            "--image-size",
            "32",
            "--workers",
            "1",
            "--log-every",
            "5",
            "--out",
            str(out),
        )
        listings = [p for _m, p, _r in srv.requests if p.startswith("/api/")]
        sent = srv.total_sent(".parquet")
    reports = [json.loads((out / f"rank{r}.json").read_text()) for r in range(2)]
    keys = {r["key"] for r in rows}
    for epoch in range(2):
        assert {r["epochs"][epoch]["steps"] for r in reports} == {reports[0]["len"]} == {11}
        covered = [k for r in reports for k in r["epochs"][epoch]["keys"]]
        assert len(covered) == len(set(covered)) == 2 * 8 * 11 and set(covered) <= keys
    assert len(listings) == 1  # one rank listed the repository; the other took its listing
    assert sent <= 2 * 1.05 * asked + 3 * (8 << 10)  # two epochs of the asked chunks + footers
