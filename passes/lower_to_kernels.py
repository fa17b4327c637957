"""`lower-to-kernels`: core -> loop. Each affine op becomes one `kernel` (ir/ops/kernel.py) whose
body is a new scalar function of the module:

    f(x, y)                 -> kernel over f's shape, identity maps, body f       (elementwise)
    broadcast(x) / transpose(x) -> copy kernel: the layout change lives in the map
    slice(x)                -> copy kernel reading x[start + stride * i] (the map's stride
                               coefficients and offsets)
    reduce_*(x) {axes}      -> kernel over x's shape, reduce = sorted axes, body x
    dot(a, b)               -> kernel over (batch, a free, b free, contract), body
                               convert(a) * convert(b) in acc, then a convert kernel to the
                               result dtype when acc differs
    conv2d(x, w)            -> pad(x) with zeros (when padded), then a kernel over (N, O, OH,
                               OW, Cg, KH, KW) reading the padded input at channel Cg*g + c
                               (g the output channel's group), position stride*o +
                               dilation*k, body x * w, an add fold over (Cg, KH, KW); with
                               groups of several output channels the kernel runs over (N, G,
                               Og, OH, OW, ...) writing [N, OH, OW, G, Og], then a reshape and
                               a copy kernel back to [N, O, OH, OW]. f32/f64 and not depthwise:
                               at least CONV_MIN_MACS multiply-adds, and select-products runs
                               it as a product; depthwise (one output channel per group) and
                               integer or 16-bit convs: any size at stride 1, a nest folding
                               adjacent outputs in vector lanes. Smaller float convs and
                               strided nest convs stay ops.

A splat constant (one value) becomes a kernel with no operands whose body is that value.
Ops that are not affine in their indices (reshape, concat, pad, take, iota, other
constants, the conv2d not lowered) stay ops at the loop stage. Each rewrite carries an exact
(`fp`) equivalence obligation between the op and its kernels (and a conv2d's pad), with the new
bodies in scope; the kernel's SMT meaning folds exactly as reduce_*, dot and conv2d do, so
these prove by congruence.
"""

from __future__ import annotations

import itertools
from dataclasses import dataclass, replace

from gdv.ir.core import Function, Module, Op, Param
from gdv.ir.dtypes import DType
from gdv.ir.obligation import Obligation
from gdv.ir.ops import names_where
from gdv.ir.ops.contract import dot_dims
from gdv.ir.ops.kernel import bodies_used
from gdv.ir.ops.reduce import REDUCTIONS
from gdv.ir.types import TensorType
from gdv.passes.base import Names, Pass, PassResult, Step

CONV_MIN_MACS = 1 << 12
"""Smaller convolutions stay conv2d ops (their plain loop nest: a packed product would cost
more than it saves)."""

NEST_MAX_STRIDE = 1
"""A conv2d that becomes a reduction nest (not a product) is lowered only when both its strides
are at most this. Measured on one core (benchmarks/conv_kernels.py --threads 1): a 3x3
depthwise conv of 144 channels on 56x56 ran in 0.59 ms as the kernel against 1.09 ms as the op
at stride 1, but in 0.50 ms against 0.26 ms at stride 2, where the kernel's lanes read every
other element and the pad copy costs as much as the smaller output (since the op folds its taps
unrolled, 2026-12-04: 0.089 ms at stride 2)."""

NEST_MAX_PLANE_BYTES = 64 << 10
"""A stride-1 f32/f64 depthwise conv2d (one input and one output channel per group) whose
padded input plane takes more bytes than this is lowered to a reduction nest; a smaller one
stays an op, which the C target runs a plane at a time from a padded copy in L1
(backends/c/conv.py, PLANE_MAX_BYTES, the same bound). Measured on one core (CPU time, medians
of 200 calls, the op's plane loop against the pad and the kernel): depthwise 5x5 of 240
channels on 28x28 0.27 against 0.38 ms (0.38 against 0.71 ms followed by SiLU, which the kernel
fuses in a row group and the op does not); 3x3 of 144 on 56x56 0.21 against 0.34; 576 on 14x14
0.053 against 0.092; 960 on 7x7 0.053 against 0.074. At 112x112 (a 52 KB plane) the two were
even alone (96 channels 0.66 against 0.67 ms), but in the models the op wins, since the kernel
needs a padded copy of the whole input first: whole models with the bound at 16 KB against 64 KB
(2026-12-05, 2-core Zen 4, -O3, weights bound, per-kernel profiles of 60-100 interleaved calls),
mobilenet_v2 one thread 7.93 -> 7.82 ms and 8.05 -> 7.97, two threads 4.49 -> 4.47 and 4.62 ->
4.52, efficientnet_b0 one thread 12.13 -> 12.07, two threads 7.16 -> 7.02 and 6.90 -> 6.78;
under GDV_C_ISA=avx2, one thread, mobilenet_v2 8.67 -> 8.64 and efficientnet_b0 14.20 -> 14.00
(its first depthwise conv and SiLU 0.53 -> 0.38 ms)."""

ELEMENTWISE = names_where(lambda s: s.body_legal and s.min_operands > 0)
_COMBINER = {s.name: s.combiner.op for s in REDUCTIONS.specs()}


def identity_map(rank: int, n: int) -> list[list[int]]:
    """Operand dim d read at loop dim d (of n loop dims)."""
    return [[1 if c == d else 0 for c in range(n)] + [0] for d in range(rank)]


def _row(n: int, dim: int | None, const: int = 0) -> list[int]:
    """A map row reading loop dim `dim` (None: a constant index)."""
    return [1 if c == dim else 0 for c in range(n)] + [const]


class Bodies:
    """Fresh body functions for one module, named `<function>.k<N>`."""

    def __init__(self, module: Module) -> None:
        self.taken = {f.name for f in module.functions}
        self.made: list[Function] = []

    def new(self, owner: str, params: list[TensorType], ops: list[Op], result: str) -> str:
        for k in itertools.count():
            name = f"{owner}.k{k}"
            if name not in self.taken and len(name) <= 128:
                break
        self.taken.add(name)
        scalars = [Param(f"a{i}", TensorType(t.dtype, ())) for i, t in enumerate(params)]
        out_type = next((o.type for o in ops if o.result == result), None)
        if out_type is None:
            out_type = scalars[int(result[1:])].type
        self.made.append(Function(name, scalars, [out_type], ops, [result]))
        return name


def _kernel(
    site_op: Op,
    result: str,
    operands: list[str],
    dtype,
    body: str,
    space: list[int],
    maps: list[list[list[int]]],
    out: list[int],
    reduce: list[int] | None = None,
    combiner: str = "none",
) -> Op:
    attrs = {
        "body": body,
        "space": list(space),
        "maps": maps,
        "out": out,
        "reduce": reduce or [],
        "combiner": combiner,
    }
    shape = tuple(space[d] for d in out)
    return Op(result, "kernel", operands, attrs, TensorType(dtype, shape), site_op.loc)


def _sum(reduce: list[int]) -> str:
    """A contraction's combiner: `add`, or `none` when it contracts nothing (an outer product,
    a kernel over no reduced dims, which the verifier requires to say so)."""
    return "add" if reduce else "none"


def lower_op(
    op: Op, types: dict[str, TensorType], names: Names, bodies: Bodies, owner: str
) -> tuple[str, list[Op]] | None:
    """(rule, kernels) computing `op`'s value, the last one defining `op.result`; None to keep
    the op."""
    ts = [types[o] for o in op.operands]
    if op.name in ELEMENTWISE:
        n = op.type.rank
        scalar = Op(
            "r",
            op.name,
            [f"a{i}" for i in range(len(ts))],
            dict(op.attrs),
            TensorType(op.type.dtype, ()),
        )
        body = bodies.new(owner, ts, [scalar], "r")
        maps = [identity_map(n, n) for _ in ts]
        k = _kernel(
            op,
            op.result,
            op.operands,
            op.type.dtype,
            body,
            list(op.type.shape),
            maps,
            list(range(n)),
        )
        return f"elementwise-{op.name}", [k]
    if op.name in ("broadcast", "transpose"):
        n, (x,) = op.type.rank, ts
        if op.name == "broadcast":
            rows = [
                _row(n, d if x.shape[i] == op.type.shape[d] else None)
                for i, d in enumerate(op.attrs["dims"])
            ]
        else:
            perm = op.attrs["perm"]
            rows = [_row(n, perm.index(j)) for j in range(x.rank)]
        body = bodies.new(owner, ts, [], "a0")
        k = _kernel(
            op,
            op.result,
            op.operands,
            op.type.dtype,
            body,
            list(op.type.shape),
            [rows],
            list(range(n)),
        )
        return f"copy-{op.name}", [k]
    if op.name == "slice":
        # x[start + stride * i]: an affine read, so a copy kernel whose map holds the slice;
        # fusion then reads the sliced tensor in place (a max pool's window taps) instead of
        # materialising each slice.
        n = op.type.rank
        starts, strides = op.attrs["start"], op.attrs["stride"]
        rows = [[strides[d] if c == d else 0 for c in range(n)] + [starts[d]] for d in range(n)]
        body = bodies.new(owner, ts, [], "a0")
        k = _kernel(
            op, op.result, op.operands, op.type.dtype, body, list(op.type.shape), [rows],
            list(range(n)),
        )  # fmt: skip
        return "copy-slice", [k]
    if op.name == "constant" and op.type.rank > 0 and not isinstance(op.attrs["value"], list):
        # A splat: a kernel with no operands whose body is the scalar constant, so fusion can
        # inline it into its user (no tensor of copies is written and read back).
        n = op.type.rank
        scalar = Op("r", "constant", [], dict(op.attrs), TensorType(op.type.dtype, ()))
        body = bodies.new(owner, [], [scalar], "r")
        k = _kernel(op, op.result, [], op.type.dtype, body, list(op.type.shape), [], list(range(n)))
        return "splat-constant", [k]
    if op.name in _COMBINER:
        (x,) = ts
        axes = sorted(op.attrs["axes"])
        kept = [d for d in range(x.rank) if d not in axes]
        body = bodies.new(owner, ts, [], "a0")
        k = _kernel(
            op,
            op.result,
            op.operands,
            op.type.dtype,
            body,
            list(x.shape),
            [identity_map(x.rank, x.rank)],
            kept,
            axes,
            _COMBINER[op.name] if axes else "none",  # over no axes: a copy, no fold
        )
        return op.name, [k]
    if op.name == "dot":
        return "dot", _lower_dot(op, ts, names, bodies, owner)
    if op.name == "conv2d" and _conv_lowers(op, ts):
        return "conv2d", _lower_conv2d(op, ts, names, bodies, owner)
    return None


def _conv_lowers(op: Op, ts: list[TensorType]) -> bool:
    """Whether a conv2d becomes a kernel. Not when empty or of i1 values. A kernel that
    select-products will run as a product (f32/f64, not depthwise) needs at least
    CONV_MIN_MACS multiply-adds; the others (depthwise: one output channel per group; integer
    and 16-bit float dtypes) run as a reduction nest folding a block of adjacent outputs in
    vector lanes, which beats the conv2d op's scalar nest at every size at stride 1 (see
    NEST_MAX_STRIDE)."""
    if "epilogue" in op.attrs:
        return False  # a conv2d with an epilogue (fuse-conv-epilogues) stays an op
    x, w = ts
    dtype = op.type.dtype
    if dtype.is_bool or x.dtype != dtype or w.dtype != dtype:
        return False
    if op.type.num_elements == 0 or x.num_elements == 0:
        return False
    groups = op.attrs["groups"]
    depthwise = groups > 1 and w.shape[0] == groups
    if depthwise and w.shape[1] == 1 and dtype in (DType.F32, DType.F64):
        (pt, pb), (pl, pr) = op.attrs["padding"]
        plane = (x.shape[2] + pt + pb) * (x.shape[3] + pl + pr) * dtype.itemsize
        if tuple(op.attrs["stride"]) == (1, 1) and plane <= NEST_MAX_PLANE_BYTES:
            return False
    if depthwise or dtype not in (DType.F32, DType.F64):
        return max(op.attrs["stride"]) <= NEST_MAX_STRIDE
    return op.type.num_elements * w.shape[1] * w.shape[2] * w.shape[3] >= CONV_MIN_MACS


def _lower_conv2d(
    op: Op, ts: list[TensorType], names: Names, bodies: Bodies, owner: str
) -> list[Op]:
    """pad (when padded) and the contraction kernel

        r[n, o, y, x] = fold_add over (c, i, j) in row-major order of
                        xp[n, Cg*g + c, y*sh + i*dh, x*sw + j*dw] * w[o, c, i, j]

    xp being the input padded with +0.0, so padded positions take part as 0.0 * w, as in the
    conv2d's meaning (IR_SPEC.md section 7); output channel o is in group g = o div Og, whose
    input channels are Cg*g .. Cg*g + Cg - 1. With one group g = 0; with one output channel per
    group (depthwise) g = o, so the kernel reads channel Cg*o + c. With G > 1 groups of Og > 1
    output channels, g is not affine in o: the kernel runs over (n, g, m, y, x | c, i, j), o =
    Og*g + m, and writes its result as [N, OH, OW, G, Og]; a reshape merges (G, Og) into O and a
    copy kernel moves O back before (OH, OW). (That order keeps the SMT index forms exact:
    reshape's o mod Og and o div Og recombine into o, where [N, G, Og, OH, OW] would give a
    quotient over (o, y, x) that does not, see gdv.validate.semantics.index.delinearize.)"""
    x, w = ts
    dtype = op.type.dtype
    n, c, h, wd = x.shape
    o, cg, kh, kw = w.shape
    _, _, oh, ow = op.type.shape
    groups = op.attrs["groups"]
    og = o // groups
    (pt, pb), (pl, pr) = op.attrs["padding"]
    sh, sw = op.attrs["stride"]
    dh, dw = op.attrs["dilation"]
    out: list[Op] = []
    source = op.operands[0]
    padded = x
    if (pt, pb, pl, pr) != (0, 0, 0, 0):
        padded = TensorType(dtype, (n, c, h + pt + pb, wd + pl + pr))
        source = names.fresh(f"{op.result}.pad")
        zero = 0.0 if dtype.is_float else 0
        attrs = {"low": [0, 0, pt, pl], "high": [0, 0, pb, pr], "value": zero}
        out.append(Op(source, "pad", [op.operands[0]], attrs, padded, op.loc))
    split = groups > 1 and og > 1
    # Loop dims: n, (g,) o-or-m, y, x | c, i, j; a map row: coefficients, then the constant.
    lead = [n, groups, og] if split else [n, o]
    space = [*lead, oh, ow, cg, kh, kw]
    nd = len(space)
    y, xx, cc, i, j = nd - 5, nd - 4, nd - 3, nd - 2, nd - 1

    def row(terms: dict[int, int]) -> list[int]:
        return [terms.get(d, 0) for d in range(nd)] + [0]

    # the input channel: Cg*g + c (g the group dim, or the output channel when depthwise)
    group_dim = 1 if groups > 1 else None
    channel = {cc: 1} | ({group_dim: cg} if group_dim is not None else {})
    x_map = [row({0: 1}), row(channel), row({y: sh, i: dh}), row({xx: sw, j: dw})]
    w_out = {1: og, 2: 1} if split else {1: 1}
    w_map = [row(w_out), row({cc: 1}), row({i: 1}), row({j: 1})]
    scalar = TensorType(dtype, ())
    body = bodies.new(owner, [padded, w], [Op("p", "mul", ["a0", "a1"], {}, scalar)], "p")
    result = names.fresh(f"{op.result}.groups") if split else op.result
    k = _kernel(
        op, result, [source, op.operands[1]], dtype, body, space, [x_map, w_map],
        [0, y, xx, 1, 2] if split else list(range(nd - 3)), [cc, i, j], "add",
    )  # fmt: skip
    if not split:
        return [*out, k]
    merged = names.fresh(f"{op.result}.nhwc")
    nhwc = TensorType(dtype, (n, oh, ow, o))
    reshape = Op(merged, "reshape", [result], {}, nhwc, op.loc)
    copy = bodies.new(owner, [nhwc], [], "a0")
    # loop dims (n, o, y, x) read [n, y, x, o]
    rows = [_row(4, 0), _row(4, 2), _row(4, 3), _row(4, 1)]
    back = _kernel(op, op.result, [merged], dtype, copy, [n, o, oh, ow], [rows], [0, 1, 2, 3])
    return [*out, k, reshape, back]


def _lower_dot(op: Op, ts: list[TensorType], names: Names, bodies: Bodies, owner: str) -> list[Op]:
    a, b = ts
    lb, rb = op.attrs["lhs_batch"], op.attrs["rhs_batch"]
    lc, rc = op.attrs["lhs_contract"], op.attrs["rhs_contract"]
    a_free, b_free = dot_dims(a, b, op.attrs)
    res = op.type.dtype
    acc = a.dtype if a.dtype.is_int else (op.attrs.get("acc") or res)
    # Loop dims: batch, A's free, B's free (the result's dims, in order), then the contraction.
    nb, na, nf = len(lb), len(a_free), len(b_free)
    space = (
        [a.shape[d] for d in lb]
        + [a.shape[d] for d in a_free]
        + [b.shape[d] for d in b_free]
        + [a.shape[d] for d in lc]
    )
    n = len(space)
    a_loop = {d: p for p, d in enumerate(lb)} | {d: nb + p for p, d in enumerate(a_free)}
    a_loop |= {d: nb + na + nf + p for p, d in enumerate(lc)}
    b_loop = {d: p for p, d in enumerate(rb)} | {d: nb + na + p for p, d in enumerate(b_free)}
    b_loop |= {d: nb + na + nf + p for p, d in enumerate(rc)}
    maps = [
        [_row(n, a_loop[d]) for d in range(a.rank)],
        [_row(n, b_loop[d]) for d in range(b.rank)],
    ]
    scalar = TensorType(acc, ())
    body_ops: list[Op] = []
    reads = []
    for i, t in enumerate(ts):
        if t.dtype == acc:
            reads.append(f"a{i}")
        else:
            body_ops.append(Op(f"c{i}", "convert", [f"a{i}"], {}, scalar))
            reads.append(f"c{i}")
    body_ops.append(Op("p", "mul", reads, {}, scalar))
    body = bodies.new(owner, ts, body_ops, "p")
    out = list(range(nb + na + nf))
    reduce = list(range(nb + na + nf, n))
    if acc == res:
        return [
            _kernel(op, op.result, op.operands, acc, body, space, maps, out, reduce, _sum(reduce))
        ]
    summed = names.fresh(f"{op.result}.acc")
    k = _kernel(op, summed, op.operands, acc, body, space, maps, out, reduce, _sum(reduce))
    conv = Op("r", "convert", ["a0"], {}, TensorType(res, ()))
    cbody = bodies.new(owner, [k.type], [conv], "r")
    c = _kernel(
        op,
        op.result,
        [summed],
        res,
        cbody,
        list(op.type.shape),
        [identity_map(op.type.rank, op.type.rank)],
        list(range(op.type.rank)),
    )
    return [k, c]


def rewrite_obligation(
    pass_name: str,
    rule: str,
    index: int,
    src_ops: list[Op],
    tgt_ops: list[Op],
    results: tuple[str, str],
    types: dict[str, TensorType],
    functions: list[Function],
) -> Obligation:
    """`src_ops` computing results[0] equal `tgt_ops` computing results[1], over the values
    they read (both sides read the same values)."""
    defined = {o.result for o in src_ops} | {o.result for o in tgt_ops}
    reads: list[str] = []
    for o in [*src_ops, *tgt_ops]:
        for v in o.operands:
            if v not in defined and v not in reads:
                reads.append(v)
    root = next(o for o in src_ops if o.result == results[0])
    params = [Param(v, types[v]) for v in reads]
    src = Function("src", params, [root.type], list(src_ops), [results[0]])
    tgt = Function("tgt", list(params), [root.type], list(tgt_ops), [results[1]])
    suffix = f"#{index}" if index else ""
    return Obligation(
        id=f"{pass_name}/{rule}/equivalence{suffix}",
        kind="equivalence",
        theory="fp",
        src=src,
        tgt=tgt,
        claim=f"%{root.result} = {root.name}(...) may be replaced by kernels",
        loc=root.loc,
        functions=functions,
    )


@dataclass(frozen=True)
class LowerToKernels(Pass):
    name = "lower-to-kernels"
    stage_in = "core"

    def run(self, module: Module) -> PassResult:
        bodies = Bodies(module)
        counts: dict[str, int] = {}
        obligations: list[Obligation] = []
        steps: list[Step] = []
        functions = []
        used = bodies_used(module.functions)
        for fn in module.functions:
            if fn.name in used:  # a body of kernels already there stays scalar ops
                functions.append(fn)
                continue
            names, types = Names(fn), fn.types()
            out: list[Op] = []
            for op in fn.ops:
                before = len(bodies.made)
                lowered = lower_op(op, types, names, bodies, fn.name)
                if lowered is None:
                    out.append(op)
                    continue
                rule, kernels = lowered
                for k in kernels:
                    types[k.result] = k.type
                index = counts.get(rule, 0)
                counts[rule] = index + 1
                steps.append(
                    Step(
                        "rewrite",
                        fn.name,
                        len(out),
                        op.result,
                        op.result,
                        [k.result for k in kernels],
                        len(obligations),
                        [b.name for b in bodies.made[before:]],
                    )
                )
                obligations.append(
                    rewrite_obligation(
                        self.name,
                        rule,
                        index,
                        [op],
                        kernels,
                        (op.result, op.result),
                        types,
                        bodies.made[before:],
                    )
                )
                out.extend(kernels)
            functions.append(replace(fn, ops=out))
        new = Module(functions + bodies.made, module.filename)
        return PassResult(new, obligations, bool(obligations), steps)
