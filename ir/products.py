"""Which `kernel`s are matrix products, and the sizes a packed product is blocked with.

A kernel is a product when its combiner is `add` over at least one reduce dim, its dtype is f32
or f64, it has one accumulator, and its body returns `mul(X, Y)` where the sub-body X reads
only operands indexed by the "row" out dims I (and batch and reduce dims) and Y only operands
indexed by the "column" out dims J (and batch and reduce dims); out dims that feed both are
batch dims B. Then

    result[b, i, j] = fold_add over k in row-major order of `reduce` of X(b, i, k) * Y(b, j, k)

`find` gives the roles (`Product`); `holds` checks roles recorded on a kernel against its body.
The `select-products` pass (passes/select_products.py) records them as the kernel's schedule
attributes, with the micro-tile, cache blocks and thread split of `micro_tile`, `blocking` and
`split`, computed by an analytical model from the numbers of the target's capability
descriptor (vector width and registers, add latency x pipes, cache sizes) or taken from a
measured `Tuned` choice (`gdv tune`); the C printer follows the attributes and builds no
product of its own (a conv2d is one once `lower-to-kernels` has made it a `pad` and a
contraction kernel; its leading image dim may then run as a batch dim, see `find`). The C
target's capability descriptor reports the same sizes for its host (backends/c/simd.py).

None of this changes a result: the roles only say which factor is packed by rows and which by
columns; every output still folds its products in the order of `reduce`.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

from gdv.ir.core import Function
from gdv.ir.dtypes import DType
from gdv.ir.ops.elementwise import TRANSCENDENTAL
from gdv.ir.ops.kernel import BODY_OPS, SPLITS

FLOATS = (DType.F32, DType.F64)
"""The dtypes a product runs in (the micro-kernel's vectors)."""

PARALLEL_MIN_MACS = 1 << 17
"""Products with fewer multiply-adds than this run on one thread."""

DEFAULT_CACHES = (32 << 10, 1 << 20)
"""(L1 data, L2) bytes per core assumed when no descriptor gives them."""

SPLIT_WEIGHT_MIN_L2 = 0.25
"""A product whose factor is a model's weight of at least this fraction of L2 splits that
factor between threads (`split`). resnet18's four 28x28 convs (128 output channels, weights of
288 and 576 KiB), whose columns were split before, at two threads on the 2-core Zen 4 host
(-O3, bound, both builds in one process, 300 interleaved calls each, medians, 2026-12-06):
the whole model 18.94 -> 18.79 ms, the 576 KiB convs 1.08-1.09 -> 1.05 ms each; in a slow
stretch (both builds 23-24 ms, as in `benchmarks/two_threads.py`'s far rounds) 23.92 -> 22.88,
and 1.39-1.43 -> 1.08-1.11 ms each. A tenth of L2 (layer 1's 144 KiB weights split too) made
the model slower again (18.89 against 18.72 ms)."""

SPLIT_X_PACK_RATIO = 2
"""Where neither a costly prologue nor a model's large weight decides, the rows are split
when M is at least N / this, unless the row factor X reads a model's weight (`split`). Each
thread packs the whole factor it does not split, and X's packing (MR-row slivers, k-major:
every row read along k and scattered MR floats apart) costs more per element than Y's (runs of
NR contiguous floats copied by vectors). Measured on the 2-core Zen 4 host, two threads, -O2,
both factors packed on every call (each build alone in its process, medians of a second of
calls, alternating, 2026-12-06): 1024^3 under AVX-512 15.78, 15.33 ms with the columns split
against 11.05, 11.22 with the rows (AVX2: 13.69, 13.75 against 11.78, 11.68) while the probe of
`benchmarks/two_threads.py` said the vCPUs were far (40.7 against 15.8 us); 10.9-11.5 against
10.6-11.4 while they were near. 1024 x 2048 x 1024: 22.2 against 26.1 and 22.0 against 22.2
(AVX-512), 23.1-23.5 either way (AVX2); 512 x 2048 x 1024 (N = 4M) and 256 x 2048 x 1024
within noise of each other, or the columns slightly ahead."""

SPLIT_WINDOW_ROWS = True
"""Where the column factor Y is a model's weight and the row factor X reads a conv's input
through its window (`windowed`: packing X gathers each input element once per tap, on every
call), the rows are split even when the weight rule would split the columns: each thread then
gathers half of X instead of all of it, and both stream the whole weight. resnet18's layer 4
(its convs on 7 x 7 run as 49 positions by 512 channels: X a 49 x 4608 gather, Y a 9.4 MB
weight) at two threads on the 2-core Zen 4 host (-O3, bound, both builds in one process,
interleaved, 8 rounds of 40 calls each with the probe of `benchmarks/two_threads.py` before
each, 2026-12-06): the whole model 18.87 -> 18.51 ms (medians of all rounds), faster in 7 of the
8 rounds, 23.42 -> 22.32 in the one slow round; each 3x3 conv 1.32-1.35 -> 1.21-1.23 ms
(`gdv profile`-style timers, 150 calls). The transformers' products, whose X is read row by
row (no window), keep the weight's split: the 2-layer BERT with its weight-side products'
rows split instead ran 5.18 -> 5.25 ms (6 rounds of 60 calls)."""

SPLIT_WEIGHT_MIN_SLIVERS = 8
"""... and when that side has at least this many slivers of the micro-tile (a thread's share
then differs from another's by at most one sliver in eight): efficientnet_b0's 1x1 convs to
112 channels on 14x14 (7 row slivers of 16) ran 0.160 -> 0.175 ms each with their rows split
when the vCPUs shared a cache (0.25 -> 0.21-0.23 when they did not)."""


@dataclass(frozen=True)
class Product:
    """The roles of a product kernel's loop dims, and which factor of the body's final `mul`
    (its operand 0 or 1) is the row factor X."""

    row_factor: int
    batch: list[int]
    rows: list[int]
    cols: list[int]

    def attrs(self) -> dict[str, Any]:
        return {
            "batch": list(self.batch),
            "rows": list(self.rows),
            "cols": list(self.cols),
            "row_factor": self.row_factor,
        }


def closure(body: Function, value: str) -> set[str]:
    """The body values (params and op results) that `value` depends on, itself included."""
    producer = {b.result: b for b in body.ops}
    seen: set[str] = set()
    todo = [value]
    while todo:
        v = todo.pop()
        if v in seen:
            continue
        seen.add(v)
        if v in producer:
            todo.extend(producer[v].operands)
    return seen


def factor_operands(body: Function, value: str) -> list[int]:
    """The positions of the kernel operands that the body value `value` reads (a factor's
    operands, for `value` one of `factors`)."""
    index = {q.name: k for k, q in enumerate(body.params)}
    return [index[v] for v in closure(body, value) if v in index]


def _final_mul(attrs: dict, dtype: DType, body: Function):
    """The body's returned `mul` when the kernel can be a product, else None."""
    if (
        attrs["combiner"] != "add"
        or not attrs["reduce"]
        or attrs.get("accumulators", 1) > 1
        or attrs.get("lanes", 1) > 1
    ):
        return None
    if dtype not in FLOATS or len(body.returns) != 1:
        return None
    if any(b.name not in BODY_OPS or b.type.rank != 0 for b in body.ops):
        return None  # the loop nest reports it
    (ret,) = body.returns
    last = next((b for b in body.ops if b.result == ret), None)
    if last is None or last.name != "mul" or last.type.dtype != dtype or last.type.rank != 0:
        return None
    return last


def _operand_rows(attrs: dict, body: Function, value: str) -> Iterator[list[int]]:
    """The map rows (one per operand dim) of every operand the body value `value` reads."""
    index = {q.name: k for k, q in enumerate(body.params)}
    for v in closure(body, value):
        if v in index:
            yield from attrs["maps"][index[v]]


def _factor_dims(attrs: dict, body: Function, value: str) -> set[int]:
    """The loop dims the body value `value` reads operands along (non-zero coefficients)."""
    n = len(attrs["space"])
    return {d for row in _operand_rows(attrs, body, value) for d in range(n) if row[d]}


def windowed(attrs: dict, p: Product, body: Function, value: str) -> bool:
    """Whether the factor `value` reads an operand through a window: one of the operand's dims
    moves with a row or column dim by less than a reduce dim's whole span (a conv's input as
    the row factor, its position oh * stride + kh * dilation with stride < 3 * dilation), so
    that neighbouring rows read overlapping elements and packing gathers each several times.
    A flattened read (index i * K + k, k < K) moves by the whole span: no window."""
    space = attrs["space"]
    sides = set(p.rows) | set(p.cols)
    return any(
        row[s] and row[r] and abs(row[s]) < abs(row[r]) * space[r]
        for row in _operand_rows(attrs, body, value)
        for s in sides
        for r in attrs["reduce"]
    )


def find(attrs: dict, dtype: DType, body: Function) -> Product | None:
    """The product a kernel with attributes `attrs`, result dtype `dtype` and body `body` is,
    or None when it is not one."""
    last = _final_mul(attrs, dtype, body)
    if last is None:
        return None
    x, y = last.operands
    dx, dy = _factor_dims(attrs, body, x), _factor_dims(attrs, body, y)
    out = list(attrs["out"])
    batch = [d for d in out if d in dx and d in dy]
    rows = [d for d in out if d not in dy]  # out dims in neither factor ride with the rows
    cols = [d for d in out if d in dy and d not in dx]
    if not rows or not cols:
        return None  # a matrix-vector product or a plain reduction: no tile to reuse
    pos = {d: p for p, d in enumerate(out)}

    def direct(r: list[int], c: list[int]) -> bool:
        return [pos[d] for d in batch + r + c] == list(range(len(out)))

    if direct(rows, cols):
        return Product(0, batch, rows, cols)
    if direct(cols, rows) and not any(d not in dx and d not in dy for d in out):
        return Product(1, batch, cols, rows)
    # Leading out dims of one factor only (a convolution's images) may run as batch dims too:
    # the tiles of the rest are then stored in place instead of through a workspace.
    for p in range(1, len(out) - 1):
        outer = out[:p]
        if not set(batch) <= set(outer):
            continue
        rows_p = [d for d in rows if d not in outer]
        cols_p = [d for d in cols if d not in outer]
        if not rows_p or not cols_p:
            break
        if [pos[d] for d in outer + rows_p + cols_p] == list(range(len(out))):
            return Product(0, outer, rows_p, cols_p)
        if [pos[d] for d in outer + cols_p + rows_p] == list(range(len(out))) and not any(
            d not in dx and d not in dy for d in rows_p + cols_p
        ):
            return Product(1, outer, cols_p, rows_p)
    return Product(0, batch, rows, cols)


def recorded(attrs: dict) -> Product:
    """The roles recorded on a kernel (`strategy = "product"`)."""
    return Product(
        int(attrs["row_factor"]), list(attrs["batch"]), list(attrs["rows"]), list(attrs["cols"])
    )


def holds(attrs: dict, dtype: DType, body: Function) -> str | None:
    """Why the roles recorded on a product kernel do not fit its body (None: they do): the row
    factor must read nothing along the column dims, the column factor nothing along the rows,
    and batch, rows and columns must split the out dims."""
    last = _final_mul(attrs, dtype, body)
    if last is None:
        return "its body is not a sum of one product of two factors"
    p = recorded(attrs)
    if sorted(p.batch + p.rows + p.cols) != sorted(attrs["out"]) or not p.rows or not p.cols:
        return f"batch {p.batch}, rows {p.rows} and cols {p.cols} do not split out {attrs['out']}"
    x = last.operands[p.row_factor]
    y = last.operands[1 - p.row_factor]
    if _factor_dims(attrs, body, x) & set(p.cols):
        return f"the row factor reads along column dims {p.cols}"
    if _factor_dims(attrs, body, y) & set(p.rows):
        return f"the column factor reads along row dims {p.rows}"
    return None


def factors(attrs: dict, body: Function) -> tuple[str, str]:
    """The body values of the row factor X and the column factor Y of a product kernel."""
    (ret,) = body.returns
    last = next(b for b in body.ops if b.result == ret)
    k = int(attrs["row_factor"])
    return last.operands[k], last.operands[1 - k]


def sizes(attrs: dict, p: Product) -> tuple[int, int, int, int]:
    """(B, M, N, K): the flattened extents of the batch, row, column and reduce dims."""

    def size(dims: list[int]) -> int:
        out = 1
        for d in dims:
            out *= attrs["space"][d]
        return out

    return size(p.batch), size(p.rows), size(p.cols), size(attrs["reduce"])


def costly(body: Function, value: str) -> bool:
    """Whether computing the factor `value` involves a transcendental function."""
    need = closure(body, value)
    return any(b.name in TRANSCENDENTAL for b in body.ops if b.result in need)


DEFAULT_CHAINS = 8
"""Independent add chains assumed when no descriptor gives them: 4-cycle adds on 2 pipes."""

WIDE_ROWS_MAX = 16
"""Products with at most this many rows (a few tokens times a weight, whose columns
`backends/c/matmul.py` reads in place) get a wide micro-tile when that weight streams from
beyond L2 (`wide_tile`)."""

WIDE_BYTES = 256
"""The wide tile reads this many contiguous bytes of a weight row per reduce step (4 vectors).
Measured on this 2-core AVX-512 host, models' weights not in cache (12 x 384 @ 384 x 1536,
calls cycling through 40 weights, timed in interleaved turns): 12 x 16 columns 0.48 ms, 6 x
32 0.38, 6 x 64 0.23 (numpy's OpenBLAS 0.26); with the weight in cache 0.11 for both. 16 x
384 @ 384 x 1536: 0.57 against 0.30. The 8 x 784 @ 784 x 128 of the mlp example (weights in
L2) was faster narrow: 0.014 against 0.022. AVX2's 16 registers hold only 2 rows of 4 ymm
vectors, which was slower than 12 x 8 (0.37 against 0.35 cold, 0.25 against 0.21 warm); AVX2
now takes 6 x 16 there (`micro_tile`: 94.6 against 84.3 GFLOP/s warm, one thread)."""

WIDE_THREE = True
"""`wide_tile` takes 3 vectors a row where that needs fewer row slivers than 4. Measured on the
2-core Zen 4 host (one thread, the product alone, interleaved turns, medians): 16 x 384 @ 384 x
1536 with the weight cycling through 40 copies (from memory) 0.361 ms in 6 x 64 tiles, 0.326
in 8 x 48 (16 x 16: 0.361); mobilenet_v2's 32 -> 16 channel 1x1 conv over 112 x 112 (the
input read in place, 1.6 MB) 0.168 against 0.131 (16 x 16: 0.138)."""

LOOP_OVERHEAD = 2
"""Issue slots one k step of the micro-kernel spends besides its multiplies and adds (the B
vector load and the pointer updates), in vector-op units; it favours taller tiles."""


@dataclass(frozen=True)
class Tuned:
    """A measured micro-kernel and blocking (`gdv tune`) that replaces the model's for products
    with at least `mr` rows: MR rows by NV vectors, and (KC, MC, NC)."""

    mr: int
    nv: int
    kc: int
    mc: int
    nc: int


def wide_tile(
    rows: int, cols: int, vl: int, vector_bytes: int, registers: int
) -> tuple[int, int, int] | None:
    """(MR, NV, VL) of a wide micro-tile for a product of at most `WIDE_ROWS_MAX` rows whose
    column factor streams from beyond L2: 4 vectors of at least `WIDE_BYTES` in all, and as
    many rows as the registers hold besides (MR * 4 + 4 + 1 <= registers, at least 4 rows);
    None where that does not fit (16 registers: AVX2, SSE2). Where 3 vectors a row take the
    rows in fewer slivers (16 rows: 2 of 8 against 6 + 6 + 4), 3 vectors, the rows shared
    evenly between the slivers (`WIDE_THREE`)."""
    nv = max(1, min(4, -(-cols // vl)))
    cap = (registers - 1 - nv) // nv
    if not 0 < rows <= WIDE_ROWS_MAX or 4 * vector_bytes < WIDE_BYTES or cap < 4:
        return None
    if nv == 4 and WIDE_THREE:
        cap3 = (registers - 1 - 3) // 3
        slivers = -(-rows // cap3)
        if slivers < -(-rows // cap):
            return -(-rows // slivers), 3, vl
    return min(rows, cap), nv, vl


def micro_tile(
    elem_bytes: int,
    rows: int,
    cols: int,
    vector_bytes: int,
    registers: int,
    chains: int = DEFAULT_CHAINS,
    streamed: bool = False,
) -> tuple[int, int, int]:
    """(MR, NV, VL) of the micro-kernel: MR rows by NV vectors of VL lanes, for vectors of
    `vector_bytes` bytes of which the target has `registers`, whose add pipeline needs `chains`
    independent accumulator chains (add latency x add pipes) to stay busy.

    The analytical model (BLIS-style, for the exact mode's separate multiply and add):

    - Registers. The kernel holds MR x NV accumulators, NV vectors of B for the current k and
      one broadcast A element: MR * NV + NV + 1 <= registers.
    - Chains. Each accumulator is one chain of dependent adds (the order IR_SPEC fixes), so at
      least `chains` accumulators are needed; up to 2 * chains, to leave slack for the
      multiplies that share the add pipes on Intel cores and for the loads.
    - Shape. One vector per row (NV = 1): the A element is a broadcast memory operand and one
      B vector serves every row. MR is the count in [chains, min(2 * chains, registers - 2)]
      that minimises ceil(rows / MR) * (MR + LOOP_OVERHEAD), the issue slots per k step over
      all row slivers (edge waste included).
    - Two vectors per row where one column cannot hold 2 * chains accumulators (16 registers:
      AVX2, SSE2) and there are more columns than one vector: MR = (registers - 3) // 2 rows
      of NV = 2 (6 x 2 on 16 registers), when that still makes `chains` accumulators. A step
      of a one-vector tile loads MR broadcasts and one B vector for MR multiply-adds; 6 x 2
      loads 8 for 12. Measured on the 2-core Zen 4 host with `GDV_C_ISA=avx2` (one thread,
      interleaved with onnxruntime, medians): resnet18 at -O3 49.3 ms with 13 x 1 against
      40.3 with 6 x 2 (onnxruntime 37.3 and 34.2 in the same runs), at -O2 49.7 against 43.9;
      mobilenet_v2 9.84 against 8.99; efficientnet_b0 17.2 against 16.5; the 2-layer BERT at
      -O3 15.75 against 12.83, at -O2 15.94 against 13.38; 1024^3 at -O3 97.3 and 86.7 GFLOP/s
      against 78.4 and 82.0. (A square 512^3 product at -O3 was the exception: 88.6 against
      77.0.)

    With the descriptor's numbers (f32): AVX-512 (32 zmm, 4 x 2 chains) 16 x 16; AVX2 (16 ymm)
    6 x 16; SSE2 (16 xmm) 6 x 8; NEON (32 v, 3 x 2) 12 x 4. Measured on Zen 4 with vmulps /
    vaddps: 16 x 1 vectors runs at the multiply/add peak where wide tiles (6x64, 8x32) reach
    70-80% of it; on a 2-core AVX-512 Xeon (1024^3 f32, both cores) every tile from 6 x 64 to
    30 x 16 is within about 10% of the others once warm (README, "Host tuning").

    A problem with fewer rows than `chains` gets as many rows as it has and more vectors per
    row, up to 4 and what the registers hold, to keep `chains` accumulators: (measured on the
    mlp example's 8 x 784 x 128 product, one core, CPU time: 8x16 19.6 us, 8x32 24.5 us,
    8x48 26.4 us).

    `streamed`: the column factor comes from beyond L2 (it is larger than L2, or it is one of a
    model's weights, which together are: `select-products`), so each reduce step of the
    micro-kernel reads it from L3 or memory; a product with few rows then gets `wide_tile`'s
    tile."""
    vl = max(1, vector_bytes // elem_bytes)
    chains = max(1, chains)
    top = max(1, min(2 * chains, registers - 2))
    low = min(chains, top)
    wide = wide_tile(rows, cols, vl, vector_bytes, registers) if streamed else None
    if wide is not None:
        return wide
    if 0 < rows < low:
        fit = max(1, (registers - 1) // (rows + 1))
        nv = max(1, min(4, fit, -(-chains // rows), -(-cols // vl)))
        return rows, nv, vl
    pair = (registers - 3) // 2  # below `low`, so below `rows` here
    if rows >= low and top < 2 * chains and 2 * pair >= chains and cols > vl:
        return pair, 2, vl
    if 0 < rows <= top:
        return rows, 1, vl
    span = range(top, low - 1, -1)  # taller first: ties go to the taller tile
    mr = min(span, key=lambda r: -(-rows // r) * (r + LOOP_OVERHEAD))
    return mr, 1, vl


KC_STRETCH = 4
"""A product whose reduction is longer than the model's KC by at most KC / KC_STRETCH runs it
as one reduce block: a second block of a few steps would store and reload every output tile
for little work. Measured on resnet18's stem (7x7 conv, K = 147 against KC 128; 2-core Zen 4,
one thread, the kernel alone, interleaved, medians of 40): 2.451 ms in two blocks, 2.372 in
one (74 + 73 steps: 2.421)."""


BALANCED_KC = True
"""A reduction longer than KC (and than its stretch) runs in as many reduce blocks as KC gives,
of equal length (a multiple of 8), not in full blocks and a short tail: each block boundary
stores and reloads every output tile, and a short last block pays that for little work. KC
and MC and NC stay the model's. Measured on resnet18 (-O3, bound, two threads, the same
module with its 3x3 convs' KC changed, both builds in one process, alternating blocks of 5
calls, 2026-12-07, 2-core Zen 4, AVX-512): K = 576 in three blocks of 192 instead of
256 + 256 + 64 (and 1152 in six of 192) 17.452 -> 17.352 ms near, 19.775 -> 19.660 far;
two of 288 17.384 -> 17.271 near; 1152 in three of 384 17.462 -> 17.332. As committed (576
in three of 192, 1152 in five of 232; the old passes in a subprocess, alternating turns of 3
calls): resnet18 19.608 -> 19.501 ms, mobilenet_v2 3.983 -> 3.959, MiniLM 2.484 -> 2.471,
the same output bits."""


KC_FILLS_L1 = True
"""KC from all of L1 for the A and B slivers, and NC and MC from all and half of L2 (False: half
of L1, half and a quarter of L2, the first model). MC and NC come out the same; KC doubles:
16 x 16 tiles on this 32 KiB L1d host run reduce blocks of 256, not 128. Measured on the 2-core
Zen 4 host (resnet18, -O3, bound, one thread, both builds in one process, interleaved, medians
of 40 calls, three runs): 35.09 -> 34.74, 35.67 -> 35.25, 36.22 -> 35.82 ms; every 3x3 conv
1-3% faster (layer 1's 64 x 3136 x 576, 2.130 -> 2.069 ms). mobilenet_v2's kernels 7.38 ->
7.34 ms, efficientnet_b0 12.19 -> 12.20, the 2-layer BERT 9.64 -> 9.50, GPT-2 9.64 -> 9.60,
MiniLM 3.81 -> 3.86 (within this host's noise)."""


KC_A_RESIDENT = True
"""Where the A sliver is at least as wide as the B sliver (MR >= NR), KC comes from the MR x KC
sliver of A taking three quarters of L1 when that is longer than from both slivers filling it
(with MR = NR it is 1.5 times as long; with a much narrower B sliver it is not): each A
sliver sweeps every B sliver of the panel, so A is what L1 reuses, and B streams through the
rest. MC and NC stay what the both-slivers KC gives. On this 32 KiB L1d host AVX-512's
16 x 16 tiles run reduce blocks of up to 384, not 256. Measured on the 2-core Zen 4 host
(AVX-512; -O3, bound, ONNX path, two threads, both builds in one process, alternating blocks of
5 calls with the two-vCPU probe of `benchmarks/two_threads.py` before each, medians, 2026-12-07;
the same output bits):
- against the both-slivers KC (256), without the MR >= NR condition: resnet18 17.693 ->
  17.494 ms when the vCPUs shared a cache (160 blocks), 20.025 -> 19.777 when they did not
  (366); the 2-layer BERT 5.166 -> 5.162 (1672) and 6.203 -> 6.125 (62); mobilenet_v2 4.636
  -> 4.621 (1209) and 7.786 -> 7.667 (126); efficientnet_b0 7.225 -> 7.058 (435) and 10.237 ->
  10.202 (353) (that form was the A sliver and half a B sliver in L1: KC 336 here);
- that form as committed first (KC 336, MR >= NR) against the 256: resnet18 17.753 -> 17.514
  (215) and 20.496 -> 19.900 (239); BERT 5.379 -> 5.283 (1050) and 6.314 -> 6.317 (66);
- this form (384) against that one (336): resnet18 17.721 -> 17.539 (383) and 20.333 -> 20.046
  (103); BERT 5.141 -> 5.112 (728) and 6.069 -> 5.860 (214).
The 1024^3 product (`benchmarks/isa_matmul.py --isa avx512`, K = 1024 in three blocks of 344
instead of four of 256): 1.15, 1.00 and 0.95 of numpy's GFLOP/s (`--turns 3`), and 1.02, 0.94,
0.95 (`--turns 5`) against 0.98, 0.90, 0.95 alternating with them; with NC and MC from the
longer KC too (672 and 336), 0.87 and 0.88 against 0.91 and 1.13. AVX2's 6 x 16 tiles
(GDV_C_ISA=avx2, resnet18, KC 584 against 368 in the first form) ran slower: 22.129 -> 22.889
ms near (149 blocks), 24.091 -> 24.430 far (280); there a B sliver is wider than the A sliver,
and the rule does not apply. NEON's 12 x 4 follows it unmeasured (no NEON host)."""


def blocking(
    elem_bytes: int,
    mr: int,
    nr: int,
    caches: tuple[int, int] = DEFAULT_CACHES,
    override: tuple[int, int, int] | None = None,
    reduce: int | None = None,
) -> tuple[int, int, int]:
    """(KC, MC, NC) for the packed product's loop order (`backends/c/matmul.py`: column panels
    of NC, reduce blocks of KC, row blocks of MC; in each, every MR x KC sliver of A sweeps
    every KC x NR sliver of B):

    - KC: an MR x KC sliver of A and a KC x NR sliver of B fill L1 data (the output tile is in
      registers): KC = L1 / ((MR + NR) * bytes), a multiple of 8 in [16, 1024]; where MR >=
      NR, the A sliver in three quarters of L1 (`KC_A_RESIDENT`): 3 L1 / (4 MR bytes).
      Each reduce block stores and reloads every output tile and restarts the micro-kernel's
      pipeline, so longer blocks pay off while the A sliver, read again for every B sliver,
      stays in L1 (`KC_FILLS_L1`).
    - NC: the KC x NC panel of B, which every A sliver sweeps, fills L2 (a multiple of NR). In
      this order the B panel, not an A block, is what L2 keeps; nothing is reused from L3 that
      L2 does not hold, so the L3 size does not enter.
    - MC: the MC x KC block of A, packed and then consumed sliver by sliver (each sliver then
      held in L1), takes half of L2 (a multiple of MR).

    With a 48 KiB L1d and a 2 MiB L2, f32: AVX-512 16 x 16 -> KC 576, MC 672,
    NC 1360 (KC from the A sliver alone, MC and NC from both slivers:
    `KC_A_RESIDENT`); AVX2 6 x 16 -> KC 552, MC 474, NC 944. `caches`: (L1 data, L2)
    bytes; `override`: (KC, MC, NC) wanted instead (MC and NC rounded down to whole
    slivers). `reduce`: the product's reduction length K; one at most KC / KC_STRETCH longer
    than KC is one block, a longer one is split into as many blocks of equal length
    (`BALANCED_KC`)."""
    if override is not None:
        kc, mc, nc = override
        return kc, max(mr, mc - mc % mr), max(nr, nc - nc % nr)
    l1d, l2 = caches
    l1_share, l2_panel, l2_block = (1, 1, 2) if KC_FILLS_L1 else (2, 2, 4)
    kc = (l1d // l1_share) // ((mr + nr) * elem_bytes)
    kc = max(16, min(1024, kc - kc % 8))
    nc = max(nr, (l2 // l2_panel) // (kc * elem_bytes))
    nc -= nc % nr
    mc = max(mr, (l2 // l2_block) // (kc * elem_bytes))
    mc -= mc % mr
    if KC_A_RESIDENT and mr >= nr:  # the A sliver alone in three quarters of L1, if longer
        alone = 3 * (l1d // l1_share) // (4 * mr * elem_bytes)
        kc = max(kc, min(1024, alone - alone % 8))
    if reduce is not None and kc < reduce <= kc + kc // KC_STRETCH:
        kc = reduce  # one reduce block, not a full one and a short tail
    elif reduce is not None and kc < reduce and BALANCED_KC:
        blocks = -(-reduce // kc)
        length = -(-reduce // blocks)  # as many blocks, of about equal length
        kc = -(-length // 8) * 8
    return kc, mc, nc


def split(
    attrs: dict,
    p: Product,
    body: Function,
    weight_side: str | None = None,
    caches: tuple[int, int] = DEFAULT_CACHES,
    elem_bytes: int = 4,
    tile: tuple[int, int] = (1, 1),
) -> str:
    """The thread split of a product, one of `SPLITS`: `none`, one thread; `columns`, column
    slivers when there are at least as many as threads, else row slivers; `rows`, row slivers
    when there are at least as many as threads, else column slivers when there are enough of
    those, else row slivers. One thread below `PARALLEL_MIN_MACS` multiply-adds. Each thread
    packs the whole of the factor it does not split, so: rows first when only the row factor
    has a costly prologue (threads given columns would each compute all of it), columns first
    when only the column factor has; the rows when the weight is Y and X reads a conv's input
    through its window (`SPLIT_WINDOW_ROWS`); else the side of a model's weight (`weight_side`,
    `rows` when the row factor reads it, `columns` when the column factor does) of at least
    `SPLIT_WEIGHT_MIN_L2` of L2 and at least `SPLIT_WEIGHT_MIN_SLIVERS` slivers of the
    micro-`tile` (MR rows, NR columns), so that each thread streams its own part of it from
    memory; else the rows when M is at least N / `SPLIT_X_PACK_RATIO` (X's packing costs
    more per element than Y's), or, where X reads a model's weight (`weight_side` `rows`:
    packed once at bind time when bound), the larger side (rows when M > N: a late CNN layer's
    512 x 49 product packed its 2.4M-element weight factor once per thread when its columns
    were split, 3.9 against 2.0 ms on this 2-core host)."""
    _, m, n, k = sizes(attrs, p)
    if m * n * k < PARALLEL_MIN_MACS:
        return "none"
    x, y = factors(attrs, body)
    weight = {"rows": m * k, "columns": n * k}.get(weight_side or "", 0) * elem_bytes
    slivers = {"rows": -(-m // tile[0]), "columns": -(-n // tile[1])}.get(weight_side or "", 0)
    if costly(body, x) != costly(body, y):
        choice = "rows" if costly(body, x) else "columns"
    elif SPLIT_WINDOW_ROWS and weight_side == "columns" and windowed(attrs, p, body, x):
        choice = "rows"
    elif weight >= SPLIT_WEIGHT_MIN_L2 * caches[1] and slivers >= SPLIT_WEIGHT_MIN_SLIVERS:
        assert weight_side is not None
        choice = weight_side
    elif weight_side == "rows":
        choice = "rows" if m > n else "columns"
    else:
        choice = "rows" if m * SPLIT_X_PACK_RATIO >= n else "columns"
    assert choice in SPLITS
    return choice


def plan(
    attrs: dict,
    dtype: DType,
    body: Function,
    p: Product,
    vector_bytes: int,
    registers: int,
    caches: tuple[int, int] = DEFAULT_CACHES,
    override: tuple[int, int, int] | None = None,
    chains: int = DEFAULT_CHAINS,
    tuned: Tuned | None = None,
    streamed: bool | None = None,
    weight_side: str | None = None,
) -> dict[str, Any]:
    """The schedule attributes of product `p`: strategy, roles, `micro = [MR, NR]`,
    `blocks = [MC, KC, NC]` and `split`. `tuned` (a measured choice for this dtype) replaces
    the model's micro-kernel and blocking for products with at least its MR rows; `override`
    (the descriptor's imposed blocking) wins over both. `streamed`: whether the column factor
    comes from beyond L2 (None: when it is larger than L2). `weight_side`: which factor reads a
    model's weight (`split`)."""
    size = dtype.itemsize
    _, m, n, k = sizes(attrs, p)
    vl = max(1, vector_bytes // size)
    if tuned is not None and m >= tuned.mr and tuned.mr * tuned.nv + tuned.nv + 1 <= registers:
        mr, nv = tuned.mr, tuned.nv
        kc, mc, nc = blocking(size, mr, nv * vl, caches, override or (tuned.kc, tuned.mc, tuned.nc))
    else:
        if streamed is None:
            streamed = k * n * size > caches[1]  # the column factor is larger than L2
        mr, nv, vl = micro_tile(size, m, n, vector_bytes, registers, chains, streamed)
        kc, mc, nc = blocking(size, mr, nv * vl, caches, override, reduce=k)
    return {
        "strategy": "product",
        **p.attrs(),
        "micro": [mr, nv * vl],
        "blocks": [mc, kc, nc],
        "split": split({**attrs, **p.attrs()}, p, body, weight_side, caches, size, (mr, nv * vl)),
    }
