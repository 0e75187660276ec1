"""The code blocks of the README and the guides, found and run as a reader would run them.

A page's blocks run in order, in a new, empty folder of their own, as a reader who has made
only the venv runs them: the page makes the data it uses (``wdstool sample-data``, a few lines
of Python), a page's Python blocks share one namespace, as in a session where the reader pastes
them one after another, and shell blocks run in ``bash -e`` with the venv's ``bin/`` first on
``PATH`` (as ``source .venv/bin/activate`` puts it) and no ``PYTHONPATH``.

A guide's fragment may use the names a training script around it has (``model``, ``device``,
``epochs``, ``loader``, ...): :data:`GIVEN` lists each with what it stands for, made only when a
block reads a name it did not define. A comment on the line before a block changes how it runs,
visibly in the page's source:

- ``<!-- snippet: skip: REASON -->``: not run here, and why (a real bucket, the Hub, GPUs);
- ``<!-- snippet: file NAME; COMMAND -->``: the block is saved as NAME and COMMAND runs it in
  bash (a script that ``torchrun`` starts, say).
"""

from __future__ import annotations

import ast
import re
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[2]
PAGES = [
    ROOT / "README.md",
    ROOT / "docs" / "index.md",
    *sorted((ROOT / "docs" / "guides").glob("*.md")),
]
LANGUAGES = {"python": "python", "bash": "bash", "sh": "bash", "shell": "bash"}
FENCE = re.compile(r"^(?P<indent> *)```(?P<lang>[\w-]*)\s*$")
DIRECTIVE = re.compile(r"^\s*<!--\s*snippet:\s*(?P<what>.*?)\s*-->\s*$")


@dataclass(frozen=True)
class Block:
    """One fenced block of a page: where it is, its language, its code and its directive."""

    page: Path
    line: int  # the fence's line, 1-based
    lang: str  # "python", "bash" or "" (text, output: never run)
    code: str
    directive: str = ""

    @property
    def where(self) -> str:
        return f"{self.page.relative_to(ROOT).as_posix()}:{self.line}"

    @property
    def skip_reason(self) -> str | None:
        if self.directive.startswith("skip:"):
            return self.directive[len("skip:") :].strip()
        return None

    @property
    def as_file(self) -> tuple[str, str] | None:
        """(file name, command) of a ``file NAME; COMMAND`` directive."""
        m = re.fullmatch(r"file\s+(\S+)\s*;\s*(.+)", self.directive)
        return (m.group(1), m.group(2)) if m else None


def blocks(page: Path) -> list[Block]:
    """Every fenced block of ``page`` in order (indented ones inside lists too)."""
    lines = page.read_text().splitlines()
    found, i = [], 0
    while i < len(lines):
        m = FENCE.match(lines[i])
        if not m:
            i += 1
            continue
        indent, start = m.group("indent"), i
        end = next(
            (j for j in range(i + 1, len(lines)) if lines[j].rstrip() == indent + "```"), None
        )
        assert end is not None, f"{page}:{i + 1}: a code block is not closed"
        body = [
            ln[len(indent) :] if ln.startswith(indent) else ln.lstrip() for ln in lines[i + 1 : end]
        ]
        prev = next((lines[j] for j in range(start - 1, -1, -1) if lines[j].strip()), "")
        d = DIRECTIVE.match(prev)
        found.append(
            Block(
                page,
                start + 1,
                LANGUAGES.get(m.group("lang"), ""),
                "\n".join(body) + "\n",
                d.group("what") if d else "",
            )
        )
        i = end + 1
    return found


def names(code: str) -> tuple[set[str], set[str]]:
    """(names a block binds, names it reads): assignments, imports, definitions and arguments;
    loads anywhere in it."""
    bound, read = set(), set()
    for node in ast.walk(ast.parse(code)):
        if isinstance(node, ast.Name):
            (bound if isinstance(node.ctx, ast.Store | ast.Del) else read).add(node.id)
        elif isinstance(node, ast.alias):
            bound.add((node.asname or node.name).split(".")[0])
        elif isinstance(node, ast.FunctionDef | ast.ClassDef | ast.AsyncFunctionDef):
            bound.add(node.name)
        elif isinstance(node, ast.arg):
            bound.add(node.arg)
    return bound, read


def free_names(code: str) -> set[str]:
    """Names a block reads that it never binds (what it needs from outside)."""
    bound, read = names(code)
    return read - bound


# What a fragment may use without defining it: name -> (what it stands for, how it is made from
# the namespace so far). Made lazily, at the first read of the name.
Factory = Callable[[dict[str, Any]], Any]


def _model(ns: dict[str, Any]) -> Any:
    import torch

    return torch.nn.Sequential(
        torch.nn.Conv2d(3, 8, 3, stride=4),
        torch.nn.AdaptiveAvgPool2d(1),
        torch.nn.Flatten(),
        torch.nn.Linear(8, 10),
    )


def _loader(ns: dict[str, Any]) -> Any:
    from loaders import make_loader

    return make_loader("data/shards", batch_size=8, num_workers=2, seed=0, image_size=64)


def _tokenize(fields: dict[str, Any]) -> dict[str, Any]:
    """A stand-in for a tokenizer call with padding to 16: the caption's bytes as ids; every
    other field passed on."""
    import torch

    ids = list(str(fields.get("caption", "")).encode())
    return {
        **{k: v for k, v in fields.items() if k != "caption"},
        "input_ids": torch.tensor((ids + [0] * 16)[:16]),
    }


def _v2_train(size: int) -> Any:
    from torchvision.transforms import v2

    return v2.Compose([v2.RandomResizedCrop(size), v2.RandomHorizontalFlip()])


def _v1_train(ns: dict[str, Any]) -> Any:
    from torchvision import transforms as T

    return T.Compose(
        [
            T.RandomResizedCrop(224),
            T.RandomHorizontalFlip(),
            T.ToTensor(),
            T.Normalize([0.485, 0.456, 0.406], [0.229, 0.224, 0.225]),
        ]
    )


def _args(ns: dict[str, Any]) -> Any:
    import argparse

    return argparse.Namespace(data_dir="data/shards", batch_size=8, workers=2, model="tiny")


GIVEN: dict[str, tuple[str, Factory]] = {
    "epochs": ("how many epochs the script trains", lambda ns: 1),
    "device": ("the device batches go to", lambda ns: __import__("torch").device("cpu")),
    "rank": ("this process's rank", lambda ns: 0),
    "model": ("the model being trained (a tiny CNN here)", _model),
    "optimizer": (
        "its optimizer",
        lambda ns: __import__("torch").optim.SGD(ns["model"].parameters(), lr=0.1),
    ),
    "loader": ("a loader made earlier in the script", _loader),
    "batch": ("a batch of the loader the block made", lambda ns: next(iter(ns["loader"]))),
    "tf": ("a transform: a torchvision v2 pipeline", lambda ns: _v2_train(64)),
    "train_tf": ("the torchvision v1 pipeline of the block being replaced", _v1_train),
    "deit_recipe": ("a DeiT-like v2 recipe", lambda ns: _v2_train(224)),
    "global_crop": ("DINO's global crop (224 px)", lambda ns: _v2_train(224)),
    "local_crop": ("DINO's local crop (96 px)", lambda ns: _v2_train(96)),
    "tokenize": ("a tokenizer call for fields_fn", lambda ns: _tokenize),
    "src": ("a folder of caption shards", lambda ns: "data/laion-shards"),
    "args": ("the training script's parsed arguments", _args),
    "resuming": ("whether the job resumes a checkpoint", lambda ns: False),
    "urls": (
        "the shards' URLs",
        lambda ns: sorted(str(p) for p in Path("data/shards").glob("*.tar")),
    ),
    "steps_per_epoch": ("steps in an epoch", lambda ns: 4),
}


class Namespace(dict):  # type: ignore[type-arg]
    """A page's globals: a GIVEN name is made at its first read, anything else is a NameError
    as usual (builtins are looked up after this)."""

    def __missing__(self, name: str) -> Any:
        if name not in GIVEN:
            raise KeyError(name)
        value = GIVEN[name][1](self)
        self[name] = value
        return value


def unknown_names(block: Block) -> set[str]:
    """Names a Python block reads that neither it, the page's earlier blocks, builtins nor
    GIVEN define (checked before running, so a typo fails with its name)."""
    import builtins

    earlier = set()
    for b in blocks(block.page):
        if b.line >= block.line:
            break
        if b.lang == "python" and b.skip_reason is None:
            earlier |= names(b.code)[0]
    return free_names(block.code) - earlier - set(GIVEN) - set(dir(builtins))
