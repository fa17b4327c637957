"""The IR verifier: SSA, definition before use, op names, operand counts, attributes, type rules,
written result types, return arity and types (IR_SPEC.md sections 1, 2 and 4).

Every rejection is an `IRError` pointing at the offending token and naming both sides of a
mismatch.
"""

from __future__ import annotations

import difflib
import math
from fractions import Fraction

from gdv.ir import ops as op_registry
from gdv.ir.core import Function, Module, Op, Param
from gdv.ir.diagnostics import IRError, Loc, printable
from gdv.ir.mesh import check_spmd
from gdv.ir.ops import OpTypeError
from gdv.ir.ops.control import check_control_bodies
from gdv.ir.ops.kernel import check_kernel_bodies
from gdv.ir.types import MAX_ELEMENTS, MAX_RANK, TensorType

STAGES = ("graph", "core", "loop")
"""`loop` is `core` where kernels are checked against their bodies too."""


def verify(module: Module, stage: str = "graph") -> Module:
    """Check `module`; return it unchanged, or raise the first `IRError` found.

    At the `core` and `loop` stages, composite ops (`graph`-stage only) are rejected too."""
    assert stage in STAGES, stage
    seen: dict[str, Function] = {}
    for fn in module.functions:
        if fn.name in seen:
            raise IRError(
                f"function @{fn.name} is defined twice (first at line {_line(seen[fn.name].loc)})",
                _at(fn.loc, module),
            )
        seen[fn.name] = fn
        verify_function(fn, stage, module.filename)
    if module.entry is None:
        raise IRError(
            f"the module has {len(module.functions)} functions and none is named @main, so it "
            "has no entry function",
            _at(module.functions[0].loc, module),
        )
    # Bodies are checked at every stage, not only `loop`: a kernel is valid wherever it
    # appears, and an unchecked body (wrong dtype, recursion, a nested kernel) crashed the
    # interpreters that trust this check (issue 14).
    check_kernel_bodies(module)
    check_control_bodies(module)
    check_spmd(module)
    return module


def _line(loc: Loc | None) -> int:
    return loc.line if loc else 1


def _at(loc: Loc | None, module_or_file: Module | str) -> Loc:
    if loc is not None:
        return loc
    file = module_or_file if isinstance(module_or_file, str) else module_or_file.filename
    return Loc(file, 1, 1)


def verify_function(fn: Function, stage: str = "graph", filename: str = "<input>") -> None:
    defined: dict[str, Loc | None] = {}

    def where(loc: Loc | None) -> Loc:
        return _at(loc, filename)

    for p in fn.params:
        if p.name in defined:
            raise IRError(f"parameter %{p.name} is declared twice", where(p.loc))
        defined[p.name] = p.loc
        _check_type(p.type, where(p.loc))
        _check_param_attrs(p, where)
    for k, t in enumerate(fn.results):
        _check_type(t, where(fn.result_locs[k] if k < len(fn.result_locs) else fn.loc))
    types = {p.name: p.type for p in fn.params}
    for op in fn.ops:
        for i, name in enumerate(op.operands):
            if name not in defined:
                loc = op.operand_locs[i] if i < len(op.operand_locs) else op.loc
                later = next((o for o in fn.ops if o.result == name), None)
                if later is not None:
                    msg = f"%{name} is used before its definition at line {_line(later.loc)}"
                else:
                    msg = f"use of undefined value %{name}"
                raise IRError(msg, where(loc))
        if op.result in defined:
            prev = defined[op.result]
            raise IRError(
                f"%{op.result} is defined twice (first at line {_line(prev)}); values are SSA",
                where(op.loc),
            )
        _check_type(op.type, where(op.type_loc or op.loc))
        verify_op(op, [types[o] for o in op.operands], stage, where)
        defined[op.result] = op.loc
        types[op.result] = op.type
    if len(fn.returns) != len(fn.results):
        raise IRError(
            f"@{fn.name} returns {len(fn.returns)} value(s) but declares {len(fn.results)} "
            f"result(s) ({', '.join(map(str, fn.results)) or 'none'})",
            where(fn.return_loc),
        )
    for i, (name, expected) in enumerate(zip(fn.returns, fn.results, strict=True)):
        loc = fn.return_locs[i] if i < len(fn.return_locs) else fn.return_loc
        if name not in types:
            raise IRError(f"return of undefined value %{name}", where(loc))
        if types[name] != expected:
            raise IRError(
                f"returned value {i + 1} (%{name}) is {types[name]}, expected {expected} as "
                f"@{fn.name} declares",
                where(loc),
            )


def verify_op(op: Op, operand_types: list[TensorType], stage: str, where) -> None:
    spec = op_registry.get(op.name)
    name_loc = where(op.name_loc or op.loc)
    if spec is None:
        close = difflib.get_close_matches(op.name, list(op_registry.REGISTRY), n=1)
        hint = f" (did you mean '{close[0]}'?)" if close else ""
        raise IRError(f"unknown op '{printable(op.name)}'{hint}", name_loc)
    if stage != "graph" and spec.is_composite:
        raise IRError(
            f"{op.name} is a graph-stage op and cannot appear at the {stage} stage", name_loc
        )
    n = len(op.operands)
    lo, hi = spec.min_operands, spec.max_operands
    if n < lo or (hi is not None and n > hi):
        want = str(lo) if lo == hi else (f"at least {lo}" if hi is None else f"{lo} to {hi}")
        raise IRError(f"{op.name} takes {want} operand(s), got {n}", name_loc)
    attrs = {}
    for key, value in op.attrs.items():
        attr_loc = where(op.attr_locs.get(key, op.name_loc or op.loc))
        attr_spec = next((a for a in spec.attrs if a.name == key), None)
        if attr_spec is None:
            takes = ", ".join(spec.attr_names) or "no attributes"
            raise IRError(f"{op.name} has no attribute '{key}' (it takes: {takes})", attr_loc)
        try:
            attrs[key] = attr_spec.check(value)
        except ValueError as e:
            raise IRError(f"attribute '{key}' of {op.name}: {e}", attr_loc) from None
    for a in spec.attrs:
        if a.required and a.name not in attrs:
            raise IRError(f"{op.name} needs attribute '{a.name}'", name_loc)
    _check_storage(op, spec, operand_types, name_loc)
    try:
        inferred = spec.infer(operand_types, attrs, op.type)
    except OpTypeError as e:
        if e.operand is not None and e.operand < len(op.operand_locs):
            loc = op.operand_locs[e.operand]
        elif e.attr is not None and e.attr in op.attr_locs:
            loc = op.attr_locs[e.attr]
        else:
            loc = op.name_loc or op.loc
        raise IRError(f"{op.name}: {e.message}", where(loc)) from None
    if inferred != op.type:
        raise IRError(
            f"result type is written {op.type}, but {op.name} of "
            f"({', '.join(map(str, operand_types))}) gives {inferred}",
            where(op.type_loc or op.loc),
        )


def _check_storage(op: Op, spec, operand_types: list[TensorType], loc: Loc) -> None:
    """Storage-only dtypes (float8, IR_SPEC.md section 8) reach only `convert` and data
    movement; a kernel on them maps and never folds."""
    found = [t.dtype for t in [*operand_types, op.type] if t.dtype.is_storage]
    if not found:
        return
    folds = op.name == "kernel" and bool(op.attrs.get("reduce")) and op.type.dtype.is_storage
    if spec.storage_legal and not folds:
        return
    d = found[0]
    raise IRError(
        f"{op.name} on {d}: {d} is a storage-only dtype (convert and data movement, IR_SPEC.md "
        f"section 8); arithmetic on it is refused, convert it to a float first",
        loc,
    )


def _check_type(t: TensorType, loc: Loc) -> None:
    if t.rank > MAX_RANK:
        raise IRError(f"type {t} has rank {t.rank}, more than the limit of {MAX_RANK}", loc)
    if t.num_elements > MAX_ELEMENTS:
        raise IRError(f"type {t} has {t.num_elements} elements, more than the limit of 2^62", loc)


def _check_param_attrs(p: Param, where) -> None:
    if "range" not in p.attrs:
        return
    r = p.attrs["range"]
    loc = where(p.attr_locs.get("range", p.loc))
    ok = (
        isinstance(r, list)
        and len(r) == 2
        and all(isinstance(v, int | float | Fraction) and not isinstance(v, bool) for v in r)
    )
    if not ok:
        raise IRError("range must be [lo, hi] with two numbers", loc)
    lo, hi = (_as_float(v) for v in r)
    if math.isnan(lo) or math.isnan(hi) or lo > hi:
        raise IRError(f"range [{lo!r}, {hi!r}] needs lo <= hi and no NaN", loc)


def _as_float(v: int | float | Fraction) -> float:
    try:
        return float(v)
    except OverflowError:  # an integer literal beyond the f64 range
        return math.inf if v > 0 else -math.inf
