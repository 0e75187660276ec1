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

import json
import re
from collections.abc import Callable
from typing import Any

import numpy as np

from wdstool.format import byte_words as bw
from wdstool.format.manifest import manifest_from_json
from wdstool.format.sample_offsets import OffsetsFile
from wdstool.format.shard_table import ShardTable
from wdstool.format.table_digest import identity_digest, offsets_digest
from wdstool.format.versions import parse_versions

CHUNK = 8 << 20
HEAD_LIMIT = 16 << 20  # the top level before "shardlist" (ours: ~300 bytes)
_FRONT, _PAD = bytes(bw.FRONT), bytes(bw.PAD)
_WS = b" \t\n\r"
_NUMBER_GAP = re.compile(rb"([ \t\n\r]*:[ \t\n\r]*)(-?[0-9]+)([\s\S]*)")
_KEY_GAP = re.compile(rb"[ \t\n\r]*:[ \t\n\r]*")
_LIST_END = re.compile(rb"[ \t\n\r]*\}[ \t\n\r]*\]")
_NUMBER_END = re.compile(rb"-?[0-9]+(?=[ \t\n\r]*\}[ \t\n\r]*\])")
_FIELDS = {"url": str, "nsamples": int, "filesize": int, "sha256": str}
Read = Callable[[int], bytes]


class _NotTemplate(Exception):
    """The manifest is not one this module reads: parse it the ordinary way."""


def stream_table(read: Read, where: str) -> ShardTable | None:
    """The shard table of the manifest whose bytes ``read(n)`` returns in order (``where``:
    its URL, in errors); None where its entries do not all follow one template (then parse
    it with :func:`wdstool.format.manifest.parse_manifest`). A malformed manifest's facts are
    the ShardError the ordinary parse raises."""
    try:
        return _Stream(read, where).table()
    except _NotTemplate:
        return None


def _skip_ws(text: str, i: int) -> int:
    while i < len(text) and text[i] in " \t\n\r":
        i += 1
    return i


def _shardlist_at(data: bytes) -> tuple[int, dict[str, Any]] | None:
    """Where ``data``'s top-level ``"shardlist": [`` opens (the offset past ``[``) and the
    values before it; None where ``data`` ends first. _NotTemplate where there is none."""
    text = data.decode("latin-1")  # one char a byte: offsets are byte offsets
    dec = json.JSONDecoder()
    seen: dict[str, Any] = {}
    try:  # text[i] past the end (IndexError) or a value cut short (ValueError): read more
        i = _skip_ws(text, 0)
        if text[i] != "{":
            raise _NotTemplate
        i += 1
        while True:
            i = _skip_ws(text, i)
            key, i = dec.raw_decode(text, i)
            i = _skip_ws(text, i)
            if not isinstance(key, str) or text[i] != ":":
                raise _NotTemplate
            i = _skip_ws(text, i + 1)
            if key == "shardlist":
                if text[i] != "[":
                    raise _NotTemplate
                return i + 1, seen
            seen[key], i = dec.raw_decode(text, i)
            i = _skip_ws(text, i)
            if text[i] != ",":
                raise _NotTemplate  # the object ends without a shard list
            i += 1
    except (ValueError, IndexError):
        return None  # cut short: the caller reads more, or gives up at its end


class _Template:
    """The first entry's bytes as fixed runs (keys, quotes, separators) between variables (a
    string value's characters, a number's digits). Run ``r`` is found in every entry by its
    first quote: quote ``anchors[r][0]`` of the entry, ``anchors[r][1]`` bytes into the run."""

    def __init__(self, entry: bytes, obj: Any) -> None:
        if (
            not isinstance(obj, dict)
            or set(obj) - set(_FIELDS)
            or not {"url", "nsamples"} <= set(obj)
        ):
            raise _NotTemplate
        if any(type(v) is not _FIELDS[k] for k, v in obj.items()):
            raise _NotTemplate
        quotes = [i for i, c in enumerate(entry) if c == 34]
        self.quotes = len(quotes)
        self.runs: list[bytes] = []
        self.fields: list[str] = []  # the variable after each run but the last
        cut = qi = 0
        while qi + 1 < len(quotes):
            key = entry[quotes[qi] + 1 : quotes[qi + 1]].decode("latin-1")
            if key not in obj or key in self.fields:
                raise _NotTemplate
            after = quotes[qi + 1] + 1
            if type(obj[key]) is str and qi + 3 < len(quotes):
                if not _KEY_GAP.fullmatch(entry[after : quotes[qi + 2]]):
                    raise _NotTemplate
                self.runs.append(entry[cut : quotes[qi + 2] + 1])
                cut, qi = quotes[qi + 3], qi + 4
            else:
                number = _NUMBER_GAP.fullmatch(
                    entry[after : quotes[qi + 2] if qi + 2 < len(quotes) else len(entry)]
                )
                if number is None:
                    raise _NotTemplate
                start = after + len(number.group(1))
                self.runs.append(entry[cut:start])
                cut, qi = start + len(number.group(2)), qi + 2
            self.fields.append(key)
        self.runs.append(entry[cut:])
        if qi != len(quotes) or len(self.fields) != len(obj):
            raise _NotTemplate
        # the last run has a quote where the entry ends in a string (its closing quote), none
        # where it ends in a number: then it is found by its end, the next entry's first quote
        self.anchors: list[tuple[int, int] | None] = []
        seen = 0
        for r, run in enumerate(self.runs):
            if b'"' not in run and r + 1 < len(self.runs):
                raise _NotTemplate
            self.anchors.append((seen, run.index(b'"')) if b'"' in run else None)
            seen += run.count(b'"')


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
                raise _NotTemplate  # more entries than num_shards says: the ordinary parse
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
            raise _NotTemplate  # a URL twice (or two hashes alike): the ordinary parse decides
        if self.count is None:
            cols = {k: np.concatenate(self.parts[k]) for k in ("n", "f", "s", "e")}
        elif self.filled != self.count:
            raise _NotTemplate
        else:
            cols = {"n": self.n, "f": self.f, "s": self.s, "e": self.e}
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
                raise _NotTemplate
            data += more
            found = _shardlist_at(data)
        at, seen = found
        head, rest = data[:at], data[at:]
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
            i = _skip_ws(text, 0)
            try:
                if text[i] != "{":
                    raise _NotTemplate  # an empty list, or not a list of objects
                obj, end = json.JSONDecoder().raw_decode(text, i)
                j = _skip_ws(text, end)
                if text[j] != ",":
                    raise _NotTemplate  # one entry: no manifest this module is for
                j = _skip_ws(text, j + 1)
                k = _skip_ws(text, j + 1)
                if text[j] != "{" or text[k] != '"':
                    raise _NotTemplate
                break
            except (ValueError, IndexError):
                more = self._more()
                if not more or len(rest) > HEAD_LIMIT:
                    raise _NotTemplate from None
                rest += more
        first = rest.index(b'"', i)
        self.tpl = _Template(rest[first:k], obj)
        self._sha = "sha256" in self.tpl.fields
        return rest[first:]

    def _entries(self, carry: bytes, cols: _Columns) -> bytes:
        """Read entries into ``cols`` until the list ends; the bytes after its ``]``."""
        q = self.tpl.quotes
        while True:
            more = self._more()
            buf = np.frombuffer(b"".join((_FRONT, carry, more, _PAD)), dtype=np.uint8)
            body = buf[bw.FRONT : len(buf) - bw.PAD]
            if bool((body == 92).any()):
                raise _NotTemplate  # an escape: quotes no longer delimit strings alone
            qs = np.flatnonzero(body == 34) + bw.FRONT
            ends = len(body) + bw.FRONT
            starts = qs[::q] if not self.eof else np.append(qs[::q], ends)
            n = min(len(qs) // q, len(starts) - 1)
            grid = qs[: q * n].reshape(n, q)
            end = self._piece(buf, grid, starts[1 : n + 1], cols)
            if end is not None:
                return bytes(buf[end : len(buf) - bw.PAD]) + b"".join(iter(self._more, b""))
            if self.eof:
                raise _NotTemplate  # the list never ends: the ordinary parse says why
            carry = bytes(body[int(starts[n]) - bw.FRONT :]) if n < len(starts) else bytes(body)

    def _piece(
        self, buf: np.ndarray, grid: np.ndarray, nxt: np.ndarray, cols: _Columns
    ) -> int | None:
        """Check and read the entries of one piece (``buf``: the piece, padded; ``grid``: each
        entry's quotes; ``nxt``: where the next entry begins); where the list ends in it, the
        offset in ``buf`` past its ``]``."""
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
                raise _NotTemplate
            if tpl.anchors[-1] is None:  # it ends in a number: its digits, then "}" and "]"
                digits = _NUMBER_END.match(buf.data, int(at[-2][good]) + len(runs[-2]))
                if digits is None:
                    raise _NotTemplate
                at[-1][good] = digits.end()
            m = _LIST_END.match(buf.data, int(at[-1][good]) + (tpl.anchors[-1] is not None))
            if m is None:
                raise _NotTemplate
            end, good = m.end(), good + 1
        spans = [
            (a[:good] + len(run), b[:good])
            for a, b, run in zip(at[:-1], at[1:], tpl.runs[:-1], strict=True)
        ]
        self._read_rows(words, spans, cols)
        return end

    def _read_rows(
        self, words: np.ndarray, spans: list[tuple[np.ndarray, np.ndarray]], cols: _Columns
    ) -> None:
        values: dict[str, Any] = {}
        for field, (start, end) in zip(self.tpl.fields, spans, strict=True):
            if _FIELDS[field] is int:
                values[field] = bw.ints(words, start, end)
                if values[field] is None:
                    raise _NotTemplate
                continue
            lengths = end - start
            width = 64 if field == "sha256" else int(lengths.max(initial=0))
            if lengths.max(initial=0) > width or lengths.min(initial=1) < (field == "url"):
                raise _NotTemplate  # a checksum past 64 characters, an empty URL
            rows = bw.texts(words, start, end, width)
            if rows is None:
                raise _NotTemplate
            if field == "sha256":
                values[field] = rows.view("S64").reshape(len(rows))
            else:
                values[field] = (lengths, bw.joined(rows, lengths), bw.row_hash(rows, lengths))
        n = values["nsamples"]
        if len(n) and n.min() < 0:
            raise _NotTemplate
        cols.add(n, values.get("filesize"), values.get("sha256"), values["url"])

    def _with_facts(self, head: bytes, tail: bytes, cols: dict[str, np.ndarray]) -> ShardTable:
        """The table, with the manifest's facts checked as the ordinary parse checks them."""
        try:
            obj = json.loads(head + b"]" + tail)
        except (ValueError, UnicodeDecodeError):
            raise _NotTemplate from None
        if not isinstance(obj, dict) or obj.get("shardlist") != []:
            raise _NotTemplate
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
        meta: dict[str, Any] = {
            "classes": list(base.classes),
            "identity": base.fingerprint or identity_digest(table),
            "versions": [[v.identity, v.shards, v.samples] for v in history[:-1]],
        }
        if offsets is not None:
            total = int(cols["n"].sum())
            of = OffsetsFile.from_json(offsets, total, self.where, offsets_digest(table))
            if of is not None:
                meta["sample_offsets"] = of.to_json()
        table.meta.update(meta)
        return table


__all__ = ["CHUNK", "stream_table"]
