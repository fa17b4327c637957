"""Delta debugging (Zeller and Hildebrandt's ddmin), written once and small.

`ddmin(items, interesting)` returns a 1-minimal subsequence of `items` for which
`interesting` holds: removing any single element of the result loses it. `interesting` must
hold for `items` itself. Candidates of one round are passed to `interesting_many` together,
so that a caller can test them in parallel; the first interesting one in a fixed order wins,
so the result does not depend on how many run at once.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import TypeVar

T = TypeVar("T")


def _split(items: list[T], n: int) -> list[list[T]]:
    size, extra = divmod(len(items), n)
    out, start = [], 0
    for k in range(n):
        end = start + size + (1 if k < extra else 0)
        out.append(items[start:end])
        start = end
    return [c for c in out if c]


def ddmin(
    items: Sequence[T],
    interesting: Callable[[list[T]], bool] | None = None,
    *,
    interesting_many: Callable[[list[list[T]]], list[bool]] | None = None,
) -> list[T]:
    """A 1-minimal interesting subsequence of `items` (order kept)."""
    if interesting_many is None:
        assert interesting is not None

        def interesting_many(cands: list[list[T]]) -> list[bool]:
            out = []
            for c in cands:  # stop at the first interesting one: the rest are not needed
                out.append(interesting(c))
                if out[-1]:
                    break
            return out + [False] * (len(cands) - len(out))

    current, n = list(items), 2
    while len(current) >= 2:
        chunks = _split(current, min(n, len(current)))
        # Try each chunk alone (the big wins), then each complement.
        subsets = chunks if len(chunks) > 2 else []
        complements = [[x for c2 in chunks if c2 is not c for x in c2] for c in chunks]
        found = None
        for group, reduce_to_subset in ((subsets, True), (complements, False)):
            if not group:
                continue
            verdicts = interesting_many(group)
            hit = next((i for i, ok in enumerate(verdicts) if ok), None)
            if hit is not None:
                found = (group[hit], reduce_to_subset)
                break
        if found is not None:
            current, to_subset = found
            n = 2 if to_subset else max(min(n, len(current)) - 1, 2)
            continue
        if n >= len(current):
            break
        n = min(2 * n, len(current))
    if len(current) == 1 and interesting_many([[]])[0]:
        return []
    return current
