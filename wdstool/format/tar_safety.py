"""Is a tar member safe to extract? One answer, used by verify (reading) and by the writer (pack).

Our readers never extract, so they are safe whatever a shard holds; people do run ``tar -x`` on
shards, though, and these members can then write outside the target folder, follow or plant
links, or create device nodes:

- absolute names (``/etc/x.jpg``) and names with a ``..`` component (``a/../../x.jpg``);
- symlinks and hard links;
- character and block devices, FIFOs;
- names that are not valid UTF-8 (extracted under a name nobody can type, and a ``..`` can hide
  in how a tool decodes them).

Names are checked as the reader resolves them: the ustar prefix joined to the name, a GNU long
name (``L``) or a pax ``path`` record. A name holding undecodable bytes arrives as a ``str`` with
surrogate escapes (``bytes.decode("utf-8", "surrogateescape")``), as the reader decodes it.
"""

from __future__ import annotations

# typeflags of members that are not plain files or folders, and what each is called
_KIND_PROBLEMS = {
    b"1": "hard link",
    b"2": "symlink",
    b"3": "character device",
    b"4": "block device",
    b"6": "FIFO",
}


def unsafe_reasons(name: str, kind: bytes = b"0") -> tuple[str, ...]:
    """Why extracting a member named ``name`` with typeflag ``kind`` is unsafe; () when it is safe.

    Pure: looks at nothing but its arguments. ``kind`` is the one-byte tar typeflag.
    """
    reasons: list[str] = []
    problem = _KIND_PROBLEMS.get(kind)
    if problem is not None:
        reasons.append(problem)
    if name.startswith("/"):
        reasons.append("absolute name")
    if ".." in name.split("/"):
        reasons.append("'..' in the path")
    if not name.isascii():
        try:
            name.encode("utf-8")
        except UnicodeEncodeError:  # surrogate escapes: bytes that were not UTF-8
            reasons.append("name is not valid UTF-8")
    return tuple(reasons)


def printable_name(name: str) -> str:
    """``name`` for a one-line message: undecodable bytes as ``\\xNN``, control characters (a
    newline in a name, a terminal escape) as ``\\n``/``\\x1b``, so it cannot break the line."""
    try:
        raw = name.encode("utf-8", "surrogateescape")
    except UnicodeEncodeError:  # a surrogate no byte decodes to: only a caller's str has one
        raw = name.encode("utf-8", "backslashreplace")
    text = raw.decode("utf-8", "backslashreplace")
    if not text.isprintable():
        text = "".join(
            c if c.isprintable() else c.encode("unicode_escape").decode("ascii") for c in text
        )
    return text
