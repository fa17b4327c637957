"""Random well-typed programs for `gdv fuzz`, Csmith-style (issue 18).

`programs()` is a hypothesis strategy of one-function modules (`@main`) whose ops chain: each
operand is an earlier value of the right type or a fresh parameter, and ops pick their operand
types from the values already defined where they can. Names are short (`%p0`, `%v3`), every
tensor holds at most `MAX_ELEMENTS` elements, and dims come from `DIMS` (weighted toward small,
with 0 and 1 and remainders like 7, 17, 33), so programs run fast and hit edge cases. Each op's
result type comes from its own type rule (`spec.infer`); a draw the rule rejects is retried.
`sample()` draws a deterministic list of programs, `inputs()` seeded inputs with float specials.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import ml_dtypes
import numpy as np
from hypothesis import HealthCheck, Phase, given, settings
from hypothesis import seed as hypothesis_seed
from hypothesis import strategies as st

from gdv.backends.reference.inputs import random_inputs
from gdv.backends.reference.interpreter import entry_function
from gdv.ir.core import Function, Module, Op, Param
from gdv.ir.dtypes import ALL_DTYPES, FLOAT_DTYPES, INT_DTYPES, DType
from gdv.ir.ops import REGISTRY, OpTypeError
from gdv.ir.ops.collective import COLLECTIVES
from gdv.ir.ops.control import CONTROL
from gdv.ir.ops.elementwise import (
    BINARY_DOCS,
    BITWISE_DOCS,
    CMP_DIRECTIONS,
    INT_BINARY,
    SHIFT_DOCS,
    UNARY_FLOAT_DOCS,
)
from gdv.ir.ops.reduce import REDUCE_DOCS
from gdv.ir.printer import print_module
from gdv.ir.types import TensorType

DIMS = (0, 1, 2, 3, 4, 5, 7, 8, 16, 17, 33)
MAX_ELEMENTS = 4096
"""The most elements any parameter or op result holds."""
MAX_RANK = 4
NUMERIC = tuple(d for d in ALL_DTYPES if not d.is_bool)
INF, NAN = float("inf"), float("nan")
RANGES = {True: [[0, 1], [-10, 10], [1, 100], [0.5, 0.5]], False: [[0, 3], [-2, 2], [5, 9]]}
"""Declared `range` attributes some parameters get (float ones, int ones)."""
EXCLUDED: dict[str, str] = {
    "kernel": "loop-stage op: needs a body function and in-bounds affine maps; gdv compile "
    "makes kernels itself from the graph ops, which is what fuzzing exercises",
    **{
        spec.name: "collective: valid only in an SPMD function (a mesh attribute); the SPMD "
        "claims have their own tests (tests/validate/test_spmd.py)"
        for spec in COLLECTIVES.specs()
    },
    **{
        spec.name: "control flow: names body functions of the module (IR_SPEC.md section 9), "
        "not drawn in one-function programs; tests/backends/c/test_control.py runs drawn "
        "programs as branches and scan bodies"
        for spec in CONTROL.specs()
    },
}

Drawn = tuple[list[TensorType], dict[str, Any], TensorType | None]
"""Operand types, attributes, and the written result type (read by some type rules only)."""

# Half the draws are 1..4, the other half any of DIMS: small dims dominate, edges still come.
dims = st.one_of(st.sampled_from((1, 2, 3, 4)), st.sampled_from(DIMS))


class Scope:
    """The values defined so far, and type draws that prefer their types (so ops chain)."""

    def __init__(self, draw: Callable) -> None:
        self.draw = draw
        self.values: list[tuple[str, TensorType]] = []

    def shape(self, min_rank: int = 0, max_rank: int = 3) -> tuple[int, ...]:
        """A fresh shape of at most MAX_ELEMENTS elements."""
        out: list[int] = []
        for _ in range(self.draw(st.integers(min_rank, max_rank))):
            size = int(np.prod(out))
            d = self.draw(dims)
            if size * d > MAX_ELEMENTS:
                d = self.draw(st.sampled_from([x for x in DIMS if size * x <= MAX_ELEMENTS]))
            out.append(d)
        return tuple(out)

    def fresh(self, dtypes: Sequence[DType], min_rank: int = 0, max_rank: int = 3) -> TensorType:
        return TensorType(self.draw(st.sampled_from(list(dtypes))), self.shape(min_rank, max_rank))

    def type(self, dtypes: Sequence[DType], min_rank: int = 0, max_rank: int = 3) -> TensorType:
        """An earlier value's type that fits (three times in four, when one does), or fresh."""
        fits = [t for _, t in self.values if t.dtype in dtypes and min_rank <= t.rank <= max_rank]
        if fits and self.draw(st.integers(0, 3)) < 3:
            return self.draw(st.sampled_from(fits))
        return self.fresh(dtypes, min_rank, max_rank)

    def bind(self, t: TensorType, taken: list[str], params: list[Param]) -> str:
        """An earlier value of type `t` (preferring one this op does not read yet), or a new
        parameter, sometimes with a declared `range`."""
        same = [n for n, v in self.values if v == t]
        other = [n for n in same if n not in taken]
        if other and self.draw(st.integers(0, 3)) < 3 or same and not self.draw(st.integers(0, 3)):
            return self.draw(st.sampled_from(other or same))
        attrs = {}
        if not t.dtype.is_bool and self.draw(st.integers(0, 4)) == 4:
            attrs["range"] = self.draw(st.sampled_from(RANGES[t.dtype.is_float]))
        params.append(Param(f"p{len(params)}", t, attrs))
        self.values.append((params[-1].name, t))
        return params[-1].name


def literal(draw: Callable, dtype: DType) -> Any:
    """A literal of `dtype`: specials and small values for floats, extremes for ints."""
    if dtype.is_bool:
        return draw(st.booleans())
    if dtype.is_int:
        small = [v for v in (0, 1, -1, 2, 3, -7) if dtype.int_min <= v <= dtype.int_max]
        return draw(st.sampled_from([*small, dtype.int_min, dtype.int_max]))
    return draw(st.sampled_from([0.0, -0.0, 1.0, -1.0, 0.5, 2.5, -3.0, 1e-30, 1e4, INF, -INF, NAN]))


# --- per-op generators: each takes the scope and returns what `Drawn` describes -------------


def _unary(s: Scope) -> Drawn:
    return [s.type(FLOAT_DTYPES)], {}, None


def _binary(name: str) -> Callable[[Scope], Drawn]:
    allowed = NUMERIC if name in (*INT_BINARY, "rem") else FLOAT_DTYPES
    allowed = INT_DTYPES if name == "mod" else allowed

    def gen(s: Scope) -> Drawn:
        t = s.type(allowed)
        return [t, t], {}, None

    return gen


def _bitwise(name: str) -> Callable[[Scope], Drawn]:
    # integers (and i1 but for the shifts); bitwise_not has one operand
    allowed = INT_DTYPES if name in SHIFT_DOCS else [*INT_DTYPES, DType.I1]

    def gen(s: Scope) -> Drawn:
        t = s.type(allowed)
        return [t] * (1 if name == "bitwise_not" else 2), {}, None

    return gen


def _cmp(s: Scope) -> Drawn:
    t = s.type(ALL_DTYPES)
    return [t, t], {"dir": s.draw(st.sampled_from(CMP_DIRECTIONS))}, None


def _select(s: Scope) -> Drawn:
    t = s.type(ALL_DTYPES)
    return [t.with_dtype(DType.I1), t, t], {}, None


def _convert(s: Scope) -> Drawn:
    t = s.type(ALL_DTYPES)
    return [t], {}, t.with_dtype(s.draw(st.sampled_from(ALL_DTYPES)))


def _constant(s: Scope) -> Drawn:
    t = s.fresh(ALL_DTYPES)
    value: Any = literal(s.draw, t.dtype)
    if 0 < t.num_elements <= 64 and t.rank and s.draw(st.booleans()):
        flat = [literal(s.draw, t.dtype) for _ in range(t.num_elements)]
        value = np.array(flat, dtype=object).reshape(t.shape).tolist()
    return [], {"value": value}, t


def _iota(s: Scope) -> Drawn:
    t = s.fresh(NUMERIC, min_rank=1)
    return [], {"axis": s.draw(st.integers(0, t.rank - 1))}, t


def _broadcast(s: Scope) -> Drawn:
    x = s.type(ALL_DTYPES)
    rank = s.draw(st.integers(x.rank, min(MAX_RANK, x.rank + 2)))
    kept = sorted(s.draw(st.permutations(range(rank)))[: x.rank])
    shape = [s.draw(dims) for _ in range(rank)]
    for d, size in zip(kept, x.shape, strict=True):
        shape[d] = size if size != 1 else s.draw(st.sampled_from([1, 2, 3]))
    return [x], {"dims": kept}, x.with_shape(shape)


def _factor(s: Scope, n: int) -> tuple[int, ...]:
    """A random shape of `n` elements, rank at most MAX_RANK."""
    if n == 0:
        return tuple(s.draw(st.permutations([0, *s.shape(max_rank=2)])))
    rank = s.draw(st.integers(0 if n == 1 else 1, MAX_RANK))
    out: list[int] = []
    for _ in range(rank - 1):
        out.append(s.draw(st.sampled_from([d for d in range(1, n + 1) if n % d == 0])))
        n //= out[-1]
    return (*out, n) if rank else ()


def _reshape(s: Scope) -> Drawn:
    t = s.type(ALL_DTYPES)
    return [t], {}, t.with_shape(_factor(s, t.num_elements))


def _transpose(s: Scope) -> Drawn:
    t = s.type(ALL_DTYPES)
    return [t], {"perm": list(s.draw(st.permutations(range(t.rank))))}, None


def _slice(s: Scope) -> Drawn:
    t = s.type(ALL_DTYPES)
    start = [s.draw(st.integers(0, n)) for n in t.shape]
    limit = [s.draw(st.integers(a, n)) for a, n in zip(start, t.shape, strict=True)]
    stride = [s.draw(st.integers(1, 3)) for _ in t.shape]
    return [t], {"start": start, "limit": limit, "stride": stride}, None


def _concat(s: Scope) -> Drawn:
    t = s.type(ALL_DTYPES, min_rank=1)
    axis = s.draw(st.integers(0, t.rank - 1))
    others = [list(t.shape) for _ in range(s.draw(st.integers(0, 2)))]
    for shape in others:
        shape[axis] = s.draw(dims)
    return [t, *(t.with_shape(x) for x in others)], {"axis": axis}, None


def _pad(s: Scope) -> Drawn:
    t = s.type(ALL_DTYPES)
    low = [s.draw(st.integers(0, 2)) for _ in t.shape]
    high = [s.draw(st.integers(0, 2)) for _ in t.shape]
    return [t], {"low": low, "high": high, "value": literal(s.draw, t.dtype)}, None


def _reduce(s: Scope) -> Drawn:
    t = s.type(NUMERIC)
    axes = list(s.draw(st.permutations(range(t.rank))))
    return [t], {"axes": axes[: s.draw(st.integers(0, t.rank))]}, None


def _result_dtype(s: Scope, dtype: DType) -> DType:
    return s.draw(st.sampled_from(FLOAT_DTYPES)) if dtype.is_float else dtype


def _dot(s: Scope) -> Drawn:
    """The lhs chains; each of its dims is a batch, contracting or free dim."""
    a = s.type(NUMERIC, max_rank=3)
    roles = [s.draw(st.sampled_from("bcf")) for _ in a.shape]
    pick = {r: [i for i, x in enumerate(roles) if x == r] for r in "bcf"}
    b_free = list(s.shape(max_rank=1))
    b_dims = [("b", i) for i in pick["b"]] + [("c", i) for i in pick["c"]]
    b_dims += [("f", k) for k in range(len(b_free))]
    b_order = s.draw(st.permutations(b_dims))
    b_shape = [b_free[i] if r == "f" else a.shape[i] for r, i in b_order]
    attrs: dict[str, Any] = {
        "lhs_batch": pick["b"],
        "rhs_batch": [b_order.index(("b", i)) for i in pick["b"]],
        "lhs_contract": pick["c"],
        "rhs_contract": [b_order.index(("c", i)) for i in pick["c"]],
    }
    if a.dtype.is_float and s.draw(st.booleans()):
        attrs["acc"] = s.draw(st.sampled_from(FLOAT_DTYPES))
    shape = [a.shape[i] for i in pick["b"] + pick["f"]] + b_free
    result = TensorType(_result_dtype(s, a.dtype), tuple(shape))
    return [a, a.with_shape(b_shape)], attrs, result


def _matmul(s: Scope) -> Drawn:
    a = s.type(NUMERIC, min_rank=2, max_rank=3)
    n = s.draw(dims)
    b = a.with_shape((*a.shape[:-2], a.shape[-1], n))
    return [a, b], {}, TensorType(_result_dtype(s, a.dtype), (*a.shape[:-1], n))


def _take(s: Scope) -> Drawn:
    table = s.type(ALL_DTYPES, min_rank=1)
    axis = s.draw(st.integers(0, table.rank - 1))
    idx = s.type(INT_DTYPES, max_rank=2)
    if table.shape[axis] == 0 and idx.num_elements:
        idx = idx.with_shape((0,))
    return [table, idx], {"axis": axis}, None


def _conv2d(s: Scope) -> Drawn:
    dtype = s.draw(st.sampled_from(NUMERIC))
    groups = s.draw(st.integers(1, 2))
    c, o = groups * s.draw(st.integers(0, 2)), groups * s.draw(st.integers(1, 2))
    stride = [s.draw(st.integers(1, 2)) for _ in range(2)]
    dilation = [s.draw(st.integers(1, 2)) for _ in range(2)]
    padding = [[s.draw(st.integers(0, 1)), s.draw(st.integers(0, 1))] for _ in range(2)]
    k = [s.draw(st.integers(1, 3)) for _ in range(2)]
    hw = [
        max(dilation[i] * (k[i] - 1) + 1 - sum(padding[i]), 0) + s.draw(st.sampled_from(DIMS[:8]))
        for i in range(2)
    ]
    x = TensorType(dtype, (s.draw(st.integers(0, 2)), c, *hw))
    w = TensorType(dtype, (o, c // groups, *k))
    attrs = {"stride": stride, "padding": padding, "dilation": dilation, "groups": groups}
    return [x, w], attrs, None


def _axis(s: Scope) -> Drawn:
    t = s.type(FLOAT_DTYPES, min_rank=1)
    return [t], {"axis": s.draw(st.integers(0, t.rank - 1))}, None


def _flags(s: Scope, names: tuple[str, ...]) -> dict[str, Any]:
    """Optional boolean attributes: absent, false or true."""
    out: dict[str, Any] = {}
    for name in names:
        value = s.draw(st.sampled_from([None, False, True]))
        if value is not None:
            out[name] = value
    return out


def _scan(s: Scope) -> Drawn:
    t = s.type(NUMERIC, min_rank=1)
    attrs = {"axis": s.draw(st.integers(0, t.rank - 1)), **_flags(s, ("exclusive", "reverse"))}
    return [t], attrs, None


def _argsort(s: Scope) -> Drawn:
    t = s.type(NUMERIC, min_rank=1)
    return [t], {"axis": s.draw(st.integers(0, t.rank - 1)), **_flags(s, ("descending",))}, None


def _layer_norm(s: Scope) -> Drawn:
    x = s.type(FLOAT_DTYPES)
    axes = sorted(s.draw(st.sets(st.integers(0, x.rank - 1)))) if x.rank else []
    norm = x.with_shape([x.shape[a] for a in axes])
    eps = s.draw(st.sampled_from([1e-5, 1e-12, 0.0, 1]))
    return [x, norm, norm], {"axes": axes, "eps": eps}, None


def _gelu(s: Scope) -> Drawn:
    return [s.type(FLOAT_DTYPES)], {"approximate": s.draw(st.sampled_from(["none", "tanh"]))}, None


GENERATORS: dict[str, Callable[[Scope], Drawn]] = {
    **dict.fromkeys(UNARY_FLOAT_DOCS, _unary),
    **{name: _binary(name) for name in BINARY_DOCS},
    **{name: _bitwise(name) for name in (*BITWISE_DOCS, *SHIFT_DOCS)},
    "rem": _binary("rem"),
    "mod": _binary("mod"),
    **dict.fromkeys(REDUCE_DOCS, _reduce),
    **dict(cmp=_cmp, select=_select, convert=_convert, constant=_constant, iota=_iota),
    **dict(broadcast=_broadcast, reshape=_reshape, transpose=_transpose, slice=_slice),
    **dict(concat=_concat, pad=_pad, dot=_dot, matmul=_matmul, take=_take, conv2d=_conv2d),
    **dict(softmax=_axis, log_softmax=_axis, layer_norm=_layer_norm, gelu=_gelu),
    **dict(cumsum=_scan, cumprod=_scan, argsort=_argsort),
}
OPS: tuple[str, ...] = tuple(sorted(GENERATORS))
"""The ops `programs()` generates: every registry op but those in EXCLUDED."""


def programs(ops: Sequence[str] | None = None, max_ops: int = 8) -> st.SearchStrategy[Module]:
    """Modules with one function `@main` of 1..max_ops ops drawn from `ops` (default OPS),
    returning every op result no later op reads. Unknown op names raise ValueError."""
    names = sorted(OPS if ops is None else ops)
    unknown = set(names) - set(OPS)
    if unknown or not names or max_ops < 1:
        raise ValueError(f"cannot generate ops {sorted(unknown) or names} with max_ops {max_ops}")
    return _programs(names, max_ops)


@st.composite
def _programs(draw: Callable, names: list[str], max_ops: int) -> Module:
    s = Scope(draw)
    params: list[Param] = []
    body: list[Op] = []
    for _ in range(draw(st.integers(1, max_ops))):
        name = draw(st.sampled_from(names))
        for _attempt in range(3):  # a draw the type rule rejects is tried again
            operand_types, attrs, written = GENERATORS[name](s)
            try:
                result = REGISTRY[name].infer(operand_types, attrs, written or operand_types[0])
            except OpTypeError:
                continue
            if result.num_elements <= MAX_ELEMENTS and result.rank <= MAX_RANK:
                break
        else:
            continue
        operands: list[str] = []
        for t in operand_types:
            operands.append(s.bind(t, operands, params))
        body.append(Op(f"v{len(body)}", name, operands, attrs, result))
        s.values.append((body[-1].result, result))
    read = {x for op in body for x in op.operands}
    returns = [(op.result, op.type) for op in body if op.result not in read]
    results, returned = [t for _, t in returns], [n for n, _ in returns]
    fn = Function("main", params, results, body, returned, results_parenthesized=len(returns) != 1)
    return Module([fn], "<fuzz>")


def sample(
    seed: int, count: int, ops: Sequence[str] | None = None, max_ops: int = 8
) -> list[Module]:
    """`count` distinct programs drawn by hypothesis from `seed`: the same arguments give the
    same programs (with the same hypothesis version); fewer only if there are no more."""
    strategy = programs(ops, max_ops)
    out: list[Module] = []
    seen: set[str] = set()

    def collect(module: Module) -> None:
        text = print_module(module)
        if len(out) < count and text not in seen:
            seen.add(text)
            out.append(module)

    for round in range(8):  # hypothesis draws repeats of small programs: top up
        if len(out) >= count:
            break
        run = given(strategy)(collect)
        run = settings(
            max_examples=count - len(out) + 10,
            database=None,
            phases=[Phase.generate],
            derandomize=False,
            deadline=None,
            suppress_health_check=list(HealthCheck),
        )(run)
        hypothesis_seed(f"{seed}.{round}")(run)()
    return out


def _specials(dtype: DType) -> list[float]:
    """The special values `inputs` mixes in for `dtype` (not i1)."""
    if not dtype.is_float:
        return [v for v in (dtype.int_min, dtype.int_max, 0, -1, 1) if v >= dtype.int_min]
    info = ml_dtypes.finfo(dtype.np)
    tiny, big = float(info.smallest_subnormal), float(info.max)
    return [NAN, INF, -INF, -0.0, 0.0, tiny, -tiny, big, -big, 1.0, -1.0]


def inputs(fn: Function | Module, seed: int) -> dict[str, np.ndarray]:
    """Seeded inputs for `fn`'s parameters: `random_inputs` (within declared ranges), with about
    a quarter of the positions replaced by specials of the dtype (NaN, ±inf, ±0.0, subnormals,
    ±max, ±1 for floats; min, max for ints) that lie in the parameter's range, if declared."""
    fn = entry_function(fn)
    out = random_inputs(fn, seed)
    rng = np.random.default_rng([seed, 18])
    for p in fn.params:
        if p.type.dtype.is_bool or not p.type.num_elements:
            continue
        specials = _specials(p.type.dtype)
        if p.range is not None:  # NaN lies in no range
            specials = [v for v in specials if p.range[0] <= v <= p.range[1]]
        if not specials:
            continue
        x = out[p.name].reshape(-1).copy()
        where = np.flatnonzero(rng.random(x.size) < 0.25)
        picked = np.array(specials, dtype=np.float64 if p.type.dtype.is_float else p.type.dtype.np)
        with np.errstate(all="ignore"):
            x[where] = picked[rng.integers(0, len(specials), where.size)].astype(x.dtype)
        out[p.name] = x.reshape(p.type.shape)
    return out
