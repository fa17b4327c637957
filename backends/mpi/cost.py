"""The alpha-beta cost of each collective as the MPI runtime (runtime.c) performs it (issue 17,
item 4).

A message of n bytes between two ranks costs `alpha + n * beta` (alpha: latency in seconds,
beta: seconds per byte). A step in which every member sends one message and receives one at
once (runtime.c's `xchg`: both posted, then one wait) costs the same as one message. Each
collective of a group of p members, operand of n bytes (E elements of e bytes), costs the
number of steps on its critical path times alpha plus the bytes along that path times beta:

- all_reduce over 2 members, order rank or tree (both are op(v0, v1): one exchange, each member
  folds the two values in order itself): 1 step, n bytes;
- all_reduce, order rank (a chain down the members, pipelined in pieces of s = min(n, 256 KiB),
  k = ceil(n / 256 KiB) of them, then the result round the chain): 2(p + k - 2) steps,
  2(p + k - 2) s bytes;
- all_reduce, order tree (reduce to member 0, then broadcast; L = ceil(log2 p)): 2L steps,
  2L n bytes;
- all_reduce, order ring (reduce-scatter then all-gather, chunks of c = ceil(E/p) e bytes):
  2(p - 1) steps, 2(p - 1) c bytes;
- reduce_scatter, any order (a pairwise exchange, or the ring's reduce-scatter): p - 1 steps,
  (p - 1) n / p bytes;
- all_gather (the ring's all-gather of the n-byte blocks): p - 1 steps, (p - 1) n bytes;
- all_to_all (a pairwise exchange of n/p-byte blocks): p - 1 steps, (p - 1) n / p bytes;
- collective_permute (one exchange; none when every pair is a copy): 1 step, n bytes;
- carry_reduce (the r-byte accumulator down the chain, then p - 1 sends from the last
  member): 2(p - 1) steps, 2(p - 1) r bytes;
- shard_slice (each member keeps its own block): nothing.

For p = 1 every collective is free. The ring all-reduce is the textbook 2(p-1)α + 2(p-1)/p·nβ
(exactly so when p divides E). `bytes_sent` gives what each member sends, counted the way the
runtime counts it (`*sent` in runtime.c), so the prediction can be compared with a run's
report byte for byte. The local folds of a reduction are not in the model (they are
elementwise work the size of the operand, far below the messages' cost).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

CHAIN_PIECE = 1 << 18
"""Bytes per piece of the pipelined rank-order chain (runtime.c's CHAIN_PIECE)."""


@dataclass(frozen=True)
class Network:
    """The alpha-beta parameters of the links between ranks, and where they came from."""

    alpha: float
    """Seconds per message (latency)."""
    beta: float
    """Seconds per byte (inverse bandwidth)."""
    source: str
    """`default` (documented values, not measured), or `measured ...` (the probe's cache)."""

    def message(self, nbytes: float) -> float:
        return self.alpha + nbytes * self.beta


DEFAULT_NETWORK = Network(
    alpha=5e-6,
    beta=1 / 5e9,
    source="default (not measured: 5 us per message, 5 GB/s; run gdv plan --probe to measure)",
)
"""Used when no probe has run: shared-memory MPI on one host is in this range."""


@dataclass(frozen=True)
class CollectiveCost:
    """One collective on one group: steps and bytes on its critical path, and what each
    member sends."""

    op: str
    steps: int
    path_bytes: float
    bytes_sent: tuple[int, ...]
    """Bytes member m sends (index m), as the runtime counts them."""

    def seconds(self, net: Network) -> float:
        return self.steps * net.alpha + self.path_bytes * net.beta

    @property
    def max_bytes_sent(self) -> int:
        return max(self.bytes_sent, default=0)


def _ring_chunk_elements(elements: int, p: int) -> list[int]:
    size = -(-elements // p)
    return [max(0, min((c + 1) * size, elements) - min(c * size, elements)) for c in range(p)]


def _tree_sent(nbytes: int, p: int) -> list[int]:
    """Bytes each member sends in runtime.c's tree reduce plus tree broadcast."""
    sent = [0] * p

    def walk(lo: int, n: int) -> None:
        if n == 1:
            return
        h = (n + 1) // 2
        sent[lo + h] += nbytes  # reduce: the upper half's root sends to lo
        sent[lo] += nbytes  # broadcast: lo sends to the upper half's root
        walk(lo, h)
        walk(lo + h, n - h)

    walk(0, p)
    return sent


def tree_depth(p: int) -> int:
    """Levels of runtime.c's tree: ceil(log2 p)."""
    return math.ceil(math.log2(p)) if p > 1 else 0


def collective_cost(
    op: str,
    p: int,
    operand_bytes: int,
    *,
    itemsize: int = 4,
    order: str = "rank",
    result_bytes: int | None = None,
    pairs: list[list[int]] | None = None,
) -> CollectiveCost:
    """The cost of collective `op` over a group of `p` members whose operand has
    `operand_bytes` bytes per member (`result_bytes`: carry_reduce's result; `pairs`:
    collective_permute's pairs)."""
    n = operand_bytes
    if p <= 1 or op == "shard_slice":
        return CollectiveCost(op, 0, 0.0, tuple([0] * max(p, 1)))
    if op == "all_reduce":
        if p == 2 and order in ("rank", "tree"):
            return CollectiveCost(op, 1, float(n), (n, n))
        if order == "rank":
            k = max(1, -(-n // CHAIN_PIECE))
            s = min(n, CHAIN_PIECE)
            steps = 2 * (p + k - 2)
            sent = [2 * n] * p
            sent[p - 2] -= n  # the chain ends there (phase 0: members 0 .. p-2 send)
            sent[p - 1] -= n  # phase 1 starts at p-1 and ends at p-2
            return CollectiveCost(op, steps, float(steps * s), tuple(sent))
        if order == "tree":
            depth = tree_depth(p)
            return CollectiveCost(op, 2 * depth, float(2 * depth * n), tuple(_tree_sent(n, p)))
        if order == "ring":
            chunks = [c * itemsize for c in _ring_chunk_elements(n // itemsize, p)]
            total = sum(chunks)
            # member m sends every chunk but chunk m (reduce-scatter) and but chunk m+1 (gather)
            sent = [2 * total - chunks[m] - chunks[(m + 1) % p] for m in range(p)]
            return CollectiveCost(op, 2 * (p - 1), float(2 * (p - 1) * max(chunks)), tuple(sent))
        raise ValueError(f"all_reduce has no order {order!r}")
    if op in ("reduce_scatter", "all_to_all"):
        block = n // p
        return CollectiveCost(op, p - 1, float((p - 1) * block), tuple([(p - 1) * block] * p))
    if op == "all_gather":
        return CollectiveCost(op, p - 1, float((p - 1) * n), tuple([(p - 1) * n] * p))
    if op == "collective_permute":
        sent = [0] * p
        for src, dst in pairs or []:
            if src != dst:
                sent[src] += n
        return CollectiveCost(op, 1 if any(sent) else 0, float(n if any(sent) else 0), tuple(sent))
    if op == "carry_reduce":
        r = n if result_bytes is None else result_bytes
        sent = [r] * (p - 1) + [(p - 1) * r]
        return CollectiveCost(op, 2 * (p - 1), float(2 * (p - 1) * r), tuple(sent))
    raise ValueError(f"{op} is not a collective")


__all__ = [
    "CHAIN_PIECE",
    "DEFAULT_NETWORK",
    "CollectiveCost",
    "Network",
    "collective_cost",
    "tree_depth",
]
