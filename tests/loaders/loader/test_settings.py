"""The loader's settings: make_loader's flat keywords take their defaults from the settings
values (one place for defaults), and the plan's functions take a handful of parameters."""

from __future__ import annotations

import dataclasses
import inspect

import pytest

import loaders.plan as plan
from loaders import make_loader
from loaders.config import BatchSettings, WorkerSettings
from loaders.plan import EpochSpec, Topology
from wdstool.base.errors import ConfigError

# make_loader keyword -> (settings class, field)
FIELDS = {
    "batch_size": (EpochSpec, "batch_size"),
    "seed": (EpochSpec, "seed"),
    "shuffle": (EpochSpec, "shuffle"),
    "shuffle_buffer": (EpochSpec, "shuffle_buffer"),
    "uneven": (EpochSpec, "uneven"),
    "drop_last": (EpochSpec, "drop_last"),
    "worker_mode": (WorkerSettings, "mode"),
    "prefetch_factor": (WorkerSettings, "prefetch_factor"),
    "pin_memory": (WorkerSettings, "pin_memory"),
    "persistent_workers": (WorkerSettings, "persistent"),
    "multiprocessing_context": (WorkerSettings, "context"),
    "output": (BatchSettings, "output"),
    "channels_last": (BatchSettings, "channels_last"),
    "scaled_decode": (BatchSettings, "scaled_decode"),
    "on_error": (BatchSettings, "on_error"),
    "max_replaced": (BatchSettings, "max_replaced"),
}


def test_make_loader_defaults_are_the_settings_defaults() -> None:
    params = inspect.signature(make_loader).parameters
    for name, (cls, fname) in FIELDS.items():
        default = {f.name: f.default for f in dataclasses.fields(cls)}[fname]
        assert params[name].default == default, (name, params[name].default, default)


def test_every_rule_is_checked_where_its_value_is_built() -> None:
    for build, match in (
        (lambda: EpochSpec(batch_size=0), "batch_size"),
        (lambda: EpochSpec(uneven="mask", drop_last=True), "mask"),
        (lambda: EpochSpec(uneven="sometimes"), "uneven"),
        (lambda: Topology(2, 2), "rank 2"),
        (lambda: Topology(0, 1, -1), "num_workers"),
        (lambda: WorkerSettings(prefetch_factor=0), "prefetch_factor"),
        (lambda: WorkerSettings(mode="fiber"), "worker_mode"),
        (lambda: BatchSettings(max_replaced=1.5), "max_replaced"),
        (lambda: BatchSettings(output="jpeg"), "output"),
    ):
        with pytest.raises(ConfigError, match=match):
            build()


def test_the_plan_functions_take_a_handful_of_parameters() -> None:
    for name in plan.__all__:
        obj = getattr(plan, name)
        if inspect.isfunction(obj):
            assert len(inspect.signature(obj).parameters) <= 5, name
