"""`make mutants`: mutation testing (mutmut) of the modules that carry the README's promises.

Each target is mutated in a scratch copy of the tree (``build/mutants/<target>/``; the built C
extensions come along) against its own fast tests, never the torchrun or S3 ones: mutmut first
runs those tests once to learn which test reaches which function, then runs, for each mutant,
only the tests that reach the mutated function. A surviving mutant is either killed by a new
test or listed, with the reason it is equivalent, in ``tests/EQUIVALENT_MUTANTS.md``.

    python tests/support/mutation.py                  # every target, one after the other
    python tests/support/mutation.py retry tar_read   # some of them
    python tests/support/mutation.py --list           # the targets and their tests

Prints, and writes to ``build/mutants/summary.md``, the kill rate per target: killed / (killed +
survived); mutants no test reaches count as survivors. Slow: minutes to hours per target on 2
cores. Not part of `make test`.
"""

from __future__ import annotations

import argparse
import os
import re
import shutil
import signal
import subprocess
import sys
from collections import Counter
from dataclasses import dataclass
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
OUT = REPO / "build" / "mutants"
PACKAGES = ("wdstool", "shard_writer", "loaders")


@dataclass(frozen=True, kw_only=True)
class Target:
    mutate: tuple[str, ...]  # globs of files to mutate, relative to the repository root
    tests: tuple[str, ...]  # the fast tests that hold the module's promises
    # also the tests marked slow in those files: S3 on loopback, where only a real object
    # store reaches the code (an ETag, a resumed GET)
    slow: bool = False


TARGETS = {
    "plan": Target(
        mutate=("loaders/plan/*",),
        tests=(
            "tests/loaders/plan/test_plan.py",
            "tests/loaders/plan/test_mixture_plan.py",
            "tests/loaders/plan/test_resume_plan.py",
            "tests/loaders/plan/test_plan_values.py",
        ),
    ),
    "state": Target(
        mutate=("loaders/state.py",),
        tests=(
            "tests/loaders/state/test_resume.py",
            "tests/loaders/state/test_state_values.py",
            "tests/loaders/loader/test_mixing.py",
        ),
    ),
    "tar_read": Target(
        mutate=("wdstool/format/tar_read.py",),
        tests=(
            "tests/format/test_tario.py",
            "tests/format/test_tar_members.py",
            "tests/format/test_tar_headers.py",
            "tests/format/test_tar_safety.py",
            "tests/format/test_dali_index.py",
        ),
    ),
    "tar_write": Target(
        mutate=("wdstool/format/tar_write.py",),
        tests=(
            "tests/format/test_tar_write.py",
            "tests/format/test_tar_members.py",
            "tests/format/test_tar_safety.py",
        ),
    ),
    "manifest": Target(
        mutate=("wdstool/format/manifest.py",),
        tests=("tests/format/test_manifest.py", "tests/shard_writer/test_index.py"),
    ),
    "publish": Target(
        mutate=("shard_writer/publish.py",),
        tests=("tests/shard_writer/test_reuse.py", "tests/shard_writer/test_pack.py"),
        slow=True,
    ),
    "retry": Target(
        mutate=("wdstool/base/retry.py",),
        tests=("tests/base/test_retry.py",),
    ),
    "remote": Target(
        mutate=("wdstool/base/remote.py",),
        tests=("tests/base/test_remote.py", "tests/s3/test_replaced_object.py"),
        slow=True,
    ),
}

# mutmut's exit-code verdicts, grouped: a timeout or a crash is a test noticing the mutant
KILLED = {"killed", "timeout", "segfault", "suspicious", "caught by type check"}
SURVIVED = {"survived", "no tests"}


def _tree_files() -> list[Path]:
    """The working tree as git sees it (tracked and untracked, not ignored) plus the built
    C extensions, which git ignores."""
    out = subprocess.run(
        ["git", "ls-files", "--cached", "--others", "--exclude-standard", "-z"],
        cwd=REPO,
        capture_output=True,
        check=True,
    ).stdout.decode()
    files = [Path(p) for p in out.split("\0") if p]
    files += [p.relative_to(REPO) for p in (REPO / "wdstool").rglob("*.so")]
    keep = (*PACKAGES, "tests")
    return [p for p in files if p.parts[0] in keep or p.name == "pyproject.toml"]


def _setup(name: str, target: Target) -> Path:
    """A scratch copy of the tree with a setup.cfg that points mutmut at ``target``."""
    work = OUT / name
    shutil.rmtree(work, ignore_errors=True)
    for rel in _tree_files():
        if (REPO / rel).is_file():
            (work / rel).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(REPO / rel, work / rel)
    lines = lambda items: "".join(f"\n    {i}" for i in items)  # noqa: E731
    marks = [] if target.slow else ["-m", "not slow"]
    (work / "setup.cfg").write_text(
        "[mutmut]\n"
        f"source_paths ={lines(PACKAGES)}\n"
        f"only_mutate ={lines(target.mutate)}\n"
        f"pytest_add_cli_args_test_selection ={lines(target.tests)}\n"
        # the torchrun / S3 tests are not this module's fast tests (unless it needs them)
        f"pytest_add_cli_args ={lines([*marks, '-p', 'no:cacheprovider'])}\n"
        # a mutant that makes its tests 4x slower is caught (an endless loop, mostly): mutmut's
        # default 15x spent ~2 minutes on each such mutant of the plan
        "timeout_multiplier = 4.0\n"
    )
    return work


def _count(work: Path) -> Counter[str]:
    out = subprocess.run(
        [_mutmut(), "results", "--all", "true"],
        cwd=work,
        capture_output=True,
        text=True,
        env=_env(),
        check=True,
    ).stdout
    return Counter(m.group(1) for m in re.finditer(r": ([a-z ]+)$", out, re.MULTILINE))


def _mutmut() -> str:
    exe = Path(sys.executable).with_name("mutmut")
    return str(exe) if exe.exists() else "mutmut"


def _env() -> dict[str, str]:
    # the copy's own code, not whatever PYTHONPATH points at (subprocesses started by the
    # tests run `python -m wdstool` from the copy's mutants/ folder)
    return {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}


def run(name: str, target: Target, children: int) -> Counter[str]:
    work = _setup(name, target)
    log = work / "mutmut.log"
    print(f"{name}: mutating {', '.join(target.mutate)} (log: {log})", file=sys.stderr)
    with open(log, "w") as f:
        proc = subprocess.Popen(
            [_mutmut(), "run", "--max-children", str(children)],
            cwd=work,
            stdout=f,
            stderr=subprocess.STDOUT,
            env=_env(),
            start_new_session=True,  # its forked workers in one group, ended with it
        )
        try:
            proc.wait()
        finally:
            if proc.poll() is None:
                os.killpg(proc.pid, signal.SIGTERM)
                proc.wait()
    counts = _count(work)
    _write_survivors(work)
    return counts


def _write_survivors(work: Path) -> None:
    """``survivors.txt``: each mutant no test killed, with its diff."""
    listed = subprocess.run(
        [_mutmut(), "results"], cwd=work, capture_output=True, text=True, env=_env()
    ).stdout
    out = []
    for name in re.findall(r"^\s*(\S+): (?:survived|no tests)$", listed, re.MULTILINE):
        diff = subprocess.run(
            [_mutmut(), "show", name], cwd=work, capture_output=True, text=True, env=_env()
        ).stdout
        changed = [ln for ln in diff.splitlines() if ln.startswith(("- ", "+ "))]
        out.append("\n".join([f"## {name}", *changed]))
    (work / "survivors.txt").write_text("\n".join(out) + "\n")


def rate(counts: Counter[str]) -> tuple[int, int, float]:
    killed = sum(v for k, v in counts.items() if k in KILLED)
    survived = sum(v for k, v in counts.items() if k in SURVIVED)
    total = killed + survived
    return killed, survived, (killed / total if total else 0.0)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("targets", nargs="*", metavar="TARGET", help=", ".join(TARGETS))
    parser.add_argument("--children", type=int, default=1, help="mutants tested at once")
    parser.add_argument("--list", action="store_true", help="print the targets and exit")
    args = parser.parse_args()
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))  # `kill PID` stops mutmut too
    if args.list:
        for name, t in TARGETS.items():
            print(f"{name}: {' '.join(t.mutate)} <- {' '.join(t.tests)}")
        return
    unknown = [t for t in args.targets if t not in TARGETS]
    if unknown:
        parser.error(f"unknown target {', '.join(unknown)}; choose from {', '.join(TARGETS)}")
    rows = ["| target | mutants | killed | survived | kill rate |", "|---|---|---|---|---|"]
    for name in args.targets or list(TARGETS):
        counts = run(name, TARGETS[name], args.children)
        killed, survived, r = rate(counts)
        other = sum(counts.values()) - killed - survived
        note = f" ({other} not run: {dict(counts)})" if other else ""
        rows.append(f"| {name} | {killed + survived} | {killed} | {survived} | {r:.1%}{note} |")
        print(rows[-1], flush=True)
    OUT.mkdir(parents=True, exist_ok=True)
    (OUT / "summary.md").write_text("\n".join(rows) + "\n")
    print("\n".join(rows))


if __name__ == "__main__":
    main()
