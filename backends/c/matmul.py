"""Contraction kernels as packed, cache-blocked, register-blocked C (issue 5, item 3).

A `kernel` with `strategy = "product"` (set by the `select-products` pass; `gdv.ir.products`
says which kernels are products) records its roles: batch dims B, "row" out dims I read only by
the sub-body X (factor `row_factor` of the body's final `mul`), "column" out dims J read only by
the other factor Y, and the sizes it runs with (`micro`, `blocks`, `split`), which this file
follows without choosing any (it checks the roles against the body). Then

    result[b, i, j] = fold_add over k in row-major order of `reduce` of X(b, i, k) * Y(b, j, k)

and it is computed as BLAS computes a matrix product, but keeping the IR's order exactly:

- Packing evaluates X into row slivers (MR rows by KC reduce positions) and Y into column
  slivers (KC by NR): a fused prologue such as relu(a + b) runs once per packed element instead
  of once per (i, j, k). The packed K index is the row-major position over `reduce` as listed.
- The micro-kernel holds an MR x NR tile of accumulators in vector registers (GCC vector
  extensions, the width from `backends/c/simd.py`). For each k in order it adds the products
  X[i, k] * Y[j, k] (one multiply rounded, then one add rounded: no FMA, `-ffp-contract=off`),
  so every accumulator is exactly the left fold acc = p0; acc = acc + p1; ... of its output.
  Accumulators start at -0.0, which changes nothing: -0.0 + p == p for every p, NaN included.
- Blocking over k stores the partial sums in the result between blocks (in the result dtype,
  so exactly) and reloads them for the next block, in order. An empty reduction writes +0.0.
- Threads (OpenMP, as `split` says) split the output's columns (or, with too few column
  slivers, its rows; `split = "rows"` prefers rows): each thread packs and computes its own
  rectangle, so there is no barrier, and an output element is always computed by one thread,
  in order.
- Index tables (a conv's input offset per output position and per reduce position, and the
  window coordinates its masks test) depend on shapes alone: file-scope arrays filled once
  when the library loads (`Program.index_table`), shared by every kernel that needs the same.

So the result is bit-identical to the reference backend's. Multiplication is commutative in
IEEE arithmetic, so which factor is the row operand never matters.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass

from gdv.backends.c.elementwise import bind_scalar
from gdv.backends.c.emit import (
    ARENA_MARGIN,
    CTYPE,
    SUFFIX,
    Program,
    attr_literal,
    comment,
    ctype,
    strides,
)
from gdv.ir import products
from gdv.ir.core import Function, Op
from gdv.ir.dtypes import DType
from gdv.ir.ops.kernel import affine_range, fills_of, leaving_dims
from gdv.ir.types import TensorType

DIRECT_MAX_ROWS = 16
"""Products with at most this many rows read their column factor in place when they can
(measured on the mlp example, M = 8: packing B cost more than the product)."""

COLUMNS_IN_PLACE_MAX_ROWS = 64
"""Products with at most this many rows read full column slivers of Y in place where Y is a
value the program computes (not a parameter: a weight keeps DIRECT_MAX_ROWS) adjacent along
the columns (a 1x1 conv's input, its channels' planes, just written), instead of packing them.
Measured on the 2-core Zen 4 host (one thread, -O3, bound, interleaved, the whole model,
`fuse-conv-epilogues` on, 2026-12-06): mobilenet_v2, whose projections to 16-64 channels read
the depthwise conv's output, 7.78 ms with 16, 7.48 with 64, 7.54 with 128, 7.49 with 2000;
efficientnet_b0 11.88, 11.90, 11.89, 11.93; resnet18 (slow minutes) 35.05, 34.98, 35.19,
35.15."""

IN_PLACE_ROWS_MAX_COLS = 256
"""Products with at most this many columns read full row slivers of the row factor in place
(where it is an operand adjacent along k) instead of packing them: a conv's weights times a
small image. Measured on this 2-core AVX-512 host (gdv profile, 3x3 convs as products):
512 channels on 7x7 (49 columns) 2.2-2.3 -> 1.6-1.8 ms, 256 on 14x14 (196) 1.5-1.7 -> 1.4 ms;
128 on 28x28 (784) no change, 64 on 56x56 (3136) slower."""


@dataclass
class Contraction:
    """How a product kernel splits (its recorded roles): the factors and the loop dims of
    each role."""

    left: str
    """Body value of the row factor X."""
    right: str
    """Body value of the column factor Y."""
    batch: list[int]
    rows: list[int]
    cols: list[int]
    red: list[int]
    direct: bool
    """The result is laid out [batch..., rows..., cols...] row-major: tiles are stored in place
    (else into a workspace, scattered afterwards)."""


_closure = products.closure


def contraction(op: Op, body: Function) -> Contraction:
    """The contraction a kernel with `strategy = "product"` records (its roles read off its
    attributes; nothing is chosen here)."""
    a = op.attrs
    x, y = products.factors(a, body)
    p = products.recorded(a)
    pos = {d: k for k, d in enumerate(a["out"])}
    direct = [pos[d] for d in p.batch + p.rows + p.cols] == list(range(len(a["out"])))
    return Contraction(x, y, p.batch, p.rows, p.cols, list(a["reduce"]), direct)


# --- C emission -------------------------------------------------------------------------------


def _vector_types(prog: Program, dtype: DType, vb: int) -> tuple[str, str]:
    """The aligned and unaligned vector typedefs of `dtype` lanes in `vb` bytes (emitted once)."""
    t, s = CTYPE[dtype], SUFFIX[dtype]
    va, vu = f"gdv_v{s}x{vb}", f"gdv_u{s}x{vb}"
    marker = f"typedef {t} {va} "
    if not any(f.startswith(marker) for f in prog.functions):
        prog.functions.append(
            f"{marker}__attribute__((vector_size({vb})));\n"
            f"typedef {t} {vu} __attribute__((vector_size({vb}), aligned({math.gcd(vb, 8)})));\n"
        )
    return va, vu


def _runtime_includes(prog: Program) -> None:
    marker = "/* gdv fast kernels: heap and OpenMP */"
    if not any(f.startswith(marker) for f in prog.functions):
        prog.functions.append(
            f"{marker}\n#include <stdlib.h>\n#ifdef _OPENMP\n#include <omp.h>\n#endif\n"
        )


def fma_helper(prog: Program, dtype: DType, vb: int) -> str:
    """The name of `gdv_vfma_<s>x<vb>(x, y, z)`: x * y + z rounded once in every lane (IEEE
    fusedMultiplyAdd), emitted once per program. It is the FMA instruction where the ISA has
    one (AVX-512F, FMA3: `_mm512_fmadd_ps`, `_mm256_fmadd_ps`, `_mm_fmadd_ps` on 64-byte
    vectors in 16- to 64-byte pieces), else `fmaf` per lane, which C specifies as rounding
    once: every path computes the same bits."""
    assert dtype is DType.F32, dtype
    va, _ = _vector_types(prog, dtype, vb)
    vl = vb // 4
    name = f"gdv_vfma_f32x{vb}"
    marker = f"/* {name}: fused multiply-add in every lane */"
    if any(f.startswith(marker) for f in prog.functions):
        return name
    head = f"static inline {va} {name}("
    wide = {64: ("__AVX512F__", "__m512", "_mm512_fmadd_ps", "_mm512_loadu_ps", "_mm512_storeu_ps")}
    pieces = [(64, *wide[64])] if vb % 64 == 0 else []
    pieces += [
        (32, "__FMA__", "__m256", "_mm256_fmadd_ps", "_mm256_loadu_ps", "_mm256_storeu_ps"),
        (16, "__FMA__", "__m128", "_mm_fmadd_ps", "_mm_loadu_ps", "_mm_storeu_ps"),
    ]
    lines = [
        marker,
        "#if defined(__x86_64__) || defined(__i386__)",
        "#include <immintrin.h>",
        "#endif",
        f"{head}{va} x, {va} y, {va} z)",
        "{",
        f"  {va} r;",
        "  const float *px = (const float *)&x, *py = (const float *)&y, *pz = (const float *)&z;",
        "  float *pr = (float *)&r;",
    ]
    first = True
    for width, macro, vt, fma, load, store in pieces:
        if vb % width:
            continue
        lines.append(f"#{'if' if first else 'elif'} defined({macro})")
        first = False
        step = width // 4
        lines += [
            f"  for (int h = 0; h < {vl}; h += {step}) {{",
            f"    const {vt} c = {fma}({load}(px + h), {load}(py + h), {load}(pz + h));",
            f"    {store}(pr + h, c);",
            "  }",
        ]
    lines += [
        "#else",
        f"  for (int l = 0; l < {vl}; l++) pr[l] = __builtin_fmaf(px[l], py[l], pz[l]);",
        "#endif",
        "  return r;",
        "}",
    ]
    prog.functions.append("\n".join(lines) + "\n")
    return name


PREFETCH_STEPS = 64
"""The micro-kernel prefetches the B row this many reduce steps ahead (`__builtin_prefetch`,
read, PREFETCH_LOCALITY's hint; these figures are from the `prefetchnta` hint): a model's
weights stream from memory through B, and the hardware prefetchers alone left them at 12 GB/s.
Measured on the 2-core Zen 4 host (-O3, weights bound, 12 weight matrices cycled so none stays
in cache, shuffled interleaved turns, medians): 12 x 384 @ 384 x 1536 0.207 ms without, 0.180
at 16 steps, 0.167 at 32, 0.170 at 64; 32 x 768 @ 768 x 3072 1.270 against 1.053; 1024^3 15.7
against 14.8 (no loss where the product is compute-bound); MiniLM end to end 4.13 against
3.58 ms (40 rounds; onnxruntime 3.69 in the same rounds).
With the `prefetcht2` hint (PREFETCH_LOCALITY = 1), 32 against 64 steps, whole models (-O3,
bound, one thread, interleaved in one process, CPU-time medians of 50 calls, 2026-12-05):
  AVX-512: resnet18 35.25 -> 34.66 ms, MiniLM 3.77 -> 3.59, mobilenet_v2 8.10 -> 7.99, BERT
  10.30 -> 9.83, GPT-2 9.79 -> 9.35, efficientnet_b0 12.56 -> 12.48; 96 and 128 steps were
  no better (MiniLM 3.88 and 3.80, BERT 9.61 and 9.98);
  AVX2 (`GDV_C_ISA=avx2`): resnet18 38.63 -> 37.94, mobilenet_v2 8.99 -> 8.76, MiniLM 5.22 ->
  4.26, BERT 12.63 -> 11.50."""

PREFETCH_LOCALITY = 1
"""The B prefetch's temporal-locality hint (`__builtin_prefetch`'s third argument: 1 is
`prefetcht2`; 0 is `prefetchnta`, which marks the line non-temporal, and a B panel is read
again by every row sliver of its block). Measured on the 2-core Zen 4 host (-O3, bound, one
thread, interleaved in one process, CPU-time medians of 60 calls, 2026-12-05;
`GDV_C_ISA=avx2` for AVX2), 0 against 1:
  AVX-512: MiniLM 4.37 -> 3.73 ms (again 4.34 -> 3.54), BERT 10.44 -> 10.32, GPT-2 10.45 ->
  10.23, resnet18 35.90 -> 35.49, efficientnet_b0 12.42 -> 12.40, mobilenet_v2 8.01 -> 8.04;
  two threads MiniLM 6.67 -> 6.44 and resnet18 38.98 -> 38.55 ms of CPU time;
  AVX2: MiniLM 4.99 -> 4.99, BERT 12.37 -> 12.13, resnet18 38.54 -> 38.46, mobilenet_v2
  8.75 -> 8.70.
3 (`prefetcht0`, into L1 as well) lost to 1 on AVX-512 (MiniLM 4.26, resnet18 35.62)."""

PREFETCH_A_LOCALITY = 0
"""The A prefetch's locality hint. 1 lost on AVX2's convolutions (mobilenet_v2 8.70 -> 9.24 ms,
resnet18 38.46 -> 39.28, with B at 1) and was within noise on AVX-512 (MiniLM 3.73 -> 3.65,
resnet18 35.49 -> 35.44)."""

IMPLICIT_MIN_BYTES = 64
"""Column slivers are read in place only with vectors of at least this many bytes. AVX2's
6 x 16 tile (two 8-lane vectors a row) lost by it: resnet18 with `GDV_C_ISA=avx2`, one thread,
interleaved, 38.3 ms packed against 40.3 in place (each B load serves 6 multiply-adds there,
16 in AVX-512's 16 x 16 tile, so unaligned and blended loads weigh more)."""

IMPLICIT_STRIDE2_BYTES = 64
"""Stride-2 convolutions read their column slivers in place only with vectors of this many
bytes (AVX-512: one two-source shuffle a vector, `valignd`/`vpermt2ps`; AVX2 has no
two-source shuffle across its 128-bit lanes and would spend several instructions)."""

IMPLICIT_COLUMNS = True
"""A product whose column factor is a convolution's (padded) input, at stride 1 or (with
IMPLICIT_STRIDE2_BYTES) 2, reads each full column sliver in place where its NR columns are one
run of an input row, or two runs (it crosses one row end; the second run at or after the
first's end): the micro-kernel loads row k of the sliver at the input plus the reduce
position's table entry (at stride 2, two loads and a shuffle a vector), and for two runs
blends the two runs' loads by lane. The same values reach the same lanes as from the packed
sliver, so every output's steps are unchanged. Slivers of three or more runs, and edge
slivers, are packed as before (their run split is found again by the packing code). Measured
on resnet18 (-O3, bound, one thread, the 2-core Zen 4 host): packing the column slivers was
2.27 ms of 37.6 (`gdv profile` with the packing loop cut out); in place, interleaved, the
whole model 37.3 -> 36.2 ms at stride 1; its 7x7/2 stem alone 2.272 -> 2.142 ms at stride 2."""


PREFETCH_A = True
"""The micro-kernel also prefetches its packed A sliver PREFETCH_STEPS steps ahead. With the
roles swapped (`select_products.weights_as_rows`: a Linear's W [out, in] as the rows, few
tokens as the columns) A carries the weights; measured on MiniLM's torch.export path (-O3,
bound, one thread, the 2-core Zen 4 host under load, interleaved, medians): 8.9-9.6 ms without,
6.5-7.4 ms with; its ONNX path (B carries the weights) within noise either way."""


def micro_kernel(
    prog: Program,
    dtype: DType,
    mr: int,
    nv: int,
    vb: int,
    a_in_place: bool = False,
    fma: bool = False,
    a_step: int | None = None,
    b_runs: int = 0,
    b_step: int = 1,
    b_masked: bool = False,
) -> str:
    """The name of the MR x (NV vectors) micro-kernel for `dtype` (emitted once per program).

    `gdv_mk(kc, ap, bp, ldb, c, ldc, first)`: for k = 0 .. kc-1 in order, c[r][j] +=
    ap[k][r] * bp[k * ldb + j] (multiply, then add), starting from -0.0 when `first`, else
    from c. B is a packed sliver (ldb = NR) or, for a product with few rows, the operand
    itself (ldb its reduce stride; unaligned loads). With `a_in_place` (`gdv_mk..._ai`, one
    more argument `lda` after `ap`), A is the operand itself, row r at ap[r * lda], contiguous
    in k: a product with few rows does not pack it. With `fma` (`contract = "fma"`,
    `gdv_mk..._fma`) each step is c[r][j] = fma(ap[k][r], bp[k * ldb + j], c[r][j]), rounded
    once (`fma_helper`); from -0.0 the first step gives the product itself. With `a_step`
    (`gdv_mk..._a<step>`), A is a packed sliver of `a_step` rows of which the kernel computes
    the first MR (an edge of rows: ap[k * a_step + r]).

    With `b_runs` (`gdv_mk..._r1`, `_r2`: B's column sliver read where it lies, a stride-1
    convolution's input, see `IMPLICIT_COLUMNS`) the arguments `bp, ldb` become `bp, koff`
    (one run: row k of the sliver is bp[koff[k] + j]) or `bp, bq, cut, koff` (two runs: lanes
    j < cut from bp[koff[k] + j], the others from bq[koff[k] + j]); the same values in the same
    lanes as the packed sliver, so the same steps. With `b_step = 2` (`_s2`, a stride-2
    convolution's input) the sliver's column j is at bp[koff[k] + 2 j]: each vector of lanes
    comes from two loads and one two-source shuffle keeping the even elements, as
    `strided_y`'s packing builds it.

    With `b_masked` (`_z`, f32 runs only: a column factor with a `fill` of +0.0, read
    unpadded) two more arguments follow `koff`: `masks` (per tap, NR int32 lanes, all ones
    where the lane's read lies inside the operand) and `tap` (per reduce step, its tap: the
    values of the reduce dims that move an index out of the operand, `_tap_masks`). Each
    step's lanes are ANDed with its tap's mask: a lane outside the operand is +0.0, the padded
    copy's value there (its loaded bits, which may lie outside the operand, are dropped)."""
    t, s = CTYPE[dtype], SUFFIX[dtype]
    va, vu = _vector_types(prog, dtype, vb)
    vl = vb // dtype.itemsize
    nr = nv * vl
    step = a_step or mr
    assert not (b_runs and a_in_place), "B runs go with a packed A sliver"
    assert not b_masked or (b_runs and dtype is DType.F32), "masked runs are f32 runs"
    name = (
        f"gdv_mk_{s}_{mr}x{nr}_v{vb}"
        + ("_ai" if a_in_place else "")
        + (f"_a{step}" if step != mr else "")
        + (f"_r{b_runs}" if b_runs else "")
        + ("_s2" if b_runs and b_step == 2 else "")
        + ("_z" if b_masked else "")
        + ("_fma" if fma else "")
    )
    vfma = fma_helper(prog, dtype, vb) if fma else None
    head = f"static void {name}("
    if any(f.startswith(head) for f in prog.functions):
        return name
    accs = [[f"c{r}_{v}" for v in range(nv)] for r in range(mr)]
    zero = "-0.0f" if dtype is DType.F32 else "-0.0"
    b_args = {
        0: f"const {t} *restrict bp, int64_t ldb, ",
        1: f"const {t} *restrict bp, const int64_t *restrict koff, ",
        2: f"const {t} *restrict bp, const {t} *restrict bq, int64_t cut, "
        "const int64_t *restrict koff, ",
    }[b_runs]
    if b_masked:
        b_args += "const int32_t *restrict masks, const int32_t *restrict tap, "
    lines = [
        f"{head}int64_t kc, const {t} *restrict ap, "
        + ("int64_t lda, " if a_in_place else "")
        + b_args
        + f"{t} *restrict c, int64_t ldc, int first)",
        "{",
        f"  {va} " + ", ".join(a for row in accs for a in row) + ";",
        "  if (first) {",
        f"    const {va} z = {{" + ", ".join([zero] * vl) + "};",
    ]
    lines += [f"    {a} = z;" for row in accs for a in row]
    lines.append("  } else {")
    lines += [
        f"    {accs[r][v]} = *(const {vu} *)(c + {r} * ldc + {v * vl});"
        for r in range(mr)
        for v in range(nv)
    ]
    lines.append("  }")
    it = "int32_t" if dtype.itemsize == 4 else "int64_t"  # a lane's integer, for masks
    if b_runs == 2:
        # Lane masks, all ones where the lane's column is in the first run (j < cut).
        lines.append(f"  typedef {it} gdv_mi __attribute__((vector_size({vb})));")
        for v in range(nv):
            lanes = ", ".join(str(v * vl + lane) for lane in range(vl))
            cuts = ", ".join(["cut"] * vl)
            lines.append(f"  const gdv_mi m{v} = (gdv_mi){{{lanes}}} < (gdv_mi){{{cuts}}};")
    if b_masked:
        lines.append(f"  typedef int32_t gdv_zu __attribute__((vector_size({vb}), aligned(4)));")
    if b_runs and b_step == 2:
        even = [2 * lane for lane in range(vl // 2)] + [2 * lane + 1 for lane in range(vl // 2, vl)]
        lines.append(f"  typedef {it} gdv_si __attribute__((vector_size({vb})));")
        lines.append(f"  const gdv_si even = {{{', '.join(map(str, even))}}};")

    def load_b(at: str, v: int) -> str:
        """Vector v of the sliver row at `at` (its lanes b_step elements apart)."""
        if b_step == 1:
            return f"*(const {vu} *)({at} + {v * vl})"
        first = 2 * v * vl
        return (
            f"__builtin_shuffle(*(const {vu} *)({at} + {first}), "
            f"*(const {vu} *)({at} + {first + vl - 1}), even)"
        )

    lines.append("  for (int64_t k = 0; k < kc; k++) {")
    if b_runs:
        lines.append(f"    const {t} *restrict bk = bp + koff[k];")
        lines += [f"    {va} b{v} = {load_b('bk', v)};" for v in range(nv)]
        if b_runs == 2:
            lines.append(f"    const {t} *restrict qk = bq + koff[k];")
            for v in range(nv):
                q = load_b("qk", v)
                lines.append(f"    b{v} = ({va})((m{v} & (gdv_mi)b{v}) | (~m{v} & (gdv_mi)({q})));")
    else:
        # The B stream is prefetched PREFETCH_STEPS reduce steps ahead (a hint: no value
        # changes).
        hint = PREFETCH_LOCALITY
        lines += [
            f"    __builtin_prefetch(bp + {PREFETCH_STEPS} * ldb + {v * vl}, 0, {hint});"
            for v in range(nv)
        ]
    if PREFETCH_A and not a_in_place:
        # A packed sliver streams too: with the roles swapped (`weights_as_rows`), it is the
        # weights (MR floats a step).
        hint = PREFETCH_A_LOCALITY
        lines.append(f"    __builtin_prefetch(ap + {PREFETCH_STEPS * step}, 0, {hint});")
    if b_masked:
        # Lanes outside the operand at this step: +0.0, as the padded copy holds.
        lines.append(f"    const int32_t *restrict mk = masks + tap[k] * {nr};")
        lines += [
            f"    b{v} = ({va})((gdv_zu)b{v} & *(const gdv_zu *)(mk + {v * vl}));"
            for v in range(nv)
        ]
    if not b_runs:
        lines += [f"    const {va} b{v} = *(const {vu} *)(bp + {v * vl});" for v in range(nv)]
    for r in range(mr):
        lines.append(f"    {{ const {t} a = ap[{f'{r} * lda' if a_in_place else r}];")
        if vfma is not None:
            # a broadcast by an initialiser (not `{0} + a`, which turns -0.0 into +0.0)
            lines.append(f"      const {va} av = {{{', '.join(['a'] * vl)}}};")
            lines += [f"      {accs[r][v]} = {vfma}(av, b{v}, {accs[r][v]});" for v in range(nv)]
        else:
            lines += [f"      {accs[r][v]} = {accs[r][v]} + b{v} * a;" for v in range(nv)]
        lines.append("    }")
    lines += [f"    ap += {1 if a_in_place else step};"]
    lines += ["  }"] if b_runs else ["    bp += ldb;", "  }"]
    lines += [
        f"  *({vu} *)(c + {r} * ldc + {v * vl}) = {accs[r][v]};"
        for r in range(mr)
        for v in range(nv)
    ]
    lines.append("}")
    prog.functions.append("\n".join(lines) + "\n")
    return name


EDGE_COLUMNS = (4, 2, 1)
"""The column counts of `column_kernel`s an edge tile of fewer than NR columns is cut into."""

EDGE_ROWS = (8, 4, 2, 1)
"""The row counts of the micro-kernels (`micro_kernel`'s `a_step`) an edge tile of fewer than
MR rows and all NR columns is cut into, instead of computing MR rows of which the last are
zero: 24 output channels in 16-row tiles spend a third of their steps on zeros otherwise."""

BALANCED_ROWS = True
"""A product whose `split` is `rows` and whose whole MR-row slivers would give two threads
unequal shares gives each thread M / threads rows instead, where X is packed on every call (its
slivers start wherever a thread's rows do). resnet18's layer 4 convs run 49 positions as rows
in 13-row slivers: whole slivers gave the threads 26 and 23 rows, so one did 53% of the work.
Measured on the 2-core Zen 4 host (-O3, bound, two threads, both builds in one process,
interleaved blocks of 20 calls with the probe of `benchmarks/two_threads.py` before each,
2026-12-06): in 174 near rounds the model 17.88 -> 17.71 ms, each of those convs 1.153-1.176
-> 1.106-1.131 ms (0.598 -> 0.576 the smaller one); in 57 far rounds 21.10 -> 21.00. Applied
to every product, the ones whose threads split columns (BERT's) ran 1.4-1.6% slower with
nothing but that branch's text changed, so only products that split rows get it."""

EDGE_ROWS_EXACT = True
"""Before `EDGE_ROWS`, a micro-kernel of exactly M mod MR rows: the only partial row sliver a
product has (its row blocks and the threads' shares are whole slivers; with `BALANCED_ROWS`,
one of exactly each of two threads' shares mod MR), run as one call instead of a ladder whose
smallest pieces keep one or two accumulator chains."""


def column_kernel(prog: Program, dtype: DType, mr: int, vb: int, cols: int, fma: bool) -> str:
    """The name of the MR x `cols` column kernel (emitted once per program), for the columns
    of an edge tile whose rows are a full packed A sliver (MR a whole number of vectors).

    `gdv_mkc(kc, ap, bp, ldb, c, ldc, first)` computes exactly what `micro_kernel`'s call
    computes for these columns: for k = 0 .. kc-1 in order, c[r][j] += ap[k][r] * bp[k * ldb
    + j] (or the fused multiply-add), from -0.0 when `first`, else from c; each element's
    chain of steps and its rounding are the same, only the lanes differ: the vectors run
    along the rows (A's packed sliver holds a step's MR row values contiguous) and B's values
    are broadcast, so a tile of one column costs one vector step per reduce step instead of
    MR. A 1x1 convolution at 7 x 7 (49 positions: three 16-lane slivers and one of a single
    column) spends a quarter of its steps on that last column otherwise."""
    t, s = CTYPE[dtype], SUFFIX[dtype]
    va, vu = _vector_types(prog, dtype, vb)
    vl = vb // dtype.itemsize
    assert mr % vl == 0, (mr, vl)
    nq = mr // vl
    name = f"gdv_mkc_{s}_{mr}x{cols}_v{vb}" + ("_fma" if fma else "")
    vfma = fma_helper(prog, dtype, vb) if fma else None
    head = f"static void {name}("
    if any(f.startswith(head) for f in prog.functions):
        return name
    accs = [[f"c{q}_{j}" for j in range(cols)] for q in range(nq)]
    zero = "-0.0f" if dtype is DType.F32 else "-0.0"
    lines = [
        f"{head}int64_t kc, const {t} *restrict ap, const {t} *restrict bp, int64_t ldb, "
        f"{t} *restrict c, int64_t ldc, int first)",
        "{",
        f"  {va} " + ", ".join(a for row in accs for a in row) + ";",
        f"  {t} lane[{vl}] __attribute__((aligned(64)));",
        "  if (first) {",
        f"    const {va} z = {{" + ", ".join([zero] * vl) + "};",
    ]
    lines += [f"    {a} = z;" for row in accs for a in row]
    lines.append("  } else {")
    for q in range(nq):
        for j in range(cols):
            lines.append(
                f"    for (int l = 0; l < {vl}; l++) lane[l] = c[({q * vl} + l) * ldc + {j}];"
            )
            lines.append(f"    {accs[q][j]} = *(const {va} *)lane;")
    lines += ["  }", "  for (int64_t k = 0; k < kc; k++) {"]
    lines += [f"    const {va} a{q} = *(const {vu} *)(ap + {q * vl});" for q in range(nq)]
    for j in range(cols):
        lines.append(f"    {{ const {t} b = bp[{j}];")
        if vfma is not None:
            lines.append(f"      const {va} bv = {{{', '.join(['b'] * vl)}}};")
            lines += [f"      {accs[q][j]} = {vfma}(a{q}, bv, {accs[q][j]});" for q in range(nq)]
        else:
            lines += [f"      {accs[q][j]} = {accs[q][j]} + a{q} * b;" for q in range(nq)]
        lines.append("    }")
    lines += [f"    ap += {mr};", "    bp += ldb;", "  }"]
    for q in range(nq):
        for j in range(cols):
            lines.append(f"  *({va} *)lane = {accs[q][j]};")
            lines.append(
                f"  for (int l = 0; l < {vl}; l++) c[({q * vl} + l) * ldc + {j}] = lane[l];"
            )
    lines.append("}")
    prog.functions.append("\n".join(lines) + "\n")
    return name


@dataclass
class _Group:
    """A role's loop dims flattened row-major into one index `var` of extent `size`."""

    dims: list[int]
    sizes: list[int]
    var: str

    @property
    def size(self) -> int:
        return math.prod(self.sizes)

    def step(self, coef: list[int]) -> int | None:
        """How far one step of the flattened index moves at per-dim coefficients `coef`, or
        None when the dims do not flatten to one stride."""
        live = [(c, z) for c, z in zip((coef[d] for d in self.dims), self.sizes, strict=True)]
        live = [(c, z) for c, z in live if z != 1]
        if all(c == 0 for c, _ in live):
            return 0
        step = live[-1][0]
        expect = step
        for c, z in reversed(live):
            if c != expect:
                return None
            expect *= z
        return step

    def sliver_offset(
        self, coef: list[int], table: str, tables: dict[str, str], sliver: tuple[int, str, str]
    ) -> tuple[str, int]:
        """`offset` inside a packed sliver of `width` consecutive indices from `base` (a
        multiple of `width`, the position in it `counter`): where the dims need a table but the
        innermost one's extent is a multiple of the width, a sliver never crosses it, and the
        offset is the table's entry at `base` plus a stride (a convolution's rows)."""
        width, base, counter = sliver
        step = self.sliver_step(coef, width)
        if self.step(coef) is None and step is not None:
            self.offset(coef, table, tables)  # the table
            return f"{table}[{base}] + INT64_C({step}) * {counter}", abs(step)
        return self.offset(coef, table, tables)

    def sliver_step(self, coef: list[int], width: int) -> int | None:
        """How far one step moves in memory inside a sliver of `width` consecutive indices
        (starting at a multiple of `width`): the flattened step, or where the dims need a table,
        the innermost dim's when a sliver never crosses it; None otherwise."""
        step = self.step(coef)
        if step is not None:
            return step
        live = [(coef[d], z) for d, z in zip(self.dims, self.sizes, strict=True) if z != 1]
        return live[-1][0] if live and live[-1][1] % width == 0 else None

    def offset(
        self, coef: list[int], table: str, tables: dict[str, str], force: bool = False
    ) -> tuple[str, int]:
        """C for sum_d coef[d] * index_d at flattened index `var`, and a stride hint (how far
        one step of `var` moves in memory; large when a table is needed). A table (int64_t
        `table[size]`, its initialising loop put in `tables`) serves when the dims do not
        flatten to one stride, or with `force` (the table is made, the expression kept)."""
        step = self.step(coef)
        if step is not None and not force:
            if step == 0:
                return "INT64_C(0)", 0
            return f"INT64_C({step}) * {self.var}", abs(step)
        if table not in tables:
            init = [
                f"  for (int64_t v = 0; v < INT64_C({self.size}); v++) {{",
                "    int64_t q = v;",
            ]
            terms = []
            for d, z in reversed(list(zip(self.dims, self.sizes, strict=True))):
                init.append(f"    const int64_t u{d} = q % INT64_C({z}); q /= INT64_C({z});")
                if coef[d]:
                    terms.append(f"INT64_C({coef[d]}) * u{d}")
            init.append(f"    {table}[v] = {' + '.join(terms) or '0'};")
            init.append("  }")
            tables[table] = "\n".join(init)
        if step is not None:
            return (f"INT64_C({step}) * {self.var}", abs(step)) if step else ("INT64_C(0)", 0)
        return f"{table}[{self.var}]", 1 << 30


def _coefficients(rows: list[list[int]], t: TensorType, n: int) -> tuple[list[int], int]:
    """The flat index of an operand read at `rows . i + c`: per loop dim coefficient, constant."""
    st = strides(t)
    coef = [sum(st[r] * row[d] for r, row in enumerate(rows)) for d in range(n)]
    return coef, sum(st[r] * row[-1] for r, row in enumerate(rows))


def emit(prog: Program, op: Op, operand_types: list[TensorType], body: Function) -> None:
    """Emit the C function computing product kernel `op` (`strategy = "product"`) into a new
    buffer, and its call: its roles, `micro`, `blocks`, `split` and `vector` lanes (absent:
    one) as its attributes give them."""
    why = products.holds(op.attrs, op.type.dtype, body)
    if why is not None:
        raise prog.error(op, f'its strategy = "product" does not fit it: {why}')
    con = contraction(op, body)
    dtype = op.type.dtype
    t = ctype(dtype, op, prog.module)
    space = list(op.attrs["space"])
    size = dtype.itemsize

    def group(dims: list[int], var: str) -> _Group:
        return _Group(dims, [space[d] for d in dims], var)

    gb, gi, gj = group(con.batch, "b"), group(con.rows, "i"), group(con.cols, "j")
    gk = group(con.red, "k")
    m_, n_, k_, nb = gi.size, gj.size, gk.size, gb.size
    vl = int(op.attrs.get("vector", 1))
    vb = vl * size
    mr, nr = (int(v) for v in op.attrs["micro"])
    nv = nr // vl
    mc_max, kc_max, nc_max = (int(v) for v in op.attrs["blocks"])
    fused = "contract" in op.attrs
    name = prog.new_function()
    params = [f"const {CTYPE[ot.dtype]} *restrict a{k}" for k, ot in enumerate(operand_types)]
    params.append(f"{t} *restrict r")
    total = op.type.num_elements
    pre_slots: list[int] = []
    if total == 0:
        code = "{\n  return 0;\n}\n"
    elif k_ == 0:  # the empty fold of every output: +0.0
        code = f"{{\n  for (int64_t e = 0; e < {total}; e++) r[e] = 0;\n  return 0;\n}}\n"
    else:
        _runtime_includes(prog)
        micro = micro_kernel(prog, dtype, mr, nv, vb, fma=fused)
        code, pre_slots = _blocked(
            prog, op, con, operand_types, body, (gb, gi, gj, gk), micro, mr, nr, vb, name
        )
    if pre_slots:
        params += [f"const {t} *restrict pre_x", f"const {t} *restrict pre_y"]
    head = (
        f"/* kernel %{comment(op.result)} body @{comment(op.attrs['body'])}: contraction "
        f"M={m_} N={n_} K={k_} batch={nb}; packed {mr}x{nr} micro-kernel, {vb}-byte vectors, "
        f"KC={kc_max} MC={mc_max} NC={nc_max} */\n"
        f"static int {name}({', '.join(params)})\n"
    )
    prog.functions.append(head + code)
    prog.new_slot(op.result, op.type)
    args = [prog.var(o) for o in op.operands] + [prog.var(op.result)]
    args += [f"(const {t} *)buf[{slot}]" if slot >= 0 else "NULL" for slot in pre_slots]
    prog.body.append(
        f"  if ({name}({', '.join(args)}) != 0) return -1;  /* %{comment(op.result)}; "
        "-1: out of memory */"
    )


def _blocked(
    prog: Program,
    op: Op,
    con: Contraction,
    operand_types: list[TensorType],
    body: Function,
    groups: tuple[_Group, _Group, _Group, _Group],
    micro: str,
    mr: int,
    nr: int,
    vb: int,
    name: str,
) -> tuple[str, list[int]]:
    """The body of a contraction's C function (at least one output, a non-empty fold), and
    the slots of its factors' prepacked panels ([X's, Y's], -1 for a factor packed on every
    call; empty when neither can be prepacked: the function then takes no panel pointers)."""
    dtype = op.type.dtype
    t = CTYPE[dtype]
    n = len(op.attrs["space"])
    gb, gi, gj, gk = groups
    m_, n_, k_, nb = gi.size, gj.size, gk.size, gb.size
    mc_max, kc_max, nc_max = (int(v) for v in op.attrs["blocks"])
    coefs = [_coefficients(op.attrs["maps"][k], ot, n) for k, ot in enumerate(operand_types)]
    out_coef = [0] * n
    for p, d in enumerate(op.attrs["out"]):
        out_coef[d] = strides(op.type)[p]
    tables: dict[str, str] = {}  # name -> initialising loop
    pidx = {p.name: k for k, p in enumerate(body.params)}

    def factor_offsets(
        value: str, g: _Group, sliver: tuple[int, str, str]
    ) -> tuple[dict[int, str], bool]:
        """Per operand of the factor: its C flat index at (b, g's index, k); and whether the
        k loop should run innermost when packing (k moves less far in memory than g; on a tie,
        such as two index tables, g runs innermost and the stores into the sliver are adjacent)."""
        offs, sg, sk = {}, 0, 0
        for v in sorted(_closure(body, value) & set(pidx), key=pidx.__getitem__):
            k = pidx[v]
            og, hg = g.sliver_offset(coefs[k][0], f"t{k}{g.var}", tables, sliver)
            ok, hk = gk.offset(coefs[k][0], f"t{k}k", tables)
            offs[k] = f"o{k} + {og} + {ok}"
            sg, sk = max(sg, hg), max(sk, hk)
        return offs, sk < sg

    fills = fills_of(op.attrs)

    def guard(k: int, groups: list[_Group]) -> str:
        """C condition that operand k's read at the loop variables of `groups` (and the batch
        position; the other groups' dims at 0) lies inside it: its `fill` is read elsewhere.
        Per dim that the maps can take outside, its index from tables like the offsets'."""
        t = operand_types[k]
        conds = []
        for d in leaving_dims(op.attrs["maps"][k], list(op.attrs["space"]), t.shape):
            row = op.attrs["maps"][k][d]
            terms = [f"INT64_C({row[-1]})"]
            terms += [f"INT64_C({row[b]}) * bi{b}" for b in gb.dims if row[b]]
            terms += [g.offset(row[:-1], f"t{k}d{d}{g.var}", tables)[0] for g in groups]
            conds.append(f"(uint64_t)({' + '.join(terms)}) < UINT64_C({t.shape[d]})")
        return " && ".join(conds) or "1"

    def guards(value: str, g: _Group) -> dict[int, tuple[str, str]]:
        """Per filled operand the factor `value` reads: (its guard in a packing loop over g
        and k, its fill as a C literal)."""
        ks = {pidx[v] for v in _closure(body, value) & set(pidx)}
        return {
            k: (guard(k, [g, gk]), attr_literal(fills[k], operand_types[k].dtype))
            for k in sorted(ks & set(fills))
        }

    x_guards, y_guards = guards(con.left, gi), guards(con.right, gj)
    for k in y_guards:  # the run tables of masked runs (`_implicit_columns`), even if linear
        gj.offset(coefs[k][0], f"t{k}j", tables, force=True)
        gk.offset(coefs[k][0], f"t{k}k", tables, force=True)
    x_offs, x_k_inner = factor_offsets(con.left, gi, (mr, "r0", "ii"))
    y_offs, y_k_inner = factor_offsets(con.right, gj, (nr, "j0", "jj"))
    epilogue = _epilogue(
        prog,
        op,
        coefs,
        gi,
        gj,
        tables,
        (m_, n_, k_),
        {
            k: (guard(k, [gi, gj]), attr_literal(v, operand_types[k].dtype))
            for k, v in fills.items()
        },
    )

    def in_place(value: str, unit: _Group, other: _Group) -> tuple[int, int] | None:
        """(operand, stride along `other`) when the factor `value` is an operand read
        unchanged, adjacent along `unit`, in a product with few rows, or for the row factor
        also few columns (at most `IN_PLACE_ROWS_MAX_COLS`; each element meets only a few
        products, so packing it costs more than it saves: `select-products` makes a weight
        matrix read along k the row factor of a product with few tokens, `weights_as_rows`)."""
        k = pidx.get(value)
        if k in fills:  # read through its guard, packed
            return None
        few = min(m_, n_) if value == con.left else m_
        if value == con.left and n_ <= IN_PLACE_ROWS_MAX_COLS:
            few = 0  # each row sliver meets few column slivers
        if k is None or operand_types[k].dtype != dtype:
            return None
        # Y computed by the program (a conv's input, just written) with a few more rows
        computed = value == con.right and prog.param_of(op.operands[k]) is None
        if few > (COLUMNS_IN_PLACE_MAX_ROWS if computed else DIRECT_MAX_ROWS):
            return None
        stride = other.step(coefs[k][0])
        return (k, stride) if unit.step(coefs[k][0]) == 1 and stride is not None else None

    # Full column slivers of Y (one column per step of j) and full row slivers of X
    # (contiguous in k, row r at r * lda) go to the micro-kernel in place.
    y_in, x_in = in_place(con.right, gj, gk), in_place(con.left, gk, gi)
    if y_in or x_in:
        prog.record(
            op,
            "in-place factors",
            [side for side, used in (("rows", x_in), ("columns", y_in)) if used],
            f"a product of at most {DIRECT_MAX_ROWS} rows (or columns; {IN_PLACE_ROWS_MAX_COLS} "
            "for the row factor) reads full slivers of an operand in place instead of packing them",
        )
    skip_full = in_place_b = note = ""
    if y_in:
        ky, ks = y_in
        note = "  /* full column slivers of Y are read in place */\n"
        skip_full = f"            if (nr == {nr}) continue;  /* read in place, below */\n"
        in_place_b = (
            f"                if (nr == {nr}) {{\n"
            f"                  pb = a{ky} + o{ky} + ja + pc * INT64_C({ks});\n"
            f"                  ldb = INT64_C({ks});\n"
            "                }\n"
        )
    skip_full_x = ""
    call_full = f"{micro}(kc, pa, pb, ldb, ct, {n_}, pc == 0);"
    call_tile = f"{micro}(kc, pa, pb, ldb, tile, {nr}, pc == 0);"
    if x_in:
        kx, lda = x_in
        micro_ai = micro_kernel(
            prog, dtype, mr, nr * dtype.itemsize // vb, vb, True, "contract" in op.attrs
        )
        note += "  /* full row slivers of X are read in place */\n"
        skip_full_x = f"              if (mr == {mr}) continue;  /* read in place, below */\n"
        pa_in = f"a{kx} + o{kx} + ia * INT64_C({lda}) + pc"
        call_full = f"{micro_ai}(kc, {pa_in}, INT64_C({lda}), pb, ldb, ct, {n_}, pc == 0);"
        call_tile = (
            f"if (mr == {mr})\n"
            f"                    {micro_ai}(kc, {pa_in}, INT64_C({lda}), pb, ldb, tile, {nr}, "
            "pc == 0);\n"
            f"                  else\n                    {call_tile}"
        )
    scatter = ""
    if not con.direct:
        res_b = gb.offset(out_coef, "trb", tables)[0]
        res_i = gi.offset(out_coef, "tri", tables)[0]
        res_j = gj.offset(out_coef, "trj", tables)[0]
        scatter = f"""    const int64_t ob = {res_b};
    for (int64_t i = 0; i < {m_}; i++)
      for (int64_t j = 0; j < {n_}; j++)
        r[ob + {res_i} + {res_j}] = ws[i * {n_} + j];
"""

    # Buffers, per thread: a packed panel of Y and a packed block of X; the tables.
    kc_top = min(kc_max, k_)
    bp_elems = _round64(kc_top * -(-min(nc_max, n_) // nr) * nr, dtype.itemsize)
    mc_top = min(mc_max, -(-m_ // mr) * mr)
    ap_elems = _round64(kc_top * mc_top, dtype.itemsize)
    # Factors read in place whole (no edge sliver) need no packing buffer.
    if skip_full and n_ % nr == 0:
        bp_elems = _round64(1, dtype.itemsize)
    if skip_full_x and m_ % mr == 0:
        ap_elems = _round64(1, dtype.itemsize)
    sizes = {"b": nb, "i": m_, "j": n_, "k": k_}
    heap = [f"bpall = aligned_alloc(64, sizeof({t}) * {bp_elems} * nthreads)"]
    heap.append(f"apall = aligned_alloc(64, sizeof({t}) * {ap_elems} * nthreads)")
    if not con.direct:
        heap.append(f"ws = malloc(sizeof({t}) * {m_ * n_})")
    typed = [f"{t} *{h}" for h in heap]
    owned = [h.split(" =")[0] for h in heap]
    free = " ".join(f"free({v});" for v in owned)
    alloc = "".join(f"  {h};\n" for h in typed)
    alloc += f"  if ({' || '.join(f'!{v}' for v in owned)}) {{\n    {free}\n    return 1;\n  }}\n"
    table_refs = "".join(
        f"  const int64_t *const {v} = {prog.index_table(sizes[v[-1]], init, v)};\n"
        for v, init in tables.items()
    )
    alloc += table_refs

    batch = "".join(
        f"    const int64_t bi{d} = q % {z}; q /= {z};\n"
        for d, z in reversed(list(zip(gb.dims, gb.sizes, strict=True)))
    )
    for k, (coef, const) in enumerate(coefs):
        terms = [f"INT64_C({const})"] + [f"INT64_C({coef[d]}) * bi{d}" for d in gb.dims if coef[d]]
        batch += f"    const int64_t o{k} = {' + '.join(terms)};\n"
    c_at = f"r + b * INT64_C({m_ * n_})" if con.direct else "ws"
    ind_y, ind_x = " " * 14, " " * 16

    def both(
        width: int, extent: str, ind: str, make: Callable[[str, str], str], edge: str = ""
    ) -> str:
        """A full sliver with its width as a constant (loops the compiler can vectorise
        whole), else the edge sliver's extent (or the C `edge` given)."""
        return (
            f"{ind}if ({extent} == {width}) {{\n{make(str(width), ind + '  ')}{ind}}} else {{\n"
            f"{edge or make(extent, ind + '  ')}{ind}}}\n"
        )

    zero_y = (
        f"            for (int64_t jj = nr; jj < {nr}; jj++)\n"
        f"              for (int64_t kk = 0; kk < kc; kk++) dst[kk * {nr} + jj] = 0;\n"
    )
    masked_y = con.right in pidx and not y_k_inner

    def edge_y(ind: str) -> str:
        """A Y read unchanged, a row of the sliver adjacent in memory: the edge sliver packed
        whole in vector lanes, the columns past the edge zero (masked loads); a filled Y's
        reads outside it its fill."""
        (ky,) = y_offs
        value = f"jj < nr ? a{ky}[{y_offs[ky]}] : 0"
        if ky in y_guards:
            cond, fill = y_guards[ky]
            value = f"jj < nr && ({cond}) ? a{ky}[{y_offs[ky]}] : jj < nr ? {fill} : 0"
        return (
            f"{ind}for (int64_t kk = 0; kk < kc; kk++) {{\n"
            f"{ind}  const int64_t k = pc + kk;\n"
            "#pragma omp simd\n"
            f"{ind}  for (int64_t jj = 0; jj < {nr}; jj++) {{\n"
            f"{ind}    const int64_t j = j0 + jj;\n"
            f"{ind}    dst[kk * {nr} + jj] = {value};\n"
            f"{ind}  }}\n"
            f"{ind}}}\n"
        )

    if masked_y:
        zero_y = ""

    # Y's reads adjacent along j (one step of j moves one element, or none): its sliver rows
    # are copies in vector lanes (left to itself, GCC unrolled them into scalar moves). A
    # full sliver is adjacent also where j goes through a table but no sliver crosses the
    # table's innermost dim (`sliver_step`: NR divides a conv's output width). GCC had left
    # that copy as scalar moves too: with 8-column slivers over a 56-wide image (AVX2's
    # former 13 x 8 tile), `perf` put about 15% of a 64-channel 3x3 conv's samples there.
    y_unit = not y_k_inner and all(gj.step(coefs[k][0]) in (0, 1) for k in y_offs)
    y_unit_full = not y_k_inner and all(gj.sliver_step(coefs[k][0], nr) in (0, 1) for k in y_offs)

    def pack_y_as(ext: str, ind: str) -> str:
        if ext == str(nr):
            fast = strided_y(ind)
            if fast is not None:
                return fast
        return _pack(
            prog, body, con.right, y_offs, ind, ("jj", ext, "j", "j0 + jj"), y_k_inner,
            f"dst[kk * {nr} + jj]", y_unit_full if ext == str(nr) else y_unit, y_guards,
        )  # fmt: skip

    def strided_y(ind: str) -> str | None:
        """A full sliver of Y read unchanged at a stride of 2 along j (a stride-2 convolution's
        input positions), packed per reduce position with two vector loads and a shuffle per
        vector of lanes: the loads cover exactly the elements the sliver reads (the second
        starts at the first's last lane), and the shuffle keeps the even ones. The same values
        in the same places as the element loop, which GCC left as scalar moves."""
        if y_k_inner or con.right not in pidx or dtype not in (DType.F32, DType.F64):
            return None
        if pidx[con.right] in fills:
            return None
        k = pidx[con.right]
        if operand_types[k].dtype != dtype:
            return None
        coef = coefs[k][0]
        vl = vb // dtype.itemsize
        if gj.sliver_step(coef, nr) != 2 or nr % vl or vl < 2:
            return None
        og = gj.sliver_offset(coef, f"t{k}j", tables, (nr, "j0", "INT64_C(0)"))[0]
        ok = gk.offset(coef, f"t{k}k", tables)[0]
        ct, it = CTYPE[dtype], "int32_t" if dtype is DType.F32 else "int64_t"
        mask = [2 * lane for lane in range(vl // 2)] + [2 * lane + 1 for lane in range(vl // 2, vl)]
        lines = [
            f"{ind}{{",
            f"{ind}  typedef {ct} gdv_sv"
            f" __attribute__((vector_size({vb}), aligned({dtype.itemsize})));",
            f"{ind}  typedef {it} gdv_sm __attribute__((vector_size({vb})));",
            f"{ind}  const gdv_sm even = {{{', '.join(map(str, mask))}}};",
            f"{ind}  for (int64_t kk = 0; kk < kc; kk++) {{",
            f"{ind}    const int64_t k = pc + kk, j = j0;",
            f"{ind}    (void)k; (void)j;",
            f"{ind}    const {ct} *src = a{k} + o{k} + {og} + {ok};",
        ]
        for q in range(nr // vl):
            lines += [
                f"{ind}    *(gdv_sv *)(dst + kk * {nr} + {q * vl}) = __builtin_shuffle("
                f"*(const gdv_sv *)(src + {2 * q * vl}), "
                f"*(const gdv_sv *)(src + {2 * q * vl + vl - 1}), even);",
            ]
        lines += [f"{ind}  }}", f"{ind}}}"]
        return "".join(line + "\n" for line in lines)

    def pack_x_as(ext: str, ind: str) -> str:
        return _pack(
            prog, body, con.left, x_offs, ind, ("ii", ext, "i", "r0 + ii"), x_k_inner,
            f"dst[kk * {mr} + ii]", False, x_guards,
        )  # fmt: skip

    # Y's columns through an index table (a conv's output positions, H x W flattened): a full
    # sliver whose table entries are one stride apart at run time (it does not cross a row of
    # the image) is packed with offsets from its first entry, a copy the compiler vectorises;
    # the entries are compared first, so both loops read the same elements.
    runs = {}
    for k in y_offs:
        table = f"t{k}j"
        live = [(coefs[k][0][d], z) for d, z in zip(gj.dims, gj.sizes, strict=True) if z != 1]
        if table in tables and f"{table}[j]" in y_offs[k] and live:
            runs[k] = (table, live[-1][0])

    def from_entry(entry: str, counter: str) -> dict[int, str]:
        """Y's offsets with each run table's lookup at j replaced by its entry at `entry`
        plus `counter` strides."""
        return {
            k: off.replace(
                f"{runs[k][0]}[j]", f"({runs[k][0]}[{entry}] + INT64_C({runs[k][1]}) * {counter})"
            )
            if k in runs
            else off
            for k, off in y_offs.items()
        }

    def pack_y_full(ext: str, ind: str) -> str:
        """A sliver of `ext` columns of Y: where its columns go through index tables, copied
        from table entries in vector lanes when the entries (compared first) allow it."""
        if not runs:
            return pack_y_as(ext, ind)

        def copy(offs: dict[int, str], side: tuple[str, str, str, str], store: str) -> str:
            return _pack(
                prog, body, con.right, offs, ind + "  ", side, y_k_inner, store, not y_k_inner,
                y_guards,
            )  # fmt: skip

        whole = copy(from_entry("j0", "jj"), ("jj", ext, "j", "j0 + jj"), f"dst[kk * {nr} + jj]")
        generic = pack_y_as(ext, ind + "  ")
        if len(runs) > 1:
            check = " && ".join(
                f"{table}[j0 + jj] == {table}[j0] + INT64_C({step}) * jj"
                for table, step in runs.values()
            )
            return (
                f"{ind}int run = 1;\n"
                f"{ind}for (int64_t jj = 1; jj < {ext}; jj++) run = run && {check};\n"
                f"{ind}if (run) {{\n{whole}{ind}}} else {{\n{generic}{ind}}}\n"
            )
        # One table (a conv's input): entries [0, cut) are one run from the first entry; a
        # sliver that crosses one row of the image is a second run [cut, ext) from entry cut.
        ((table, step),) = runs.values()
        two_runs = copy(
            from_entry("j0", "jj"), ("jj", "cut", "j", "j0 + jj"), f"dst[kk * {nr} + jj]"
        ) + copy(
            from_entry("j0 + cut", "jq"),
            ("jq", f"{ext} - cut", "j", "j0 + cut + jq"),
            f"dst[kk * {nr} + cut + jq]",
        )
        return (
            _run_split(table, step, ext, ind)
            + f"{ind}if (cut == {ext}) {{\n{whole}{ind}}} else if (two) {{\n{two_runs}"
            f"{ind}}} else {{\n{generic}{ind}}}\n"
        )

    # A factor read in place only ever packs its edge sliver.
    if y_in:
        pack_y = edge_y(ind_y) if masked_y else pack_y_as("nr", ind_y)
    else:
        pack_y = both(nr, "nr", ind_y, pack_y_full, edge_y(ind_y + "  ") if masked_y else "")
    pack_x = pack_x_as("mr", ind_x) if x_in else both(mr, "mr", ind_x, pack_x_as)
    # A factor read only from the entry's parameters (a model's weights) is packed once, when
    # those are bound (`Executable.bind`), by the same packing code run over all of K, into
    # slivers laid out as the per-call packing lays out one panel: sliver s of Y at
    # s * K * NR (X: s * K * MR), reduce position k at k * NR (k * MR) within it.
    pre_slots: list[int] = []
    y_guard = pre_b = x_guard = ""
    pa_expr = f"ap + is * kc * {mr}"
    bindable = {
        side: _bindable(prog, op, offs, nb) for side, offs in (("x", x_offs), ("y", y_offs))
    }
    if any(v is not None for v in bindable.values()):
        args = ", ".join(
            f"const {CTYPE[ot.dtype]} *restrict a{k}" for k, ot in enumerate(operand_types)
        )
        sides = {
            "x": (mr, m_, "r0", both(mr, "mr", ind_x, pack_x_as), zero_x_all(mr)),
            "y": (
                nr,
                n_,
                "j0",
                both(nr, "nr", ind_y, pack_y_as, edge_y(ind_y + "  ") if masked_y else ""),
                zero_y,
            ),
        }
        for side, params in bindable.items():
            if params is None:
                pre_slots.append(-1)
                continue
            width, extent, first, pack, zero = sides[side]
            slivers = -(-extent // width)
            fn = f"{name}_pre_{side}"
            prog.functions.append(
                f"/* the {side.upper()} factor of %{comment(op.result)} packed whole, once */\n"
                f"static int {fn}({args}, {t} *restrict pre)\n{{\n{table_refs}"
                f"  int64_t q = 0;\n{batch}  (void)q;\n"
                f"  const int64_t pc = 0, kc = {k_};\n"
                f"  for (int64_t s = 0; s < {slivers}; s++) {{\n"
                f"    {t} *restrict dst = pre + s * INT64_C({k_ * width});\n"
                f"    const int64_t {first} = s * {width};\n"
                f"    const int64_t {'m' if side == 'x' else 'n'}r = {extent} - {first} < {width} "
                f"? {extent} - {first} : {width};\n"
                f"{pack}{zero}  }}\n  return 0;\n}}\n"
            )
            call_args = ", ".join(
                prog.var(o) if k in (x_offs if side == "x" else y_offs) else "NULL"
                for k, o in enumerate(op.operands)
            )
            pre_slots.append(
                prog.prepack_slot(
                    op.result,
                    side,
                    slivers * k_ * width,
                    dtype,
                    params,
                    f"{fn}({call_args}, {{dst}})",
                )
            )
        prog.record(
            op,
            "prepacked factors",
            [s for s, v in (("rows", bindable["x"]), ("columns", bindable["y"])) if v is not None],
            "a factor read only from parameters is packed once when they are bound "
            "(Executable.bind), into the per-call packing's sliver layout",
        )
        y_guard = "          if (!pre_y)\n"
        x_guard = "            if (!pre_x)\n"
        pre_b = (
            f"                if (pre_y) {{\n"
            f"                  pb = pre_y + ((ja / {nr}) * INT64_C({k_}) + pc) * {nr};\n"
            f"                  ldb = {nr};\n"
            "                }\n"
        )
        pa_expr = f"pre_x ? pre_x + ((ia / {mr}) * INT64_C({k_}) + pc) * {mr} : ap + is * kc * {mr}"
        if x_in:
            plain_full = f"{micro}(kc, pa, pb, ldb, ct, {n_}, pc == 0);"
            pad = " " * 18
            call_full = f"if (pre_x)\n{pad}  {plain_full}\n{pad}else\n{pad}  {call_full}"
            call_tile = call_tile.replace(f"if (mr == {mr})", f"if (mr == {mr} && !pre_x)", 1)
    # Full column slivers of a stride-1 (or stride-2) convolution's input read where they lie
    # (IMPLICIT_COLUMNS): per sliver, one run or two of the input's rows, else packed.
    implicit = _implicit_columns(op, con, operand_types, pidx, coefs, gj, tables, nr, vb)
    taps = None  # a filled Y's masked runs (`_tap_masks`)
    if implicit is not None and implicit[0] in fills:
        width = -(-min(nc_max, n_) // nr)
        taps = _tap_masks(prog, op, operand_types, coefs, implicit, fills, nb, nr, width)
        if taps is None:
            implicit = None
        elif not taps.dims:  # every read lies inside the operand: plain runs
            taps = None
    # With X read in place (few columns), only a call with X packed at bind time takes them.
    x_packed = "pre_x" if x_in else ""
    if y_in or (x_in and bindable["x"] is None) or bindable["y"] is not None:
        implicit = None
    y_state = y_modes = ""
    fma = "contract" in op.attrs

    def by_runs(rows: int, a: str, c_at: str, plain: str) -> str:
        """The micro-kernel call for a tile of `rows` rows at `a` (A) and `c_at` (C) by the
        sliver's mode: its runs read in place, else `plain` (the packed sliver's call)."""
        if implicit is None:
            return plain
        ky, _, ktable, b_step = implicit
        step = None if rows == mr else mr
        one, two = (
            micro_kernel(
                prog, dtype, rows, nr * dtype.itemsize // vb, vb, False, fma, step, n, b_step
            )
            for n in (1, 2)
        )
        at, koff = f"a{ky} + o{ky}", f"{ktable} + pc"
        calls = (
            f"if (ymode[js] == 1) {one}(kc, {a}, {at} + yb[js], {koff}, {c_at}, {n_}, pc == 0); "
            f"else if (ymode[js] == 2) {two}(kc, {a}, {at} + yb[js], {at} + yq[js], ycut[js], "
            f"{koff}, {c_at}, {n_}, pc == 0); "
        )
        if taps is not None:  # slivers with a lane outside the operand: masked (modes 3, 4)
            one, two = (
                micro_kernel(
                    prog,
                    dtype,
                    rows,
                    nr * dtype.itemsize // vb,
                    vb,
                    False,
                    fma,
                    step,
                    n,
                    b_step,
                    True,
                )  # fmt: skip
                for n in (1, 2)
            )
            koff += ", ymask[js], ztap + pc"
            calls += (
                f"else if (ymode[js] == 3) {one}(kc, {a}, {at} + yb[js], {koff}, {c_at}, {n_}, "
                f"pc == 0); else if (ymode[js] == 4) {two}(kc, {a}, {at} + yb[js], "
                f"{at} + yq[js], ycut[js], {koff}, {c_at}, {n_}, pc == 0); "
            )
        return calls + f"else {plain}"

    if implicit is not None:
        _, table, _, b_step = implicit
        width = -(-min(nc_max, n_) // nr)
        y_state = f"      int64_t ymode[{width}], yb[{width}], yq[{width}], ycut[{width}];\n"
        ind = " " * 12
        lanes = ""
        if taps is not None:
            # Per sliver read in place, per tap, which of its lanes lie inside the operand.
            vl = vb // dtype.itemsize
            y_state += (
                f"      typedef int32_t gdv_zv __attribute__((vector_size({vb})));\n"
                f"      typedef uint32_t gdv_zn __attribute__((vector_size({vb})));\n"
                f"      int32_t ymask[{width}][{len(taps.parts) * nr}] "
                f"__attribute__((aligned({vb})));\n"
                f"      int64_t ymasked[{width}];\n"
            )
            lanes = taps.sliver_masks(op, gj, tables, nr, vl, ind + "  ")
            alloc += taps.steps(prog, gk.sizes)
        # Two runs are read in place only when the second starts at or after the first's
        # end, so that both loads stay between the sliver's first and last elements.
        after = f"{table}[j0 + cut] - INT64_C({b_step}) * cut >= {table}[j0]"
        y_modes = (
            f"{ind}ymode[s] = 0;\n"
            f"{ind}if (nr == {nr}{' && ' + x_packed if x_packed else ''}) {{\n"
            + _run_split(table, b_step, str(nr), ind + "  ")
            + f"{ind}  yb[s] = {table}[j0];\n"
            f"{ind}  yq[s] = cut < {nr} ? {table}[j0 + cut] - INT64_C({b_step}) * cut : 0;\n"
            f"{ind}  ycut[s] = cut;\n"
            f"{ind}  ymode[s] = cut == {nr} ? 1 : two && {after} ? 2 : 0;\n"
            + lanes
            + f"{ind}  if (ymode[s]) continue;  /* read where it lies, below */\n"
            f"{ind}}}\n"
        )
        if x_in:  # the call with X packed at bind time (`pre_x`)
            plain = f"{micro}(kc, pa, pb, ldb, ct, {n_}, pc == 0);"
            assert call_full.count(plain) == 1, call_full
            call_full = call_full.replace(plain, by_runs(mr, "pa", "ct", plain))
        else:
            call_full = by_runs(mr, "pa", "ct", call_full)
        prog.record(
            op,
            "implicit columns",
            f"input rows read in place, stride {b_step}",
            "a stride-1 (or, with 64-byte vectors, stride-2) convolution's full column slivers "
            "lying in one run or two of the input's rows are read there by the micro-kernel "
            "instead of being packed (the same values in the same lanes)",
        )
    cols_edge = ""
    # An edge tile of full rows reads A's packed sliver with vectors along its rows: A packed
    # per call, or read in place but packed at bind time (`pre_x`).
    packed_a = "" if not x_in else " && pre_x" if bindable["x"] is not None else None
    kernels = {}
    if packed_a is not None and mr % (vb // dtype.itemsize) == 0 and n_ % nr:
        kernels = {
            j: column_kernel(prog, dtype, mr, vb, j, "contract" in op.attrs)
            for j in EDGE_COLUMNS
            if j < nr
        }
    if kernels:
        steps = "\n".join(
            f"                    {'if' if i == 0 else 'else if'} (nr - jj >= {j}) {{ "
            f"{kernels[j]}(kc, pa, pb + jj, ldb, ct + jj, {n_}, pc == 0); jj += {j}; }}"
            for i, j in enumerate(kernels)
        )
        cols_edge = (
            f"                }} else if (mr == {mr}{packed_a}) {{"
            " /* an edge of columns: vectors along the rows */\n"
            "                  for (int64_t jj = 0; jj < nr;) {\n"
            f"{steps}\n"
            "                  }\n"
        )
        prog.record(
            op,
            "edge columns",
            "column kernels",
            "an edge tile of full rows and fewer than NR columns runs with vectors along the "
            "rows (the same steps per element, in the same order)",
        )
    rows_edge = ""
    # Rows split evenly between threads where X is packed on every call and whole slivers
    # would give two threads unequal shares (`BALANCED_ROWS`): each thread's last sliver may
    # be partial, so the two threads' remainders get exact kernels.
    half = (m_ + mr - 1) // mr // 2 * mr
    balanced = (
        BALANCED_ROWS
        and op.attrs["split"] == "rows"
        and not x_in
        and bindable["x"] is None
        and max(half, m_ - half) > (m_ + 1) // 2
    )
    shares = (m_ // 2, m_ - m_ // 2) if balanced else (m_,)
    exact = tuple(sorted({h % mr for h in shares}, reverse=True)) if EDGE_ROWS_EXACT else ()
    row_kernels = {
        r: micro_kernel(
            prog, dtype, r, nr * dtype.itemsize // vb, vb, False, "contract" in op.attrs, mr
        )
        for r in (*exact, *EDGE_ROWS)
        if 0 < r < mr and any(h % mr for h in shares)
    }
    if row_kernels:
        steps = "\n".join(
            f"                    {'if' if i == 0 else 'else if'} (mr - ii >= {r}) {{ "
            + by_runs(
                r,
                "pa + ii",
                f"ct + ii * {n_}",
                f"{row_kernels[r]}(kc, pa + ii, pb, ldb, ct + ii * {n_}, {n_}, pc == 0);",
            )
            + f" ii += {r}; }}"
            for i, r in enumerate(row_kernels)
        )
        rows_edge = (
            f"                }} else if (nr == {nr}) {{ /* an edge of rows: its rows only */\n"
            "                  for (int64_t ii = 0; ii < mr;) {\n"
            f"{steps}\n"
            "                  }\n"
        )
        prog.record(
            op,
            "edge rows",
            "row micro-kernels",
            "an edge tile of fewer than MR rows and all NR columns runs only its rows (the "
            "same steps per element, in the same order)",
        )
    # The thread split the kernel's `split` gives (gdv.ir.products.split says what each means).
    split = op.attrs["split"]
    if balanced:
        row_split = (
            f"        i_lo = tid * INT64_C({m_}) / nt;\n"
            f"        i_hi = (tid + 1) * INT64_C({m_}) / nt;"
        )
        prog.record(
            op,
            "balanced rows",
            "threads' rows",
            "threads given rows share them evenly, each thread's last sliver partial where "
            "needed (X is packed on every call; the same steps per element)",
        )
    else:
        row_split = (
            f"        i_lo = tid * msl / nt * {mr};\n"
            f"        i_hi = (tid + 1) * msl / nt * {mr};\n"
            f"        if (i_hi > {m_}) i_hi = {m_};"
        )
    parallel = int(split != "none")
    by_columns = "nsl >= nt" if split != "rows" else "nsl >= nt && msl < nt"
    return (
        f"""{{
{note}  int nthreads = 1;
#ifdef _OPENMP
  nthreads = omp_get_max_threads();
#endif
{alloc}  for (int64_t b = 0; b < {nb}; b++) {{
    int64_t q = b;
{batch}    (void)q;
    {t} *restrict c = {c_at};
    /* Each thread computes its own rectangle of the output with its own packed buffers: no
       barrier, no output element shared. The columns are split when there are enough column
       slivers for every thread (and X has no costly prologue), else the rows. */
#pragma omp parallel if ({parallel})
    {{
      int64_t nt = 1, tid = 0;
#ifdef _OPENMP
      nt = omp_get_num_threads();
      tid = omp_get_thread_num();
#endif
      {t} *restrict ap = apall + tid * {ap_elems};
      {t} *restrict bp = bpall + tid * {bp_elems};
{y_state}      const int64_t nsl = ({n_} + {nr - 1}) / {nr}, msl = ({m_} + {mr - 1}) / {mr};
      int64_t i_lo = 0, i_hi = {m_}, j_lo = 0, j_hi = {n_};
      if ({by_columns}) {{
        j_lo = tid * nsl / nt * {nr};
        j_hi = (tid + 1) * nsl / nt * {nr};
        if (j_hi > {n_}) j_hi = {n_};
      }} else {{
{row_split}
      }}
      for (int64_t jc = j_lo; jc < j_hi; jc += {nc_max}) {{
        const int64_t nc = j_hi - jc < {nc_max} ? j_hi - jc : {nc_max};
        const int64_t ns = (nc + {nr - 1}) / {nr};
        for (int64_t pc = 0; pc < {k_}; pc += {kc_max}) {{
          const int64_t kc = {k_} - pc < {kc_max} ? {k_} - pc : {kc_max};
          /* Pack Y: sliver s holds columns jc + s*NR.. for reduce positions pc..pc+kc-1. */
{y_guard}          for (int64_t s = 0; s < ns; s++) {{
            {t} *restrict dst = bp + s * kc * {nr};
            const int64_t j0 = jc + s * {nr};
            const int64_t nr = jc + nc - j0 < {nr} ? jc + nc - j0 : {nr};
{skip_full}{y_modes}{pack_y}{zero_y}          }}
          for (int64_t i0 = i_lo; i0 < i_hi; i0 += {mc_top}) {{
            const int64_t mcur = i_hi - i0 < {mc_top} ? i_hi - i0 : {mc_top};
            const int64_t nis = (mcur + {mr - 1}) / {mr};
            /* Pack X: row slivers of MR rows. */
{x_guard}            for (int64_t is = 0; is < nis; is++) {{
              {t} *restrict dst = ap + is * kc * {mr};
              const int64_t r0 = i0 + is * {mr};
              const int64_t mr = i0 + mcur - r0 < {mr} ? i0 + mcur - r0 : {mr};
{skip_full_x}{pack_x}              for (int64_t ii = mr; ii < {mr}; ii++)
                for (int64_t kk = 0; kk < kc; kk++) dst[kk * {mr} + ii] = 0;
            }}
            for (int64_t is = 0; is < nis; is++) {{
              const int64_t ia = i0 + is * {mr};
              const int64_t mr = i0 + mcur - ia < {mr} ? i0 + mcur - ia : {mr};
              for (int64_t js = 0; js < ns; js++) {{
                const int64_t ja = jc + js * {nr};
                const int64_t nr = jc + nc - ja < {nr} ? jc + nc - ja : {nr};
                {t} *ct = c + ia * {n_} + ja;
                const {t} *pa = {pa_expr};
                const {t} *pb = bp + js * kc * {nr};
                int64_t ldb = {nr};
{in_place_b}{pre_b}                if (mr == {mr} && nr == {nr}) {{
                  {call_full}
{cols_edge}{rows_edge}                }} else {{ /* an edge tile: through a full-size tile */
                  {t} tile[{mr * nr}] __attribute__((aligned(64)));
                  if (pc != 0)
                    for (int64_t ii = 0; ii < mr; ii++)
                      for (int64_t jj = 0; jj < nr; jj++) tile[ii * {nr} + jj] = ct[ii * {n_} + jj];
                  {call_tile}
                  for (int64_t ii = 0; ii < mr; ii++)
                    for (int64_t jj = 0; jj < nr; jj++) ct[ii * {n_} + jj] = tile[ii * {nr} + jj];
                }}
              }}
{epilogue}            }}
          }}
        }}
      }}
    }}
{scatter}  }}
  {free}
  return 0;
}}
""",
        pre_slots,
    )


def _run_split(table: str, step: int, ext: str, ind: str) -> str:
    """C finding how the `ext` columns of a sliver from j0 lie along a column table: `cut`,
    the length of the first run (entries one `step` apart from the first), and `two`, whether
    the entries from cut on are one more such run."""
    return (
        f"{ind}int64_t cut = 1;\n"
        f"{ind}while (cut < {ext} && {table}[j0 + cut] == {table}[j0] + "
        f"INT64_C({step}) * cut) cut++;\n"
        f"{ind}int two = 1;\n"
        f"{ind}for (int64_t jj = cut + 1; jj < {ext}; jj++) two = two && "
        f"{table}[j0 + jj] == {table}[j0 + cut] + INT64_C({step}) * (jj - cut);\n"
    )


def _implicit_columns(
    op: Op,
    con: Contraction,
    operand_types: list[TensorType],
    pidx: dict[str, int],
    coefs: list[tuple[list[int], int]],
    gj: _Group,
    tables: dict[str, str],
    nr: int,
    vb: int,
) -> tuple[int, str, str, int] | None:
    """(operand, its column table, its reduce table, step) when, with vectors of at least
    IMPLICIT_MIN_BYTES, Y is an operand of the product's dtype read unchanged through two
    index tables, one step along the innermost column dim moving `step` elements: 1, a
    stride-1 convolution's input, or 2 (a stride-2 one's) with vectors of
    IMPLICIT_STRIDE2_BYTES; its full column slivers `IMPLICIT_COLUMNS` reads in place. Else
    None."""
    dtype = op.type.dtype
    k = pidx.get(con.right)
    if (
        not IMPLICIT_COLUMNS
        or k is None
        or dtype not in (DType.F32, DType.F64)
        or operand_types[k].dtype != dtype
        or vb < IMPLICIT_MIN_BYTES
        or vb // dtype.itemsize < 2
        or nr % (vb // dtype.itemsize)
    ):
        return None
    table, ktable = f"t{k}j", f"t{k}k"
    if table not in tables or ktable not in tables:
        return None
    live = [(coefs[k][0][d], z) for d, z in zip(gj.dims, gj.sizes, strict=True) if z != 1]
    step = live[-1][0] if live else 0
    if step == 1 or (step == 2 and vb == IMPLICIT_STRIDE2_BYTES):
        return k, table, ktable, step
    return None


MASKED_RUNS = True
"""A product whose column factor is an operand with a `fill` of +0.0 (`fold-pads`: a
convolution's unpadded input) reads its full column slivers in place as `IMPLICIT_COLUMNS`
does, the micro-kernel masking the lanes outside the operand to +0.0 at each reduce step
(`micro_kernel`'s `b_masked`, `_tap_masks`), when the operand lives in the planned arena and
the slivers' loads reach at most `emit.ARENA_MARGIN` bytes outside it (f32, one batch
position, few taps); else it packs them, each read guarded."""

MASKED_MAX_TAPS = 64
MASKED_MAX_BYTES = 64 << 10
"""At most this many taps (`_Taps`) and this many bytes of a thread's sliver masks."""


@dataclass
class _Taps:
    """How the masked runs of filled column operand `k` find their lanes' masks. `dims`: the
    operand's dims whose index the maps can take outside it; `red`: the positions (in
    `reduce`) of the reduce dims that move those indices; a tap is one value of those reduce
    dims, and `parts[t]` holds, per dim of `dims`, what tap t adds to its index (the map's
    constant included)."""

    k: int
    dims: list[int]
    extents: list[int]
    """The operand's extents along `dims`."""
    red: list[int]
    parts: list[list[int]]

    def steps(self, prog: Program, red_sizes: list[int]) -> str:
        """C declaring, before the threads start, `ztap` (each reduce position's tap: an index
        table, `Program.index_table`) and `zpart` (the parts, tap by tap)."""
        n = math.prod(red_sizes)
        lines = [f"  for (int64_t v = 0; v < INT64_C({n}); v++) {{", "    int64_t q = v, tap = 0;"]
        radix = 1
        for pos in reversed(range(len(red_sizes))):
            z = red_sizes[pos]
            lines.append(f"    {{ const int64_t u = q % INT64_C({z}); q /= INT64_C({z});")
            if pos in self.red:
                lines.append(f"      tap += INT64_C({radix}) * u;")
                radix *= z
            lines.append("    }")
        lines += ["    ztap[v] = (int32_t)tap;", "  }"]
        table = prog.index_table(n, "\n".join(lines), "ztap", "int32_t")
        flat = [str(v) for part in self.parts for v in part]
        return (
            f"  const int32_t *const ztap = {table};\n"
            f"  static const int64_t zpart[{len(flat)}] = {{{', '.join(flat)}}};\n"
        )

    def sliver_masks(
        self, op: Op, gj: _Group, tables: dict[str, str], nr: int, vl: int, ind: str
    ) -> str:
        """C filling `ymask[s]` for the sliver from column j0 (once per column block, at its
        first reduce block): per tap, all ones in the lanes whose read lies inside the
        operand, a vector of lanes at a time. A sliver with a lane outside at some tap takes
        the masked micro-kernels (`ymasked[s]` = 2 is added to its mode), the others the
        plain ones (their reads all lie inside the operand)."""
        rows = op.attrs["maps"][self.k]
        nd = len(self.dims)
        lines = [
            "if (ymode[s] && pc == 0) {",
            "  gdv_zv inside = ~(gdv_zv){0};",
            f"  for (int64_t v = 0; v < {nr // vl}; v++) {{",
        ]
        for z, d in enumerate(self.dims):
            at = gj.offset(rows[d][:-1], f"t{self.k}d{d}j", tables)[0]
            lines += [
                f"    gdv_zv l{z};",
                f"    for (int64_t q = 0; q < {vl}; q++) {{",
                f"      const int64_t j = j0 + v * {vl} + q;",
                f"      l{z}[q] = (int32_t)({at});",
                "    }",
            ]
        conds = " & ".join(
            f"(gdv_zv)((gdv_zn)(l{z} + (int32_t)zpart[t * {nd} + {z}]) < "
            f"(gdv_zn){{{', '.join([str(self.extents[z])] * vl)}}})"
            for z in range(nd)
        )
        lines += [
            f"    for (int64_t t = 0; t < {len(self.parts)}; t++) {{",
            f"      const gdv_zv m = {conds};",
            f"      *(gdv_zv *)&ymask[s][t * {nr} + v * {vl}] = m;",
            "      inside &= m;",
            "    }",
            "  }",
            "  int32_t all = -1;",
            f"  for (int64_t q = 0; q < {vl}; q++) all &= inside[q];",
            "  ymasked[s] = all ? 0 : 2;  /* a lane reads outside: masked */",
            "}",
            "if (ymode[s]) ymode[s] += ymasked[s];",
        ]
        return "".join(f"{ind}{line}\n" for line in lines)


def _tap_masks(
    prog: Program,
    op: Op,
    operand_types: list[TensorType],
    coefs: list[tuple[list[int], int]],
    implicit: tuple[int, str, str, int],
    fills: dict[int, int | float],
    nb: int,
    nr: int,
    width: int,
) -> _Taps | None:
    """How the masked runs read the filled column operand (`implicit`'s), or None when they
    cannot (`MASKED_RUNS`)."""
    ky, _, _, step = implicit
    t = operand_types[ky]
    fill = float(fills[ky])
    if (
        not MASKED_RUNS
        or nb != 1
        or t.dtype is not DType.F32
        or fill != 0.0
        or math.copysign(1.0, fill) < 0
        or op.operands[ky] not in prog.arena_of
    ):
        return None
    space = list(op.attrs["space"])
    coef, const = coefs[ky]
    lo, hi = affine_range([*coef, const], space)
    reach = max(0, -lo, hi - (t.num_elements - 1)) + 2 * nr * step
    if reach * t.dtype.itemsize > ARENA_MARGIN:
        return None
    rows = op.attrs["maps"][ky]
    dims = leaving_dims(rows, space, t.shape)
    if any(max(abs(v) for v in affine_range(rows[d], space)) >= 1 << 30 for d in dims):
        return None  # the lanes' indices are int32
    red_dims = list(op.attrs["reduce"])
    red = [p for p, r in enumerate(red_dims) if any(rows[d][r] for d in dims)]
    sizes = [space[red_dims[p]] for p in red]
    taps = math.prod(sizes)
    if taps > MASKED_MAX_TAPS or taps * nr * width * 4 > MASKED_MAX_BYTES:
        return None
    parts = []
    for tap in range(taps):
        u, q = {}, tap
        for p, z in reversed(list(zip(red, sizes, strict=True))):
            u[p], q = q % z, q // z
        parts.append([rows[d][-1] + sum(rows[d][red_dims[p]] * u[p] for p in red) for d in dims])
    return _Taps(ky, dims, [t.shape[d] for d in dims], red, parts)


def _epilogue(
    prog: Program,
    op: Op,
    coefs: list[tuple[list[int], int]],
    gi: _Group,
    gj: _Group,
    tables: dict[str, str],
    sizes: tuple[int, int, int],
    guards: dict[int, tuple[str, str]],
) -> str:
    """C applying the kernel's `epilogue` (IR_SPEC.md) to a finished row panel: after the last
    reduce block of a row sliver's tiles across the column block (MR rows by up to NC
    columns, just written: in L2), each of its outputs becomes E(its fold, the operands at its
    index with the reduce dims at 0); empty without an epilogue. One long loop per row runs
    in whole vectors: applied tile by tile (16 x 16), the loop overhead cost more than the
    epilogue (EPILOGUE_PANELS)."""
    name = op.attrs.get("epilogue")
    if name is None:
        return ""
    epi = prog.module.function(name)
    if epi is None:
        raise prog.error(op, f"its epilogue @{name} is not in the module")
    m_, n_, k_ = sizes
    need = _closure(epi, epi.returns[0])
    offsets = {}
    for k, q in enumerate(epi.params[1:]):
        if q.name in need:
            oi = gi.offset(coefs[k][0], f"t{k}i", tables)[0]
            oj = gj.offset(coefs[k][0], f"t{k}j", tables)[0]
            offsets[k] = f"o{k} + {oi} + {oj}"
    mr, nr = (int(v) for v in op.attrs["micro"])

    def tile(rows: str, cols: str, ind: str) -> list[str]:
        """The epilogue over `rows` x `cols` outputs at ct (rows a constant for a full row
        sliver)."""
        lines = [
            f"{ind}for (int64_t ii = 0; ii < {rows}; ii++) {{",
            f"{ind}  const int64_t i = ia + ii;",
            "#pragma omp simd",
            f"{ind}  for (int64_t jj = 0; jj < {cols}; jj++) {{",
            f"{ind}    const int64_t j = ja + jj;",
        ]
        acc = (f"ct[ii * {n_} + jj]", op.type.dtype)
        expr = eval_value(
            prog, epi, epi.returns[0], offsets, lines, ind + "    ", {0: acc}, 1, guards
        )
        lines += [f"{ind}    ct[ii * {n_} + jj] = {expr};", f"{ind}  }}", f"{ind}}}"]
        return lines

    ind = " " * 14
    t = CTYPE[op.type.dtype]
    lines = [
        f"{ind}if (pc + kc == {k_}) {{  /* the row panel is final: its epilogue */",
        f"{ind}  {t} *ct = c + ia * {n_} + jc;",
        f"{ind}  const int64_t ja = jc;",
        f"{ind}  if (mr == {mr}) {{",
        *tile(str(mr), "nc", ind + "    "),
        f"{ind}  }} else {{",
        *tile("mr", "nc", ind + "    "),
        f"{ind}  }}",
        f"{ind}}}",
    ]
    prog.record(
        op,
        "epilogue per row panel",
        [name],
        "the epilogue runs on each finished row sliver of a column block (MR x NC outputs, "
        "in cache), one loop per row",
    )
    return "".join(line + "\n" for line in lines)


def zero_x_all(mr: int) -> str:
    """C zeroing the rows of an X sliver past its `mr` rows (the edge sliver)."""
    return (
        f"    for (int64_t ii = mr; ii < {mr}; ii++)\n"
        f"      for (int64_t kk = 0; kk < kc; kk++) dst[kk * {mr} + ii] = 0;\n"
    )


def _bindable(prog: Program, op: Op, offsets: dict[int, str], nb: int) -> list[str] | None:
    """The entry parameters a factor reads when it reads nothing else (and the product has
    one batch position): it can be packed once when they are bound. None otherwise."""
    if nb != 1 or not offsets:
        return None
    params = [prog.param_of(op.operands[k]) for k in sorted(offsets)]
    if any(p is None for p in params):
        return None
    return sorted(set(params))  # type: ignore[arg-type]


def _round64(elems: int, size: int) -> int:
    """`elems` rounded up so that the buffer is a whole number of 64-byte lines."""
    per = 64 // size
    return max(per, -(-elems // per) * per)


_costly = products.costly


def _pack(
    prog: Program,
    body: Function,
    value: str,
    offsets: dict[int, str],
    ind: str,
    side: tuple[str, str, str, str],
    k_inner: bool,
    store: str,
    simd: bool = False,
    guards: dict[int, tuple[str, str]] | None = None,
) -> str:
    """C loops over a sliver storing the factor `value`: `side` = (counter, extent, index
    variable, index expression) of its rows or columns, the reduce positions kk < kc at
    k = pc + kk; k innermost when `k_inner`. `simd`: the inner loop in vector lanes (its
    reads are adjacent). `guards`: the filled operands' (condition, fill) (`eval_value`)."""
    first, second = (side, ("kk", "kc", "k", "pc + kk"))
    if not k_inner:
        first, second = second, first
    # A prologue with a transcendental (GELU's tanh) is worth vector lanes even though the
    # stores into the sliver are strided; a plain copy is not.
    costly = _costly(body, value)
    lines = [
        f"{ind}for (int64_t {first[0]} = 0; {first[0]} < {first[1]}; {first[0]}++) {{",
        f"{ind}  const int64_t {first[2]} = {first[3]};",
        *(["#pragma omp simd"] if costly or simd else []),
        f"{ind}  for (int64_t {second[0]} = 0; {second[0]} < {second[1]}; {second[0]}++) {{",
        f"{ind}    const int64_t {second[2]} = {second[3]};",
    ]
    expr = eval_value(prog, body, value, offsets, lines, ind + "    ", guards=guards)
    lines += [f"{ind}    {store} = {expr};", f"{ind}  }}", f"{ind}}}"]
    return "".join(line + "\n" for line in lines)


def eval_value(
    prog: Program,
    body: Function,
    value: str,
    offsets: dict[int, str],
    lines: list[str],
    ind: str,
    given: dict[int, tuple[str, DType]] | None = None,
    first: int = 0,
    guards: dict[int, tuple[str, str]] | None = None,
) -> str:
    """C lines computing the body value `value` (its operands read at `offsets[k]`); the C
    expression of its value. `given`: parameters (by position) whose value is a C expression
    instead (an epilogue's folded value); `first`: the position of the parameter that reads
    operand 0 (an epilogue's parameters after the folded value). `guards`: per operand with a
    `fill`, (C condition that its read lies inside it, the fill as a C literal): the read is
    made only where the condition holds, the fill taken elsewhere."""
    need = _closure(body, value)
    env: dict[str, tuple[str, DType]] = {}
    for k, p in enumerate(body.params):
        if p.name not in need:
            continue
        if given and k in given:
            expr, dt = given[k]
            lines.append(f"{ind}const {CTYPE[dt]} g{k} = {expr};")
            env[p.name] = (f"g{k}", dt)
        else:
            a = k - first
            read = f"a{a}[{offsets[a]}]"
            if guards and a in guards:
                cond, fill = guards[a]
                read = f"({cond}) ? {read} : {fill}"
            lines.append(f"{ind}const {CTYPE[p.type.dtype]} x{a} = {read};")
            env[p.name] = (f"x{a}", p.type.dtype)
    for s, b in enumerate(body.ops):
        if b.result not in need:
            continue
        bind_scalar(prog, b, env, lines, ind, f"s{s}")
    return env[value][0]
