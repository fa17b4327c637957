"""Hypothesis strategies for whole programs that stress what lives *between* ops: layout ops
(slice, concat, pad, reshape, transpose, broadcast, take) over shared values, read by nested
reductions of different extents (issue 14: the range-blind memo was such a bug), and
meaning-changing mutations of them.

Every value may be an operand of several later ops, so one tensor is read at indices of
different ranges; extents run up to 12, past the small-fold unrolling limit (8), so both
uninterpreted and unrolled folds are built.
"""

from __future__ import annotations

import math

from hypothesis import strategies as st

from gdv.ir.core import Function, Op, Param
from gdv.ir.dtypes import DType
from gdv.ir.types import TensorType

DTYPES = (DType.I32, DType.F32)
KINDS = (
    "slice concat pad reshape transpose broadcast take reduce_sum reduce_max add mul max neg "
    "views views views"
).split()
"""`views` (three times as likely) reads one value through two folds of different extents:
the whole of a dim and a prefix of it (a slice from 0), the shape of issue 14's bug."""


class _Builder:
    def __init__(self, dtype: DType) -> None:
        self.dtype = dtype
        self.params: list[Param] = []
        self.ops: list[Op] = []
        self.types: dict[str, TensorType] = {}

    def fresh(self) -> str:
        return f"v{len(self.ops)}"

    def add(self, name: str, operands: list[str], attrs: dict, shape: tuple[int, ...], dtype=None):
        r = self.fresh()
        t = TensorType(dtype or self.dtype, shape)
        self.ops.append(Op(r, name, operands, attrs, t))
        self.types[r] = t
        return r

    def values(self, dtype: DType | None = None) -> list[str]:
        names = [p.name for p in self.params] + [o.result for o in self.ops]
        return [n for n in names if self.types[n].dtype == (dtype or self.dtype)]


def _step(draw, b: _Builder, kind: str | None = None) -> None:
    kind = kind or draw(st.sampled_from(KINDS))
    pool = [v for v in b.values() if b.types[v].num_elements <= 256]
    recent = [v for v in pool if v in {o.result for o in b.ops[-2:]}]
    x = draw(st.sampled_from(recent if recent and draw(st.booleans()) else pool))
    t = b.types[x]
    shape, rank = t.shape, t.rank
    if kind == "views" and rank and max(shape) >= 2:
        d = draw(st.sampled_from([d for d, n in enumerate(shape) if n >= 2]))
        limit = list(shape)
        limit[d] = draw(st.integers(1, shape[d] - 1))
        part = tuple(limit)
        y = b.add("slice", [x], {"start": [0] * rank, "limit": limit, "stride": [1] * rank}, part)
        red = draw(st.sampled_from(["reduce_sum", "reduce_max"]))
        out = tuple(n for k, n in enumerate(shape) if k != d)
        r1 = b.add(red, [y], {"axes": [d]}, out)
        r2 = b.add(red, [x], {"axes": [d]}, out)
        b.add("add", [r1, r2], {}, out)
    elif kind == "slice" and rank:
        start, limit, stride = [], [], []
        for n in shape:
            s = draw(st.integers(0, max(0, n - 1)))
            lim = draw(st.integers(s, n))
            start.append(s)
            limit.append(lim)
            stride.append(draw(st.integers(1, 3)))
        out = tuple(
            max(0, -(-(lim - s) // k)) for s, lim, k in zip(start, limit, stride, strict=True)
        )
        b.add("slice", [x], {"start": start, "limit": limit, "stride": stride}, out)
    elif kind == "concat" and rank:
        axis = draw(st.integers(0, rank - 1))
        same = [
            v
            for v in pool
            if b.types[v].rank == rank
            and all(b.types[v].shape[d] == shape[d] for d in range(rank) if d != axis)
        ]
        ys = draw(st.lists(st.sampled_from(same), min_size=1, max_size=2))
        out = list(shape)
        out[axis] += sum(b.types[y].shape[axis] for y in ys)
        b.add("concat", [x, *ys], {"axis": axis}, tuple(out))
    elif kind == "pad" and rank:
        low = [draw(st.integers(0, 2)) for _ in shape]
        high = [draw(st.integers(0, 2)) for _ in shape]
        value = (
            draw(st.sampled_from([0, 1, -3]))
            if b.dtype.is_int
            else draw(st.sampled_from([0.0, -0.0, 1.0, -2.5]))
        )
        out = tuple(n + lo + hi for n, lo, hi in zip(shape, low, high, strict=True))
        b.add("pad", [x], {"low": low, "high": high, "value": value}, out)
    elif kind == "reshape":
        n = t.num_elements
        dims = [d for d in range(1, n + 1) if n % d == 0] if n else [0]
        first = draw(st.sampled_from(dims))
        out = (first, n // first) if first else (0, 3)
        if n == 0:
            out = tuple(shape)
        b.add("reshape", [x], {}, out)
    elif kind == "transpose" and rank >= 2:
        perm = draw(st.permutations(list(range(rank))))
        b.add("transpose", [x], {"perm": list(perm)}, tuple(shape[p] for p in perm))
    elif kind == "broadcast":
        extra = draw(st.integers(1, 3))
        dims = list(range(1, rank + 1))
        b.add("broadcast", [x], {"dims": dims}, (extra, *shape))
    elif kind == "take" and rank and shape[0]:
        n_idx = draw(st.integers(1, 4))
        table_rows = shape[0]
        idx_values = [draw(st.integers(-1, table_rows)) for _ in range(n_idx)]
        c = b.add("constant", [], {"value": idx_values}, (n_idx,), DType.I32)
        b.add("take", [x, c], {"axis": 0}, (n_idx, *shape[1:]))
    elif kind in ("reduce_sum", "reduce_max") and rank:
        axes = sorted(draw(st.sets(st.integers(0, rank - 1), min_size=1)))
        out = tuple(n for d, n in enumerate(shape) if d not in axes)
        b.add(kind, [x], {"axes": axes}, out)
    elif kind in ("add", "mul", "max"):
        same = [v for v in pool if b.types[v].shape == shape]
        y = draw(st.sampled_from(same))
        b.add(kind, [x, y], {}, shape)
    elif kind == "neg" and b.dtype.is_float:
        b.add("neg", [x], {}, shape)


@st.composite
def layout_programs(draw, focused: bool = False) -> Function:
    """A function of 1-2 parameters and about 4-16 ops, returning its last value and a
    reduction of an earlier one (so several folds of different extents read shared values).

    `focused`: the first op is a concat (of two parameters) or a pad along dim 1, read next
    through a prefix of that dim that lies in its first part, and through the whole dim:
    exactly where a range-blind memo hides the rest of the dim."""
    dtype = draw(st.sampled_from(DTYPES))
    b = _Builder(dtype)
    rows, cols = draw(st.integers(1, 3)), draw(st.integers(2, 12))
    for k in range(2 if focused else draw(st.integers(1, 2))):
        shape = (rows, cols) if focused else (draw(st.integers(1, 3)), draw(st.integers(2, 12)))
        p = Param(f"x{k}", TensorType(dtype, shape))
        b.params.append(p)
        b.types[p.name] = p.type
    if focused:
        if draw(st.booleans()):
            b.add("concat", ["x0", "x1"], {"axis": 1}, (rows, 2 * cols))
        else:
            value = 0 if dtype.is_int else 0.0
            high = draw(st.integers(1, cols))
            attrs = {"low": [0, 0], "high": [0, high], "value": value}
            b.add("pad", ["x0"], attrs, (rows, cols + high))
        x, n = b.ops[-1].result, b.ops[-1].type.shape[1]
        prefix = draw(st.integers(1, cols))
        y = b.add(
            "slice",
            [x],
            {"start": [0, 0], "limit": [rows, prefix], "stride": [1, 1]},
            (rows, prefix),
        )
        red = draw(st.sampled_from(["reduce_sum", "reduce_max"]))
        r1 = b.add(red, [y], {"axes": [1]}, (rows,))
        r2 = b.add(red, [x], {"axes": [1]}, (rows,))
        b.add("add", [r1, r2], {}, (rows,))
        assert n > prefix
    else:
        # A value whose elements are chosen statically by index range (concat or pad), read
        # next through two views: the ops whose encoding depends on the ranges of indices.
        _step(draw, b, draw(st.sampled_from(["concat", "pad"])))
        _step(draw, b, "views")
    for _ in range(draw(st.integers(0, 3) if focused else st.integers(2, 8))):
        _step(draw, b)
    last = b.ops[-1].result if b.ops else b.params[0].name
    other = draw(st.sampled_from(b.values()))
    t = b.types[other]
    if t.rank:
        other = b.add("reduce_sum", [other], {"axes": list(range(t.rank))}, ())
    returns = [last, other]
    return Function("main", b.params, [b.types[r] for r in returns], b.ops, returns)


def mutations(fn: Function, first_only: bool = False) -> list[tuple[str, Function]]:
    """Meaning-changing edits of `fn`, each still well-typed (the caller re-verifies): swap a
    non-commutative operand pair, change a constant or pad value, a slice bound or start, a
    reduction axis, a concat order, a transpose's perm, a reduce kind."""
    out: list[tuple[str, Function]] = []

    def with_op(k: int, op: Op, why: str) -> None:
        ops = list(fn.ops)
        ops[k] = op
        out.append((why, Function(fn.name, fn.params, fn.results, ops, fn.returns)))

    for k, op in enumerate(fn.ops[:1] if first_only else fn.ops):
        a = op.attrs
        if op.name == "concat" and len(op.operands) >= 2:
            with_op(k, Op(op.result, op.name, op.operands[::-1], a, op.type), "concat order")
            # Another value of the same type in place of a later operand (issue 14's case:
            # the part only the longer fold reads).
            types = fn.types()
            for j in range(1, len(op.operands)):
                for v in [p.name for p in fn.params] + [o.result for o in fn.ops[:k]]:
                    if v != op.operands[j] and types[v] == types[op.operands[j]]:
                        operands = list(op.operands)
                        operands[j] = v
                        with_op(k, Op(op.result, op.name, operands, a, op.type), "concat operand")
                        break
        if op.name == "pad":
            v = a["value"]
            nv = (v + 1) if isinstance(v, int) else (v + 1.5)
            with_op(
                k, Op(op.result, op.name, op.operands, {**a, "value": nv}, op.type), "pad value"
            )
        if op.name == "slice":
            for d, (s, lim) in enumerate(zip(a["start"], a["limit"], strict=True)):
                if lim - s >= 1 and lim < _dim(fn, op.operands[0], d):
                    st_ = list(a["start"])
                    li = list(a["limit"])
                    st_[d] += 1
                    li[d] += 1
                    with_op(
                        k,
                        Op(
                            op.result,
                            op.name,
                            op.operands,
                            {**a, "start": st_, "limit": li},
                            op.type,
                        ),
                        "slice window shifted",
                    )
                    break
        if op.name == "constant" and isinstance(a["value"], list):
            vals = list(a["value"])
            vals[0] = vals[0] + 1
            with_op(
                k, Op(op.result, op.name, op.operands, {**a, "value": vals}, op.type), "constant"
            )
        if op.name == "transpose" and len(a["perm"]) >= 2:
            perm = list(a["perm"])
            perm[0], perm[1] = perm[1], perm[0]
            shape = list(op.type.shape)
            shape[0], shape[1] = shape[1], shape[0]
            if shape == list(op.type.shape):
                with_op(
                    k, Op(op.result, op.name, op.operands, {**a, "perm": perm}, op.type), "perm"
                )
        if op.name in ("reduce_sum", "reduce_max"):
            other = "reduce_max" if op.name == "reduce_sum" else "reduce_sum"
            with_op(k, Op(op.result, other, op.operands, a, op.type), "reduce kind")
        if op.name in ("add", "mul", "max") and op.operands[0] != op.operands[1]:
            new = {"add": "mul", "mul": "add", "max": "add"}[op.name]
            with_op(k, Op(op.result, new, op.operands, a, op.type), f"{op.name} -> {new}")
    return out


def _dim(fn: Function, name: str, d: int) -> int:
    types = fn.types()
    return types[name].shape[d]


def size(fn: Function) -> int:
    """Elements of every value, all together (to keep evaluation cheap)."""
    return sum(p.type.num_elements for p in fn.params) + sum(
        math.prod(o.type.shape) for o in fn.ops
    )
