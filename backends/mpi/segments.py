"""Cutting an SPMD function into segments of local ops with the collectives between them.

A segment is an ordinary function `@main` (no mesh attributes): its parameters are the values
live into it (the SPMD function's parameters, or results of earlier segments and collectives),
its results the values it defines that a later op or the return uses. Each segment compiles
through the C target like any program, its obligations proved; a segment with no ops (two
collectives in a row) or whose values nothing uses is skipped.
"""

from __future__ import annotations

from dataclasses import dataclass

from gdv.ir.core import Function, Module, Op, Param
from gdv.ir.diagnostics import IRError
from gdv.ir.dtypes import DType
from gdv.ir.ops.collective import COLLECTIVES

FOLDED_DTYPES = {
    DType.F64: 0,
    DType.F32: 1,
    DType.I64: 2,
    DType.I32: 3,
    DType.I8: 4,
    DType.I16: 5,
    DType.U64: 6,
    DType.U32: 7,
    DType.U16: 8,
    DType.U8: 9,
}
"""The dtypes the runtime folds, with their codes in runtime.c."""
COMBINERS = {"add": 0, "max": 1, "min": 2}
ORDERS = {"rank": 0, "tree": 1, "ring": 2}


@dataclass
class Segment:
    """Ops `first .. end-1` of the SPMD function as the ordinary function `function`."""

    first: int
    end: int
    function: Function

    @property
    def params(self) -> list[str]:
        return [p.name for p in self.function.params]

    @property
    def results(self) -> list[str]:
        return list(self.function.returns)


@dataclass
class Collective:
    """The collective op at `index` of the SPMD function."""

    index: int
    op: Op


Step = Segment | Collective


def split(fn: Function) -> list[Step]:
    """`fn`'s ops as segments and collectives, in program order."""
    types = fn.types()
    later_uses: list[set[str]] = [set() for _ in range(len(fn.ops) + 1)]
    used = set(fn.returns)
    later_uses[len(fn.ops)] = set(used)
    for i in range(len(fn.ops) - 1, -1, -1):
        used |= set(fn.ops[i].operands)
        later_uses[i] = set(used)
    steps: list[Step] = []
    first = 0
    for i, op in enumerate([*fn.ops, None]):
        if op is not None and op.name not in COLLECTIVES:
            continue
        if i > first:
            seg = _segment(fn, first, i, types, later_uses[i])
            if seg is not None:
                steps.append(seg)
        if op is not None:
            steps.append(Collective(i, op))
        first = i + 1
    return steps


def _segment(fn: Function, first: int, end: int, types, live_after: set[str]) -> Segment | None:
    ops = fn.ops[first:end]
    defined = {op.result for op in ops}
    inputs: list[str] = []
    for op in ops:
        for o in op.operands:
            if o not in defined and o not in inputs:
                inputs.append(o)
    outputs = [op.result for op in ops if op.result in live_after]
    if not outputs:
        return None
    function = Function(
        "main",
        [Param(name, types[name]) for name in inputs],
        [types[name] for name in outputs],
        list(ops),
        outputs,
        loc=fn.loc,
    )
    return Segment(first, end, function)


def segment_module(module: Module, fn: Function, seg: Segment) -> Module:
    """The module a segment compiles as: its function and the module's ordinary functions
    (kernel bodies; the branches, conditions and bodies its control flow ops name, and those
    they name in turn), without meshes."""
    others = [f for f in module.functions if f is not fn and "mesh" not in f.attrs]
    return Module([seg.function, *others], module.filename)


def check_runnable(fn: Function, module: Module | None = None) -> None:
    """Every folding collective's dtype is one the runtime folds, and every function a control
    flow op names (in `module`) is an ordinary one (an IRError at the op).

    A control flow op (IR_SPEC.md section 9) is a local op like any other: every rank runs it
    on its own values in its segment (`gdv partition` gathers its operands whole first), the
    functions it names being ordinary functions of the module, which `segment_module` keeps.
    A function with a mesh (an SPMD one, which may hold collectives) is no such body: the
    segments between collectives could not hold it."""
    if module is not None:
        _check_bodies(fn, module)
    for op in fn.ops:
        if "combiner" in op.attrs and op.type.dtype not in FOLDED_DTYPES:
            known = ", ".join(str(d) for d in FOLDED_DTYPES)
            raise IRError(
                f"{op.name} on {op.type.dtype}: the MPI runtime folds {known} only (a "
                f"{op.type.dtype} fold would need its own rounding; not implemented)",
                op.name_loc or op.loc,
            )


def _check_bodies(fn: Function, module: Module) -> None:
    """No function a control flow op of `fn` reaches (through the functions named in turn) has
    a mesh."""
    from gdv.ir.ops.control import FUNCTION_ATTRS

    seen = {fn.name}
    todo = [fn]
    while todo:
        caller = todo.pop()
        for op in caller.ops:
            for attr in FUNCTION_ATTRS.get(op.name, ()):
                callee = module.function(op.attrs[attr])
                if callee is None or callee.name in seen:
                    continue
                if "mesh" in callee.attrs:
                    raise IRError(
                        f"{op.name} {attr} @{callee.name} is an SPMD function (it has a mesh): "
                        "the functions a control flow op names run on every rank as ordinary "
                        "functions",
                        op.attr_locs.get(attr) or op.name_loc or op.loc,
                    )
                seen.add(callee.name)
                todo.append(callee)
