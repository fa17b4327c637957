"""Refusing programs whose tensors would not fit in memory, before allocating anything."""

from __future__ import annotations

import os

from gdv.backends.reference.registry import Context
from gdv.ir.core import Function
from gdv.ir.diagnostics import IRError
from gdv.ir.types import TensorType

_FALLBACK_PHYSICAL = 8 << 30
"""Assumed physical memory where the OS does not say (not POSIX)."""

_SCRATCH_ITEMSIZE = 8
"""Kernels hold float64 working copies of their operands and result (arith.Working), so an op
is charged 8 bytes per operand and result element on top of the live values."""


def physical_memory() -> int:
    """Bytes of physical memory, from os.sysconf."""
    try:
        return os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    except (AttributeError, ValueError, OSError):
        return _FALLBACK_PHYSICAL


def default_limit() -> int:
    """80% of physical memory."""
    return physical_memory() * 4 // 5


def _bytes(t: TensorType, ctx: Context) -> int:
    return t.num_elements * ctx.storage(t.dtype).itemsize


def _show(n: int) -> str:
    for unit, size in (("TiB", 1 << 40), ("GiB", 1 << 30), ("MiB", 1 << 20), ("KiB", 1 << 10)):
        if n >= size:
            return f"{n / size:.1f} {unit} ({n} bytes)"
    return f"{n} bytes"


def _limit_text(limit: int, explicit: bool) -> str:
    why = "the given limit" if explicit else "80% of physical memory"
    return f"{_show(limit)}, {why}"


def check_params_memory(
    function: Function, limit_bytes: int | None = None, *, mode: str = "exact"
) -> None:
    """Raise an IRError at the first parameter whose value does not fit together with the
    parameters before it."""
    ctx = Context(mode)
    limit = default_limit() if limit_bytes is None else limit_bytes
    total = 0
    for p in function.params:
        total += _bytes(p.type, ctx)
        if total > limit:
            raise IRError(
                f"parameter %{p.name}: {p.type} needs {_show(_bytes(p.type, ctx))} "
                f"({_show(total)} with the parameters before it), more than the reference "
                f"backend may use: {_limit_text(limit, limit_bytes is not None)}",
                p.loc,
            )


def check_memory(
    function: Function, limit_bytes: int | None = None, *, mode: str = "exact"
) -> None:
    """Refuse `function` with an IRError at the first parameter or op whose working set would
    exceed `limit_bytes` (default: 80% of physical memory).

    The working set of an op is an estimate: every parameter, every value still to be used
    (or returned), the op's result, and float64 scratch for its operands and result. Types
    alone decide it, so nothing is allocated. Sizes are Python integers: no overflow."""
    ctx = Context(mode)
    limit = default_limit() if limit_bytes is None else limit_bytes
    explicit = limit_bytes is not None
    check_params_memory(function, limit_bytes, mode=mode)
    types = {p.name: p.type for p in function.params}
    params = sum(_bytes(p.type, ctx) for p in function.params)
    last_use: dict[str, int] = {}
    for i, op in enumerate(function.ops):
        for name in op.operands:
            last_use[name] = i
    for name in function.returns:
        last_use[name] = len(function.ops)
    live: dict[str, int] = {}  # op results still needed, by name
    for i, op in enumerate(function.ops):
        types[op.result] = op.type
        result = _bytes(op.type, ctx)
        elements = op.type.num_elements + sum(
            types[n].num_elements for n in op.operands if n in types
        )
        need = params + sum(live.values()) + result + _SCRATCH_ITEMSIZE * elements
        if need > limit:
            raise IRError(
                f"%{op.result} = {op.name}(...) : {op.type} needs about {_show(need)} of live "
                f"tensors and scratch (its result alone {_show(result)}), more than the "
                f"reference backend may use: {_limit_text(limit, explicit)}",
                op.loc,
            )
        live[op.result] = result
        for name in set(op.operands) | {op.result}:
            if last_use.get(name, -1) <= i and name in live and name not in function.returns:
                del live[name]
