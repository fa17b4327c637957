"""Every op has every rule (DESIGN.md, "One op, one column per layer"), and its traits agree
with what the layers do.

A column is a table keyed by the op's spec object; the rule for an op must live in the layer's
file of the op's family name (`backends/reference/reduce.py` for `reduce_sum`, ...). The C
scalar column (`backends/c/elementwise.py`, `SCALAR`) is asked of every op a kernel body may
hold. `test_a_scratch_op_needs_every_column` registers an op for the length of one test and
shows each missing entry is caught.
"""

from __future__ import annotations

import importlib
import math
from collections.abc import Callable, Iterable, Iterator
from typing import Any

import numpy as np
import pytest

from gdv.ir import ops
from gdv.ir.dtypes import FLOAT_DTYPES, INT_DTYPES, DType
from gdv.ir.ops import OpSpec, OpTypeError
from gdv.ir.types import TensorType


def _every_op(spec: OpSpec) -> bool:
    return True


def _body_op(spec: OpSpec) -> bool:
    return spec.body_legal


# (layer, module holding the table, table name, package of the family files, ops it must cover)
LAYERS: list[tuple[str, str, str, str, Callable[[OpSpec], bool]]] = [
    (
        "reference meaning",
        "gdv.backends.reference.registry",
        "KERNELS",
        "gdv.backends.reference",
        _every_op,
    ),
    (
        "SMT meaning",
        "gdv.validate.semantics.registry",
        "SEMANTICS",
        "gdv.validate.semantics",
        _every_op,
    ),
    ("error bound", "gdv.validate.bounds.registry", "RULES", "gdv.validate.bounds", _every_op),
    ("C lowering", "gdv.backends.c.registry", "RULES", "gdv.backends.c", _every_op),
    ("C scalar code", "gdv.backends.c.elementwise", "SCALAR", "gdv.backends.c", _body_op),
]


def _table(module: str, name: str, package: str) -> dict:
    pkg = importlib.import_module(package)  # importing the package registers the family files
    load_all = getattr(pkg, "load_all", None)
    if load_all is not None:  # gdv.validate.semantics loads its family files on demand
        load_all()
    return getattr(importlib.import_module(module), name)


def column_problems(layer: str, module: str, table: str, package: str, applies) -> list[str]:
    """What is wrong with one column: ops without an entry, entries not keyed by a spec or
    living outside the family file of their op."""
    rules = _table(module, table, package)
    out = [
        f"{s.name} has no {layer} rule" for s in ops.all_specs() if applies(s) and s not in rules
    ]
    for spec, rule in rules.items():
        if not isinstance(spec, OpSpec):
            out.append(f"the {layer} table is keyed by {spec!r}, not a spec")
            continue
        if ops.get(spec.name) is not spec:
            out.append(f"the {layer} table holds {spec.name}, which is not a registered op")
        home = rule.__module__.rsplit(".", 1)[-1]
        if home != spec.family:
            out.append(
                f"the {layer} rule of {spec.name} lives in {rule.__module__}, expected "
                f"{package}.{spec.family}"
            )
        if not applies(spec):
            out.append(f"the {layer} table holds {spec.name}, which it does not cover")
    return out


def trait_problems() -> list[str]:
    """Traits that contradict each other or the layers (see the tests below for each)."""
    from gdv.ir.ops.kernel import COMBINERS

    out = []
    for s in ops.all_specs():
        if s.transcendental and s.int_legal:
            out.append(f"{s.name} is transcendental and integer-legal")
        if s.body_legal and (s.family != "elementwise" or s.stage != "core"):
            out.append(f"{s.name} is body-legal but not a core elementwise op")
        if s.commutative and not (
            s.family == "elementwise" and s.min_operands == 2 == s.max_operands
        ):
            out.append(f"{s.name} is commutative but not a binary elementwise op")
        if s.combiner is not None:
            if s.family != "reduce":
                out.append(f"{s.name} has a combiner but is not a reduction")
            c = ops.get(s.combiner.op)
            if c is None or not (c.body_legal and c.commutative and c.int_legal):
                out.append(f"{s.name} folds with {s.combiner.op}, not a body-legal op")
            if s.combiner.op not in COMBINERS:
                out.append(f"{s.name}'s combiner {s.combiner.op} is not a kernel combiner")
    for layer in LAYERS:
        out += column_problems(*layer)
    return out


# --- the columns ------------------------------------------------------------------------------


def test_every_family_has_specs() -> None:
    for family in ops.FAMILIES:
        assert ops.by_family(family), f"no op in family {family}"


def test_type_rules_are_complete() -> None:
    for spec in ops.all_specs():
        assert callable(spec.infer), spec
        assert spec.doc.strip(), f"{spec.name} has no docstring of its meaning"
        assert spec.is_composite == (spec.decompose is not None), spec.name


@pytest.mark.parametrize("layer", LAYERS, ids=[x[0] for x in LAYERS])
def test_every_op_has_a_rule_in_its_family_file(layer) -> None:
    problems = column_problems(*layer)
    assert not problems, problems


def test_rules_register_against_specs_not_names() -> None:
    from gdv.backends.c.registry import lowering
    from gdv.backends.reference.registry import kernel
    from gdv.validate.bounds.registry import rule as bound_rule
    from gdv.validate.semantics.registry import rule as smt_rule

    for register in (smt_rule, bound_rule, kernel, lowering):
        with pytest.raises(TypeError, match="OpSpec"):
            register("add")(lambda *a: None)


# --- the traits -------------------------------------------------------------------------------


def test_traits_are_consistent() -> None:
    problems = trait_problems()
    assert not problems, problems


def test_derived_name_sets_follow_the_traits() -> None:
    """The names other layers import are derived from the specs, not kept by hand."""
    from gdv.ir.ops.elementwise import INT_BINARY, TRANSCENDENTAL
    from gdv.ir.ops.kernel import BODY_OPS, COMBINER_OP, FOLD_KIND
    from gdv.passes.lower_to_kernels import ELEMENTWISE

    specs = list(ops.all_specs())
    assert set(TRANSCENDENTAL) == {s.name for s in specs if s.transcendental}
    assert set(TRANSCENDENTAL) == {
        "exp",
        "log",
        "rsqrt",
        "tanh",
        "sigmoid",
        "erf",
        "sin",
        "cos",
        "pow",
        "tan",
        "asin",
        "acos",
        "atan",
        "sinh",
        "cosh",
        "asinh",
        "acosh",
        "atanh",
    }
    assert set(BODY_OPS) == {s.name for s in specs if s.body_legal}
    assert set(ELEMENTWISE) == {s.name for s in specs if s.body_legal and s.min_operands}
    assert set(INT_BINARY) == {"add", "sub", "mul", "div", "max", "min"}
    assert COMBINER_OP == {"add": "add", "max": "max", "min": "min"}
    assert FOLD_KIND == {s.combiner.op: s.combiner.fold for s in specs if s.combiner}


def _const_at(c):
    return lambda i: c


def test_body_legality_is_what_the_c_scalar_and_smt_rules_cover() -> None:
    """Every body-legal op has C scalar code and a scalar SMT meaning: applied to rank-0
    operands, its rule gives a rank-0 term of the result's sort."""
    import z3

    from gdv.backends.c.elementwise import SCALAR
    from gdv.ir.core import Op
    from gdv.validate.semantics.registry import SEMANTICS, Ctx, Tensor
    from gdv.validate.semantics.values import Values

    _table("gdv.validate.semantics.registry", "SEMANTICS", "gdv.validate.semantics")
    assert set(SCALAR) == {s for s in ops.all_specs() if s.body_legal}
    for spec in ops.all_specs():
        if not spec.body_legal:
            continue
        dtype = DType.F32
        n = spec.min_operands
        attrs: dict[str, Any] = {"cmp": {"dir": "lt"}, "constant": {"value": 1.5}}.get(
            spec.name, {}
        )
        if spec.name in ("bitwise_and", "bitwise_or", "bitwise_xor", "bitwise_not"):
            dtype = DType.I32  # integer-only ops (and i1); shifts below
        if spec.name in ("shift_left", "shift_right", "mod"):
            dtype = DType.I8
        types = [TensorType(dtype, ())] * n
        if spec.name == "select":
            types = [TensorType(DType.I1, ()), *types[1:]]
        result = spec.infer(types, attrs, TensorType(dtype, ()))
        values = Values("fp")
        consts = [z3.Const(f"x{k}", values.sort(t.dtype)) for k, t in enumerate(types)]
        xs = [Tensor(t, _const_at(c)) for t, c in zip(types, consts, strict=True)]
        op = Op("r", spec.name, [f"x{k}" for k in range(n)], attrs, result)
        term = SEMANTICS[spec](Ctx(values), op, xs).at(())
        assert term.sort() == values.sort(result.dtype), spec.name


def test_integer_legality_is_the_type_rule() -> None:
    """For the elementwise arithmetic (and cmp), the type rule accepts integer operands exactly
    when the spec says `int_legal`."""
    checked = 0
    for spec in ops.by_family("elementwise"):
        if spec.name in ("select", "convert", "constant", "iota"):
            continue  # any dtype (select, convert) or generators: nothing to compare
        attrs = {"dir": "lt"} if spec.name == "cmp" else {}
        for dtype in INT_DTYPES:
            t = TensorType(dtype, (3,))
            try:
                spec.infer([t] * spec.min_operands, attrs, t)
                accepted = True
            except OpTypeError:
                accepted = False
            assert accepted == spec.int_legal, (spec.name, dtype)
            checked += 1
    assert checked >= 20


def test_combiner_identities_are_the_empty_reductions() -> None:
    """Each reduction's combiner identity is what the reference gives for an empty reduction."""
    from gdv.backends.reference import apply

    for spec in ops.all_specs():
        if spec.combiner is None:
            continue
        for dtype in FLOAT_DTYPES + INT_DTYPES:
            x = np.zeros((0, 2), dtype=dtype.np)
            got = apply(spec.name, [x], {"axes": [0]}, TensorType(dtype, (2,)))
            want = spec.combiner.identity(dtype)
            assert got.astype(np.float64).tolist() == [float(want)] * 2, (spec.name, dtype)


def _special_values(dtype: DType) -> np.ndarray:
    if dtype.is_int:
        info = np.iinfo(dtype.np)
        vals = [0, 1, -1, 2, -7, info.min, info.max, info.min + 1, info.max - 1]
        # modulo 2^n: -1 and -7 are large values of an unsigned dtype
        return np.array([v % (1 << dtype.bits) for v in vals], np.uint64).astype(dtype.np)
    vals = [0.0, -0.0, 1.0, -1.0, 0.5, -2.5, 3.0, math.inf, -math.inf, math.nan, -math.nan]
    out = np.array(vals, dtype=np.float64).astype(dtype.np)
    if dtype in (DType.F16, DType.BF16):  # subnormals and a quiet NaN with a payload
        nan = 0x7E01 if dtype is DType.F16 else 0x7FC1
        bits = np.array([1, 0x8001, nan], dtype=np.uint16)
        out = np.concatenate([out, bits.view(dtype.np)])
    return out


def test_commutative_ops_are_symmetric_on_the_reference() -> None:
    """`op(a, b)` and `op(b, a)` give the same bits (NaNs one value) on every pair of special
    values (+-0, +-inf, NaNs, subnormals) and on random pairs, for every dtype the op takes; the
    SMT meaning agrees with the reference on concrete values (tests/validate/test_agreement.py),
    so it is symmetric on them too. max and min are commutative in IR_SPEC.md: NaN if either
    is NaN, and max(-0.0, +0.0) = max(+0.0, -0.0) = +0.0 (min: -0.0) in either order."""
    from gdv.backends.reference import apply, bit_equal

    rng = np.random.default_rng(7)
    specs = [s for s in ops.all_specs() if s.commutative]
    assert {s.name for s in specs} == {"add", "mul", "max", "min"}
    for spec in specs:
        for dtype in FLOAT_DTYPES + (INT_DTYPES if spec.int_legal else ()):
            sv = _special_values(dtype)
            a, b = (m.ravel() for m in np.meshgrid(sv, sv))
            if dtype.is_int:
                r = rng.integers(-(2**31), 2**31, size=(2, 512)).astype(dtype.np)
            else:
                r = rng.standard_normal((2, 512)) * 10.0 ** rng.integers(-5, 5, (2, 512))
                r = r.astype(dtype.np)
            a, b = np.concatenate([a, r[0]]), np.concatenate([b, r[1]])
            t = TensorType(dtype, a.shape)
            ab = apply(spec.name, [a, b], {}, t)
            ba = apply(spec.name, [b, a], {}, t)
            assert bit_equal(ab, ba), (spec.name, dtype)


def test_non_commutative_binary_ops_are_not_symmetric() -> None:
    """The trait is not vacuous: sub, div and pow differ when swapped."""
    from gdv.backends.reference import apply, bit_equal

    a = np.array([1.0, 2.0, 3.0], dtype=np.float32)
    b = np.array([2.0, 5.0, 0.5], dtype=np.float32)
    t = TensorType(DType.F32, (3,))
    for name in ("sub", "div", "pow"):
        assert not ops.REGISTRY[name].commutative
        assert not bit_equal(apply(name, [a, b], {}, t), apply(name, [b, a], {}, t)), name


# --- a scratch op -----------------------------------------------------------------------------


def _twice_type(types: list[TensorType], attrs: dict, written: TensorType) -> TensorType:
    if not types[0].dtype.is_float:
        raise OpTypeError(f"twice takes a float operand, operand 1 is {types[0]}", 0)
    return types[0]


def _in(module: str, fn: Callable) -> Callable:
    """`fn`, presented as living in `module` (where a real op's rule would be written)."""
    fn.__module__ = module
    return fn


def _scratch_entries(spec: OpSpec) -> dict[str, tuple[dict, Any]]:
    """The entry a scratch elementwise op `twice(x) = x + x` has in each column: layer ->
    (table, rule). Each rule is what its family file would hold."""
    from gdv.backends.c.elementwise import _elementwise
    from gdv.backends.c.registry import Unsupported
    from gdv.validate.bounds.registry import RULES as BOUNDS
    from gdv.validate.semantics.registry import Tensor

    def reference(op, xs, ctx):
        return xs[0] + xs[0]

    def smt(ctx, op, xs):
        (x,), v = xs, ctx.values
        return Tensor(op.type, lambda i: v.add(x.dtype, x.at(i), x.at(i)))

    def bound(op, args, ctx):
        return BOUNDS[ops.REGISTRY["add"]](op, [args[0], args[0]], ctx)

    tables = {layer[0]: _table(*layer[1:4]) for layer in LAYERS}
    return {
        "reference meaning": (
            tables["reference meaning"],
            _in("gdv.backends.reference.elementwise", reference),
        ),
        "SMT meaning": (tables["SMT meaning"], _in("gdv.validate.semantics.elementwise", smt)),
        "error bound": (tables["error bound"], _in("gdv.validate.bounds.elementwise", bound)),
        "C lowering": (tables["C lowering"], _elementwise),
        "C scalar code": (
            tables["C scalar code"],
            Unsupported(spec, "twice has no C scalar code yet", "gdv.backends.c.elementwise"),
        ),
    }


@pytest.fixture
def scratch_op() -> Iterator[OpSpec]:
    """A temporary elementwise op in the registry, removed (with every entry the test gave it)
    when the test ends."""
    spec = ops.register(
        OpSpec(
            "twice",
            "elementwise",
            1,
            1,
            (),
            _twice_type,
            "x + x, rounded once (a scratch op of tests/test_registry.py)",
            body_legal=True,
        )
    )
    try:
        yield spec
    finally:
        ops.unregister(spec)
        for layer in LAYERS:
            _table(*layer[1:4]).pop(spec, None)
        assert ops.get("twice") is None


def _mentions(problems: Iterable[str], layer: str) -> bool:
    return any(f"twice has no {layer} rule" in p for p in problems)


def test_a_scratch_op_needs_every_column(scratch_op: OpSpec) -> None:
    """Adding an elementwise op: its spec (with its traits) in ir/ops/elementwise.py, then one
    entry per column. The checks fail while any one entry is missing and pass once all are."""
    from gdv.ir.ops.elementwise import TRANSCENDENTAL
    from gdv.ir.ops.kernel import BODY_OPS
    from gdv.passes.lower_to_kernels import ELEMENTWISE

    # The traits reach every layer at once: no list of names to edit.
    assert "twice" in BODY_OPS and "twice" in ELEMENTWISE and "twice" not in TRANSCENDENTAL
    entries = _scratch_entries(scratch_op)
    layers = [layer[0] for layer in LAYERS]
    assert set(entries) == set(layers)

    # With no entries, every column names the op.
    problems = trait_problems()
    assert all(_mentions(problems, layer) for layer in layers), problems

    # Adding them one by one: each column stops naming it exactly when its entry is added.
    for k, layer in enumerate(layers):
        table, rule = entries[layer]
        table[scratch_op] = rule
        problems = trait_problems()
        for other in layers[: k + 1]:
            assert not _mentions(problems, other), (other, problems)
        for other in layers[k + 1 :]:
            assert _mentions(problems, other), (other, problems)
    assert trait_problems() == []

    # With all present, taking away any one entry fails the checks again, naming that column.
    for layer in layers:
        table, rule = entries[layer]
        del table[scratch_op]
        problems = trait_problems()
        assert _mentions(problems, layer), (layer, problems)
        assert [p for p in problems if "twice" not in p] == []
        table[scratch_op] = rule
    assert trait_problems() == []

    # A rule kept outside the family file is caught too.
    table, rule = entries["error bound"]
    table[scratch_op] = _in("gdv.validate.bounds.reduce", lambda op, args, ctx: None)
    assert any("lives in gdv.validate.bounds.reduce" in p for p in trait_problems())
    table[scratch_op] = rule

    # A contradictory trait is caught: a scratch op may not be both transcendental and
    # integer-legal.
    ops.unregister(scratch_op)
    bad = ops.register(
        OpSpec(
            "twice",
            "elementwise",
            1,
            1,
            (),
            _twice_type,
            "x + x",
            transcendental=True,
            int_legal=True,
        )
    )
    try:
        assert "twice is transcendental and integer-legal" in trait_problems()
    finally:
        ops.unregister(bad)
        ops.register(scratch_op)


def test_the_scratch_op_left_no_trace() -> None:
    """Runs after the scratch-op test (file order): nothing of `twice` is left anywhere."""
    from gdv.ir.ops.kernel import BODY_OPS

    assert ops.get("twice") is None and "twice" not in BODY_OPS
    for layer in LAYERS:
        assert all(s.name != "twice" for s in _table(*layer[1:4])), layer[0]
    assert trait_problems() == []
