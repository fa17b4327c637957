"""The Triton target's tables, per op spec (DESIGN.md, one op one column): how the host launcher
runs an op of the entry function (`HOST`), how a kernel body computes an op (`BODY`), and the
explicit refusals with their reasons (`UNSUPPORTED`).

Rules live in the family file of their op (`backends/triton/<family>.py`) and are registered
against the `OpSpec` objects of `gdv.ir.ops`, never against names. `RULES` holds, for every op,
its host rule or its refusal; `tests/backends/triton/test_registry.py` checks that no op is
missing.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING

from gdv.ir.core import Op
from gdv.ir.dtypes import DType
from gdv.ir.ops import OpSpec

if TYPE_CHECKING:
    from gdv.backends.triton.emit import BodyWriter, Program

HostRule = Callable[["Program", Op], None]
"""(program being emitted, op of the entry function) -> None: emits the launcher's lines."""
BodyRule = Callable[["BodyWriter", Op, list[str], list[DType]], str]
"""(body being emitted, scalar op of a kernel body, operand expressions, operand dtypes) -> the
op's Triton expression."""

HOST: dict[OpSpec, HostRule] = {}
"""Ops of the entry function the launcher runs: kernels (a Triton kernel each) and the ops that
only move data (torch operations on the device, exact)."""
BODY: dict[OpSpec, BodyRule] = {}
"""Ops a kernel body may hold, as Triton expressions."""
UNSUPPORTED: dict[OpSpec, str] = {}
"""Ops the target refuses in the entry function, with the reason."""
RULES: dict[OpSpec, HostRule | str] = {}
"""Every op: its host rule or the reason it is refused (the registry test's column)."""


def host(*specs: OpSpec) -> Callable[[HostRule], HostRule]:
    """Register the decorated function as the host rule of each of `specs`."""

    def register(fn: HostRule) -> HostRule:
        for spec in specs:
            if not isinstance(spec, OpSpec):
                raise TypeError(f"rules register against OpSpec objects, got {spec!r}")
            if spec in RULES:
                raise ValueError(f"{spec.name} already has a triton rule")
            HOST[spec] = fn
            RULES[spec] = fn
        return fn

    return register


def body(*specs: OpSpec) -> Callable[[BodyRule], BodyRule]:
    """Register the decorated function as the body expression of each of `specs`."""

    def register(fn: BodyRule) -> BodyRule:
        for spec in specs:
            if spec in BODY:
                raise ValueError(f"{spec.name} already has a triton body rule")
            BODY[spec] = fn
        return fn

    return register


def unsupported(spec: OpSpec, reason: str) -> None:
    """Declare that the target refuses `spec` in the entry function, and why."""
    if spec in RULES:
        raise ValueError(f"{spec.name} already has a triton rule")
    UNSUPPORTED[spec] = reason
    RULES[spec] = reason
