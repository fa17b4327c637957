"""C for conv2d (NCHW input, OIHW weights, cross-correlation), as the reference computes it:
the input is padded with +0.0 (0 for integers) and every padded position takes part as
0.0 * w; per output element the products, each rounded to the dtype, are folded left from the
first over c (within the output channel's group), then kh, then kw. An empty window gives 0.
The products and sums are the elementwise family's `scalar` code, so f16/bf16 values (bit
patterns) are multiplied and added in double and rounded once per step, as the reference does.

This is the plain loop nest of a conv2d that stays an op: at -O0, or an f32/f64 conv that is
not depthwise and has fewer than `lower_to_kernels.CONV_MIN_MACS` multiply-adds. At -O1/-O2
`lower-to-kernels` turns every other conv2d into a `pad` and a contraction kernel (IR order
kept): one group, or groups of several output channels (written channels-last and copied
back), run as products chosen by `select-products`; depthwise, integer and 16-bit ones as the
nest printer's vector-lane reduction. The printer decides nothing about them.

A depthwise conv2d that stays an op (its padded plane small enough: `NEST_MAX_PLANE_BYTES`)
is folded here in one of four ways, each keeping every output's left fold in IR order (so
the same bits; the choice is recorded as a printer choice): f32 with whole vectors of
channels and a small plane, a block of channels in vector lanes, channels-last
(`_channel_blocks`); else a plane at a time from a padded copy (`_plane`); else, f32 at stride
2 with 64-byte vectors, rows in blocks of 16 lanes (`_strided_vectors`); else the window's
inside and border apart (`_direct`)."""

from __future__ import annotations

from gdv.backends.c.elementwise import scalar
from gdv.backends.c.emit import Program, comment, ctype, value_literal
from gdv.backends.c.matmul import eval_value
from gdv.backends.c.nest import strided_helpers
from gdv.backends.c.registry import lowering
from gdv.backends.c.simd import vector_bytes
from gdv.ir.core import Op
from gdv.ir.dtypes import DType
from gdv.ir.ops import REGISTRY as OPS
from gdv.ir.types import TensorType

DIRECT_MAX_TAPS = 64
"""A conv2d op with at most this many taps per output (Cg * KH * KW: a depthwise 3x3 or 5x5
has 9 or 25) folds each output's taps in registers, unrolled, in IR order: the outputs whose
whole window lies inside the input run as one `omp simd` loop of straight-line code, the rest
(the border) tap by tap with the padding's +0.0 (`_direct`). Longer windows keep the row
sweep below, one tap at a time over a row of outputs."""

PLANE_MAX_BYTES = 64 << 10
"""A conv2d op with one input channel per group (depthwise) and stride 1 or 2 on both axes
whose padded input plane takes at most this many bytes copies each plane, padded with +0.0,
into a buffer on the stack (at stride 2, four phase buffers of every other row and column) and
folds every output of the plane in one `omp simd` loop over the buffer's positions with
contiguous loads (`_plane`): no border code, no remainder loop per row, no strided reads."""

PHASE_MAX_KW = 3
PHASE_MIN_WIDTH = 16
"""A stride-2 depthwise conv2d op with windows at most PHASE_MAX_KW wide and rows of at least
PHASE_MIN_WIDTH outputs folds strided rows (`_strided_vectors`, else `_direct`); the others
fold from phase buffers (`_plane`). Measured before `_strided_vectors`: one core, Zen 4, the
C alone, best of 200 (2026-12-05), direct -> phases: 3x3 over 96x112 0.222 -> 0.269 ms and
144x56 0.080 -> 0.086 (kept direct); 3x3 over 192x28 0.053 -> 0.031, 576x14 0.038 -> 0.032;
5x5 over 144x56 0.340 -> 0.141, 672x14 0.194 -> 0.117 (efficientnet_b0's)."""

STRIDED_VECTORS = True
STRIDED_MAX_BLOCKS = 8
"""With 64-byte vectors, an f32 depthwise conv2d op at stride 2 that `_plane` leaves to
`_direct` (PHASE_MAX_KW) folds each row of outputs in blocks of 16 in vector lanes instead
(`_strided_vectors`, up to STRIDED_MAX_BLOCKS blocks a row): a tap's 16 inputs are the even
elements of two 16-element loads (one two-source shuffle), loads that would reach outside the
input row are masked loads whose lanes there read nothing and hold the padding's +0.0, and a
row's last, partial block is a masked store. So the border and the remainder columns are vector
code too. The same products and sums in the same order: the same bits. Its epilogue (relu6)
runs on each block as it is stored (`EPILOGUE_IN_STORES`). Measured on the 2-core Zen 4 host
(-O3, bound, one thread, both builds in one process, interleaved, medians of 150 calls,
2026-12-06): mobilenet_v2 7.675 -> 7.574 ms with the epilogue over each plane, 7.495 in the
stores; its 3x3/2 convs over 96x112 0.276 -> 0.202 and 144x56 0.095 -> 0.078; efficientnet_b0
12.085 -> 12.019 (over 96x112 0.238 -> 0.174); mobilenet_v2 at two threads 4.264 -> 4.232."""

ROWS_MIN_WIDTH = 48
"""`_plane` folds a row of outputs at a time straight into the result when rows have at least
this many outputs (three 16-lane vectors), else every buffer position in one loop and copies
the rows out. One core, Zen 4, the C alone, best of 200 (2026-12-05), one loop -> rows: 3x3
over 144x56 0.193 -> 0.160 ms and 32x56 0.051 -> 0.037; over 192x28 0.066 -> 0.096 and 5x5
over 240x28 0.247 -> 0.409 (kept one loop)."""

VECTOR_FOLD_BYTES = 64
VECTOR_FOLD_UNALIGNED_BYTES = 32
VECTOR_FOLD_MAX_UNROLL = 7
VECTOR_FOLD_MIN_TAPS = 16
"""With 64-byte vectors (AVX-512), an f32 plane of a window of at least VECTOR_FOLD_MIN_TAPS
taps whose rows are shorter than ROWS_MIN_WIDTH folds in GCC vector types (`_vector_fold`):
each iteration computes up to VECTOR_FOLD_MAX_UNROLL vectors of 16 outputs side by side, and a
tap's 16 inputs at q + at come from the two aligned vectors around them by one two-source
shuffle (valignd) instead of a load that splits across cache lines; the loads are shared by
the taps of a window row. The same products and sums in the same order: the same bits. One
core, Zen 4, the C alone, best of 300 (2026-12-05), 5x5 over 240x28 (efficientnet_b0's), the
whole op: 0.225 ms as the `omp simd` loop, 0.210 in vector types one vector an iteration,
0.161 four, 0.152 seven; with the unroll capped at seven and the loads per window row, 5x5
over 1152x7 0.142 -> 0.099, over 672x14 at stride 2 0.121 -> 0.078, over 144x56 at stride 2
0.149 -> 0.152; 3x3 ones within 5% either way (384x14 0.029 -> 0.031, 576x14 at stride 2
0.045 -> 0.039), so they keep the `omp simd` loop.

With VECTOR_FOLD_UNALIGNED_BYTES (AVX2's 32-byte vectors) the fold is the same but each tap's
8 inputs come from one unaligned load (an AVX2 two-source shuffle across 128-bit lanes is two
instructions on one port). Measured on efficientnet_b0 with `GDV_C_ISA=avx2` (-O3, bound, one
thread, `gdv profile`'s timers, interleaved, medians of 30, the Zen 4 host, 2026-12-05): the
whole model 14.70 -> 14.00 ms; its 5x5 convs over 672x14 0.252 -> 0.172, over 480x14 0.179 ->
0.123, over 1152x7 0.159 -> 0.093, over 672x14 at stride 2 0.111 -> 0.066, over 240x28 0.248 ->
0.228. On AVX-512 unaligned loads were not better than the shuffles as a whole (672x14 0.154
-> 0.159, 480x14 0.110 -> 0.112, 1152x7 0.101 -> 0.105; 240x28 0.153 -> 0.137), and 3x3
windows on AVX2 stayed within noise (mobilenet_v2 8.655 -> 8.636 ms with the threshold at 9
taps), so both keep their choice."""

_VECTOR, _LANE_MASK = "gdv_pf", "gdv_pm"
"""The C vector types `_vector_fold` declares: f32 lanes, and int32 lanes for shuffle masks."""

PARALLEL_MIN_MACS = 1 << 16
"""A conv2d op with at least this many multiply-adds runs its (batch, output channel) pairs on
OpenMP threads (each output still folded by one thread, in order)."""

CHANNEL_BLOCK_BYTES = (32, 64)
CHANNEL_BLOCK_MAX_BYTES = 80 << 10
CHANNEL_BLOCK_MAX_ROW = {64: 8, 32: 4}
"""An f32 depthwise conv2d op (one input and one output channel per group) whose channels are a
whole number of vectors (16 lanes with AVX-512, 8 with AVX2: CHANNEL_BLOCK_BYTES) and whose
padded plane and output, a vector per position, take at most CHANNEL_BLOCK_MAX_BYTES folds a
block of `lanes` channels at a time channels-last (`_channel_blocks`): the block's planes are
transposed into a zero-bordered buffer of one vector per padded position (its weights into a
vector per tap), each output vector folds its taps in IR order, a multiply and an add per tap
as the scalar code does (each lane is one channel's output, its own left fold: the same bits),
up to CHANNEL_BLOCK_MAX_ROW outputs of a row side by side, and the output vectors are
transposed back into the channels' planes. Every tap is a whole aligned vector load at any
stride or dilation; a plane fold (`_plane`) uses as few as 61% of its lanes on a 7x7 plane
and shifts each tap's vector into place. One core, Zen 4, the C alone against `_plane`'s,
bit-equal, medians of 400 (2026-12-05), AVX-512 then AVX2 (`-march=haswell`, 8 lanes): 5x5
over 1152x7x7 0.100 -> 0.046 ms and 0.090 -> 0.052; 5x5 over 672x14x14 0.153 -> 0.092 and
0.166 -> 0.116; at stride 2 0.068 -> 0.041 and 0.064 -> 0.046; 5x5 over 240x28x28 0.152 ->
0.122 and 0.214 -> 0.157; 3x3 over 960x7x7 0.040 -> 0.020 and 0.039 -> 0.020; 3x3 at stride 2
over 576x14x14 0.037 -> 0.020 and 0.035 -> 0.025; 3x3 over 480x14x14 0.036 -> 0.035 and 0.040
-> 0.037; 3x3 over 192x28x28 0.058 -> 0.052 and 0.066 -> 0.065. Larger planes gained little
(3x3 over 144x56x56 0.162 -> 0.154, 32x112x112 0.161 -> 0.149) or lost (96x112x112 at stride
2, 0.226 -> 0.232) and keep the plane fold. CHANNEL_BLOCK_MAX_ROW: 7 outputs side by side
against 1, 5x5 over 672x14x14, 0.107 -> 0.092 ms; 4 of 7 columns (then 3) was slower than 1
over 7x7 (0.052 -> 0.067), so a row splits into equal runs of at most this many."""

_CB_VECTOR, _CB_MASK = "gdv_cv", "gdv_cm"
"""The C vector types `_channel_blocks` declares: f32 lanes, and int32 lanes for shuffles."""


@lowering(OPS["conv2d"])
def _conv2d(prog: Program, op: Op) -> None:
    types = prog.entry.types()
    xt, wt = (types[o] for o in op.operands[:2])
    dtype = op.type.dtype
    t = ctype(dtype, op, prog.module)
    if dtype.is_bool:
        raise prog.error(op, "conv2d of i1 values has no C lowering")
    n, c, h, wd = xt.shape
    o, cg, kh, kw = wt.shape
    og = o // op.attrs["groups"]
    (pt, _), (pl, _) = op.attrs["padding"]
    sh, sw = op.attrs["stride"]
    dh, dw = op.attrs["dilation"]
    _, _, oh, ow = op.type.shape
    scalar_t = TensorType(dtype, ())
    mul = scalar(prog, Op("p", "mul", ["a", "b"], {}, scalar_t), ["xv", "wv"], [dtype, dtype])
    add = scalar(prog, Op("s", "add", ["a", "b"], {}, scalar_t), ["acc", "p"], [dtype, dtype])
    zero = value_literal(0, dtype)
    taps = cg * kh * kw
    name = prog.new_function()
    macs = n * o * oh * ow * cg * kh * kw
    par = n * o > 1 and macs >= PARALLEL_MIN_MACS
    if par:
        prog.record(op, "parallel", "batch and output channels", "the conv2d op's nest")
    pragma = "#pragma omp parallel for collapse(2) schedule(static)\n" if par else ""
    # The first tap writes each output; an empty window (a dim of 0 in the weights) gives 0.
    fill = (
        "" if cg * kh * kw else f"        for (int64_t ox = 0; ox < {ow}; ox++) row[ox] = {zero};\n"
    )

    def _lanes(lo: str, hi: str, xv: str) -> str:
        return f"""#pragma omp simd
              for (int64_t ox = {lo}; ox < {hi}; ox++) {{
                const {t} xv = {xv};
                const {t} p = {mul};
                const {t} acc = row[ox];
                row[ox] = first ? p : {add};
              }}"""

    epi = _Epilogue(prog, op, t) if "epilogue" in op.attrs else None
    body = None
    if 0 < taps <= DIRECT_MAX_TAPS and (mul, add) == ("((xv) * (wv))", "((acc) + (p))"):
        # f32's own * and + (the vector code writes them): blocks of channels in vector lanes
        body = _channel_blocks(name, op, t, par, xt.shape, wt.shape, epi)
        if body:
            prog.record(
                op,
                "channel blocks",
                f"{vector_bytes() // 4} channels a vector, channels-last",
                "the conv2d op",
            )
    if body is None and 0 < taps <= DIRECT_MAX_TAPS:
        body = _plane(name, op, t, pragma, mul, add, xt.shape, wt.shape, dtype.itemsize, epi)
        how = "each padded plane one loop"
        if body is None and (mul, add) == ("((xv) * (wv))", "((acc) + (p))"):
            body = _strided_vectors(prog, name, op, pragma, xt.shape, wt.shape, epi)
            how = "rows in blocks of 16 lanes, even elements of two loads a tap"
        if body is None:
            how = "the window's inside and border apart"
        prog.record(op, "direct taps", f"{taps} taps unrolled per output, {how}", "the conv2d op")
        body = body or _direct(name, op, t, pragma, mul, add, zero, xt.shape, wt.shape, epi)
    # Else a row of outputs at a time: each output's products are folded left over (c, kh, kw)
    # in order, as in the reference; the row's outputs are independent lanes of one loop.
    if body is None:
        body = f"""/* conv2d %{comment(op.result)}: a row of {ow} outputs folded at a time */
static void {name}(const {t} *restrict x, const {t} *restrict w, {t} *restrict r)
{{
{pragma}  for (int64_t in = 0; in < {n}; in++)
    for (int64_t io = 0; io < {o}; io++) {{
      for (int64_t oy = 0; oy < {oh}; oy++) {{
        {t} *restrict row = r + ((in * {o} + io) * {oh} + oy) * {ow};
{fill}        int64_t tap = 0;
        for (int64_t ci = 0; ci < {cg}; ci++)
          for (int64_t i = 0; i < {kh}; i++)
            for (int64_t j = 0; j < {kw}; j++, tap++) {{
              const int64_t y = oy * {sh} + i * {dh} - {pt};
              const int64_t cx = (io / {max(1, og)}) * {cg} + ci;
              const int ry = y >= 0 && y < {h};
              const {t} *restrict xr = x + ((in * {c} + cx) * {h} + (ry ? y : 0)) * {wd};
              const {t} wv = w[((io * {cg} + ci) * {kh} + i) * {kw} + j];
              const int first = tap == 0;
              /* outputs [lo, hi) read inside the input row; the others read the padding */
              const int64_t off = j * {dw} - {pl};
              int64_t lo = off >= 0 ? 0 : (-off + {sw - 1}) / {sw};
              int64_t hi = {wd - 1} - off >= 0 ? ({wd - 1} - off) / {sw} + 1 : 0;
              if (!ry || hi > {ow}) hi = ry ? {ow} : 0;
              if (lo > hi) lo = hi;
{_lanes("0", "lo", zero)}
{_lanes("lo", "hi", f"xr[ox * {sw} + off]")}
{_lanes("hi", str(ow), zero)}
            }}
      }}
{epi.plane() if epi else ""}    }}
}}
"""
    if "epilogue" in op.attrs:
        extras = "".join(
            f"const {ctype(types[v].dtype, op, prog.module)} *restrict e{k}, "
            for k, v in enumerate(op.operands[2:])
        )
        signature = f" *restrict w, {t} *restrict r)"
        assert body.count(signature) == 1, "one conv2d function"
        body = body.replace(signature, f" *restrict w, {extras}{t} *restrict r)")
        assert epi is not None
        prog.record(op, "epilogue", epi.stores, "the conv2d op's epilogue, on each output")
    prog.functions.append(body)
    prog.new_slot(op.result, op.type)
    args = ", ".join([prog.var(v) for v in op.operands] + [prog.var(op.result)])
    prog.body.append(f"  {name}({args});  /* %{comment(op.result)} */")


EPILOGUE_IN_STORES = {
    "direct": False,
    "rows": True,
    "buffer": True,
    "blocks": True,
    "strided": True,
}
"""Where a conv2d op's epilogue (`fuse-conv-epilogues`) runs, per way of folding: as each
output is stored (the plane fold's rows and buffer), on a channel block's output vectors before
they are transposed back (`blocks`), or else over each plane once folded (`direct`: the
strided fold; the plane fold in vector types; the row nest). Measured on mobilenet_v2 (relu6
after every depthwise conv; the 2-core Zen 4 host, one thread, -O3, interleaved, medians of
30, 2026-12-06), the whole model and its first four depthwise convs (ms): these choices 7.451
(0.187, 0.270, 0.170, 0.094); every conv per plane 7.659 (0.230, 0.274, 0.217, 0.094); the
strided fold's stores too 7.970 (0.188, 0.606, 0.168, 0.248). Without the epilogues the four
convs took 0.188, 0.236, 0.162 and 0.081 ms."""


class _Epilogue:
    """C applying a conv2d op's epilogue E to its outputs: out = E(acc, e_k[o]...), e_k[0] for
    a scalar operand, the operands after the weight passed as `e0, e1, ...`."""

    def __init__(self, prog: Program, op: Op, t: str) -> None:
        fn = prog.module.function(op.attrs["epilogue"])
        if fn is None:
            raise prog.error(op, f"conv2d epilogue @{op.attrs['epilogue']} is not in the module")
        self.prog, self.fn, self.t = prog, fn, t
        self.dtype = op.type.dtype
        types = prog.entry.types()
        self.scalar = [not types[v].shape for v in op.operands[2:]]
        self.dtypes = [types[v].dtype for v in op.operands[2:]]
        _, self.o, oh, ow = op.type.shape
        self.plane_size = oh * ow
        self.stores = "per plane"

    def code(self, acc: str, channel: str, ind: str) -> tuple[list[str], str]:
        """C lines computing E of `acc` for output channel `channel`; E's value."""
        given = {0: (acc, self.dtype)}
        for k, (one, dt) in enumerate(zip(self.scalar, self.dtypes, strict=True)):
            given[k + 1] = (f"e{k}[{'0' if one else channel}]", dt)
        lines: list[str] = []
        value = eval_value(self.prog, self.fn, self.fn.returns[0], {}, lines, ind, given=given)
        return lines, value

    def store(self, target: str, acc: str, ind: str) -> str:
        """`target = E(acc)` for output channel io, in a block of its own."""
        self.stores = "as each output is stored"
        lines, value = self.code(acc, "io", ind + "  ")
        return (
            f"{ind}{{\n"
            + "".join(f"{line}\n" for line in lines)
            + f"{ind}  {target} = {value};\n{ind}}}\n"
        )

    def lanes(self, lanes: int, positions: int) -> list[str]:
        """E over a channel block's output buffer `out` (one vector of `lanes` channels c0 ..
        per position) before it is transposed back: one loop of whole vectors per position."""
        self.stores = "on the block's output vectors"
        lines, value = self.code(f"oe[p * {lanes} + l]", "c0 + l", " " * 10)
        return [
            f"      {{ /* the epilogue @{comment(self.fn.name)} */",
            f"        {self.t} *restrict oe = ({self.t} *)out;",
            f"        for (int64_t p = 0; p < {positions}; p++) {{",
            "#pragma omp simd",
            f"          for (int64_t l = 0; l < {lanes}; l++) {{",
            *(f"  {line}" for line in lines),
            f"            oe[p * {lanes} + l] = {value};",
            "          }",
            "        }",
            "      }",
        ]

    def plane(self) -> str:
        """E over plane (in, io) of the result once it is folded (the plane is in cache)."""
        lines, value = self.code("pe[q]", "io", " " * 10)
        size = self.plane_size
        return (
            f"      {{ /* the epilogue @{comment(self.fn.name)} */\n"
            f"        {self.t} *restrict pe = r + (in * {self.o} + io) * {size};\n"
            "#pragma omp simd\n"
            f"        for (int64_t q = 0; q < {size}; q++) {{\n"
            + "".join(f"{line}\n" for line in lines)
            + f"          pe[q] = {value};\n        }}\n      }}\n"
        )


def _strided_vectors(
    prog: Program,
    name: str,
    op: Op,
    pragma: str,
    xshape: tuple[int, ...],
    wshape: tuple[int, ...],
    epi: _Epilogue | None = None,
) -> str | None:
    """C for an f32 depthwise conv2d at stride 2 with 64-byte vectors (`STRIDED_VECTORS`), or
    None where it does not apply. Per (batch, channel) and output row, the KH input row
    pointers (a row outside the input reads row 0 and its values are replaced by the padding's
    +0.0), then each block of 16 outputs ox0 .. ox0 + 15 folds its taps unrolled in IR order
    (kh, then kw): tap (i, j) of output ox0 + l reads input column 2 (ox0 + l) + j - PL, which
    is element 2 l of the 32 elements from column a = 2 ox0 + j - PL: lane l of the two-source
    shuffle of the 16 at a and the 16 at a + 16 keeping the even elements. A load reaching
    outside [0, W) is `gdv_loadz16` with the lanes inside set (a constant), the others +0.0,
    the padding's value. Every output is acc = p_0, acc = acc + p_t in tap order, p_t the f32
    product of its input and weight: the reference's steps."""
    n, c, h, wd = xshape
    o, cg, kh, kw = wshape
    (pt, _), (pl, _) = op.attrs["padding"]
    _, _, oh, ow = op.type.shape
    lanes = 16
    blocks = -(-ow // lanes)
    if not STRIDED_VECTORS or vector_bytes() != 64 or op.type.dtype is not DType.F32:
        return None
    if tuple(op.attrs["stride"]) != (2, 2) or tuple(op.attrs["dilation"]) != (1, 1):
        return None
    if cg != 1 or o != c or not 0 < blocks <= STRIDED_MAX_BLOCKS or n * o * oh == 0:
        return None
    strided_helpers(prog)

    def mask(at: int) -> int:
        return sum(1 << j for j in range(lanes) if 0 <= at + j < wd)

    def load(row: str, at: int) -> str:
        m = mask(at)
        if m == (1 << lanes) - 1:
            return f"*(const gdv_su16 *)({row} + {at})"
        return f"gdv_loadz16({row}, {at}, 0x{m:04x}u)"

    even = ", ".join(str(2 * j) for j in range(lanes))
    lines = [
        f"/* conv2d %{comment(op.result)}: {kh * kw} taps unrolled per output,",
        "   rows in blocks of 16 lanes, each tap the even elements of two loads */",
        f"static void {name}(const float *restrict x, const float *restrict w, float *restrict r)",
        "{",
        f"  const gdv_si16 even = {{{even}}};",
        "  const gdv_sv16 zero = {0};",
        f"{pragma}  for (int64_t in = 0; in < {n}; in++)",
        f"    for (int64_t io = 0; io < {o}; io++) {{",
        f"      const float *restrict xc = x + (in * {c} + io) * {h * wd};",
        f"      float *restrict rc = r + (in * {o} + io) * {oh * ow};",
        *(f"      const float w{k} = w[io * {kh * kw} + {k}];" for k in range(kh * kw)),
        f"      for (int64_t oy = 0; oy < {oh}; oy++) {{",
    ]
    for i in range(kh):
        lines += [
            f"        const int64_t y{i} = oy * 2 + {i - pt};",
            f"        const int v{i} = y{i} >= 0 && y{i} < {h};",
            f"        const float *restrict x{i} = xc + (v{i} ? y{i} : 0) * {wd};",
        ]
    for b in range(blocks):
        ox0 = b * lanes
        lines += ["        {", "          gdv_sv16 acc;"]
        for i in range(kh):
            for j in range(kw):
                tap = i * kw + j
                at = 2 * ox0 + j - pl
                pair = f"__builtin_shuffle({load(f'x{i}', at)}, {load(f'x{i}', at + lanes)}, even)"
                lines += [
                    f"          {{ const gdv_sv16 e = v{i} ? {pair} : zero;",
                    f"            const gdv_sv16 p = e * w{tap};",
                    f"            acc = {'p' if tap == 0 else 'acc + p'}; }}",
                ]
        left = min(lanes, ow - ox0)
        at_out = f"rc + oy * {ow} + {ox0}"
        if epi is not None and EPILOGUE_IN_STORES["strided"]:
            epi.stores = "as each output is stored"
            code, value = epi.code("tile[l]", "io", " " * 12)
            lines += [
                "          float tile[16] __attribute__((aligned(64)));",
                "          *(gdv_sv16 *)tile = acc;",
                "#pragma omp simd",
                f"          for (int64_t l = 0; l < {left}; l++) {{",
                *code,
                f"            ({at_out})[l] = {value};",
                "          }",
            ]
        elif left == lanes:
            lines.append(f"          *(gdv_su16 *)({at_out}) = acc;")
        else:
            lines.append(f"          gdv_storem16({at_out}, acc, 0x{(1 << left) - 1:04x}u);")
        lines.append("        }")
    plane = epi is not None and not EPILOGUE_IN_STORES["strided"]
    lines += ["      }", (epi.plane().rstrip("\n") if plane else ""), "    }", "}", ""]
    return "\n".join(line for line in lines if line)


def _direct(
    name: str,
    op: Op,
    t: str,
    pragma: str,
    mul: str,
    add: str,
    zero: str,
    xshape: tuple[int, ...],
    wshape: tuple[int, ...],
    epi: _Epilogue | None = None,
) -> str:
    """C for a conv2d with few taps per output: per output row, the taps' weights in scalars
    and one input row pointer per (c, kh); the outputs whose every tap reads inside the input
    (rows whose KH input rows all exist, columns [LO, HI)) fold their taps unrolled in one
    `omp simd` loop, the others tap by tap with the padding's zero. Every output folds its
    products left from the first over (c, kh, kw), as the reference does."""
    n, c, h, wd = xshape
    o, cg, kh, kw = wshape
    og = o // op.attrs["groups"]
    (pt, _), (pl, _) = op.attrs["padding"]
    sh, sw = op.attrs["stride"]
    dh, dw = op.attrs["dilation"]
    _, _, oh, ow = op.type.shape
    # Columns whose every tap reads inside the row: ox sw - pl >= 0 and
    # ox sw + (kw - 1) dw - pl <= wd - 1.
    lo_col = min(ow, -(-pl // sw))
    last = wd - 1 - (kw - 1) * dw + pl
    hi_col = max(lo_col, min(ow, last // sw + 1)) if last >= 0 else lo_col
    taps = [(ci, i, j) for ci in range(cg) for i in range(kh) for j in range(kw)]
    lines = []
    for k in range(kh):
        lines.append(f"        const int64_t y{k} = oy * {sh} + {k * dh} - {pt};")
        lines.append(f"        const int v{k} = y{k} >= 0 && y{k} < {h};")
    for ci in range(cg):
        for k in range(kh):
            lines.append(
                f"        const {t} *restrict x{ci}_{k} = x + ((in * {c} + cb + {ci}) * {h}"
                f" + (v{k} ? y{k} : 0)) * {wd};"
            )
    for q in range(len(taps)):
        lines.append(f"        const {t} w{q} = wp[{q}];")
    inner = " && ".join(f"v{k}" for k in range(kh))
    lines.append(f"        const int inner = {inner};")
    lines.append(
        f"        const int64_t lo = inner ? {lo_col} : {ow}, hi = inner ? {hi_col} : {ow};"
    )
    setup = "\n".join(lines)

    def fold(read) -> str:
        out = []
        for q, (ci, i, j) in enumerate(taps):
            out.append(
                f"            {{ const {t} xv = {read(ci, i, j)}; const {t} wv = w{q};"
                f" const {t} p = {mul};" + (" acc = p; }" if q == 0 else f" acc = {add}; }}")
            )
        return "\n".join(out)

    def inside(ci: int, i: int, j: int) -> str:
        return f"x{ci}_{i}[ox * {sw} + {j * dw - pl}]"

    def guarded(ci: int, i: int, j: int) -> str:
        col = f"ox * {sw} + {j * dw - pl}"
        return f"(v{i} && {col} >= 0 && {col} < {wd}) ? x{ci}_{i}[{col}] : {zero}"

    border = fold(guarded)
    stored = epi is not None and EPILOGUE_IN_STORES["direct"]
    put = epi.store("row[ox]", "acc", "          ") if stored else "          row[ox] = acc;\n"
    tail = epi.plane() if epi is not None and not stored else ""
    return f"""/* conv2d %{comment(op.result)}: {len(taps)} taps unrolled per output, the window's
   inside and its border apart */
static void {name}(const {t} *restrict x, const {t} *restrict w, {t} *restrict r)
{{
{pragma}  for (int64_t in = 0; in < {n}; in++)
    for (int64_t io = 0; io < {o}; io++) {{
      for (int64_t oy = 0; oy < {oh}; oy++) {{
        {t} *restrict row = r + ((in * {o} + io) * {oh} + oy) * {ow};
        const {t} *restrict wp = w + io * {len(taps)};
        const int64_t cb = (io / {max(1, og)}) * {cg};
{setup}
        for (int64_t ox = 0; ox < lo; ox++) {{
          {t} acc;
{border}
{put}        }}
#pragma omp simd
        for (int64_t ox = lo; ox < hi; ox++) {{
          {t} acc;
{fold(inside)}
{put}        }}
        for (int64_t ox = hi; ox < {ow}; ox++) {{
          {t} acc;
{border}
{put}        }}
      }}
{tail}    }}
}}
"""


def _vector_fold(
    taps: list[tuple[int, int]],
    width: int,
    lanes: int,
    unroll: int,
    padded: int,
    shuffle: bool = True,
) -> str:
    """The fold of `_plane` in GCC vector types, for f32: the loop over q runs `unroll`
    vectors of `lanes` outputs an iteration, and tap k of output q reads pb[phase][q + at].
    With `shuffle` (64-byte vectors), tap k's vector for outputs q..q+15 is the aligned vector
    at q + 16 (at / 16) shifted by at % 16 lanes into the next one (`__builtin_shuffle` of the
    two: one valignd), or that aligned vector itself when at % 16 is 0; each aligned vector is
    loaded once a window row (`width` taps), just before the first tap that needs it. Without
    (32-byte vectors), it is one unaligned load at pb[phase] + q + at. Every output folds its
    products left over the taps in IR order, as the `omp simd` loop does (no contraction:
    -ffp-contract=off)."""
    vt, mt = _VECTOR, _LANE_MASK
    lines = [
        f"      typedef float {vt} __attribute__((vector_size({lanes * 4})));",
        f"      typedef int32_t {mt} __attribute__((vector_size({lanes * 4})));"
        if shuffle
        else f"      typedef float {vt}u __attribute__((vector_size({lanes * 4}), aligned(4)));",
        f"      for (int64_t q = 0; q < {padded}; q += {unroll * lanes}) {{",
        "        " + " ".join(f"{vt} acc{u};" for u in range(unroll)),
    ]
    loaded: set[tuple[int, int]] = set()
    for k, (phase, at) in enumerate(taps):
        if not shuffle:  # one unaligned load a vector
            xs = [f"*(const {vt}u *)(pb[{phase}] + q + {u * lanes + at})" for u in range(unroll)]
        else:
            if k % width == 0:
                loaded.clear()  # a window row's loads die with it: fewer live registers
            xs = _shifted(lines, loaded, k // width, phase, at, lanes, unroll)
        for u, x in enumerate(xs):
            fold = f"{x} * w{k}" if k == 0 else f"acc{u} + {x} * w{k}"
            lines.append(f"        acc{u} = {fold};")
    lines += [f"        *({vt} *)(out + q + {u * lanes}) = acc{u};" for u in range(unroll)]
    lines.append("      }")
    return "\n".join(lines)


def _shifted(
    lines: list[str],
    loaded: set[tuple[int, int]],
    row: int,
    phase: int,
    at: int,
    lanes: int,
    unroll: int,
) -> list[str]:
    """`_vector_fold`'s vectors (one per unrolled output vector) of the tap at `at` in phase
    buffer `phase`: the aligned vectors around it, loaded into `lines` unless this window
    `row` has `loaded` them, and shifted by at % lanes lanes (`__builtin_shuffle`)."""
    block, shift = divmod(at, lanes)
    for b in (block, block + 1) if shift else (block,):
        if (phase, b) not in loaded:
            loaded.add((phase, b))
            lines += [
                f"        const {_VECTOR} v{u}_{row}_{phase}_{b} ="
                f" *(const {_VECTOR} *)(pb[{phase}] + q + {u * lanes + b * lanes});"
                for u in range(unroll)
            ]
    xs = [f"v{u}_{row}_{phase}_{block}" for u in range(unroll)]
    if shift:
        mask = ", ".join(str(shift + lane) for lane in range(lanes))
        xs = [
            f"__builtin_shuffle({x}, v{u}_{row}_{phase}_{block + 1}, ({_LANE_MASK}){{{mask}}})"
            for u, x in enumerate(xs)
        ]
    return xs


def _plane(
    name: str,
    op: Op,
    t: str,
    pragma: str,
    mul: str,
    add: str,
    xshape: tuple[int, ...],
    wshape: tuple[int, ...],
    itemsize: int,
    epi: _Epilogue | None = None,
) -> str | None:
    """C for a conv2d with one input channel per group (depthwise) and one stride s (1 or 2)
    on both axes, or None where it does not apply: per (batch, output channel), the padded
    input plane (PH x PW, the padding's +0.0 in place) is copied into s x s zeroed phase
    buffers of PHs x PWs = ceil(PH / s) x ceil(PW / s), phase (a, b) holding padded position
    (s yy + a, s xx + b) at (yy, xx). Output (oy, ox)'s tap (i, j) reads padded position
    (s oy + i dh, s ox + j dw): phase ((i dh) % s, (j dw) % s) at q + ((i dh) / s) PWs +
    (j dw) / s with q = oy PWs + ox. So one `omp simd` loop over q in [0, (OH - 1) PWs + OW)
    folds every output with contiguous loads, its taps unrolled in IR order (positions with
    ox >= OW are computed and dropped); the rows are then copied out. A stride-2 conv's rows
    would otherwise be short gathers (efficientnet's 5x5/2 over 7 to 28 columns)."""
    n, c, h, wd = xshape
    o, cg, kh, kw = wshape
    sh, sw = op.attrs["stride"]
    _, _, oh, ow = op.type.shape
    if cg != 1 or sh != sw or sh not in (1, 2):
        return None
    if sh == 2 and kw <= PHASE_MAX_KW and ow >= PHASE_MIN_WIDTH:
        return None  # `_direct`'s strided rows are as fast here (PHASE_MAX_KW)
    s = sh
    (pt, pb), (pl, pr) = op.attrs["padding"]
    dh, dw = op.attrs["dilation"]
    ph, pw = h + pt + pb, wd + pl + pr
    phs, pws = -(-ph // s), -(-pw // s)
    span = (oh - 1) * pws + ow
    if oh < 1 or ow < 1 or max(s * s * phs * pws, span) * itemsize > PLANE_MAX_BYTES:
        return None
    og = o // op.attrs["groups"]
    # The flattened loop runs to a whole number of vectors (`padded`): the positions past the
    # span read the zeroed tail of the buffers and are dropped like those with ox >= OW. Left
    # at the span, GCC finished each plane with a scalar loop: 9 of a 7x7 plane's 73 positions
    # (efficientnet's 1152-channel 5x5 convs, the C alone on one AVX-512 core: 0.130 ms, 0.119
    # with whole vectors).
    lanes = max(1, vector_bytes() // itemsize)
    reach = ((kh - 1) * dh // s) * pws + (kw - 1) * dw // s  # the farthest tap's offset
    taps = [
        (((i * dh) % s) * s + (j * dw) % s, ((i * dh) // s) * pws + (j * dw) // s)
        for i in range(kh)
        for j in range(kw)
    ]  # (phase buffer, offset from q) of each tap, in IR order
    vector = (
        vector_bytes() in (VECTOR_FOLD_BYTES, VECTOR_FOLD_UNALIGNED_BYTES)
        and kh * kw >= VECTOR_FOLD_MIN_TAPS
        and ow < ROWS_MIN_WIDTH
        and t == "float"
        # the vector code writes f32's own * and +: only where the scalar code is just that
        and (mul, add) == ("((xv) * (wv))", "((acc) + (p))")
    )
    if vector:
        count = -(-span // lanes)  # vectors of outputs
        iterations = -(-count // VECTOR_FOLD_MAX_UNROLL)
        unroll = -(-count // iterations)
        padded = iterations * unroll * lanes
        # the last iteration's farthest aligned load ends before padded + reach + lanes
        plane = -(-max(phs * pws, padded + reach + lanes) // lanes) * lanes
        if s * s * plane * itemsize > PLANE_MAX_BYTES:
            vector = False
    if not vector:
        padded = -(-span // lanes) * lanes
        plane = max(phs * pws, padded + reach if ow < ROWS_MIN_WIDTH else 0)
    lines = []
    for q, (phase, at) in enumerate(taps):
        lines.append(
            f"          {{ const {t} xv = pb[{phase}][q + {at}]; const {t} wv = w{q};"
            f" const {t} p = {mul};" + (" acc = p; }" if q == 0 else f" acc = {add}; }}")
        )
    weights = "\n".join(f"      const {t} w{q} = wp[{q}];" for q in range(kh * kw))
    fold = "\n".join(lines)
    if s == 1:
        fill = (
            f"      for (int64_t y = 0; y < {h}; y++)\n"
            f"        memcpy(pb[0] + (y + {pt}) * {pws} + {pl}, xc + y * {wd},"
            f" {wd} * sizeof({t}));"
        )
    else:  # input (y, x) is padded (y + pt, x + pl): phase ((y + pt) % 2, (x + pl) % 2)
        rows = [
            f"      for (int64_t y = 0; y < {h}; y++) {{",
            f"        const {t} *restrict xr = xc + y * {wd};",
            f"        const int64_t a = (y + {pt}) % 2, yy = (y + {pt}) / 2;",
        ]
        for b in range(2):
            x0 = (b - pl) % 2  # the first input column of phase b: (x0 + pl) % 2 == b
            count = max(0, -(-(wd - x0) // 2))
            rows.append(
                f"        for (int64_t xx = 0; xx < {count}; xx++)"
                f" pb[a * 2 + {b}][yy * {pws} + {(x0 + pl) // 2} + xx] = xr[{x0} + 2 * xx];"
            )
        fill = "\n".join([*rows, "      }"])
    how = "padded in a buffer" if s == 1 else "split into 2 x 2 phase buffers"
    rc = f"      {t} *restrict rc = r + (in * {o} + io) * {oh * ow};"
    if ow >= ROWS_MIN_WIDTH:  # each row of outputs straight into the result (never vector)
        how += ", a row of outputs at a time"
        scratch = ""
        loop = (
            f"{rc}\n      for (int64_t oy = 0; oy < {oh}; oy++) {{\n#pragma omp simd\n"
            f"        for (int64_t ox = 0; ox < {ow}; ox++) {{\n"
            f"          const int64_t q = oy * {pws} + ox;\n          {t} acc;\n{fold}\n"
            + (
                epi.store(f"rc[oy * {ow} + ox]", "acc", " " * 10)
                if epi and EPILOGUE_IN_STORES["rows"]
                else f"          rc[oy * {ow} + ox] = acc;\n"
            )
            + "        }\n      }"
        )
    else:  # every position of the buffer into `out`, the rows copied out
        scratch = f"      {t} out[{padded}] __attribute__((aligned(64)));\n"
        if vector:
            how += f", in {lanes}-lane vectors, {unroll} an iteration"
            shuffle = vector_bytes() == VECTOR_FOLD_BYTES
            loop = _vector_fold(taps, kw, lanes, unroll, padded, shuffle)
        else:
            loop = (
                f"#pragma omp simd\n      for (int64_t q = 0; q < {padded}; q++) {{\n"
                f"        {t} acc;\n{fold}\n"
                + (
                    epi.store("out[q]", "acc", " " * 8)
                    if epi and EPILOGUE_IN_STORES["buffer"]
                    else "        out[q] = acc;\n"
                )
                + "      }"
            )
        loop += (
            f"\n{rc}\n      for (int64_t oy = 0; oy < {oh}; oy++)\n"
            f"        memcpy(rc + oy * {ow}, out + oy * {pws}, {ow} * sizeof({t}));"
        )
    # E as each output is stored, else (vector types) over the plane once it is copied out.
    tail = epi.plane() if epi and epi.stores == "per plane" else ""
    return f"""/* conv2d %{comment(op.result)}: {kh * kw} taps unrolled per output,
   each plane {how} and folded as one loop over its positions */
static void {name}(const {t} *restrict x, const {t} *restrict w, {t} *restrict r)
{{
{pragma}  for (int64_t in = 0; in < {n}; in++)
    for (int64_t io = 0; io < {o}; io++) {{
      {t} pb[{s * s}][{plane}] __attribute__((aligned(64)));
{scratch}      const {t} *restrict xc = x + (in * {c} + io / {max(1, og)}) * {h * wd};
      const {t} *restrict wp = w + io * {kh * kw};
      memset(pb, 0, sizeof pb);
{fill}
{weights}
{loop}
{tail}    }}
}}
"""


def _transpose(lanes: int, ind: str) -> list[str]:
    """C statements (indented `ind`) transposing the array `m` of `lanes` vectors of `lanes`
    floats in place (m[i][j] becomes m[j][i]): one stage per halving of a block size b, each
    swapping the off-diagonal b x b blocks of every 2b x 2b block by two-source shuffles."""
    vt, mt = _CB_VECTOR, _CB_MASK
    lines = []
    b = lanes // 2
    while b >= 1:
        lo = ", ".join(str(j if j & b == 0 else lanes + j - b) for j in range(lanes))
        hi = ", ".join(str(j + b if j & b == 0 else lanes + j) for j in range(lanes))
        lines += [
            f"{ind}for (int i = 0; i < {lanes}; i++)",
            f"{ind}  if (!(i & {b})) {{",
            f"{ind}    const {vt} a = m[i], c = m[i + {b}];",
            f"{ind}    m[i] = __builtin_shuffle(a, c, ({mt}){{{lo}}});",
            f"{ind}    m[i + {b}] = __builtin_shuffle(a, c, ({mt}){{{hi}}});",
            f"{ind}  }}",
        ]
        b //= 2
    return lines


def _channel_blocks(
    name: str,
    op: Op,
    t: str,
    par: bool,
    xshape: tuple[int, ...],
    wshape: tuple[int, ...],
    epi: _Epilogue | None = None,
) -> str | None:
    """C for an f32 depthwise conv2d folded `lanes` channels at a time (CHANNEL_BLOCK_BYTES),
    or None where it does not apply. Per (batch, block of channels): the block's weights are
    transposed into one vector per tap, its planes into a buffer of one vector per padded
    position (the border zeroed once per thread: +0.0, as the reference pads), whole groups of
    `lanes` positions by in-register transposes and the rest lane by lane. Output (oy, ox)'s
    tap (i, j) is the vector at padded position (oy sh + i dh, ox sw + j dw); each output
    vector folds its products left over the taps in IR order (tap 0's product, then + each
    next one; -ffp-contract=off: no fused multiply-add), up to CHANNEL_BLOCK_MAX_ROW outputs of
    a row side by side, and the output vectors are transposed back into the planes."""
    vb = vector_bytes()
    n, c, h, wd = xshape
    o, cg, kh, kw = wshape
    _, _, oh, ow = op.type.shape
    lanes = vb // 4
    if t != "float" or vb not in CHANNEL_BLOCK_BYTES or cg != 1 or o != c or c % lanes:
        return None
    sh, sw = op.attrs["stride"]
    dh, dw = op.attrs["dilation"]
    (pt, pb), (pl, pr) = op.attrs["padding"]
    ph, pw = h + pt + pb, wd + pl + pr
    if oh < 1 or ow < 1 or (ph * pw + oh * ow) * vb > CHANNEL_BLOCK_MAX_BYTES:
        return None
    vt, mt = _CB_VECTOR, _CB_MASK
    kk, hw, ohw, blocks = kh * kw, h * wd, oh * ow, c // lanes
    runs = -(-ow // CHANNEL_BLOCK_MAX_ROW[vb])  # a row in `runs` runs of at most `row` outputs
    row = -(-ow // runs)

    def fold(count: int, ox: str) -> list[str]:
        """`count` outputs of row oy side by side from column `ox`, taps in IR order."""
        lines = [f"          const {vt} *restrict q = pb + oy * {sh * pw} + ({ox}) * {sw};"]
        for k, (i, j) in enumerate((i, j) for i in range(kh) for j in range(kw)):
            for u in range(count):
                at = i * dh * pw + j * dw + u * sw
                lines.append(
                    f"          {vt} a{u} = q[{at}] * wv[{k}];"
                    if k == 0
                    else f"          a{u} = a{u} + q[{at}] * wv[{k}];"
                )
        for u in range(count):
            lines.append(f"          out[oy * {ow} + ({ox}) + {u}] = a{u};")
        return lines

    def whole(count: int, load: str, store: list[str]) -> list[str]:
        """Groups t0.. of `lanes` taps or positions below `count`: `lanes` vectors m[v] =
        `load`, transposed in place, then `store` per i (m[i] holds item t0 + i's lanes)."""
        if not count:
            return []
        return [
            f"      for (int64_t t0 = 0; t0 < {count}; t0 += {lanes}) {{",
            f"        {vt} m[{lanes}];",
            f"        for (int v = 0; v < {lanes}; v++) m[v] = {load};",
            *_transpose(lanes, "        "),
            f"        for (int i = 0; i < {lanes}; i++) {{",
            *(f"          {line}" for line in store),
            "        }",
            "      }",
        ]

    def rest(lo: int, hi: int, step: str) -> list[str]:
        """Items p in [lo, hi) lane by lane (`step` per lane v)."""
        if lo == hi:
            return []
        return [
            f"      for (int64_t v = 0; v < {lanes}; v++)",
            f"        for (int64_t p = {lo}; p < {hi}; p++) {step}",
        ]

    fold_rows = [f"      for (int64_t oy = 0; oy < {oh}; oy++) {{"]
    if ow // row:
        fold_rows += [f"        for (int64_t ox = 0; ox < {ow // row * row}; ox += {row}) {{"]
        fold_rows += [*fold(row, "ox"), "        }"]
    if ow % row:
        fold_rows += ["        {", *fold(ow % row, str(ow // row * row)), "        }"]
    fold_rows.append("      }")
    whole_taps, whole_in, whole_out = kk - kk % lanes, hw - hw % lanes, ohw - ohw % lanes
    padded_at = f"(p / {wd} + {pt}) * {pw} + p % {wd} + {pl}"
    lines = [
        f"/* conv2d %{comment(op.result)}: {kk} taps unrolled per output,"
        f" {lanes} channels a vector:",
        "   each block of channels transposed into a padded buffer of one vector per position,",
        "   folded and transposed back */",
        f"static void {name}(const float *restrict x, const float *restrict w, float *restrict r)",
        "{",
        f"  typedef float {vt} __attribute__((vector_size({vb})));",
        f"  typedef float {vt}u __attribute__((vector_size({vb}), aligned(4)));",
        f"  typedef int32_t {mt} __attribute__((vector_size({vb})));",
        "#pragma omp parallel" if par else "",
        "  {",
        f"    {vt} pb[{ph * pw}] __attribute__((aligned(64)));",
        f"    {vt} out[{ohw}] __attribute__((aligned(64)));",
        f"    {vt} wv[{kk}] __attribute__((aligned(64)));",
        "    memset(pb, 0, sizeof pb);  /* the border stays +0.0: only the inside is written */",
        "#pragma omp for schedule(static)" if par else "",
        f"    for (int64_t blk = 0; blk < {n * blocks}; blk++) {{",
        f"      const int64_t in = blk / {blocks}, c0 = blk % {blocks} * {lanes};",
        f"      const float *restrict xc = x + (in * {c} + c0) * {hw};",
        f"      const float *restrict wc = w + c0 * {kk};",
        f"      float *restrict rc = r + (in * {c} + c0) * {ohw};",
        # float views of the buffers, for the items left over from whole groups of lanes
        "      float *restrict wf = (float *)wv;" if whole_taps < kk else "",
        "      float *restrict pf = (float *)pb;" if whole_in < hw else "",
        "      const float *restrict of = (const float *)out;" if whole_out < ohw else "",
        *whole(whole_taps, f"*(const {vt}u *)(wc + v * {kk} + t0)", ["wv[t0 + i] = m[i];"]),
        *rest(whole_taps, kk, f"wf[p * {lanes} + v] = wc[v * {kk} + p];"),
        *whole(
            whole_in,
            f"*(const {vt}u *)(xc + v * {hw} + t0)",
            ["const int64_t p = t0 + i;", f"pb[{padded_at}] = m[i];"],
        ),
        *rest(whole_in, hw, f"pf[({padded_at}) * {lanes} + v] = xc[v * {hw} + p];"),
        *fold_rows,
        *(epi.lanes(lanes, ohw) if epi and EPILOGUE_IN_STORES["blocks"] else []),
        *whole(whole_out, "out[t0 + v]", [f"*({vt}u *)(rc + i * {ohw} + t0) = m[i];"]),
        *rest(whole_out, ohw, f"rc[v * {ohw} + p] = of[p * {lanes} + v];"),
        *(
            [f"      for (int64_t io = c0; io < c0 + {lanes}; io++)", epi.plane().rstrip("\n")]
            if epi and not EPILOGUE_IN_STORES["blocks"]
            else []
        ),
        "    }",
        "  }",
        "}",
        "",
    ]
    return "\n".join(line for line in lines if line)
