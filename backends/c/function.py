"""Lowering one function's ops to C, in order: the entry function's (`gdv.backends.c.lower_module`)
and those of the functions control flow ops call (`backends/c/control.py`), each with the same
rules and the same row-group loops."""

from __future__ import annotations

from collections.abc import Callable

from gdv.backends.c.emit import Program, comment, ctype
from gdv.backends.c.registry import LOWERINGS, UNSUPPORTED
from gdv.ir.core import Op
from gdv.ir.diagnostics import IRError
from gdv.ir.ops import get as get_spec
from gdv.ir.ops.kernel import at_bind_params, group_spans, row_dim

Fallback = Callable[[int, Op, IRError], bool]
"""(op index, op, the error lowering it raised) -> whether it emitted a fallback for the op
(the program restored to before the op first); False: the error is raised."""


def lower_ops(prog: Program, fallback: Fallback | None = None) -> list[tuple[int, int, int]]:
    """Emit the C of every op of `prog.entry` into `prog.body`; per op that emitted code, its
    (index, first and end line in `prog.body`), a row group's loop counted as its last
    member's (the profiling timers, `gdv.backends.c.profile`)."""
    fn = prog.entry
    spans: list[tuple[int, int, int]] = []
    groups = group_spans(fn)
    group_start = 0
    kept = {} if prog.is_body else at_bind_params(prog.module)
    params = {p.name for p in fn.params}
    hoisted: set[str] = set()
    for index, op in enumerate(fn.ops):
        group = groups[index]
        if group[0] == index and group[1] > index:  # a row group opens: its calls go below
            group_start = len(prog.body)
        spec = get_spec(op.name)
        if spec is None:
            raise prog.error(op, "unknown op")
        snap = _snapshot(prog)
        start = len(prog.body)
        try:
            if spec in UNSUPPORTED:
                raise prog.error(op, UNSUPPORTED[spec].reason)
            ctype(op.type.dtype, op, prog.module)
            LOWERINGS[spec](prog, op)
        except IRError as e:
            _restore(prog, snap)
            if group[1] > group[0]:
                raise  # a row group's loop cannot call a reference kernel (nor reach its values)
            if fallback is None or not fallback(index, op, e):
                raise
        else:
            if (
                op.result in kept
                and op.result not in prog.arena_of  # the plan keeps it apart: a slot of its own
                and all(v in params or v in hoisted for v in op.operands)
            ):
                # computed at bind time (a fallback, and what reads one, in every call)
                rows = op.attrs["space"][row_dim(op)[1]] if group[1] > group[0] else None
                prog.hoist(op, start, kept[op.result], rows)
                hoisted.add(op.result)
        if group[1] > group[0] and index == group[1]:
            # The group's loop holds every member's call: it is timed (`gdv profile`) as the
            # last member's span.
            members = [o.result for o in fn.ops[group[0] : index + 1]]
            _row_group_loop(prog, op, group_start, members)
            if all(v in hoisted for v in members):  # no fork of threads for nothing
                flags = " && ".join(
                    f"gdv_bound[{h.index}]" for h in prog.hoists if h.value in members
                )
                prog.body[group_start:] = [
                    f"  if (!({flags})) {{",
                    *["  " + line for line in prog.body[group_start:]],
                    "  }",
                ]
            spans = [sp for sp in spans if sp[0] < group[0]]
            start = group_start
        if len(prog.body) > start:
            spans.append((index, start, len(prog.body)))
    return spans


def _snapshot(prog: Program) -> tuple:
    return (
        len(prog.functions),
        len(prog.body),
        dict(prog.slot_of),
        list(prog.slot_types),
        set(prog.libm),
        set(prog.helpers),
        dict(prog._var),
        dict(prog.arena_of),
        len(prog.choices),
        list(prog.aligned_slots),
        dict(prog.called),
        dict(prog.groups),
        dict(prog.tables),
    )


def _restore(prog: Program, snap: tuple) -> None:
    (
        nf, nb, slot_of, slot_types, libm, helpers, var, arena_of, nc, aligned, called, groups,
        tables,
    ) = snap  # fmt: skip
    del prog.choices[nc:]
    del prog.functions[nf:]
    del prog.body[nb:]
    prog.slot_of, prog.slot_types, prog.libm, prog.helpers = slot_of, slot_types, libm, helpers
    prog._var, prog.arena_of, prog.groups = var, arena_of, groups
    prog.aligned_slots[:] = aligned
    prog.called.clear()
    prog.called.update(called)
    prog.tables.clear()  # shared with the bodies' programs (`Program.sub`): kept the same dict
    prog.tables.update(tables)


BLOCK_LOCAL_STACK_BYTES = 1 << 20
"""The most bytes a row group's block-local buffers may take on a thread's stack together."""


def _row_group_loop(prog: Program, op: Op, start: int, members: list[str]) -> None:
    """Wrap the calls of a row group's members (the body lines from `start`) in the group's
    loop over blocks of B rows (`row_group = [G, B]`), the blocks shared by the threads: each
    member runs on rows [r0, r1) of the block, in order (IR_SPEC.md section 7). The members'
    block-local values (`Program.local`) get a buffer of B rows each inside the loop, one per
    thread."""
    rows = op.attrs["space"][row_dim(op)[1]]
    block = int(op.attrs["row_group"][1])
    calls = prog.body[start:]
    del prog.body[start:]
    prog.body.append(
        f"  /* row group {int(op.attrs['row_group'][0])}: {len(members)} kernels over {rows} "
        f"rows in blocks of {block} */"
    )
    types = prog.entry.types()
    local = [v for v in members if v in prog.local]
    size = sum(prog.local[v][0] * block * types[v].dtype.itemsize for v in local)
    if size > BLOCK_LOCAL_STACK_BYTES:
        raise prog.error(
            op,
            f"the row group's block-local values take {size} bytes a block, more than the "
            f"{BLOCK_LOCAL_STACK_BYTES} a thread's stack may hold",
        )
    if rows > block:
        prog.body.append("#pragma omp parallel for schedule(static)")
    prog.body.append(f"  for (int64_t rb = 0; rb < INT64_C({rows}); rb += INT64_C({block})) {{")
    prog.body.append(
        f"    const int64_t r0 = rb, r1 = rb + INT64_C({block}) < INT64_C({rows}) ? "
        f"rb + INT64_C({block}) : INT64_C({rows});"
    )
    for v in local:
        t, count = types[v], max(1, prog.local[v][0] * block)
        prog.body.append(
            f"    {ctype(t.dtype, op, prog.module)} {prog.var(v)}[{count}] "
            f"__attribute__((aligned(64)));  /* %{comment(v)}: rows [r0, r1) alone */"
        )
    prog.body += ["  " + line for line in calls]
    prog.body.append("  }")
