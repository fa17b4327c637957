"""Sharding rules: every op's dims as factors, in Shardy's style (issue 17, item 2).

A rule names the factors of an op's iteration space and says, for each dim of each operand
and of the result, which factors it is made of (`[]` for a dim of extent 1 that broadcasts, or
a dim no factor can split; several factors, major first, for a dim a reshape splits or merges).
A factor in `reduction` is summed over (or folded with max/min): sharding it leaves each rank a
partial value. A factor in `replicated` may not be sharded (a softmax's axis, a conv's window,
a slice's dim). The partitioner (`gdv.passes.partition`) turns a factor's mesh axes into the
shardings of the op's operands and result; a dim made of several factors can be split only by
its first (major) factor's axes.

matmul `[i, k] x [k, j] -> [i, j]`, k a reduction; elementwise ops share one factor per dim;
broadcast maps the operand's dims to the result dims `dims` names; transpose permutes;
reduce_* reduces its axes; softmax, log_softmax, layer_norm, cumsum, cumprod and argsort
keep their axes replicated (a scan's prefix, or a sort, crosses every block of its axis);
slice and pad pass through the dims they keep whole, concat every dim but its axis, take the
table's other dims and the indices' dims, conv2d the batch and (groups = 1) the output
channels; loop-stage kernels and the control flow ops (`if`, `while`, `scan`: every operand
gathered whole, every rank running the whole op) are kept whole.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass, field

from gdv.ir.core import Op
from gdv.ir.ops import REGISTRY as OPS
from gdv.ir.ops import OpSpec
from gdv.ir.types import TensorType


@dataclass
class FactorRule:
    """The factors of one op instance (sizes by name) and each dim's factors."""

    sizes: dict[str, int]
    operands: list[list[list[str]]]
    result: list[list[str]]
    reduction: set[str] = field(default_factory=set)
    replicated: set[str] = field(default_factory=set)


Rule = Callable[[Op, list[TensorType]], FactorRule]
RULES: dict[OpSpec, Rule] = {}


def rule(*names: str) -> Callable[[Rule], Rule]:
    def deco(fn: Rule) -> Rule:
        for name in names:
            RULES[OPS[name]] = fn
        return fn

    return deco


def factor_rule(op: Op, operand_types: list[TensorType]) -> FactorRule:
    """The factors of `op` (graph or core stage)."""
    return RULES[OPS[op.name]](op, operand_types)


def _dims(prefix: str, shape: tuple[int, ...]) -> tuple[dict[str, int], list[list[str]]]:
    sizes = {f"{prefix}{d}": n for d, n in enumerate(shape)}
    return sizes, [[f"{prefix}{d}"] for d in range(len(shape))]


def _replicated_all(op: Op, types: list[TensorType]) -> FactorRule:
    """Every dim of every operand and of the result its own factor, none shardable: always
    correct, never distributed."""
    sizes: dict[str, int] = {}
    operands = []
    for k, t in enumerate(types):
        s, dims = _dims(f"o{k}.", t.shape)
        sizes.update(s)
        operands.append(dims)
    s, result = _dims("r.", op.type.shape)
    sizes.update(s)
    return FactorRule(sizes, operands, result, replicated=set(sizes))


ELEMENTWISE = (
    "neg abs exp log sqrt rsqrt tanh sigmoid erf sin cos floor relu add sub mul div max min pow "
    "cmp select convert gelu tan asin acos atan sinh cosh asinh acosh atanh "
    "bitwise_and bitwise_or bitwise_xor bitwise_not shift_left shift_right rem mod"
).split()


@rule(*ELEMENTWISE)
def _elementwise(op: Op, types: list[TensorType]) -> FactorRule:
    sizes, dims = _dims("d", op.type.shape)
    return FactorRule(sizes, [dims for _ in types], dims)


@rule("constant", "iota")
def _generator(op: Op, types: list[TensorType]) -> FactorRule:
    # A generated value is made on every rank whole; the partitioner slices it as needed.
    sizes, dims = _dims("d", op.type.shape)
    return FactorRule(sizes, [], dims, replicated=set(sizes))


@rule("broadcast")
def _broadcast(op: Op, types: list[TensorType]) -> FactorRule:
    sizes, dims = _dims("d", op.type.shape)
    (x,) = types
    operand = [
        [] if n == 1 and op.type.shape[d] != 1 else dims[d]
        for d, n in zip(op.attrs["dims"], x.shape, strict=True)
    ]
    return FactorRule(sizes, [operand], dims)


@rule("transpose")
def _transpose(op: Op, types: list[TensorType]) -> FactorRule:
    (x,) = types
    sizes, dims = _dims("d", x.shape)
    return FactorRule(sizes, [dims], [dims[p] for p in op.attrs["perm"]])


@rule("reduce_sum", "reduce_max", "reduce_min")
def _reduce(op: Op, types: list[TensorType]) -> FactorRule:
    (x,) = types
    sizes, dims = _dims("d", x.shape)
    axes = set(op.attrs["axes"])
    result = [dims[d] for d in range(x.rank) if d not in axes]
    return FactorRule(sizes, [dims], result, reduction={f"d{a}" for a in axes})


@rule("softmax", "log_softmax", "cumsum", "cumprod", "argsort")
def _axis_normalised(op: Op, types: list[TensorType]) -> FactorRule:
    sizes, dims = _dims("d", op.type.shape)
    return FactorRule(sizes, [dims], dims, replicated={f"d{op.attrs['axis']}"})


@rule("layer_norm")
def _layer_norm(op: Op, types: list[TensorType]) -> FactorRule:
    sizes, dims = _dims("d", op.type.shape)
    axes = op.attrs["axes"]
    param = [dims[a] for a in axes]
    return FactorRule(sizes, [dims, param, param], dims, replicated={f"d{a}" for a in axes})


@rule("dot")
def _dot(op: Op, types: list[TensorType]) -> FactorRule:
    a, b = types
    lb, rb = op.attrs["lhs_batch"], op.attrs["rhs_batch"]
    lc, rc = op.attrs["lhs_contract"], op.attrs["rhs_contract"]
    sizes: dict[str, int] = {}
    lhs: list[list[str]] = [[] for _ in a.shape]
    rhs: list[list[str]] = [[] for _ in b.shape]
    result: list[list[str]] = []
    for k, (x, y) in enumerate(zip(lb, rb, strict=True)):
        sizes[f"b{k}"] = a.shape[x]
        lhs[x] = rhs[y] = [f"b{k}"]
        result.append([f"b{k}"])
    for d in range(a.rank):
        if d not in lb and d not in lc:
            sizes[f"i{d}"] = a.shape[d]
            lhs[d] = [f"i{d}"]
            result.append([f"i{d}"])
    for d in range(b.rank):
        if d not in rb and d not in rc:
            sizes[f"j{d}"] = b.shape[d]
            rhs[d] = [f"j{d}"]
            result.append([f"j{d}"])
    for k, (x, y) in enumerate(zip(lc, rc, strict=True)):
        sizes[f"k{k}"] = a.shape[x]
        lhs[x] = rhs[y] = [f"k{k}"]
    reduction = {f"k{k}" for k in range(len(lc))}
    return FactorRule(sizes, [lhs, rhs], result, reduction=reduction)


@rule("matmul")
def _matmul(op: Op, types: list[TensorType]) -> FactorRule:
    a, b = types
    sizes, batch = _dims("b", a.shape[:-2])
    sizes.update({"i": a.shape[-2], "k": a.shape[-1], "j": b.shape[-1]})
    return FactorRule(
        sizes,
        [[*batch, ["i"], ["k"]], [*batch, ["k"], ["j"]]],
        [*batch, ["i"], ["j"]],
        reduction={"k"},
    )


@rule("reshape")
def _reshape(op: Op, types: list[TensorType]) -> FactorRule:
    """Groups of consecutive dims with equal products map onto each other. A group of one
    operand dim and several result dims (a split) makes the result dims its factors, the
    operand dim compound; a merge is the mirror image; any other group is one factor,
    replicated. A value with no elements is kept whole (its dims' products do not pair up)."""
    (x,) = types
    if x.num_elements == 0:
        return _replicated_all(op, types)
    src, dst = list(x.shape), list(op.type.shape)
    sizes: dict[str, int] = {}
    operand: list[list[str]] = []
    result: list[list[str]] = []
    replicated: set[str] = set()
    i = j = 0
    g = 0
    while i < len(src) or j < len(dst):
        # ones on either side stand alone (nothing to shard)
        if i < len(src) and src[i] == 1 and (j >= len(dst) or dst[j] != 1):
            operand.append([])
            i += 1
            continue
        if j < len(dst) and dst[j] == 1 and (i >= len(src) or src[i] != 1):
            result.append([])
            j += 1
            continue
        a, b = [i], [j]
        pa, pb = src[i], dst[j]
        while pa != pb:
            if pa < pb:
                i += 1
                a.append(i)
                pa *= src[i]
            else:
                j += 1
                b.append(j)
                pb *= dst[j]
        i += 1
        j += 1
        if len(a) == 1:  # a split (or 1:1): the result dims are the factors
            names = [f"g{g}.{k}" for k in range(len(b))]
            sizes.update({n: dst[d] for n, d in zip(names, b, strict=True)})
            operand.append(names)
            result.extend([[n] for n in names])
        elif len(b) == 1:  # a merge
            names = [f"g{g}.{k}" for k in range(len(a))]
            sizes.update({n: src[d] for n, d in zip(names, a, strict=True)})
            operand.extend([[n] for n in names])
            result.append(names)
        else:
            name = f"g{g}"
            sizes[name] = math.prod(src[d] for d in a)
            replicated.add(name)
            operand.extend([[name] if k == 0 else [] for k in range(len(a))])
            result.extend([[name] if k == 0 else [] for k in range(len(b))])
        g += 1
    return FactorRule(sizes, [operand], result, replicated=replicated)


@rule("slice", "pad")
def _window(op: Op, types: list[TensorType]) -> FactorRule:
    """A dim the op keeps whole (slice: start 0, limit its extent, stride 1; pad: no padding)
    is one factor of the operand and the result; a dim it cuts or pads is kept whole."""
    (x,) = types
    sizes: dict[str, int] = {}
    operand: list[list[str]] = []
    result: list[list[str]] = []
    replicated: set[str] = set()
    for d, n in enumerate(x.shape):
        if op.name == "slice":
            whole = (op.attrs["start"][d], op.attrs["limit"][d], op.attrs["stride"][d]) == (0, n, 1)
        else:
            whole = op.attrs["low"][d] == 0 and op.attrs["high"][d] == 0
        if whole:
            sizes[f"d{d}"] = n
            operand.append([f"d{d}"])
            result.append([f"d{d}"])
        else:
            sizes[f"o{d}"], sizes[f"r{d}"] = n, op.type.shape[d]
            operand.append([f"o{d}"])
            result.append([f"r{d}"])
            replicated |= {f"o{d}", f"r{d}"}
    return FactorRule(sizes, [operand], result, replicated=replicated)


@rule("concat")
def _concat(op: Op, types: list[TensorType]) -> FactorRule:
    """Every dim but `axis` shared by the operands and the result; `axis` kept whole."""
    axis = op.attrs["axis"]
    sizes, dims = _dims("d", op.type.shape)
    replicated = {f"d{axis}"}
    operands = []
    for k, t in enumerate(types):
        mine = list(dims)
        sizes[f"a{k}"] = t.shape[axis]
        mine[axis] = [f"a{k}"]
        replicated.add(f"a{k}")
        operands.append(mine)
    return FactorRule(sizes, operands, dims, replicated=replicated)


@rule("take")
def _take(op: Op, types: list[TensorType]) -> FactorRule:
    """`out[a..., i..., b...] = table[a..., clamp(idx[i...]), b...]`: the table's other dims
    and the indices' dims pass through to the result; the looked-up axis is kept whole (a
    rank clamps and reads it entire)."""
    table, idx = types
    axis = op.attrs["axis"]
    sizes: dict[str, int] = {"axis": table.shape[axis]}
    t_dims: list[list[str]] = []
    for d, n in enumerate(table.shape):
        name = "axis" if d == axis else f"t{d}"
        sizes[name] = n
        t_dims.append([name])
    i_sizes, i_dims = _dims("i", idx.shape)
    sizes.update(i_sizes)
    result = t_dims[:axis] + i_dims + t_dims[axis + 1 :]
    return FactorRule(sizes, [t_dims, i_dims], result, replicated={"axis"})


@rule("conv2d")
def _conv2d(op: Op, types: list[TensorType]) -> FactorRule:
    """The batch (n) passes through; output channels (o) are shared by the weight and the
    result when groups = 1; input channels, the window and the image are kept whole. An
    epilogue's per-channel operands go with the output channels (a scalar one is whole)."""
    x, w, *extra = types
    sizes = {"n": x.shape[0], "o": w.shape[0]}
    replicated = set()
    if op.attrs.get("groups", 1) != 1:
        replicated.add("o")
    for name, n in (("c", x.shape[1]), ("h", x.shape[2]), ("w", x.shape[3]),
                    ("wc", w.shape[1]), ("kh", w.shape[2]), ("kw", w.shape[3]),
                    ("oh", op.type.shape[2]), ("ow", op.type.shape[3])):  # fmt: skip
        sizes[name] = n
        replicated.add(name)
    return FactorRule(
        sizes,
        [
            [["n"], ["c"], ["h"], ["w"]],
            [["o"], ["wc"], ["kh"], ["kw"]],
            *([["o"]] if e.shape else [] for e in extra),
        ],
        [["n"], ["o"], ["oh"], ["ow"]],
        replicated=replicated,
    )


@rule("kernel")
def _kernel(op: Op, types: list[TensorType]) -> FactorRule:
    """Loop-stage kernels: kept whole (partition the core-stage program)."""
    return _replicated_all(op, types)


@rule("if", "while", "scan")
def _control(op: Op, types: list[TensorType]) -> FactorRule:
    """Control flow ops (IR_SPEC.md section 9): every operand and the result replicated, so
    the partitioner gathers a sharded operand whole first and every rank runs the whole op
    (its functions, which stay ordinary functions of the module) on full values. Sound for any
    body; it distributes nothing."""
    return _replicated_all(op, types)


def check_complete() -> list[str]:
    """The ops without a sharding rule (collectives have none: they are what partitioning
    emits, never what it reads)."""
    return sorted(s.name for s in OPS.values() if s not in RULES and s.family != "collective")
