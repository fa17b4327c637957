"""One C function per loop nest: the `kernel` op's meaning (ir/ops/kernel.py) as nested loops.

Elementwise nests (no reduce dims): the out dims run in the schedule's `order` (tiled by
`tile` where a read is strided, remainders handled by a `min` bound, the outermost loop under
`#pragma omp parallel for` when it is a `parallel` dim and the nest is large enough); the
innermost loop is an `omp simd` loop when it writes the result and reads its operands
contiguously, and body ops that do not depend on it are computed once before it. Points are
independent, so none of this changes a result (`omp simd` vectorises without reassociating
anything).

Reductions interleave outputs: a block of R outputs along one out dim is folded together, the
reduce dims outermost in the row-major order of `reduce` as listed and the R outputs innermost,
`acc[r] = combine(acc[r], body(r, k))`. Each output still folds its own values alone and in
order; the R folds are independent chains (and vector lanes when the block is contiguous in
memory). A fold starts from a value the combiner absorbs exactly instead of from the first
element: -0.0 for a float sum (-0.0 + x == x for every x, NaN included), -inf / +inf for float
max / min (max(-inf, x) == x, min(+inf, x) == x under IR_SPEC's NaN and signed-zero rules),
and the integer identities (0, the dtype's minimum, maximum). An empty fold writes the
combiner's identity (+0.0 for a float sum). A reduction to one value is one fold, in order.
`accumulators = A > 1` folds A consecutive blocks
apart and then folds their results in order, as the reference does. The reduce dims are never
reordered or tiled, so the schedule never changes a result.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from gdv.backends.c.elementwise import bind_scalar, scalar
from gdv.backends.c.emit import (
    CTYPE,
    SUFFIX,
    Program,
    comment,
    ctype,
    float_literal,
    identity,
    strides,
)
from gdv.backends.c.simd import vector_bytes
from gdv.ir.core import Function, Op
from gdv.ir.dtypes import DType
from gdv.ir.ops.kernel import BODY_OPS, COMBINER_OP, leaving_dims
from gdv.ir.types import TensorType

Body = Callable[[list[str], list[str], str], str]
"""(C expressions of the loaded operand scalars, lines to append to, indent) -> the C
expression of the body's value."""

PARALLEL_MIN_POINTS = 1 << 15
"""Nests with fewer points than this run on one thread (thread start-up would dominate)."""

TILE_BODIES = True
"""Reductions over rows whose body computes something evaluate it a tile at a time in vector
lanes (`_emit_interleaved`; measured: layer_norm's variance sum over 64 MiB went from 54% to
64% of copy bandwidth, softmax's sum of exp from scalar to vector exp)."""

STAGE_STRIDE2_MIN = 16
"""An elementwise nest whose innermost loop writes the result contiguously and reads f32
operands at stride 2 (and the others contiguously or not at all), with 64-byte vectors and at
least this many points a row, copies each strided operand's row into a contiguous buffer first
(16 even elements of two loads per two-source shuffle, `gdv_even_row`), and then runs the row
as an omp simd loop over the buffers: the same values reach the same body, so no result
changes. resnet18's 3x3/2 max pool (the column max over 56 outputs a row, in its row group
with the row max), measured alone on the 2-core Zen 4 host (one thread, interleaved, each run
after 8 MiB of other writes): 0.27-0.43 ms as GCC vectorised the strided loop, 0.18-0.22
staged. Rows longer than STAGE_STRIDE2_MAX are not staged (the buffers are on the stack)."""

STAGE_STRIDE2_MAX = 4096

SIMD_MAX_STRIDE = 4
"""A reduction's outputs adjacent in the result whose operands move at most this far per output
(a pooling window's stride) are still folded in vector lanes."""

INTERLEAVE_STRIDED = 8
"""Outputs folded together when consecutive outputs are far apart in memory (scalar chains)."""

LANE_FOLD_MAX_POSITIONS = 16
"""A reduction whose adjacent outputs read their operands a short stride apart (a pooling
window's: SIMD_MAX_STRIDE) and that folds at most this many positions per output runs each
output's whole fold inside the `omp simd` loop over the outputs: a lane is one output, folding
its positions in order, the reduce loops (fully unrolled) inside, with no accumulator array and
no vector loop per position. The 2x2 max pool of `benchmarks/side_by_side.py`'s conv_block
(reduce_max over 2x2 windows of 8x16x64x64 f32, stride-2 reads), measured on the 2-core Zen 4
host (2026-12-07; in one process, alternating, medians): the kernel alone 111.0 -> 55.4 us at
two threads and 420.9 -> 98.9 us at one; the whole conv_block at -O3 0.4276 -> 0.2563 ms,
`examples/conv_block.gdv` 0.0661 -> 0.0393 ms. Outputs reading at stride 1 keep the vector
loop per position: a 3x3 depthwise conv lowered to a nest (8x128x128) ran 0.0414 -> 0.0419
ms in lanes, a 5x5 one (32x128x128, 25 positions) 0.402 -> 0.520."""


@dataclass
class Nest:
    """An affine loop nest: the `kernel` op's attributes."""

    space: list[int]
    maps: list[list[list[int]]]
    out: list[int]
    reduce: list[int]
    combiner: str
    schedule: dict[str, Any]
    fills: dict[int, str] = field(default_factory=dict)
    """Per operand with a `fill`: the fill as a C literal (a read outside the operand gives
    it: `read`)."""
    inside: frozenset[tuple[int, int]] = frozenset()
    """(operand, dim) pairs whose guard holds wherever this nest's code runs: the interior
    segment of a peeled innermost loop (`peeled_segments`), where `read` leaves them out."""
    local: dict[int, int] = field(default_factory=dict)
    """Per operand (-1: the result) that is block-local (IR_SPEC `block_local`): its elements
    per row. Its buffer holds the row block [r0, r1) alone, row r0 first, so each index into
    it is the value's flat index less r0 rows (`_shift`)."""


def _shift(nest: Nest, k: int) -> str:
    """The C term moving operand k's (-1: the result's) flat index into its buffer: r0 rows
    back for a block-local value (`Nest.local`), else nothing."""
    per_row = nest.local.get(k)
    return f" - INT64_C({per_row}) * r0" if per_row else ""


def _out_index(nest: Nest, out_st: list[int]) -> str:
    """C for the result's flat index at the current loop index (the out dims' loop indices)."""
    terms = ["INT64_C(0)"] + [f"INT64_C({out_st[p]}) * i{d}" for p, d in enumerate(nest.out)]
    return " + ".join(terms) + _shift(nest, -1)


def read(nest: Nest, k: int, t: TensorType, n: int) -> str:
    """C for operand k's element at the current loop index: with a fill, guarded per dim that
    its map can take outside it (the fill where it does)."""
    at = f"a{k}[{_flat_index(nest.maps[k], t, n)}{_shift(nest, k)}]"
    if k not in nest.fills:
        return at
    conds = []
    for d in leaving_dims(nest.maps[k], nest.space, t.shape):
        if (k, d) in nest.inside:
            continue
        row = nest.maps[k][d]
        terms = [f"INT64_C({row[-1]})"] + [
            f"INT64_C({c}) * i{j}" for j, c in enumerate(row[:-1]) if c
        ]
        conds.append(f"(uint64_t)({' + '.join(terms)}) < UINT64_C({t.shape[d]})")
    return f"({' && '.join(conds)}) ? {at} : {nest.fills[k]}" if conds else at


def peeled_segments(
    nest: Nest, operand_types: list[TensorType], last: int
) -> list[tuple[int, int, Nest]] | None:
    """The innermost loop over dim `last` split where the guards of filled reads that depend on
    i{last} alone hold: [(lo, hi, nest)] covering 0 .. extent - 1 in order, the interior's nest
    with those guards in `inside`; None when no such guard is true on a proper part of the
    loop. A guard 0 <= c * i + b < S with c > 0 holds exactly for ceil(-b / c) <= i <=
    floor((S - 1 - b) / c); the edges keep every guard. The same reads of the same elements
    (resnet18's max pool rows, the kernel alone in a C harness, 2 threads: 0.092 -> 0.068 ms,
    no masked load per lane in the interior)."""
    extent = nest.space[last]
    lo, hi = 0, extent
    known: set[tuple[int, int]] = set()
    for k, ot in enumerate(operand_types):
        if k not in nest.fills:
            continue
        for d in leaving_dims(nest.maps[k], nest.space, ot.shape):
            row = nest.maps[k][d]
            c, b = row[last], row[-1]
            if c == 0 or any(row[j] for j in range(len(nest.space)) if j != last):
                continue  # constant along the loop, or not along it alone: kept in the loop
            if c < 0:
                return None
            lo = max(lo, -(b // c))  # ceil(-b / c)
            hi = min(hi, (ot.shape[d] - 1 - b) // c + 1)
            known.add((k, d))
    if not known or hi <= lo or (lo, hi) == (0, extent):
        return None
    inner = Nest(
        nest.space, nest.maps, nest.out, nest.reduce, nest.combiner, nest.schedule, nest.fills,
        nest.inside | frozenset(known), nest.local,
    )  # fmt: skip
    segments = [(0, lo, nest), (lo, hi, inner), (hi, extent, nest)]
    return [(a, z, ns) for a, z, ns in segments if z > a]


def _span(d: int, lo: int, hi: int) -> str:
    return f"i{d} = INT64_C({lo}); i{d} < INT64_C({hi})"


def grouped_row(nest: Nest) -> int | None:
    """The row loop dim of a kernel in a row group (`row_group`; its first out dim of extent
    above 1), or None. Such a kernel's C function takes `int64_t r0, int64_t r1` and computes
    only rows [r0, r1) of that dim, on the calling thread: the group's loop over row blocks
    (`lower_module`) calls every member per block and is the one parallel loop."""
    if nest.schedule.get("row_group") is None:
        return None
    return next((d for d in nest.out if nest.space[d] > 1), None)


def _row_loop(nest: Nest, d: int, indent: str) -> str:
    """The loop header over out dim `d`: rows [r0, r1) for a grouped kernel's row dim."""
    if d == grouped_row(nest):
        return f"{indent}for (int64_t i{d} = r0; i{d} < r1; i{d}++)"
    return f"{indent}for (int64_t i{d} = 0; i{d} < INT64_C({nest.space[d]}); i{d}++)"


def _params(nest: Nest, operand_types: list[TensorType], t: str) -> list[str]:
    params = [f"const {CTYPE[ot.dtype]} *restrict a{k}" for k, ot in enumerate(operand_types)]
    params.append(f"{t} *restrict r")
    if grouped_row(nest) is not None:
        params += ["int64_t r0", "int64_t r1"]
    return params


def vector_width(prog: Program, op: Op, nest: Nest, dtype: Any) -> int:
    """The vector width in bytes the nest's lanes are sized for: the schedule's `vector` lanes
    times the element size; without a schedule, the host's width (a printer choice, recorded)."""
    if "vector" in nest.schedule:
        return int(nest.schedule["vector"]) * dtype.itemsize
    vb = vector_bytes()
    prog.record(op, "vector-bytes", vb, "no vector attribute (unscheduled op): the host's width")
    return vb


def _flat_index(rows: list[list[int]], t: TensorType, n: int) -> str:
    """C for the row-major flat index of `t` read at `rows . i + c` (i = i0, i1, ...)."""
    st = strides(t)
    coef = [0] * n
    const = 0
    for d, row in enumerate(rows):
        for j in range(n):
            coef[j] += st[d] * row[j]
        const += st[d] * row[-1]
    terms = [f"INT64_C({const})"] + [f"INT64_C({c}) * i{j}" for j, c in enumerate(coef) if c]
    return " + ".join(terms)


def load_operands(
    lines: list[str],
    indent: str,
    nest: Nest,
    operand_types: list[TensorType],
    staged: tuple[int, ...] | list[int] = (),
    last: int = -1,
) -> list[str]:
    """Append the loads of every operand's element at the current loop index (`x0`, `x1`,
    ...); their C names. Operands in `staged` are read from their row buffer `s{k}` at the
    innermost loop's index i{last} (`_stage_rows`)."""
    n = len(nest.space)
    for k, ot in enumerate(operand_types):
        where = f"s{k}[i{last}]" if k in staged else read(nest, k, ot, n)
        lines.append(f"{indent}const {CTYPE[ot.dtype]} x{k} = {where};")
    return [f"x{k}" for k in range(len(operand_types))]


def _stageable(
    prog: Program,
    op: Op,
    nest: Nest,
    operand_types: list[TensorType],
    coefs: list[int],
    last: int,
) -> bool:
    """Whether the innermost loop's strided reads are f32 rows at stride 2 to stage
    (`STAGE_STRIDE2_MIN`): the others contiguous or constant along it, 64-byte vectors, and
    the loop not a row group's rows (a staged row is copied whole)."""
    if not STAGE_STRIDE2_MIN <= nest.space[last] <= STAGE_STRIDE2_MAX or 2 not in coefs:
        return False
    if last == grouped_row(nest):
        return False
    if vector_width(prog, op, nest, op.type.dtype) != 64:
        return False
    return all(
        c in (0, 1) or (c == 2 and ot.dtype is DType.F32 and k not in nest.fills)
        for k, (c, ot) in enumerate(zip(coefs, operand_types, strict=True))
    )


_EVEN_ROW = "/* gdv_even_row: a stride-2 f32 row copied contiguously */"


def _stage_rows(
    lines: list[str],
    indent: str,
    nest: Nest,
    operand_types: list[TensorType],
    staged: list[int],
    last: int,
) -> None:
    """Append C copying each staged operand's row (its elements at i{last} = 0 .. extent - 1,
    stride 2) into a buffer `s{k}` of the row's length."""
    n = len(nest.space)
    extent = nest.space[last]
    for k in staged:
        rows = [[*row[:last], 0, *row[last + 1 :]] for row in nest.maps[k]]
        base = _flat_index(rows, operand_types[k], n) + _shift(nest, k)
        lines += [
            f"{indent}float s{k}[{-(-extent // 16) * 16}] __attribute__((aligned(64)));",
            f"{indent}gdv_even_row(s{k}, a{k} + {base}, INT64_C({extent}));",
        ]


def even_row_helper(prog: Program) -> None:
    """`gdv_even_row(dst, src, n)`: dst[l] = src[2 l] for l < n, reading src[0 .. 2 n - 2] only;
    16 elements at a time as the even lanes of two 16-float loads (one two-source shuffle)."""
    if any(f.startswith(_EVEN_ROW) for f in prog.functions):
        return
    strided_helpers(prog)
    prog.functions.append(
        f"""{_EVEN_ROW}
static inline void gdv_even_row(float *restrict dst, const float *restrict src, int64_t n)
{{
  const gdv_si16 even = {{0, 2, 4, 6, 8, 10, 12, 14, 16, 18, 20, 22, 24, 26, 28, 30}};
  int64_t l = 0;
  for (; 2 * l + 32 <= 2 * n - 1; l += 16)  /* both loads end at or before src[2 n - 2] */
    *(gdv_sv16 *)(dst + l) = __builtin_shuffle(*(const gdv_su16 *)(src + 2 * l),
                                               *(const gdv_su16 *)(src + 2 * l + 16), even);
  for (; l < n; l++) dst[l] = src[2 * l];
}}
"""
    )


_STRIDED_HELPERS = "/* gdv strided helpers: 16 f32 lanes, masked loads and stores */"


def strided_helpers(prog: Program) -> None:
    """`gdv_sv16` (16 f32 lanes), `gdv_si16` (16 int32 lanes), `gdv_loadz16(base, at, m)`
    (base[at + j] in lane j where bit j of m is set, else +0.0, never reading the others) and
    `gdv_storem16(p, v, m)` (lanes with bit j of m set stored to p[j]): AVX-512F masked moves
    where the compiler targets it, else lane by lane (the same values)."""
    if any(f.startswith(_STRIDED_HELPERS) for f in prog.functions):
        return
    prog.functions.append(
        f"""{_STRIDED_HELPERS}
#if defined(__x86_64__) || defined(__i386__)
#include <immintrin.h>
#endif
typedef float gdv_sv16 __attribute__((vector_size(64)));
typedef float gdv_su16 __attribute__((vector_size(64), aligned(4)));
typedef int32_t gdv_si16 __attribute__((vector_size(64)));
static inline gdv_sv16 gdv_loadz16(const float *base, int64_t at, uint32_t m)
{{
#if defined(__AVX512F__)
  /* masked-off lanes are not read (no fault): the address is formed as an integer */
  const void *p = (const void *)((uintptr_t)base + (uintptr_t)at * (uintptr_t)4);
  return (gdv_sv16)_mm512_maskz_loadu_ps((__mmask16)m, p);
#else
  gdv_sv16 v;
  for (int j = 0; j < 16; j++) v[j] = (m >> j & 1u) ? base[at + j] : 0.0f;
  return v;
#endif
}}
static inline void gdv_storem16(float *p, gdv_sv16 v, uint32_t m)
{{
#if defined(__AVX512F__)
  _mm512_mask_storeu_ps(p, (__mmask16)m, (__m512)v);
#else
  for (int j = 0; j < 16; j++)
    if (m >> j & 1u) p[j] = v[j];
#endif
}}
"""
    )


def combine_expr(prog: Program, combiner: str, dtype: Any, a: str, b: str) -> str:
    """C for the combiner applied to `a` and `b`: the elementwise op it folds with."""

    fake = Op("acc", COMBINER_OP[combiner], ["a", "b"], {}, TensorType(dtype, ()))
    return scalar(prog, fake, [a, b], [dtype, dtype])


def emit_nest(
    prog: Program,
    op: Op,
    nest: Nest,
    operand_types: list[TensorType],
    body: Body,
    note: str,
    function: Function | None = None,
) -> None:
    """Emit the C function of `nest` computing `op`'s result into a new buffer, and its call.

    `function`, the body as a function of the module when there is one, lets an elementwise
    nest compute the body ops that do not depend on its innermost loop once per row, before
    that loop (the same ops on the same values: the same results)."""
    result = op.type
    dtype = result.dtype
    t = ctype(dtype, op, prog.module)
    for ot in operand_types:
        ctype(ot.dtype, op, prog.module)
    if nest.reduce and nest.schedule.get("accumulators", 1) <= 1:
        computes = TILE_BODIES and function is not None and len(function.ops) > 0
        _emit_interleaved(prog, op, nest, operand_types, body, note, computes)
        return
    name = prog.new_function()
    n = len(nest.space)
    params = _params(nest, operand_types, t)
    lines = [f"/* {note} */", f"static void {name}({', '.join(params)})", "{"]
    row = grouped_row(nest)
    order = [d for d in nest.schedule.get("order", list(range(n))) if d in nest.out]
    tile = nest.schedule.get("tile") or list(nest.space)
    parallel = set(nest.schedule.get("parallel", []))
    points = math.prod(nest.space)
    ind = "  "
    first_loop = True

    # The innermost loop of an elementwise nest that writes the result and reads every operand
    # contiguously (or not at all) is an omp simd loop; a strided read (a transpose) is left to
    # the compiler, as gathers seldom pay.
    out_st = strides(result)
    simd = -1
    staged: list[int] = []
    if not nest.reduce and order:
        last = order[-1]
        coefs = [_coefficients(nest.maps[k], ot, n)[last] for k, ot in enumerate(operand_types)]
        if out_st[nest.out.index(last)] == 1 and nest.space[last] > 1:
            if all(c in (0, 1) for c in coefs):
                simd = last
            elif _stageable(prog, op, nest, operand_types, coefs, last):
                simd = last
                staged = [k for k, c in enumerate(coefs) if c == 2]
                even_row_helper(prog)
                prog.record(
                    op,
                    "loop",
                    "stride-2 rows staged",
                    "each stride-2 f32 operand's row is copied contiguously by vector shuffles, "
                    "then the row runs as an omp simd loop over the copies",
                )
    # Out dims just outside the innermost contiguous loop that continue its stride in the
    # result and in every operand (H of an NCHW image, whose rows are W long) run inside it:
    # one loop over H * W, with i_H = 0 (every index is affine in the loop variables, so
    # i_H * W + i_W = f exactly), and a per-channel value is computed once per channel. A
    # row group's kernel merges them too, up to its row dim (efficientnet_b0's torch.export
    # path: batch norm + SiLU over 7x7 planes 0.160 -> 0.046 ms, one core).
    merged: list[int] = []
    inner_extent = nest.space[simd] if simd >= 0 else 0
    # A filled operand's guard tests each loop index it reads against its own dim's extent:
    # a dim it reads keeps its own loop, and none merges into an innermost loop it reads.
    guarded = {
        j
        for k, ot in enumerate(operand_types)
        if k in nest.fills
        for d in leaving_dims(nest.maps[k], nest.space, ot.shape)
        for j, c in enumerate(nest.maps[k][d][:-1])
        if c and nest.space[j] > 1
    }
    if simd >= 0 and simd not in guarded:
        flat = [_coefficients(nest.maps[k], ot, n) for k, ot in enumerate(operand_types)]
        out_coef = [0] * n
        for p, d in enumerate(nest.out):
            out_coef[d] = out_st[p]
        for d in reversed(order[:-1]):
            if d == row or (row is None and d in parallel and points >= PARALLEL_MIN_POINTS):
                break  # the row group's rows [r0, r1), or the threads' loop
            if nest.space[d] > 1 and any(c[d] != c[simd] * inner_extent for c in [*flat, out_coef]):
                break
            if d in guarded:
                break
            merged.append(d)
            inner_extent *= nest.space[d]
        if all(nest.space[d] == 1 for d in merged) or staged:  # nothing to gain, or rows
            merged, inner_extent = [], nest.space[simd]
        if merged:
            prog.record(op, "loop", "dims merged", "they continue the innermost loop's strides")
    # Tiles pay where a read is strided (a transpose: both sides stay in cache); rows read and
    # written contiguously stream whole (measured: exp(x - max) over 64 MiB ran at 3.64 Gelem/s
    # by whole rows, 2.02 in 32 x 64 tiles).
    tiled = [d for d in order if 0 < tile[d] < nest.space[d] and d != row] if simd < 0 else []
    if simd >= 0 and any(0 < tile[d] < nest.space[d] for d in order):
        prog.record(op, "tile", "rows whole", "a contiguous omp simd innermost loop streams rows")
    if parallel and points < PARALLEL_MIN_POINTS:
        prog.record(op, "parallel", "one thread", f"fewer than {PARALLEL_MIN_POINTS} points")

    def pragma(d: int, inner: bool = False) -> None:
        nonlocal first_loop
        par = first_loop and d in parallel and points >= PARALLEL_MIN_POINTS and row is None
        vec = inner and d == simd
        if nest.space[d] == 1 and not vec:
            return  # a loop of one position (a batch of 1): the next loop may be the parallel one
        if par or vec:
            lines.append(
                f"#pragma omp {'parallel for' if par else ''}{' ' if par and vec else ''}"
                f"{'simd' if vec else ''}"
            )
        first_loop = False

    for d in tiled:
        pragma(d)
        lines.append(
            f"{ind}for (int64_t t{d} = 0; t{d} < INT64_C({nest.space[d]}); "
            f"t{d} += INT64_C({tile[d]}))"
        )
        ind += "  "
    hoist = None
    if function is not None and simd >= 0 and not staged:
        hoist = _hoist(prog, function, nest, operand_types, simd)
    lines += [f"  const int64_t i{d} = 0;  /* merged into i{simd} */" for d in merged]
    out_index = _out_index(nest, out_st)

    def point(indent: str, acc: str | None, first: str | None, where: Nest = nest) -> None:
        if hoist is not None:
            lines.append(f"{indent}r[{out_index}] = {hoist.inside(lines, indent, where)};")
            return
        loads = load_operands(lines, indent, where, operand_types, staged, simd)
        value = body(loads, lines, indent)
        if acc is None:
            lines.append(f"{indent}r[{out_index}] = {value};")
            return
        lines.append(f"{indent}const {t} val = {value};")
        step = combine_expr(prog, nest.combiner, dtype, acc, "val")
        lines.append(f"{indent}if ({first}) {{ {acc} = val; {first} = 0; }}")
        lines.append(f"{indent}else {acc} = {step};")

    # An elementwise innermost loop reading a filled operand through guards on its index alone
    # (a pad folded into a max pool) runs its interior without them; not a parallel loop.
    segments = None
    if not nest.reduce and simd >= 0 and simd != row and not merged and not staged:
        if any(nest.space[d] > 1 for d in order[:-1]):
            segments = peeled_segments(nest, operand_types, simd)
    if segments:
        prog.record(op, "loop", "guards peeled", "the innermost loop's interior reads unguarded")
    where = nest
    for d in order:
        if d in merged:
            continue
        if hoist is not None and d == order[-1]:
            lines.append(f"{ind}{{")
            ind += "  "
            hoist.before(lines, ind)
        if staged and d == order[-1]:
            lines.append(f"{ind}{{")
            ind += "  "
            _stage_rows(lines, ind, nest, operand_types, staged, d)
        if segments and d == order[-1]:
            if hoist is None:
                lines.append(f"{ind}{{")
                ind += "  "
            for lo, hi, edge in segments[:-1]:
                pragma(d, inner=True)
                lines.append(f"{ind}for (int64_t {_span(d, lo, hi)}; i{d}++)")
                lines.append(f"{ind}{{")
                point(ind + "  ", None, None, edge)
                lines.append(f"{ind}}}")
            lo, hi, where = segments[-1]
            pragma(d, inner=True)
            lines.append(f"{ind}for (int64_t {_span(d, lo, hi)}; i{d}++)")
        else:
            pragma(d, inner=d == order[-1])
            if merged and d == simd:
                lines.append(f"{ind}for (int64_t i{d} = 0; i{d} < INT64_C({inner_extent}); i{d}++)")
            elif d in tiled:
                hi_ = f"(t{d} + INT64_C({tile[d]}) < INT64_C({nest.space[d]}) ? t{d} + "
                hi_ += f"INT64_C({tile[d]}) : INT64_C({nest.space[d]}))"
                lines.append(f"{ind}for (int64_t i{d} = t{d}; i{d} < {hi_}; i{d}++)")
            else:
                lines.append(_row_loop(nest, d, ind))
        ind += "  "
    lines.append(f"{ind[:-2]}{{" if order else f"{ind}{{")
    if not order:
        ind += "  "

    if not nest.reduce:
        point(ind, None, None, where)
    else:
        ident = identity(nest.combiner, dtype)
        blocks = nest.schedule.get("accumulators", 1)
        if blocks > 1:
            (d,) = nest.reduce
            size = nest.space[d] // blocks
            lines.append(f"{ind}{t} acc = {ident};")
            lines.append(f"{ind}for (int64_t b = 0; b < INT64_C({blocks}); b++) {{")
            inner = ind + "  "
            lines.append(f"{inner}{t} part = {ident};")
            lines.append(f"{inner}int first = 1;")
            lines.append(
                f"{inner}for (int64_t i{d} = b * INT64_C({size}); "
                f"i{d} < (b + 1) * INT64_C({size}); i{d}++) {{"
            )
            point(inner + "  ", "part", "first")
            lines.append(f"{inner}}}")
            whole = combine_expr(prog, nest.combiner, dtype, "acc", "part")
            lines.append(f"{inner}acc = b == 0 ? part : {whole};")
            lines.append(f"{ind}}}")
        else:
            lines.append(f"{ind}{t} acc = {ident};")
            lines.append(f"{ind}int first = 1;")
            inner = ind
            for d in nest.reduce:
                lines.append(
                    f"{inner}for (int64_t i{d} = 0; i{d} < INT64_C({nest.space[d]}); i{d}++)"
                )
                inner += "  "
            lines.append(f"{inner[:-2]}{{")
            point(inner, "acc", "first")
            lines.append(f"{inner[:-2]}}}")
        lines.append(f"{ind}r[{out_index}] = acc;")
    lines.append(f"{ind[:-2]}}}")
    if hoist is not None or staged or segments:
        lines.append(f"{ind[:-4]}}}")
    _finish(prog, op, name, lines)


@dataclass
class _Hoist:
    """A kernel body split at an innermost loop: the part that does not depend on it (computed
    before the loop) and the rest (computed at every point)."""

    prog: Program
    function: Function
    nest: Nest
    operand_types: list[TensorType]
    outside: set[str]
    """Body values computed before the loop (params read with no coefficient on it, and ops
    of those only)."""

    def _emit(self, names: set[str], env: dict, lines: list[str], indent: str, where: Nest) -> None:
        n = len(where.space)
        for k, p in enumerate(self.function.params):
            if p.name in names and p.name not in env:
                ot = self.operand_types[k]
                lines.append(f"{indent}const {CTYPE[ot.dtype]} x{k} = {read(where, k, ot, n)};")
                env[p.name] = (f"x{k}", p.type.dtype)
        for s, b in enumerate(self.function.ops):
            if b.result in names and b.result not in env:
                bind_scalar(self.prog, b, env, lines, indent, f"s{s}")

    def before(self, lines: list[str], indent: str) -> None:
        self.env: dict = {}
        self._emit(self.outside, self.env, lines, indent, self.nest)

    def inside(self, lines: list[str], indent: str, where: Nest) -> str:
        """The body's value at the loop's point, reading through `where` (the nest, or a
        peeled segment's)."""
        env = dict(self.env)
        every = {p.name for p in self.function.params} | {b.result for b in self.function.ops}
        self._emit(every, env, lines, indent, where)
        (ret,) = self.function.returns
        return env[ret][0]


def _hoist(
    prog: Program, function: Function, nest: Nest, operand_types: list[TensorType], last: int
) -> _Hoist | None:
    """The split of `function` at loop dim `last`, or None when no op would move."""
    for b in function.ops:
        if b.name not in BODY_OPS or b.type.rank != 0:
            return None  # kernel.py reports it
    outside = {
        p.name
        for p, rows in zip(function.params, nest.maps, strict=True)
        if all(row[last] == 0 for row in rows)
    }
    moved = False
    for b in function.ops:
        if all(o in outside for o in b.operands):
            outside.add(b.result)
            moved = moved or bool(b.operands)
    if not moved or len(function.returns) != 1:
        return None
    return _Hoist(prog, function, nest, operand_types, outside)


def _finish(prog: Program, op: Op, name: str, lines: list[str]) -> None:
    lines.append("}")
    prog.functions.append("\n".join(lines) + "\n")
    prog.new_slot(op.result, op.type)
    args = [prog.var(o) for o in op.operands] + [prog.var(op.result)]
    if op.attrs.get("row_group") is not None:  # called per row block by the group's loop
        args += ["r0", "r1"]
    prog.body.append(f"  {name}({', '.join(args)});  /* %{comment(op.result)} */")


def _emit_lanes(
    prog: Program,
    nest: Nest,
    operand_types: list[TensorType],
    body: Body,
    lines: list[str],
    order: list[int],
    out_st: list[int],
    dtype: Any,
    vb: int,
) -> None:
    """A max or min fold in vector lanes along its last reduce dim, the lanes folded at the end;
    or a sum with `lanes = L`, whose meaning this order is: position p to lane p mod L (the
    full chunks, then the remainder's positions in lanes 0, 1, ...; L divides the extent, so
    there is none), each lane from -0.0 (-0.0 + x == x), then the lanes added in order.

    For max and min the printer picks the lanes, which reorders the fold; that is exact for
    these combiners only: under IR_SPEC, max (min)
    of two floats is NaN if either is NaN, else the larger (smaller) in the total order
    -inf < ... < -0.0 < +0.0 < ... < +inf, so it is the join (meet) of a total order with NaN
    absorbing: associative, commutative and idempotent, and every order of the fold gives the
    same value (NaNs counting as one, as bit-exactness counts them). Integers likewise."""
    t = CTYPE[dtype]
    last = nest.reduce[-1]
    size = nest.space[last]
    lanes = max(2, min(2 * max(1, vb // dtype.itemsize), size))
    if nest.schedule.get("lanes", 1) > 1:
        lanes = int(nest.schedule["lanes"])
    start = _start(nest.combiner, dtype)
    # f32/f64: the lanes hold each value's integer key (elementwise._order_key), so a step is
    # one integer max (min) instead of the float max's NaN and signed-zero tests
    keyed = dtype in (DType.F32, DType.F64) and nest.combiner in ("max", "min")
    acc_t, fold = t, lambda acc: combine_expr(prog, nest.combiner, dtype, acc, "val")
    finish = "acc"
    if keyed:
        s = SUFFIX[dtype]
        key = f"gdv_key_{nest.combiner}_{s}"
        prog.helpers |= {key, f"gdv_unkey_{s}"}
        acc_t = "int32_t" if dtype is DType.F32 else "int64_t"
        start = f"{key}({start})"
        cmp = ">" if nest.combiner == "max" else "<"

        def fold(acc: str) -> str:
            return f"{acc} {cmp} kv ? {acc} : kv"

        finish = f"gdv_unkey_{s}(acc)"
    grouped = grouped_row(nest) is not None
    if math.prod(nest.space) >= PARALLEL_MIN_POINTS and len(order) > 0 and not grouped:
        collapse = f" collapse({len(order)})" if len(order) > 1 else ""
        lines.append(f"#pragma omp parallel for{collapse}")
    ind = "  "
    for d in order:
        lines.append(_row_loop(nest, d, ind))
    lines.append(f"{ind}{{")
    ind += "  "
    lines.append(f"{ind}{acc_t} lane[{lanes}];")
    lines.append(f"{ind}for (int64_t q = 0; q < INT64_C({lanes}); q++) lane[q] = {start};")
    for d in nest.reduce[:-1]:
        lines.append(f"{ind}for (int64_t i{d} = 0; i{d} < INT64_C({nest.space[d]}); i{d}++)")
    lines.append(f"{ind}{{")
    inner = ind + "  "

    def point(indent: str, index: str, acc: str) -> None:
        lines.append(f"{indent}const int64_t i{last} = {index};")
        loads = load_operands(lines, indent, nest, operand_types)
        value = body(loads, lines, indent)
        lines.append(f"{indent}const {t} val = {value};")
        if keyed:
            lines.append(f"{indent}const {acc_t} kv = {key}(val);")
        lines.append(f"{indent}{acc} = {fold(acc)};")

    full = size - size % lanes
    lines.append(f"{inner}for (int64_t kb = 0; kb < INT64_C({full}); kb += INT64_C({lanes})) {{")
    lines.append("#pragma omp simd")
    lines.append(f"{inner}  for (int64_t q = 0; q < INT64_C({lanes}); q++) {{")
    point(inner + "    ", "kb + q", "lane[q]")
    lines.append(f"{inner}  }}")
    lines.append(f"{inner}}}")
    if full < size:
        lines.append(f"{inner}for (int64_t q = 0; q < INT64_C({size - full}); q++) {{")
        point(inner + "  ", f"INT64_C({full}) + q", "lane[q]")
        lines.append(f"{inner}}}")
    lines.append(f"{ind}}}")
    lines.append(f"{ind}{acc_t} acc = {start};")
    lines.append(f"{ind}for (int64_t q = 0; q < INT64_C({lanes}); q++) {{")
    lines.append(f"{ind}  const {acc_t} {'kv' if keyed else 'val'} = lane[q];")
    lines.append(f"{ind}  acc = {fold('acc')};")
    lines.append(f"{ind}}}")
    out_index = _out_index(nest, out_st)
    lines.append(f"{ind}r[{out_index}] = {finish};")
    lines.append(f"{ind[:-2]}}}")


def _coefficients(rows: list[list[int]], t: TensorType, n: int) -> list[int]:
    """Per loop dim, how far one step moves in `t`'s flat index when read at `rows`."""
    st = strides(t)
    return [sum(st[r] * row[d] for r, row in enumerate(rows)) for d in range(n)]


def _start(combiner: str, dtype: Any) -> str:
    """A value the combiner absorbs exactly (combine(start, x) == x for every x): the fold may
    start from it instead of from its first element."""
    if combiner == "add" and dtype.is_float:
        return float_literal(-0.0, dtype)
    return identity(combiner, dtype)


def _emit_interleaved(
    prog: Program,
    op: Op,
    nest: Nest,
    operand_types: list[TensorType],
    body: Body,
    note: str,
    computes: bool = False,
) -> None:
    """A reduction nest folding a block of outputs along one out dim together (module doc).

    Where the body `computes` something (more than a load) and the outputs are not adjacent,
    the body is evaluated a tile at a time: for each output of the block, W consecutive
    positions of the last reduce dim (contiguous in the operands) in vector lanes, into a small
    tile; then each output folds its W values in order. The fold order is unchanged."""
    result = op.type
    dtype = result.dtype
    t = CTYPE[dtype]
    n = len(nest.space)
    name = prog.new_function()
    params = _params(nest, operand_types, t)
    row = grouped_row(nest)
    how = "outputs interleaved" if nest.out else "one fold"
    lines = [f"/* {note}: {how} */", f"static void {name}({', '.join(params)})", "{"]
    count = math.prod(nest.space[d] for d in nest.reduce)
    if result.num_elements == 0:
        pass
    elif count == 0:  # every fold is empty: the identity
        ident = identity(nest.combiner, dtype)
        lo, hi = "INT64_C(0)", f"INT64_C({result.num_elements})"
        if row is not None:  # rows are contiguous: the dims before the row dim have extent 1
            per = result.num_elements // nest.space[row]
            lo, hi = f"r0 * INT64_C({per})", f"r1 * INT64_C({per})"
            if -1 in nest.local:  # the block's rows alone
                lo, hi = "INT64_C(0)", f"(r1 - r0) * INT64_C({per})"
        lines.append(f"  for (int64_t e = {lo}; e < {hi}; e++) r[e] = {ident};")
    else:
        coefs = [_coefficients(nest.maps[k], ot, n) for k, ot in enumerate(operand_types)]
        out_st = strides(result)
        unit = [
            d
            for p, d in enumerate(nest.out)
            if out_st[p] == 1 and all(c[d] in (0, 1) for c in coefs)
        ]
        strided = not unit
        if strided:  # a short stride (a pooling window's): vector lanes still pay
            unit = [
                d
                for p, d in enumerate(nest.out)
                if out_st[p] == 1 and all(0 <= c[d] <= SIMD_MAX_STRIDE for c in coefs)
            ]
        order = [d for d in nest.schedule.get("order", list(range(n))) if d in nest.out]
        last = nest.reduce[-1]
        if nest.schedule.get("lanes", 1) > 1:  # the order `lanes` sets (one reduce dim)
            vb = vector_width(prog, op, nest, dtype)
            _emit_lanes(prog, nest, operand_types, body, lines, order, out_st, dtype, vb)
            _finish(prog, op, name, lines)
            return
        if (
            not unit
            and nest.combiner in ("max", "min")
            and nest.space[last] > 1
            and all(c[last] in (0, 1) for c in coefs)
        ):
            vb = vector_width(prog, op, nest, dtype)
            _emit_lanes(prog, nest, operand_types, body, lines, order, out_st, dtype, vb)
            _finish(prog, op, name, lines)
            return
        if not nest.out:  # one output: one fold, in order, from the absorbing start
            lines.append(f"  {t} acc = {_start(nest.combiner, dtype)};")
            ind = "  "
            for d in nest.reduce:
                extent = nest.space[d]
                lines.append(f"{ind}for (int64_t i{d} = 0; i{d} < INT64_C({extent}); i{d}++)")
                ind += "  "
            lines.append(f"{ind[:-2]}{{")
            loads = load_operands(lines, ind, nest, operand_types)
            value = body(loads, lines, ind)
            lines.append(f"{ind}const {t} val = {value};")
            lines.append(f"{ind}acc = {combine_expr(prog, nest.combiner, dtype, 'acc', 'val')};")
            lines.append(f"{ind[:-2]}}}")
            lines.append("  r[0] = acc;")
            _finish(prog, op, name, lines)
            return
        inner = unit[-1] if unit else order[-1]
        contiguous = bool(unit)
        size = nest.space[inner]
        vb = vector_width(prog, op, nest, dtype)
        lanes = 2 * max(1, vb // dtype.itemsize) if contiguous else INTERLEAVE_STRIDED
        block = max(1, min(lanes, size))
        others = [d for d in order if d != inner]
        points = math.prod(nest.space)
        if points >= PARALLEL_MIN_POINTS and row is None:
            collapse = f" collapse({len(others) + 1})" if others else ""
            lines.append(f"#pragma omp parallel for{collapse}")
        ind = "  "
        for d in others:
            lines.append(_row_loop(nest, d, ind))
        lo, hi = ("r0", "r1") if inner == row else ("INT64_C(0)", f"INT64_C({size})")
        lines.append(f"{ind}for (int64_t ib = {lo}; ib < {hi}; ib += INT64_C({block})) {{")
        ind += "  "
        lines.append(
            f"{ind}const int64_t rn = {hi} - ib < INT64_C({block}) ? {hi} - ib : INT64_C({block});"
        )
        out_index = _out_index(nest, out_st)

        def accumulate(indent: str) -> None:
            """Output q of the block takes the body's value at the current reduce position."""
            lines.append(f"{indent}const int64_t i{inner} = ib + q;")
            loads = load_operands(lines, indent, nest, operand_types)
            lines.append(f"{indent}const {t} val = {body(loads, lines, indent)};")
            step = combine_expr(prog, nest.combiner, dtype, "acc[q]", "val")
            lines.append(f"{indent}acc[q] = {step};")

        def open_loops(dims: list[int], indent: str) -> str:
            """Loops over `dims` in order, then an open brace; the indent inside them."""
            for d in dims:
                lines.append(
                    f"{indent}for (int64_t i{d} = 0; i{d} < INT64_C({nest.space[d]}); i{d}++)"
                )
                indent += "  "
            lines.append(f"{indent[:-2]}{{" if dims else f"{indent}{{")
            return indent

        def close_loops(dims: list[int], indent: str) -> None:
            lines.append(f"{indent[:-2]}}}" if dims else f"{indent}}}")

        def fold(extent: str, indent: str) -> None:
            """The reduce loops, then the block of outputs innermost."""
            indent = open_loops(nest.reduce, indent)
            if contiguous:
                lines.append("#pragma omp simd")
            else:
                lines.append(f"#pragma GCC unroll {block}")
            lines.append(f"{indent}for (int64_t q = 0; q < {extent}; q++) {{")
            accumulate(indent + "  ")
            lines.append(f"{indent}}}")
            close_loops(nest.reduce, indent)

        width = max(4, 2 * vb // dtype.itemsize)
        tiled = (
            computes
            and not contiguous
            and nest.space[last] >= width
            and all(c[last] in (0, 1) for c in coefs)
        )
        if tiled:

            def fold_tiled(extent: str, indent: str) -> None:
                """The reduce loops but the last; the last in tiles of `width` evaluated in
                vector lanes and folded in order; its remainder one position at a time."""
                indent = open_loops(nest.reduce[:-1], indent)
                full = nest.space[last] - nest.space[last] % width
                i2, i3, i4 = indent + "  ", indent + "    ", indent + "      "
                step = combine_expr(prog, nest.combiner, dtype, "acc[q]", "tile[q][w]")
                lines.extend(
                    [
                        f"{indent}for (int64_t kb = 0; kb < INT64_C({full}); "
                        f"kb += INT64_C({width})) {{",
                        f"{i2}{t} tile[{block}][{width}];",
                        f"{i2}for (int64_t q = 0; q < {extent}; q++) {{",
                        f"{i3}const int64_t i{inner} = ib + q;",
                        "#pragma omp simd",
                        f"{i3}for (int64_t w = 0; w < INT64_C({width}); w++) {{",
                        f"{i4}const int64_t i{last} = kb + w;",
                    ]
                )
                loads = load_operands(lines, i4, nest, operand_types)
                lines.append(f"{i4}tile[q][w] = {body(loads, lines, i4)};")
                lines.extend(
                    [
                        f"{i3}}}",
                        f"{i2}}}",
                        f"{i2}for (int64_t w = 0; w < INT64_C({width}); w++)",
                        f"#pragma GCC unroll {block}",
                        f"{i3}for (int64_t q = 0; q < {extent}; q++) acc[q] = {step};",
                        f"{indent}}}",
                    ]
                )
                if full < nest.space[last]:
                    lines.append(
                        f"{indent}for (int64_t i{last} = INT64_C({full}); "
                        f"i{last} < INT64_C({nest.space[last]}); i{last}++)"
                    )
                    lines.append(f"#pragma GCC unroll {block}")
                    lines.append(f"{indent}  for (int64_t q = 0; q < {extent}; q++) {{")
                    accumulate(i3)
                    lines.append(f"{indent}  }}")
                close_loops(nest.reduce[:-1], indent)

            emit_fold = fold_tiled
        else:
            emit_fold = fold
        if contiguous and strided and count <= LANE_FOLD_MAX_POSITIONS and not tiled:
            # Each lane one output: its positions folded in order inside the lane.
            lines.append("#pragma omp simd")
            lines.append(f"{ind}for (int64_t q = 0; q < rn; q++) {{")
            i2 = ind + "  "
            lines.append(f"{i2}const int64_t i{inner} = ib + q;")
            lines.append(f"{i2}{t} acc = {_start(nest.combiner, dtype)};")
            for d in nest.reduce:
                lines.append(f"#pragma GCC unroll {nest.space[d]}")
                lines.append(f"{i2}for (int64_t i{d} = 0; i{d} < INT64_C({nest.space[d]}); i{d}++)")
            lines.append(f"{i2}{{")
            loads = load_operands(lines, i2 + "  ", nest, operand_types)
            lines.append(f"{i2}  const {t} val = {body(loads, lines, i2 + '  ')};")
            step = combine_expr(prog, nest.combiner, dtype, "acc", "val")
            lines.append(f"{i2}  acc = {step};")
            lines.append(f"{i2}}}")
            lines.append(f"{i2}r[{out_index}] = acc;")
            lines.append(f"{ind}}}")
            lines.append(f"{ind[:-2]}}}")
            prog.record(
                op,
                "folds in lanes",
                f"{count} positions an output",
                "each vector lane is one output folding its few positions in order",
            )
            _finish(prog, op, name, lines)
            return
        lines.append(f"{ind}{t} acc[{block}];")
        lines.append(
            f"{ind}for (int64_t q = 0; q < INT64_C({block}); q++) acc[q] = "
            f"{_start(nest.combiner, dtype)};"
        )
        if block < size or inner == row:  # a row block may hold fewer rows than `block`
            lines.append(f"{ind}if (rn == INT64_C({block})) {{")
            emit_fold(f"INT64_C({block})", ind + "  ")
            lines.append(f"{ind}}} else {{")
            emit_fold("rn", ind + "  ")
            lines.append(f"{ind}}}")
        else:
            emit_fold(f"INT64_C({block})", ind)
        lines.append(f"{ind}for (int64_t q = 0; q < rn; q++) {{")
        lines.append(f"{ind}  const int64_t i{inner} = ib + q;")
        lines.append(f"{ind}  r[{out_index}] = acc[q];")
        lines.append(f"{ind}}}")
        lines.append(f"{ind[:-2]}}}")
    _finish(prog, op, name, lines)
