"""Every Python and shell block of README.md, docs/index.md and docs/guides/ runs as written
(tests/docs/snippets.py says how), or says in the page's source why it cannot run here."""

from __future__ import annotations

import gc
import io
import json
import os
import shutil
import subprocess
import sys
import tarfile
from pathlib import Path

import pytest

from tests.conftest import make_tree, run_cli
from tests.docs.snippets import GIVEN, PAGES, ROOT, Block, Namespace, blocks, unknown_names

pytestmark = pytest.mark.timeout(600)
BIN = Path(sys.executable).parent


def _webdataset_shards(
    dest: Path, samples: int, per_shard: int, member: str, cls: bool = False
) -> None:
    """Shards as img2dataset and upstream webdataset's ShardWriter write them (no manifest):
    KEY.jpg, KEY.txt and a KEY.json with the ``member`` layout."""
    from tests.conftest import jpeg_bytes

    dest.mkdir(parents=True)
    for shard in range(0, samples, per_shard):
        with tarfile.open(dest / f"{shard // per_shard:05d}.tar", "w") as tar:
            for i in range(shard, min(shard + per_shard, samples)):
                meta = {"url": f"https://example.org/{i}.jpg", "class_id": i % 3}
                parts = {
                    "jpg": jpeg_bytes(1000 + i, (80, 60)),
                    "txt": f"a photo number {i}".encode(),
                    "json": json.dumps(meta if member == "json" else {"url": meta["url"]}).encode(),
                }
                if cls:  # labelled like our packs: a class instead of a caption
                    parts["cls"] = str(i % 3).encode()
                    del parts["txt"]
                for ext, data in parts.items():
                    info = tarfile.TarInfo(f"{i:09d}.{ext}")
                    info.size = len(data)
                    tar.addfile(info, io.BytesIO(data))


@pytest.fixture(scope="module")
def world(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The folder every page starts from: small real data under the names the guides use."""
    from shard_writer.sample_videos import VideoSettings, generate_sample_videos

    w = tmp_path_factory.mktemp("world")
    # 288 training images: one batch of 256 with drop_last, as several guides ask for
    make_tree(w / "images" / "train", {"cat": 96, "dog": 96, "fox": 96}, seed=1)
    make_tree(w / "images" / "val", {"cat": 6, "dog": 6, "fox": 6}, seed=2)
    make_tree(w / "images" / "demo", {"cat": 32, "dog": 32}, seed=4)  # one batch of 64
    run_cli("pack", str(w / "images/train"), str(w / "data/shards"), "--max-count", "96", "-q")
    run_cli("pack", str(w / "images/train"), str(w / "data/train"), "-q")  # as interop.md packs it
    run_cli("pack", str(w / "images/val"), str(w / "data/val"), "--max-count", "9", "-q")
    run_cli("pack", str(w / "images/demo"), str(w / "build/demo/shards"), "-q")
    shutil.copytree(w / "images/train", w / "data/images")
    _webdataset_shards(w / "data/laion-shards", 48, 16, "url")
    _webdataset_shards(w / "data/extra-shards", 48, 16, "json")
    small = VideoSettings(width=64, height=48, fps=10, gop=10)
    generate_sample_videos(
        w / "videos", videos=4, classes=2, min_seconds=2, max_seconds=3, settings=small
    )
    (w / "examples").symlink_to(ROOT / "examples")
    # lifecycle.md: another folder of tars, keys to withdraw, a week of new images, Hub parquet
    _webdataset_shards(w / "other/tars", 24, 12, "json", cls=True)
    with tarfile.open(next((w / "data/shards").glob("*.tar"))) as tar:
        keys = sorted({m.name.split(".")[0] for m in tar.getmembers()})[:3]
    (w / "withdrawn.txt").write_text("\n".join(keys) + "\n")
    make_tree(w / "week-48", {"cat": 4, "dog": 4, "fox": 4}, seed=3)
    _hub_parquet(w / "hub/train-00000-of-00004.parquet", rows=12)
    return w


def _hub_parquet(path: Path, rows: int) -> None:
    """A parquet file as ``datasets.push_to_hub`` writes it: an ``image`` struct of bytes and
    path, and a ``label`` column."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    from tests.conftest import jpeg_bytes

    path.parent.mkdir(parents=True)
    images = [{"bytes": jpeg_bytes(5000 + i, (70, 50)), "path": f"{i}.jpg"} for i in range(rows)]
    pq.write_table(pa.table({"image": images, "label": [i % 3 for i in range(rows)]}), path)


def _page_id(page: Path) -> str:
    return page.relative_to(ROOT).as_posix()


def _run_shell(block: Block, cwd: Path, env: dict[str, str]) -> None:
    code = block.code
    command = ["bash", "-e", "-o", "pipefail", "-c", code]
    if block.as_file:
        name, command_line = block.as_file
        (cwd / name).write_text(code)
        command = ["bash", "-e", "-o", "pipefail", "-c", command_line]
    proc = subprocess.run(command, cwd=cwd, env=env, capture_output=True, text=True, timeout=400)
    assert proc.returncode == 0, (
        f"{block.where}: exit {proc.returncode}\n--- stdout\n{proc.stdout[-3000:]}"
        f"\n--- stderr\n{proc.stderr[-3000:]}"
    )


@pytest.mark.parametrize("page", PAGES, ids=_page_id)
def test_every_block_of_the_page_runs(
    page: Path, world: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    runnable = [b for b in blocks(page) if b.lang and b.skip_reason is None]
    if not runnable:
        pytest.skip(f"{_page_id(page)}: no runnable block")
    cwd = tmp_path / "page"
    shutil.copytree(world, cwd, symlinks=True)
    monkeypatch.chdir(cwd)
    env = {**os.environ, "PATH": f"{BIN}{os.pathsep}{os.environ['PATH']}", "PYTHONPATH": str(ROOT)}
    ns = Namespace(__name__="__snippet__")
    try:
        for block in runnable:
            if block.lang == "bash" or block.as_file:
                _run_shell(block, cwd, env)
                continue
            unknown = unknown_names(block)
            assert not unknown, f"{block.where}: reads {sorted(unknown)}, defined nowhere before it"
            try:
                exec(compile(block.code, block.where, "exec"), ns)
            except Exception as exc:
                raise AssertionError(f"{block.where}: {type(exc).__name__}: {exc}") from exc
    finally:
        # the page's loaders go now, with their workers: a worker forked later (the next
        # page's) would inherit their batch slots' shared memory and keep it alive
        ns.clear()
        gc.collect()


def test_every_skip_says_why() -> None:
    vague = [
        b.where
        for page in PAGES
        for b in blocks(page)
        if b.skip_reason is not None and len(b.skip_reason.split()) < 3
    ]
    assert not vague, f"skipped blocks without a reason: {vague}"


def test_every_directive_is_one_the_runner_knows() -> None:
    odd = [
        f"{b.where}: {b.directive}"
        for page in PAGES
        for b in blocks(page)
        if b.directive and b.skip_reason is None and b.as_file is None
    ]
    assert not odd, f"unknown snippet directives: {odd}"


def test_a_renamed_name_fails_the_page(world: Path, tmp_path: Path, monkeypatch) -> None:
    """What the runner is for: a guide quoting a name the code no longer has fails."""
    page = tmp_path / "guide.md"
    page.write_text("```python\nfrom loaders import make_loaderr\n```\n")
    (block,) = blocks(page)
    with pytest.raises(ImportError, match="make_loaderr"):
        exec(compile(block.code, "guide.md", "exec"), Namespace())


def test_the_givens_say_what_they_stand_for() -> None:
    assert all(len(what.split()) >= 2 for what, _ in GIVEN.values())


def test_pip_install_lines_name_extras_the_project_has() -> None:
    """Not on a package index: installs are from the clone (`pip install -e '.[video]'`), and
    every extra named exists in pyproject.toml."""
    import re
    import tomllib

    extras = set(
        tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["optional-dependencies"]
    )
    wrong = []
    for page in PAGES:
        for n, line in enumerate(page.read_text().splitlines(), 1):
            where = f"{_page_id(page)}:{n}"
            for m in re.finditer(r"pip install ([^#`\n]*)", line):
                if True:
                    for spec in re.findall(r"'([^']*)'|\"([^\"]*)\"|(\S+)", m.group(1)):
                        spec = next(s for s in spec if s)
                        if spec.startswith("-"):
                            continue
                        name, _, extra = spec.partition("[")
                        if name in {"wdstool"}:
                            wrong.append(f"{where}: {spec} (not on an index: -e '.[...]')")
                        for e in extra.rstrip("]").split(","):
                            if name == "." and e and e not in extras:
                                wrong.append(f"{where}: extra {e!r} is not in pyproject.toml")
    assert not wrong, wrong
