"""Every kind of output gives the very batches it gave before the kinds moved into modules of
their own: pixels, labels, fields, keys, strides, bit for bit (``golden.py`` says how they were
saved and how to save them again after a change that is meant to move them)."""

from __future__ import annotations

import json

import numpy as np
import pytest

from tests.loaders.kinds import golden

pytestmark = pytest.mark.filterwarnings("ignore::UserWarning")


@pytest.fixture(scope="module")
def saved() -> tuple[dict[str, np.ndarray], dict[str, object]]:
    with np.load(golden.DATA / "batches.npz", allow_pickle=False) as z:
        arrays = {name: z[name] for name in z.files}
    return arrays, json.loads((golden.DATA / "batches.json").read_text())


@pytest.mark.parametrize("case", sorted(golden.EPOCHS.keys() | set(golden.CASES)))
def test_batches_are_the_saved_ones(case: str, saved) -> None:  # type: ignore[no-untyped-def]
    arrays, rest = saved
    got_arrays: dict[str, np.ndarray] = {}
    got_rest: dict[str, object] = {}
    for name, batch in golden.batches(case):
        a, r = golden.flatten(name, batch)
        got_arrays.update(a)
        got_rest.update(r)
    want_arrays = {k: v for k, v in arrays.items() if k.startswith(case + "/")}
    want_rest = {k: v for k, v in rest.items() if k.startswith(case + "/")}
    assert want_arrays, f"nothing saved for {case}"
    assert sorted(got_arrays) == sorted(want_arrays)
    for name, want in want_arrays.items():
        got = got_arrays[name]
        assert (got.dtype, got.shape) == (want.dtype, want.shape), name
        assert np.array_equal(got, want), f"{name}: {int((got != want).sum())} values differ"
    assert json.loads(json.dumps(got_rest)) == want_rest
