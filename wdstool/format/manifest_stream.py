"""A large manifest streamed into a shard table: arrays, never a Python object per shard.

``json.loads`` of a manifest of 1,000,000 shards (~167 MB) builds a dict per shard: ~1.5 s and
~600 MB before the loader's own objects (6.4 s and +946 MB in all for the host's first rank,
``bench/results/scale.md``). Here the bytes are read in pieces of ``CHUNK`` and go straight
into the table's arrays (:class:`wdstool.format.shard_table.ShardTable`):

- the top level is walked key by key (``json``'s decoder, one value at a time) up to
  ``"shardlist": [``; what comes after the list is kept as bytes and parsed at the end, so
  the manifest's facts (classes, versions, the offsets file) go through the checks of
  :func:`wdstool.format.manifest.manifest_from_json` as always;
- the first entry of the list is parsed by ``json`` and becomes a template: the exact bytes
  of its keys and of everything between its strings, where its numbers are;
- every other entry is checked against the template with numpy over the whole piece at once:
  its strings are found by their quotes (a piece with a backslash anywhere is not read this
  way), its keys and separators compared as 8-byte words, its numbers' digits checked and
  read, its URL and checksum copied out. Anything that is not the template (another key
  order, a nested value, per-shard offsets or interleaved facts, a float, a leading zero, a
  duplicate URL, a non-ASCII name) makes :func:`stream_table` return None, and the manifest
  is parsed the ordinary way, with its ordinary errors.

Every writer that prints its entries one way (ours: ``json.dumps(indent=1, sort_keys=True)``;
wids', compact or indented) fits a template. Time: ~0.1 s a 100 MB besides reading it, the
table's arrays and a piece in memory (``bench/results/scale.md``).
"""

from __future__ import annotations

import hashlib
import json
import os
from collections import deque
from collections.abc import Callable
from concurrent.futures import Future, ThreadPoolExecutor
from typing import Any

import numpy as np

from wdstool.format import byte_words as bw
from wdstool.format.manifest import manifest_from_json
from wdstool.format.manifest_template import (
    FIELDS,
    LIST_END,
    NUMBER_END,
    NotTemplate,
    Template,
    shardlist_at,
    skip_ws,
)
from wdstool.format.sample_offsets import OffsetsFile
from wdstool.format.shard_table import ShardTable
from wdstool.format.table_digest import identity_digest, offsets_digest
from wdstool.format.versions import parse_versions

CHUNK = 8 << 20
HEAD_LIMIT = 16 << 20  # the top level before "shardlist" (ours: ~300 bytes)
THREADS = min(4, os.cpu_count() or 1)  # pieces checked at once
_FRONT, _PAD = bytes(bw.FRONT), bytes(bw.PAD)
Read = Callable[[int], bytes]


def stream_table(read: Read, where: str) -> ShardTable | None:
    """The shard table of the manifest whose bytes ``read(n)`` returns in order (``where``:
    its URL, in errors); None where its entries do not all follow one template (then parse
    it with :func:`wdstool.format.manifest.parse_manifest`). A malformed manifest's facts are
    the ShardError the ordinary parse raises."""
    try:
        return _Stream(read, where).table()
    except NotTemplate:
        return None


class _Columns:
    """The table's arrays as pieces fill them (sized by the manifest's ``num_shards`` where
    it says, so they are never copied to grow)."""

    def __init__(self, count: int | None, sha: bool) -> None:
        self.count = count
        self.sha_type = "S64" if sha else "S1"
        self.parts: dict[str, list[np.ndarray]] = {k: [] for k in ("n", "f", "s", "e", "h")}
        self.names: list[bytes] = []
        self.filled = self.name_bytes = 0
        if count is not None:
            self.n = np.empty(count, np.int64)
            self.f = np.full(count, -1, np.int64)
            self.s = np.zeros(count, self.sha_type)
            self.e = np.empty(count, np.int64)

    def add(self, n: np.ndarray, f: np.ndarray | None, s: np.ndarray | None, names: Any) -> None:
        lengths, data, hashes = names
        rows = len(n)
        ends = self.name_bytes + np.cumsum(lengths, dtype=np.int64)
        self.name_bytes = int(ends[-1]) if rows else self.name_bytes
        self.names.append(data)
        self.parts["h"].append(hashes)
        if self.count is None:
            self.parts["n"].append(n)
            self.parts["f"].append(f if f is not None else np.full(rows, -1, np.int64))
            self.parts["s"].append(s if s is not None else np.zeros(rows, self.sha_type))
            self.parts["e"].append(ends)
        else:
            a, b = self.filled, self.filled + rows
            if b > self.count:
                raise NotTemplate  # more entries than num_shards says: the ordinary parse
            self.n[a:b] = n
            if f is not None:
                self.f[a:b] = f
            if s is not None:
                self.s[a:b] = s
            self.e[a:b] = ends
        self.filled += rows

    def finish(self) -> dict[str, np.ndarray]:
        hashes = np.sort(np.concatenate(self.parts["h"]))
        if len(hashes) > 1 and bool(np.any(hashes[1:] == hashes[:-1])):
            raise NotTemplate  # a URL twice (or two hashes alike): the ordinary parse decides
        if self.count is None:
            cols = {k: np.concatenate(self.parts[k]) for k in ("n", "f", "s", "e")}
        elif self.filled != self.count:
            raise NotTemplate
        else:
            cols = {"n": self.n, "f": self.f, "s": self.s, "e": self.e}
        if self.sha_type == "S64" and not cols["s"].any():  # "" everywhere: as table_of keeps it
            cols["s"] = np.zeros(len(cols["s"]), "S1")
        names = np.frombuffer(b"".join(self.names), dtype=np.uint8)
        self.names.clear()
        return {**cols, "names": names}


class _Stream:
    def __init__(self, read: Read, where: str) -> None:
        self.read, self.where, self.eof = read, where, False

    def _more(self) -> bytes:
        data = b"" if self.eof else self.read(CHUNK)
        self.eof = self.eof or not data
        return data

    def table(self) -> ShardTable:
        data, found = b"", None
        while found is None:
            more = self._more()
            if not more or len(data) > HEAD_LIMIT:
                raise NotTemplate
            data += more
            found = shardlist_at(data)
        at, seen = found
        head, rest = data[:at], data[at:]
        # the digests a table needs, made from each piece's text in its thread where the top
        # level says before the list (ours does) that they are needed; else from the table
        self.digests: dict[str, Any] = {}
        if "sample_offsets" in seen:
            self.digests["offsets"] = hashlib.sha256()
        if not seen.get("fingerprint"):
            self.digests["identity"] = hashlib.sha256()
        count = seen.get("num_shards")
        rest = self._first_entry(rest)
        cols = _Columns(count if type(count) is int and count >= 0 else None, self._sha)
        tail = self._entries(rest, cols)
        return self._with_facts(head, tail, cols.finish())

    def _first_entry(self, rest: bytes) -> bytes:
        """Learn the template from the first entry (read on until the second one begins);
        ``rest`` from the first entry's first string on."""
        while True:
            text = rest.decode("latin-1")
            i = skip_ws(text, 0)
            try:
                if text[i] != "{":
                    raise NotTemplate  # an empty list, or not a list of objects
                obj, end = json.JSONDecoder().raw_decode(text, i)
                j = skip_ws(text, end)
                if text[j] != ",":
                    raise NotTemplate  # one entry: no manifest this module is for
                j = skip_ws(text, j + 1)
                k = skip_ws(text, j + 1)
                if text[j] != "{" or text[k] != '"':
                    raise NotTemplate
                break
            except (ValueError, IndexError):
                more = self._more()
                if not more or len(rest) > HEAD_LIMIT:
                    raise NotTemplate from None
                rest += more
        first = rest.index(b'"', i)
        self.tpl = Template(rest[first:k], obj)
        self._sha = "sha256" in self.tpl.fields
        return rest[first:]

    def _entries(self, carry: bytes, cols: _Columns) -> bytes:
        """Read entries into ``cols`` until the list ends; the bytes after its ``]``. The
        stream is cut into pieces where an entry ends (the template's last run, looked for
        from the end: outside a string only an entry's end holds its quote and brackets), each
        piece checked and read in a thread (numpy lets go of the GIL), its rows added in order.
        A cut after the list's end (the same bytes in what follows it) only gives a piece that
        is not read: the list ends before it."""
        sep = self.tpl.runs[-1]
        jobs: deque[tuple[Future[tuple[int | None, Any]], bytes]] = deque()
        with ThreadPoolExecutor(THREADS) as pool:
            while True:
                data = carry + self._more()
                cut = len(data) if self.eof else data.rfind(sep) + len(sep)
                if cut < len(sep):  # no entry ends in what came: read on
                    carry = data
                    continue
                piece, carry = data[:cut], data[cut:]
                jobs.append((pool.submit(self._piece, piece), piece))
                while jobs and (len(jobs) > THREADS or self.eof):
                    fut, done = jobs.popleft()
                    end, values, texts = fut.result()
                    first = cols.filled == 0  # the identity's "\n".join: none before row 0
                    cols.add(*values)
                    for name, text in texts.items():
                        skip = name == "identity" and first and bool(text)
                        self.digests[name].update(text[1:] if skip else text)
                    if end is not None:  # the rest: this piece's, the later ones', the stream's
                        later = b"".join(p for _, p in jobs)
                        return done[end:] + later + carry + b"".join(iter(self._more, b""))
                if self.eof:
                    raise NotTemplate  # the list never ends: the ordinary parse says why

    def _piece(self, piece: bytes) -> tuple[int | None, Any, dict[str, bytes]]:
        """Check and read the entries of one piece (from an entry's first quote to the next
        entry's, or to the stream's end): where the list ends in it, the offset past its
        ``]`` (None: it goes on), and its rows' values."""
        buf = np.frombuffer(b"".join((_FRONT, piece, _PAD)), dtype=np.uint8)
        body = buf[bw.FRONT : len(buf) - bw.PAD]
        if bool((body == 92).any()):
            raise NotTemplate  # an escape: quotes no longer delimit strings alone
        q = self.tpl.quotes
        qs = np.flatnonzero(body == 34) + bw.FRONT
        starts = np.append(qs[::q], len(body) + bw.FRONT)
        n = min(len(qs) // q, len(starts) - 1)
        grid, nxt = qs[: q * n].reshape(n, q), starts[1 : n + 1]
        tpl, words = self.tpl, bw.words(buf)
        runs, last = tpl.runs, tpl.runs[-1]
        at = [grid[:, a[0]] - a[1] if a else nxt - len(last) for a in tpl.anchors]
        ok = np.ones(len(grid), dtype=bool)
        for r, run in enumerate(runs[:-1]):
            ok &= bw.same(words, at[r], run)
            if r + 2 < len(runs):
                ok &= at[r + 1] >= at[r] + len(run)
        whole = ok & (at[-1] >= at[-2] + len(runs[-2])) & bw.same(words, at[-1], last)
        whole &= at[-1] + len(last) == nxt
        bad = np.flatnonzero(~whole)
        good = int(bad[0]) if len(bad) else len(grid)
        end = None
        if good < len(grid):  # the list's last entry, or not the template
            if not ok[good]:
                raise NotTemplate
            if tpl.anchors[-1] is None:  # it ends in a number: its digits, then "}" and "]"
                digits = NUMBER_END.match(buf.data, int(at[-2][good]) + len(runs[-2]))
                if digits is None:
                    raise NotTemplate
                at[-1][good] = digits.end()
            m = LIST_END.match(buf.data, int(at[-1][good]) + (tpl.anchors[-1] is not None))
            if m is None:
                raise NotTemplate
            end, good = m.end() - bw.FRONT, good + 1
        spans = [
            (a[:good] + len(run), b[:good])
            for a, b, run in zip(at[:-1], at[1:], tpl.runs[:-1], strict=True)
        ]
        return end, *self._read_rows(words, spans)

    def _read_rows(self, words: np.ndarray, spans: list[tuple[np.ndarray, np.ndarray]]) -> Any:
        values: dict[str, Any] = {}
        for field, (start, end) in zip(self.tpl.fields, spans, strict=True):
            if FIELDS[field] is int:
                values[field] = bw.ints(words, start, end)
                if values[field] is None:
                    raise NotTemplate
                continue
            lengths = end - start
            width = 64 if field == "sha256" else int(lengths.max(initial=0))
            if lengths.max(initial=0) > width or lengths.min(initial=1) < (field == "url"):
                raise NotTemplate  # a checksum past 64 characters, an empty URL
            rows = bw.texts(words, start, end, width)
            if rows is None:
                raise NotTemplate
            if field == "sha256":
                values[field] = rows.view("S64").reshape(len(rows))
            else:
                values[field] = (lengths, bw.joined(rows, lengths), bw.row_hash(rows, lengths))
        n = values["nsamples"]
        if len(n) and n.min() < 0:
            raise NotTemplate
        texts = {name: bw.rows_text(words, self._rows_of(name, spans)) for name in self.digests}
        return (n, values.get("filesize"), values.get("sha256"), values["url"]), texts

    def _rows_of(self, name: str, spans: list[tuple[np.ndarray, np.ndarray]]) -> list[Any]:
        """What digest ``name`` hashes of each row: each field's text where the entries have
        it (as the manifest writes it), its default where they do not."""
        have = dict(zip(self.tpl.fields, spans, strict=True))
        f, sha = have.get("filesize", b"-1"), have.get("sha256", b"")
        url, n = have["url"], have["nsamples"]
        if name == "offsets":  # shards_digest: f"{url}\0{nsamples}\0{filesize}\0{sha256}\n"
            return [url, b"\0", n, b"\0", f, b"\0", sha, b"\n"]
        return [b"\n", url, b"\0", n, b"\0", sha]  # "\n".join(f"{url}\0{n}\0{sha256}")

    def _with_facts(self, head: bytes, tail: bytes, cols: dict[str, np.ndarray]) -> ShardTable:
        """The table, with the manifest's facts checked as the ordinary parse checks them."""
        try:
            obj = json.loads(head + b"]" + tail)
        except (ValueError, UnicodeDecodeError):
            raise NotTemplate from None
        if not isinstance(obj, dict) or obj.get("shardlist") != []:
            raise NotTemplate
        offsets, versions = obj.pop("sample_offsets", None), obj.pop("versions", None)
        base = manifest_from_json(obj, self.where)
        rows = len(cols["n"])
        table = ShardTable(
            nsamples=cols["n"],
            filesize=cols["f"],
            sha256=cols["s"],
            names=cols["names"],
            name_ends=cols["e"],
            meta={},
        )
        history = parse_versions(versions, rows, self.where)
        done = {k: h.hexdigest() for k, h in self.digests.items()}
        meta: dict[str, Any] = {
            "classes": list(base.classes),
            "identity": base.fingerprint or done.get("identity") or identity_digest(table),
            "versions": [[v.identity, v.shards, v.samples] for v in history[:-1]],
        }
        if offsets is not None:
            total = int(cols["n"].sum())
            digest = done["offsets"][:32] if "offsets" in done else offsets_digest(table)
            of = OffsetsFile.from_json(offsets, total, self.where, digest)
            if of is not None:
                meta["sample_offsets"] = of.to_json()
        table.meta.update(meta)
        return table


__all__ = ["CHUNK", "stream_table"]
