"""Interleaving several sources evenly: the merged order of k evenly spaced sequences.

Source ``i`` contributes ``spans[i]`` samples; its ``j``-th sits at time ``(2j + 1) / (2 spans[i])``
(the middle of its slot in [0, 1]). The merged order sorts all samples by time, ties to the lower
source index. Any stretch of the merge holds every source in proportion to its span, within one
sample; prefixes are house-monotone (Sainte-Laguë's apportionment), so a stretch [lo, hi) of the
merge is described by two calls of :func:`counts_before`. Exact integer arithmetic throughout:
O(k^2 log n) per call, no per-sample list.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence


def _ahead(other: int, i: int, j: int, spans: Sequence[int]) -> int:
    """How many samples of source ``other`` come before sample ``j`` of source ``i``."""
    if other == i:
        return j
    s_i, s_o = spans[i], spans[other]
    num = (2 * j + 1) * s_o  # sample o of ``other`` is before iff o * s_i < num (o = 2j' + 1)
    # ties go to the lower index (o * s_i <= num); count the odd o in range
    count = (num // s_i + 1) // 2 if other < i else (-(-num // s_i)) // 2
    return min(s_o, count)


def rank_of(i: int, j: int, spans: Sequence[int]) -> int:
    """Position of sample ``j`` of source ``i`` in the merged order."""
    return sum(_ahead(o, i, j, spans) for o in range(len(spans)) if spans[o])


def counts_before(spans: Sequence[int], position: int) -> list[int]:
    """How many samples of each source are among the first ``position`` of the merge."""
    total = sum(spans)
    if position >= total:
        return list(spans)
    out = []
    for i, s in enumerate(spans):
        lo, hi = 0, s  # the answer: the number of j with rank_of(i, j) < position
        while lo < hi:
            mid = (lo + hi) // 2
            if rank_of(i, mid, spans) < position:
                lo = mid + 1
            else:
                hi = mid
        out.append(lo)
    return out


class _Next:
    """Source ``i``'s next sample ``j``, ordered by time then source (exact comparisons)."""

    __slots__ = ("i", "j", "span")

    def __init__(self, i: int, j: int, span: int) -> None:
        self.i, self.j, self.span = i, j, span

    def __lt__(self, other: _Next) -> bool:
        a = (2 * self.j + 1) * other.span
        b = (2 * other.j + 1) * self.span
        return a < b or (a == b and self.i < other.i)


def sources_in_order(spans: Sequence[int], lo: int, hi: int) -> Iterator[int]:
    """The source of each position in [lo, hi) of the merge, in order."""
    import heapq

    start = counts_before(spans, lo)
    end = counts_before(spans, hi)
    heap = [_Next(i, start[i], s) for i, s in enumerate(spans) if start[i] < end[i]]
    heapq.heapify(heap)
    while heap:
        nxt = heap[0]
        yield nxt.i
        if nxt.j + 1 < end[nxt.i]:
            heapq.heapreplace(heap, _Next(nxt.i, nxt.j + 1, nxt.span))
        else:
            heapq.heappop(heap)
