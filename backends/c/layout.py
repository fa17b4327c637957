"""C for the layout family outside kernels: reshape shares its operand's buffer (row-major order
is kept, values are never written twice), broadcast, transpose and slice are affine copies (one
loop nest each, backends/c/nest.py); concat copies each operand's row-major runs into place,
pad fills the result with its value (rounded once to the dtype, exact as a C literal) and then
copies the operand into the interior. No arithmetic: the same in every dtype (f16/bf16 bit
patterns are moved as they are)."""

from __future__ import annotations

import math

from gdv.backends.c.emit import Program, attr_literal, comment, ctype, strides
from gdv.backends.c.nest import Nest, emit_nest
from gdv.backends.c.registry import lowering
from gdv.ir.core import Op
from gdv.ir.ops import REGISTRY as OPS

PAD_PARALLEL_MIN = 1 << 16
"""A pad with at least this many result elements fills and copies its rows on OpenMP threads."""

PAD_PLANES = True
"""A pad between products whose threads split their columns (`split = "columns"`: a conv's
output positions, its last two dims; `_splits_planes`) splits the rows of each plane (its second
last dim) between the threads in the same way, so that each thread copies what it computed
itself and the next conv's thread reads what it copied, rather than the leading dims (a conv's
channels, half of which the other thread wrote). On this 2-core VM, whose two vCPUs sometimes
share no cache (`benchmarks/two_threads.py`'s far rounds), resnet18 at two threads (-O3,
bound, builds interleaved in one process in blocks of 20 calls, medians, 2026-12-06):
- every pad of a column-split product split so (361 far and 123 near rounds): layer 1's two
  such pads 0.146 -> 0.065 ms each in far rounds (0.033 -> 0.022 in near ones);
- every pad so split: pads of other ops' results got slower (layer 1's last pad 0.063 -> 0.145
  in far rounds);
- the max pool's -inf pad (the stem conv's columns split, the max pool's row group reading it
  by channels) so split: the pad 0.093 -> 0.215 ms and its row group 0.458 -> 0.325 in far
  rounds, 0.094 -> 0.120 and 0.088 -> 0.090 in near ones: hence the readers' condition;
- as committed (335 far and 166 near rounds): the whole model 21.13 -> 20.90 ms in far rounds
  and 17.79 -> 17.74 in near ones; layer 1's two such pads 0.144-0.145 -> 0.057-0.060 ms (far)
  and 0.032-0.033 -> 0.018 (near), its residual adds after them 0.110 -> 0.081-0.091 (far)."""


def _copy(prog: Program, op: Op, rows: list[list[int]]) -> None:
    """op's result[i] = operand[rows . i + c], a loop nest over the result's shape."""
    (src,) = op.operands
    operand_type = prog.entry.types()[src]
    n = op.type.rank
    nest = Nest(list(op.type.shape), [rows], list(range(n)), [], "none", {})
    emit_nest(
        prog,
        op,
        nest,
        [operand_type],
        lambda loads, lines, indent: loads[0],
        f"{op.name} %{comment(op.result)}",
    )


def _unit(n: int, at: int | None, const: int = 0, scale: int = 1) -> list[int]:
    row = [0] * (n + 1)
    if at is not None:
        row[at] = scale
    row[n] = const
    return row


@lowering(OPS["reshape"])
def _reshape(prog: Program, op: Op) -> None:
    ctype(op.type.dtype, op, prog.module)
    prog.share_slot(op.result, op.operands[0])


@lowering(OPS["broadcast"])
def _broadcast(prog: Program, op: Op) -> None:
    operand_type = prog.entry.types()[op.operands[0]]
    n = op.type.rank
    rows = [
        _unit(n, None if size == 1 else d)
        for size, d in zip(operand_type.shape, op.attrs["dims"], strict=True)
    ]
    _copy(prog, op, rows)


@lowering(OPS["transpose"])
def _transpose(prog: Program, op: Op) -> None:
    perm = op.attrs["perm"]
    n = op.type.rank
    _copy(prog, op, [_unit(n, perm.index(d)) for d in range(n)])


@lowering(OPS["slice"])
def _slice(prog: Program, op: Op) -> None:
    n = op.type.rank
    rows = [
        _unit(n, d, start, stride)
        for d, (start, stride) in enumerate(zip(op.attrs["start"], op.attrs["stride"], strict=True))
    ]
    _copy(prog, op, rows)


def _call(prog: Program, op: Op, name: str, lines: list[str]) -> None:
    """Append C function `name` (its `lines`), give the result a buffer, call it."""
    prog.functions.append("\n".join(lines) + "\n")
    prog.new_slot(op.result, op.type)
    args = [prog.var(o) for o in op.operands] + [prog.var(op.result)]
    prog.body.append(f"  {name}({', '.join(args)});  /* %{comment(op.result)} */")


@lowering(OPS["concat"])
def _concat(prog: Program, op: Op) -> None:
    """result[o, off_k + j, q] = operand_k[o, j, q]: per outer index o, each operand's run of
    (its axis size) x (inner size) elements is copied to its offset along the axis."""
    t = ctype(op.type.dtype, op, prog.module)
    types = prog.entry.types()
    axis = op.attrs["axis"]
    shape = op.type.shape
    outer, inner = math.prod(shape[:axis]), math.prod(shape[axis + 1 :])
    total = shape[axis]
    name = prog.new_function()
    params = [f"const {t} *restrict a{k}" for k in range(len(op.operands))]
    lines = [
        f"/* concat %{comment(op.result)} */",
        f"static void {name}({', '.join([*params, f'{t} *restrict r'])})",
        "{",
        f"  for (int64_t o = 0; o < INT64_C({outer}); o++) {{",
    ]
    offset = 0
    for k, operand in enumerate(op.operands):
        run = types[operand].shape[axis] * inner
        if run:
            lines.append(
                f"    memcpy(r + o * INT64_C({total * inner}) + INT64_C({offset * inner}), "
                f"a{k} + o * INT64_C({run}), sizeof({t}) * (size_t)INT64_C({run}));"
            )
        offset += types[operand].shape[axis]
    lines += ["  }", "}"]
    _call(prog, op, name, lines)


def _column_split(op: Op | None) -> bool:
    """Whether `op` is a product kernel whose threads split its columns (`split = "columns"`):
    `gdv.backends.c.matmul` then gives each thread a contiguous run of them."""
    return (
        op is not None
        and op.name == "kernel"
        and op.attrs.get("strategy") == "product"
        and op.attrs.get("split") == "columns"
    )


def _splits_planes(prog: Program, op: Op) -> bool:
    """Whether pad `op` sits between column-split products: its operand is the result of one
    whose column dims are its last two dims (a conv's output positions), and every op that
    reads its result is one too (a conv reading it through its window, position by position)."""
    producer = next((o for o in prog.entry.ops if o.result == op.operands[0]), None)
    if not _column_split(producer):
        return False
    assert producer is not None
    out, rank = producer.attrs["out"], producer.type.rank
    dims = sorted(d for d in range(rank) if out[d] in producer.attrs.get("cols", []))
    readers = [o for o in prog.entry.ops if op.result in o.operands]
    return (
        rank >= 3
        and dims == [rank - 2, rank - 1]
        and bool(readers)
        and all(_column_split(o) for o in readers)
    )


@lowering(OPS["pad"])
def _pad(prog: Program, op: Op) -> None:
    """result = value where no operand element lands, result[low + i] = operand[i]: a row of
    the result (its last dim) at a time, the padding filled and the operand's row copied once,
    rows on OpenMP threads when there are `PAD_PARALLEL_MIN` elements or more: the rows of each
    plane split the same way for every plane where the pad sits between products that split
    their columns (`PAD_PLANES`, `_splits_planes`), else all rows in one run."""
    dtype = op.type.dtype
    t = ctype(dtype, op, prog.module)
    x = prog.entry.types()[op.operands[0]]
    low = op.attrs["low"]
    value = attr_literal(op.attrs["value"], dtype)
    name = prog.new_function()
    lines = [
        f"/* pad %{comment(op.result)}: row by row */",
        f"static void {name}(const {t} *restrict a0, {t} *restrict r)",
        "{",
    ]
    shape, xs = list(op.type.shape), list(x.shape)
    if not shape:  # rank 0: nothing is padded
        lines += ["  r[0] = a0[0];", "}"]
        _call(prog, op, name, lines)
        return
    width, xw, lw = shape[-1], xs[-1], low[-1]
    rows = math.prod(shape[:-1])
    par = op.type.num_elements >= PAD_PARALLEL_MIN and rows > 1
    planes = par and PAD_PLANES and _splits_planes(prog, op)
    if planes:
        # every thread runs all planes and, in each, the same static share of its rows
        height = shape[-2]
        prog.record(op, "parallel", "plane rows", "between products that split their columns")
        lines += [
            "#pragma omp parallel",
            f"  for (int64_t p = 0; p < INT64_C({rows // height}); p++) {{",
            "#pragma omp for schedule(static) nowait",
            f"  for (int64_t h = 0; h < INT64_C({height}); h++) {{",
            f"    const int64_t o = p * INT64_C({height}) + h;",
        ]
    else:
        if par:
            prog.record(op, "parallel", "rows", f"at least {PAD_PARALLEL_MIN} elements")
        lines += [
            "#pragma omp parallel for schedule(static)" if par else "",
            f"  for (int64_t o = 0; o < INT64_C({rows}); o++) {{",
        ]
    lines += [
        f"    {t} *restrict row = r + o * INT64_C({width});",
        "    int64_t q = o, src = 0, inside = 1;",
    ]
    x_st = strides(x)
    for d in reversed(range(len(shape) - 1)):
        lines += [
            f"    {{ const int64_t u = q % INT64_C({shape[d]}) - INT64_C({low[d]}); "
            f"q /= INT64_C({shape[d]});",
            f"      inside = inside && u >= 0 && u < INT64_C({xs[d]}); "
            f"src += INT64_C({x_st[d]}) * u; }}",
        ]
    inside = "inside" if x.num_elements else "0"
    lines += [
        f"    if ({inside}) {{",
        f"      for (int64_t k = 0; k < INT64_C({lw}); k++) row[k] = {value};",
        f"      memcpy(row + INT64_C({lw}), a0 + src, sizeof({t}) * (size_t)INT64_C({xw}));",
        f"      for (int64_t k = INT64_C({lw + xw}); k < INT64_C({width}); k++) row[k] = {value};",
        "    } else {",
        f"      for (int64_t k = 0; k < INT64_C({width}); k++) row[k] = {value};",
        "    }",
        "  }",
        "  }" if planes else "",
        "  (void)a0;",
        "}",
    ]
    lines = [line for line in lines if line]
    _call(prog, op, name, lines)
