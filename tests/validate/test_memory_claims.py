"""The memory-safety claim (`gdv.validate.schedules.overlap_violation`) against a brute-force
check of the same plan: the formula is satisfiable exactly when two distinct buffers live at
one time share a byte, or a buffer leaves the arena."""

from __future__ import annotations

import z3
from hypothesis import given
from hypothesis import strategies as st

from gdv.validate.schedules import Buffer, overlap_violation


def brute_force(buffers: list[Buffer], arena: int) -> bool:
    for a in buffers:
        if a.offset < 0 or a.offset + a.size > arena:
            return True
    for i, a in enumerate(buffers):
        for b in buffers[i + 1 :]:
            live = a.start <= b.end and b.start <= a.end
            share = a.offset < b.offset + b.size and b.offset < a.offset + a.size
            if live and share and a.size > 0 and b.size > 0:
                return True
    return False


@st.composite
def plans(draw) -> tuple[list[Buffer], int]:
    n = draw(st.integers(0, 8))
    buffers = []
    for k in range(n):
        start = draw(st.integers(0, 6))
        buffers.append(
            Buffer(
                f"v{k}",
                draw(st.integers(-8, 96)),
                draw(st.integers(0, 32)),
                start,
                start + draw(st.integers(0, 4)),
            )
        )
    return buffers, draw(st.integers(0, 128))


@given(plans())
def test_the_claim_is_violated_exactly_when_the_plan_is(plan) -> None:
    buffers, arena = plan
    s = z3.Solver()
    s.add(overlap_violation(buffers, arena))
    assert (s.check() == z3.sat) == brute_force(buffers, arena)


def test_a_safe_plan_and_a_clash() -> None:
    safe = [Buffer("a", 0, 64, 0, 1), Buffer("b", 64, 64, 1, 2), Buffer("c", 0, 64, 2, 3)]
    s = z3.Solver()
    s.add(overlap_violation(safe, 128))
    assert s.check() == z3.unsat
    clash = [*safe[:2], Buffer("c", 32, 64, 2, 3)]  # meets b at step 2, shares bytes 64..95
    s = z3.Solver()
    s.add(overlap_violation(clash, 128))
    assert s.check() == z3.sat
