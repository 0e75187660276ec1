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
- every other entry is checked against the template with numpy over the whole piece at once
  (:mod:`wdstool.format.entry_rows`): its strings are found by their quotes (a piece with a
  backslash anywhere is not read this way), entries of one layout (the widths of their values)
  become a byte matrix whose runs are compared with the template's, a word at a time, its
  numbers' digits checked and read, its URL and checksum copied out; pieces are cut where an
  entry ends and checked in threads. Anything that is not the template (another key
  order, a nested value, per-shard offsets or interleaved facts, a float, a leading zero, a
  duplicate URL, a non-ASCII name) makes :func:`stream_table` return None, and the manifest
  is parsed the ordinary way, with its ordinary errors.

Every writer that prints its entries one way (ours: ``json.dumps(indent=1, sort_keys=True)``;
wids', compact or indented) fits a template. Time at 10^6 shards (167 MB): ~0.5 s on 2 cores,
in the memory of the table's arrays and a few pieces (``bench/results/scale.md``).
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

from wdstool.format import entry_rows as er
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

CHUNK = 2 << 20  # a piece: 2 MB (8 MB took ~70 MB more at the same speed, in the pieces in flight)
HEAD_LIMIT = 16 << 20  # the top level before "shardlist" (ours: ~300 bytes)
THREADS = min(4, os.cpu_count() or 1)  # pieces checked at once
_PAD = bytes(4096)  # after a piece: a last entry read past the piece's end reads zeros
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
    it says, so they are never copied to grow). Checksums take room only once one is not
    empty (an index of someone else's shards has none: 64 MB saved at 10^6 shards)."""

    def __init__(self, count: int | None) -> None:
        self.count = count
        self.parts: dict[str, list[Any]] = {k: [] for k in ("n", "f", "s", "e", "h")}
        self.names: list[bytes] = []
        self.filled = self.name_bytes = 0
        self.s: np.ndarray | None = None
        if count is not None:
            self.n = np.empty(count, np.int64)
            self.f = np.full(count, -1, np.int64)
            self.e = np.empty(count, np.int64)

    def add(self, n: np.ndarray, f: np.ndarray | None, s: np.ndarray | None, names: Any) -> None:
        lengths, data, hashes = names
        rows = len(n)
        ends = self.name_bytes + np.cumsum(lengths, dtype=np.int64)
        self.name_bytes = int(ends[-1]) if rows else self.name_bytes
        self.names.append(data)
        self.parts["h"].append(hashes)
        s = s if s is not None and bool(s.view(np.uint8).any()) else None
        if self.count is None:
            self.parts["n"].append(n)
            self.parts["f"].append(f if f is not None else np.full(rows, -1, np.int64))
            self.parts["s"].append(s if s is not None else rows)
            self.parts["e"].append(ends)
        else:
            a, b = self.filled, self.filled + rows
            if b > self.count:
                raise NotTemplate  # more entries than num_shards says: the ordinary parse
            self.n[a:b] = n
            if f is not None:
                self.f[a:b] = f
            if s is not None:
                if self.s is None:
                    self.s = np.zeros(self.count, "S64")
                self.s[a:b] = s
            self.e[a:b] = ends
        self.filled += rows

    def finish(self) -> dict[str, np.ndarray]:
        hashes = np.sort(np.concatenate(self.parts["h"]))
        if len(hashes) > 1 and bool(np.any(hashes[1:] == hashes[:-1])):
            raise NotTemplate  # a URL twice (or two hashes alike): the ordinary parse decides
        if self.count is None:
            cols = {k: np.concatenate(self.parts[k]) for k in ("n", "f", "e")}
            shas = self.parts["s"]
            if any(not isinstance(x, int) for x in shas):
                self.s = np.concatenate(
                    [np.zeros(x, "S64") if isinstance(x, int) else x for x in shas]
                )
        elif self.filled != self.count:
            raise NotTemplate
        else:
            cols = {"n": self.n, "f": self.f, "e": self.e}
        # "" everywhere: one byte a shard, as table_of keeps it
        cols["s"] = self.s if self.s is not None else np.zeros(self.filled, "S1")
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
        cols = _Columns(count if type(count) is int and count >= 0 else None)
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
        ``]`` (None: it goes on), its rows' values and the text of each digest asked for."""
        buf = np.frombuffer(b"".join((piece, _PAD)), dtype=np.uint8)
        body = buf[: len(piece)]
        if bool((body == 92).any()):
            raise NotTemplate  # an escape: quotes no longer delimit strings alone
        tpl, q = self.tpl, self.tpl.quotes
        qs = np.flatnonzero(body == 34)
        starts = np.append(qs[::q], len(body))
        n = min(len(qs) // q, len(starts) - 1)
        grid, nxt = qs[: q * n].reshape(n, q), starts[1 : n + 1]
        runs, last = tpl.runs, tpl.runs[-1]
        at = [grid[:, a[0]] - a[1] if a else nxt - len(last) for a in tpl.anchors]
        widths = np.empty((n, len(runs) - 1), dtype=np.int64)
        for j, (a, b, r) in enumerate(zip(at, at[1:], runs, strict=False)):
            np.subtract(b - len(r), a, out=widths[:, j])
        groups, outside = er.layouts(buf, at[0], widths, runs)
        ok, whole = np.zeros(n, bool), np.zeros(n, bool)
        for g in groups:
            ok[g.rows], whole[g.rows] = er.check(g, runs)
        for j in range(widths.shape[1] - 1):
            ok &= widths[:, j] >= 0
        ok[outside] = False
        whole &= ok & (widths[:, -1] >= 0) & (at[-1] + len(last) == nxt)
        bad = np.flatnonzero(~whole)
        good = int(bad[0]) if len(bad) else n
        end, final = None, []
        if good < n:  # the list's last entry, or not the template
            if tpl.anchors[-1] is None:  # it ends in a number: its digits, then "}" and "]"
                number = NUMBER_END.match(buf.data, int(at[-2][good]) + len(runs[-2]))
                if number is None or (widths[good, :-1] < 0).any():
                    raise NotTemplate
                widths[good, -1] = number.end() - number.start()
                final, _ = er.layouts(buf, at[0][good : good + 1], widths[good : good + 1], runs)
                if not final or not er.check(final[0], runs)[0][0]:
                    raise NotTemplate
                final[0].rows[:] = good
                after = number.end()
            elif ok[good]:
                after = int(at[-1][good]) + 1
            else:
                raise NotTemplate
            m = LIST_END.match(buf.data, after)
            if m is None:
                raise NotTemplate
            end = m.end()
            good += 1
        keep = good - len(final)  # rows read from their layout (the last one apart)
        parts = [(g, int(np.searchsorted(g.rows, keep))) for g in groups] + [(f, 1) for f in final]
        return end, *self._read_rows([(g, k) for g, k in parts if k], good)

    def _read_rows(self, parts: list[tuple[er.Layout, int]], n: int) -> Any:
        """The values of rows ``0 .. n`` (each layout's first ``k`` rows), and the digests'
        texts; NotTemplate where a value is not one ``json.dumps`` writes."""
        fields, runs = self.tpl.fields, self.tpl.runs
        ints = {f: np.full(n, -1, np.int64) for f in fields if FIELDS[f] is int}
        sha = np.zeros(n, "S64") if "sha256" in fields else None
        names, hashes = [], np.zeros(n, np.uint64)
        texts: dict[str, list[tuple[np.ndarray, np.ndarray]]] = {k: [] for k in self.digests}
        for g, k in parts:
            rows = g.rows[:k]
            cols = {f: g.value(j, runs)[:k] for j, f in enumerate(fields)}
            for f in ints:
                got = er.digits(cols[f])
                if got is None:
                    raise NotTemplate
                ints[f][rows] = got
            url = cols["url"]
            if not url.shape[1] or not er.printable(url):
                raise NotTemplate  # an empty URL, a control byte or a non-ASCII name
            names.append((rows, url))
            hashes[rows] = er.row_hash(url)
            if sha is not None:
                if cols["sha256"].shape[1] > 64 or not er.printable(cols["sha256"]):
                    raise NotTemplate  # the table keeps 64 characters
                sha.view(np.uint8).reshape(n, 64)[rows, : cols["sha256"].shape[1]] = cols["sha256"]
            for name in self.digests:
                texts[name].append((rows, er.text(self._rows_of(name, cols, len(rows)))))
        if ints["nsamples"].min(initial=0) < 0:
            raise NotTemplate
        url_parts = (er.lengths_of(names, n), er.in_order(names, n), hashes)
        values = (ints["nsamples"], ints.get("filesize"), sha, url_parts)
        return values, {name: er.in_order(p, n) if p else b"" for name, p in texts.items()}

    def _rows_of(self, name: str, cols: dict[str, np.ndarray], n: int) -> list[Any]:
        """What digest ``name`` hashes of each row: each field's text where the entries have
        it (as the manifest writes it), its default where they do not."""
        f, sha = cols.get("filesize", b"-1"), cols.get("sha256", b"")
        url, count = cols["url"], cols["nsamples"]
        if name == "offsets":  # shards_digest: f"{url}\0{nsamples}\0{filesize}\0{sha256}\n"
            return [url, b"\0", count, b"\0", f, b"\0", sha, b"\n"]
        return [b"\n", url, b"\0", count, b"\0", sha]  # "\n".join(f"{url}\0{n}\0{sha256}")

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
