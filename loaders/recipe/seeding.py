"""A recipe's random ops drawn from a per-sample seed, whoever runs them.

torchvision's v2 transforms take no generator (vision#7027): they draw from torch's global
one. :class:`Seeder` runs a sample's ops with that generator seeded from the sample's own seed
(seed, epoch, key, occurrence), so the pixels depend on nothing else — not on the worker that
decodes the sample, the number of workers, the worker mode or a resume:

- in a DataLoader worker process the global generator is the worker's own: it is seeded, ~1 us;
- in the training process (``num_workers=0``) it is the user's: saved, seeded, restored;
- in decode threads (``worker_mode="thread"``) it is shared with the other threads and with the
  training loop, so it is not touched: the ops run under a thread-local
  ``TorchFunctionMode`` that hands every random call a generator of the thread's own, seeded
  from the same seed (the same draws, at ~2.5 us per torch call of the ops, ~13% of
  TrivialAugmentWide's time).

An opaque callable (not a torchvision transform) may draw from Python's ``random`` or numpy's
global generator too (timm's transforms do): those are seeded from the same seed as well
(restored in the training process; under a lock in decode threads, which serialises those
callables, and other threads of the program that draw from them meanwhile would change the
draws — use worker processes for such callables).
"""

from __future__ import annotations

import random
import threading
from collections.abc import Callable
from enum import StrEnum
from typing import Any

import numpy as np
import torch
from torch.overrides import TorchFunctionMode
from torchvision import transforms as T
from torchvision.transforms import v2

_T = torch.Tensor
# every torch entry point that draws random numbers and takes a generator
RANDOM_OPS = frozenset(
    [
        torch.rand,
        torch.randn,
        torch.randint,
        torch.randperm,
        torch.rand_like,
        torch.randn_like,
        torch.randint_like,
        torch.normal,
        torch.bernoulli,
        torch.multinomial,
        torch.poisson,
        torch.binomial,
        torch._standard_gamma,
        torch._sample_dirichlet,
        _T.uniform_,
        _T.normal_,
        _T.random_,
        _T.bernoulli_,
        _T.bernoulli,
        _T.multinomial,
        _T.exponential_,
        _T.geometric_,
        _T.log_normal_,
        _T.cauchy_,
    ]
)


class Where(StrEnum):
    WORKER = "worker"  # a DataLoader worker process
    MAIN = "main"  # the training process itself (num_workers=0)
    THREAD = "thread"  # a decode thread (worker_mode="thread")


class _ThreadGenerator(TorchFunctionMode):
    """Hands ``generator`` to every random torch call made under it (in this thread only:
    torch's function-mode stack is thread-local)."""

    def __init__(self, generator: torch.Generator) -> None:
        super().__init__()
        self.generator = generator

    def __torch_function__(self, func, types, args=(), kwargs=None):  # type: ignore[no-untyped-def]
        kwargs = kwargs or {}
        if func in RANDOM_OPS and kwargs.get("generator") is None:
            kwargs["generator"] = self.generator
        return func(*args, **kwargs)


_LOCK = threading.Lock()  # Python's and numpy's global generators, in decode threads
_LOCAL = threading.local()


def _seed_globals(seed: int) -> None:
    random.seed(seed)
    np.random.seed(seed & 0xFFFF_FFFF)


def _globals_state() -> tuple[Any, Any]:
    return random.getstate(), np.random.get_state()


def _set_globals(state: tuple[Any, Any]) -> None:
    random.setstate(state[0])
    np.random.set_state(state[1])


class Seeder:
    """Runs ``fn(img)`` with its random draws from ``seed`` (see the module's docstring).
    ``opaque``: ``fn`` may draw from Python's and numpy's generators too."""

    def __init__(self, where: Where, opaque: bool) -> None:
        self.where = Where(where)
        self.opaque = opaque

    def __call__(self, fn: Callable[[Any], Any], img: Any, seed: int) -> Any:
        return self.staged(seed, lambda: img, None, fn)

    def staged(
        self,
        seed: int,
        draw: Callable[[], Any],
        work: Callable[[Any], Any] | None,
        tail: Callable[[Any], Any],
    ) -> Any:
        """``tail(work(draw()))`` with every draw of ``draw`` and ``tail`` from ``seed``, as if
        they ran in a row: ``work`` draws nothing (a decode) and, in a decode thread, runs
        outside the lock that Python's and numpy's generators need, with their state after
        ``draw`` handed on to ``tail``. ``work=None``: nothing between the two."""
        if self.where is Where.WORKER:
            torch.default_generator.manual_seed(seed)
            if self.opaque:
                _seed_globals(seed)
            got = draw()
            return tail(got if work is None else work(got))
        if self.where is Where.MAIN:
            state = torch.default_generator.get_state()
            saved = _globals_state() if self.opaque else None
            try:
                torch.default_generator.manual_seed(seed)
                if self.opaque:
                    _seed_globals(seed)
                got = draw()
                return tail(got if work is None else work(got))
            finally:
                torch.default_generator.set_state(state)
                if saved is not None:
                    _set_globals(saved)
        generator = getattr(_LOCAL, "generator", None)
        if generator is None:
            generator = _LOCAL.generator = torch.Generator()
        generator.manual_seed(seed)
        with _ThreadGenerator(generator):
            if not self.opaque:
                got = draw()
                return tail(got if work is None else work(got))
            with _LOCK:
                saved = _globals_state()
                try:
                    _seed_globals(seed)
                    got = draw()
                    if work is None:
                        return tail(got)
                    after = _globals_state()
                finally:
                    _set_globals(saved)
            img = work(got)
            with _LOCK:
                saved = _globals_state()
                try:
                    _set_globals(after)
                    return tail(img)
                finally:
                    _set_globals(saved)


_CONTAINERS = (
    v2.Compose,
    v2.RandomApply,
    v2.RandomChoice,
    v2.RandomOrder,
    T.Compose,
    T.RandomApply,
    T.RandomChoice,
    T.RandomOrder,
)


def draws_from_globals(op: Any) -> bool:
    """``op`` may draw from Python's or numpy's global generators: it is not a torchvision
    transform (nor a container of only those), nor one of the loader's own conversions."""
    if isinstance(op, v2.Lambda | T.Lambda):
        return True
    if getattr(op, "draws_nothing", False):  # the conversions of loaders.recipe.imagetypes
        return False
    if isinstance(op, _CONTAINERS):
        return any(draws_from_globals(t) for t in op.transforms)
    return not (isinstance(op, torch.nn.Module) and type(op).__module__.startswith("torchvision."))


__all__ = ["RANDOM_OPS", "Seeder", "Where", "draws_from_globals"]
