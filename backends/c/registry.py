"""The C target's lowering table: per op spec, a lowering rule or an explicit unsupported entry.

Rules live in the family file of their op (`backends/c/<family>.py`) and are registered against
the `OpSpec` objects of `gdv.ir.ops`, never against names; `tests/test_registry.py` checks that
every op has one or the other in `RULES`.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING

from gdv.ir.core import Op
from gdv.ir.ops import OpSpec

if TYPE_CHECKING:
    from gdv.backends.c.emit import Program

Lowering = Callable[["Program", Op], None]
"""(program being emitted, op of the entry function) -> None; emits the op's C code."""

LOWERINGS: dict[OpSpec, Lowering] = {}
"""Ops the C target lowers, with their rule."""


class Unsupported:
    """An explicit "this target cannot do this op yet" entry, with the reason."""

    def __init__(self, spec: OpSpec, reason: str, module: str) -> None:
        self.spec = spec
        self.reason = reason
        # The family file that declares the entry (tests/test_registry.py checks the home).
        self.__module__ = module

    def __repr__(self) -> str:
        return f"Unsupported({self.spec.name}: {self.reason})"


UNSUPPORTED: dict[OpSpec, Unsupported] = {}
"""Ops the C target refuses, with the reason (a compile-time error names it)."""

RULES: dict[OpSpec, Lowering | Unsupported] = {}
"""Both tables in one: the C-lowering column of tests/test_registry.py."""


def lowering(*specs: OpSpec) -> Callable[[Lowering], Lowering]:
    """Register the decorated function as the C lowering of each of `specs`."""

    def register(fn: Lowering) -> Lowering:
        for spec in specs:
            if not isinstance(spec, OpSpec):
                raise TypeError(f"lowerings register against OpSpec objects, got {spec!r}")
            if spec in RULES:
                raise ValueError(f"{spec.name} already has a C rule")
            LOWERINGS[spec] = fn
            RULES[spec] = fn
        return fn

    return register


def unsupported(spec: OpSpec, reason: str, module: str) -> None:
    """Declare that the C target cannot lower `spec` yet, and why (`module`: the family file)."""
    if spec in RULES:
        raise ValueError(f"{spec.name} already has a C rule")
    entry = Unsupported(spec, reason, module)
    UNSUPPORTED[spec] = entry
    RULES[spec] = entry
