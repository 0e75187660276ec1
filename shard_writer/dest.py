"""Where shards go: a local folder or any fsspec URL, with atomic publishing.

Local: a shard is written to a hidden temporary name in DEST and renamed into place.
Remote (s3://, memory://, ...): it is built in a local temporary folder, uploaded whole under its
final name (an object store's PUT is atomic), then its size is checked. Either way no
incomplete file ever sits under a final name.
"""

from __future__ import annotations

import contextlib
import json
import os
import tempfile
from collections.abc import Iterator
from typing import Any

import fsspec

from wdstool.errors import DestinationError

STATE_DIR = ".wdstool-pack"


class Destination:
    """A dataset folder or prefix. Names are relative to it (``train-000000.tar``)."""

    def __init__(self, url: str, storage_options: dict[str, Any] | None = None) -> None:
        self.url = url.rstrip("/") or url
        self.fs, self.root = fsspec.core.url_to_fs(self.url, **(storage_options or {}))
        self.local = "file" in (
            self.fs.protocol if isinstance(self.fs.protocol, tuple) else (self.fs.protocol,)
        )
        if self.local:
            self.root = os.path.abspath(self.root)
        self._tmpdir: tempfile.TemporaryDirectory[str] | None = None

    def __repr__(self) -> str:
        return f"Destination({self.url!r})"

    def path(self, name: str) -> str:
        return f"{self.root}/{name}"

    def display(self, name: str = "") -> str:
        """The URL users see in messages."""
        return f"{self.url}/{name}" if name else self.url

    # --- preparing -----------------------------------------------------------------------
    def ensure(self) -> None:
        """Create the folder (local) and check that it is writable."""
        if self.local:
            try:
                os.makedirs(os.path.join(self.root, STATE_DIR), exist_ok=True)
            except OSError as exc:
                raise DestinationError(
                    f"{self.url}: cannot create destination folder: {exc.strerror or exc}"
                ) from exc
            if not os.access(self.root, os.W_OK):
                raise DestinationError(f"{self.url}: destination folder is not writable")

    # --- reading -------------------------------------------------------------------------
    def exists(self, name: str) -> bool:
        return self.fs.exists(self.path(name))

    def size(self, name: str) -> int | None:
        try:
            return int(self.fs.size(self.path(name)))
        except FileNotFoundError:
            return None

    def open_read(self, name: str):
        return self.fs.open(self.path(name), "rb")

    def read_json(self, name: str) -> Any | None:
        try:
            with self.fs.open(self.path(name), "rb") as f:
                return json.loads(f.read())
        except FileNotFoundError:
            return None

    def listdir(self, sub: str = "") -> list[str]:
        """Base names directly under the folder (or under ``sub``)."""
        base = self.path(sub) if sub else self.root
        try:
            entries = self.fs.ls(base, detail=False)
        except FileNotFoundError:
            return []
        return sorted(str(e).rstrip("/").rsplit("/", 1)[-1] for e in entries)

    # --- writing -------------------------------------------------------------------------
    def temp_path(self, name: str) -> str:
        """A local path to build ``name`` in before publishing it."""
        if self.local:
            return os.path.join(self.root, f".{name}.tmp-{os.getpid()}")
        if self._tmpdir is None:
            self._tmpdir = tempfile.TemporaryDirectory(prefix="wdstool-pack-")
        return os.path.join(self._tmpdir.name, f"{name}.tmp-{os.getpid()}")

    def publish(self, tmp: str, name: str) -> None:
        """Move a complete local file to its final name, atomically."""
        if self.local:
            os.replace(tmp, os.path.join(self.root, name))
            return
        size = os.path.getsize(tmp)
        try:
            self.fs.put_file(tmp, self.path(name))
            got = self.size(name)
        finally:
            with contextlib.suppress(FileNotFoundError):
                os.unlink(tmp)
        if got != size:
            raise DestinationError(
                f"{self.display(name)}: upload check failed: {got} bytes stored, {size} sent"
            )

    def write_bytes(self, name: str, data: bytes) -> None:
        """Write a small file atomically (temporary name + rename, or one PUT)."""
        if self.local:
            path = os.path.join(self.root, name)
            os.makedirs(os.path.dirname(path), exist_ok=True)
            tmp = os.path.join(
                os.path.dirname(path), f".{os.path.basename(path)}.tmp-{os.getpid()}"
            )
            with open(tmp, "wb") as f:
                f.write(data)
                f.flush()
                os.fsync(f.fileno())
            os.replace(tmp, path)
            return
        with self.fs.open(self.path(name), "wb") as f:
            f.write(data)

    def sync(self, names: list[str]) -> None:
        """Make published files durable (local only; an object store's PUT already is). Done
        once for all shards before the manifest is written: the kernel has written most of them
        back by then, and a manifest never names data that a power loss could still take."""
        if not self.local:
            return
        for name in names:
            fd = os.open(os.path.join(self.root, name), os.O_RDONLY)
            try:
                os.fsync(fd)
            finally:
                os.close(fd)
        fd = os.open(self.root, os.O_RDONLY)
        try:
            os.fsync(fd)
        finally:
            os.close(fd)

    def remove(self, name: str) -> None:
        with contextlib.suppress(FileNotFoundError):
            self.fs.rm(self.path(name), recursive=True)

    def remove_stale_temps(self) -> Iterator[str]:
        """Delete temporary files left by an interrupted local run; yield their names."""
        if not self.local or not os.path.isdir(self.root):
            return
        for name in os.listdir(self.root):
            if name.startswith(".") and ".tmp-" in name:
                with contextlib.suppress(FileNotFoundError):
                    os.unlink(os.path.join(self.root, name))
                yield name
