"""ONNX If and Loop whose control values depend on the data, imported as the IR's `if` and
`while` (IR_SPEC.md section 9): branches and bodies become functions of the module, reading
the enclosing graph's values as parameters. Checked bit for bit against ONNX's reference
evaluator on drawn inputs (both branches, conditions that stop a loop early, trip counts known
and unknown at import, 0 trips, an If inside a Loop body); refusals name the node and the
reason. Control flow static at import stays inlined or unrolled
(tests/frontends/test_onnx_control_flow.py)."""

from __future__ import annotations

from typing import Any

import numpy as np
import onnx
import pytest
from hypothesis import given
from hypothesis import strategies as st
from hypothesis.extra import numpy as hnp
from onnx import TensorProto, helper, numpy_helper
from onnx.reference import ReferenceEvaluator

from gdv.backends import reference
from gdv.driver import CompileOptions, compile_module
from gdv.frontends.onnx import Unsupported, import_model
from gdv.ir.printer import print_module
from gdv.validate.counterexample import same_bits

F, I64, B = TensorProto.FLOAT, TensorProto.INT64, TensorProto.BOOL
FLOATS = st.floats(-4, 4, width=32, allow_subnormal=False)


def vi(name: str, t: int, shape: Any = None) -> onnx.ValueInfoProto:
    return helper.make_tensor_value_info(name, t, shape)


def const(name: str, arr: Any) -> onnx.TensorProto:
    return numpy_helper.from_array(np.asarray(arr), name)


def model(nodes, inputs, outputs, inits=()) -> onnx.ModelProto:
    g = helper.make_graph(nodes, "g", inputs, outputs, list(inits))
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])
    m.ir_version = 8
    return m


def check(m: onnx.ModelProto, feeds: dict[str, np.ndarray]) -> None:
    module, weights = import_model(m)
    args = dict(weights)
    for p in module.entry.params:
        if p.name not in args:
            args[p.name] = feeds[p.attrs.get("onnx_name", p.name)]
    got = reference.run(module, args)
    want = ReferenceEvaluator(m).run(None, feeds)
    assert len(got) == len(want)
    for g, w in zip(got, want, strict=True):
        w = np.asarray(w)
        assert g.shape == w.shape and g.dtype == w.dtype, (g.shape, w.shape, g.dtype, w.dtype)
        assert same_bits(g, w).all(), (g, w)


# --- If ---------------------------------------------------------------------------------------


def if_model() -> onnx.ModelProto:
    """(y, z) = If(sum(x) > 0) then (x * 2 + c, If(sum(w) > 0) then w else -w) else (x - c, w),
    the inner If's condition computed inside the branch from w (an outer name)."""
    inner_then = helper.make_graph(
        [helper.make_node("Identity", ["w"], ["it"])], "it", [], [vi("it", F, [3])]
    )
    inner_else = helper.make_graph(
        [helper.make_node("Neg", ["w"], ["ie"])], "ie", [], [vi("ie", F, [3])]
    )
    then_g = helper.make_graph(
        [
            helper.make_node("Mul", ["x", "two"], ["t"]),
            helper.make_node("Add", ["t", "c"], ["ty"]),
            helper.make_node("ReduceSum", ["w"], ["ws"], keepdims=0),
            helper.make_node("Greater", ["ws", "zero"], ["wc"]),
            helper.make_node("If", ["wc"], ["tz"], then_branch=inner_then, else_branch=inner_else),
        ],
        "then",
        [],
        [vi("ty", F, [2, 3]), vi("tz", F, [3])],
        [const("two", np.float32(2))],
    )
    else_g = helper.make_graph(
        [helper.make_node("Sub", ["x", "c"], ["ey"]), helper.make_node("Identity", ["w"], ["ez"])],
        "else",
        [],
        [vi("ey", F, [2, 3]), vi("ez", F, [3])],
    )
    nodes = [
        helper.make_node("ReduceSum", ["x"], ["s"], keepdims=0),
        helper.make_node("Greater", ["s", "zero"], ["cond"]),
        helper.make_node("If", ["cond"], ["y", "z"], then_branch=then_g, else_branch=else_g),
    ]
    inits = [const("c", np.float32([1.5, -0.25, 3])), const("zero", np.float32(0))]
    return model(
        nodes, [vi("x", F, [2, 3]), vi("w", F, [3])], [vi("y", F, [2, 3]), vi("z", F, [3])], inits
    )


@given(
    x=hnp.arrays(np.float32, (2, 3), elements=FLOATS),
    w=hnp.arrays(np.float32, (3,), elements=FLOATS),
)
def test_data_dependent_if_matches_the_reference(x, w) -> None:
    check(if_model(), {"x": x, "w": w})


def test_the_if_is_an_ir_op_with_its_branches_as_functions() -> None:
    module, _ = import_model(if_model())
    text = print_module(module)
    main = [op.name for op in module.entry.ops]
    assert main.count("if") == 2  # one op per output, one group
    assert sum(op.name == "if" for f in module.functions for op in f.ops) == 3  # and the inner
    assert text.count("func @") == 5  # main, then, else, inner then, inner else
    # Both signs of the condition occur: each branch is taken somewhere.
    for sign in (1, -1):
        x = np.full((2, 3), sign, np.float32)
        check(if_model(), {"x": x, "w": np.float32([1, -3, 0.5])})


def test_branches_of_different_types_are_refused_by_name() -> None:
    m = if_model()
    (else_g,) = [a.g for a in m.graph.node[2].attribute if a.name == "else_branch"]
    else_g.node[0].CopyFrom(helper.make_node("ReduceSum", ["x"], ["ey"], keepdims=0))
    with pytest.raises(Unsupported) as e:
        import_model(m)
    assert e.value.message.startswith("unsupported ONNX op If (opset 17) at node #2 (y, z): ")
    assert "the branches give (f32[2,3], f32[3]) and (f32[], f32[3])" in e.value.message


# --- Loop -------------------------------------------------------------------------------------


def loop_model(m_count: int | None | str, cond_input: bool = True) -> onnx.ModelProto:
    """(y, k) = Loop(M, true, y0, 0): y = y * 0.75 + x[i mod 4], k = k + 1, continuing while
    sum(y) < lim (computed from the data), with an If in the body: y is clipped to [-8, 8]
    when |sum(y)| > 8. M is a constant (`m_count`), a graph input ("input") or absent (None)."""
    clip_then = helper.make_graph(
        [helper.make_node("Clip", ["y3", "lo", "hi"], ["yc"])], "clip", [], [vi("yc", F, [3])]
    )
    keep_else = helper.make_graph(
        [helper.make_node("Identity", ["y3"], ["yk"])], "keep", [], [vi("yk", F, [3])]
    )
    nodes = [
        helper.make_node("Mod", ["i", "four"], ["im"]),
        helper.make_node("Gather", ["x", "im"], ["xi"], axis=0),
        helper.make_node("Mul", ["y", "decay"], ["yd"]),
        helper.make_node("Add", ["yd", "xi"], ["y3"]),
        helper.make_node("ReduceSum", ["y3"], ["tot"], keepdims=0),
        helper.make_node("Abs", ["tot"], ["atot"]),
        helper.make_node("Greater", ["atot", "hi"], ["big"]),
        helper.make_node("If", ["big"], ["y2"], then_branch=clip_then, else_branch=keep_else),
        helper.make_node("Add", ["k", "one"], ["k2"]),
        helper.make_node("Less", ["tot", "lim"], ["c2"]),
    ]
    body = helper.make_graph(
        nodes,
        "body",
        [vi("i", I64, []), vi("c", B, []), vi("y", F, [3]), vi("k", I64, [])],
        [vi("c2", B, []), vi("y2", F, [3]), vi("k2", I64, [])],
        [
            const("four", np.int64(4)),
            const("decay", np.float32(0.75)),
            const("one", np.int64(1)),
            const("lo", np.float32(-8)),
            const("hi", np.float32(8)),
        ],
    )
    inputs = [vi("x", F, [4, 3]), vi("y0", F, [3]), vi("lim", F, [])]
    inits = [const("k0", np.int64(0)), const("cond", np.bool_(True))]
    if m_count == "input":
        inputs.append(vi("M", I64, []))
    elif m_count is not None:
        inits.append(const("M", np.int64(m_count)))
    loop = helper.make_node(
        "Loop",
        ["M" if m_count is not None else "", "cond" if cond_input else "", "y0", "k0"],
        ["y", "k"],
        body=body,
        name="loop",
    )
    return model([loop], inputs, [vi("y", F, [3]), vi("k", I64, [])], inits)


@given(
    x=hnp.arrays(np.float32, (4, 3), elements=FLOATS),
    y0=hnp.arrays(np.float32, (3,), elements=FLOATS),
    lim=st.floats(-10, 40, width=32),
    m_count=st.sampled_from([0, 1, 3, 20, "input"]),
    m_value=st.integers(-1, 25),
)
def test_data_dependent_loop_matches_the_reference(x, y0, lim, m_count, m_value) -> None:
    m = loop_model(m_count)
    feeds = {"x": x, "y0": y0, "lim": np.array(lim, np.float32)}
    if m_count == "input":
        feeds["M"] = np.array(m_value, np.int64)
    check(m, feeds)


def test_a_loop_without_a_trip_count_runs_until_its_condition_fails() -> None:
    """No M: the condition alone ends the loop (here k < 7 with k0 a graph input, so the
    condition is known only at run time); the IR loop's max_trips is its limit, 2^31 - 1."""
    m = loop_model(None)
    body = m.graph.node[0].attribute[0].g
    body.node[9].CopyFrom(helper.make_node("Less", ["k2", "seven"], ["c2"]))
    body.initializer.append(const("seven", np.int64(7)))
    m.graph.initializer.remove(m.graph.initializer[0])  # k0 becomes an input
    m.graph.input.append(vi("k0", I64, []))
    rng = np.random.default_rng(0)
    for k0 in (-3, 0, 6, 7, 100):
        feeds = {
            "x": rng.standard_normal((4, 3)).astype(np.float32),
            "y0": rng.standard_normal(3).astype(np.float32),
            "lim": np.array(0, np.float32),
            "k0": np.array(k0, np.int64),
        }
        check(m, feeds)


def test_the_loop_is_an_ir_while() -> None:
    module, _ = import_model(loop_model(20))
    loops = [op for op in module.entry.ops if op.name == "while"]
    assert len(loops) == 2 and {op.attrs["max_trips"] for op in loops} == {20}
    body = module.function(loops[0].attrs["body"])
    assert "if" in {op.name for op in body.ops}
    unknown, _ = import_model(loop_model("input"))
    (cond,) = {op.attrs["cond"] for op in unknown.entry.ops if op.name == "while"}
    # M known only at run time: carried, compared in the condition; max_trips the IR's limit
    assert {op.name for op in unknown.function(cond).ops} == {"cmp", "bitwise_and"}
    assert {op.attrs["max_trips"] for op in unknown.entry.ops if op.name == "while"} == {2**31 - 1}


def test_a_loop_carried_value_that_changes_type_is_refused_by_name() -> None:
    m = loop_model(5)
    body = m.graph.node[0].attribute[0].g
    body.node[8].CopyFrom(helper.make_node("Cast", ["k"], ["k2"], to=TensorProto.INT32))
    body.output[2].CopyFrom(vi("k2", TensorProto.INT32, []))
    with pytest.raises(Unsupported, match="loop-carried value 1 is i64\\[\\] before an iteration"):
        import_model(m)


@pytest.mark.parametrize("target", ["reference", "c"])
def test_an_imported_loop_compiles_for_each_target(target: str, tmp_path) -> None:
    """The imported while (its body holding an if) compiles, proved, and runs as ONNX's
    reference evaluator does, on the reference and the C target."""
    m = loop_model(6)
    module, weights = import_model(m)
    result = compile_module(
        print_module(module), CompileOptions(target=target, jobs=1, cache_dir=str(tmp_path))
    )
    assert result.verdict == "proved"
    rng = np.random.default_rng(0)
    for lim in (-3.0, 0.5, 5.0, 40.0):
        feeds = {
            "x": rng.standard_normal((4, 3)).astype(np.float32),
            "y0": rng.standard_normal(3).astype(np.float32),
            "lim": np.array(lim, np.float32),
        }
        args = dict(weights)
        for p in module.entry.params:
            args.setdefault(p.name, feeds.get(p.attrs.get("onnx_name", p.name)))
        got = result(**args)
        want = ReferenceEvaluator(m).run(None, feeds)
        assert all(same_bits(g, np.asarray(w)).all() for g, w in zip(got, want, strict=True))


# --- Scan -------------------------------------------------------------------------------------


def long_scan_model(length: int, axes: list[int] | None = None) -> onnx.ModelProto:
    """(s, ys) = Scan(s0, xs): s = s * w + x_t, y_t = sum(s), w read from the enclosing graph
    (a run-time input)."""
    body = helper.make_graph(
        [
            helper.make_node("Mul", ["s", "w"], ["sw"]),
            helper.make_node("Add", ["sw", "x"], ["s2"]),
            helper.make_node("ReduceSum", ["s2"], ["y"], keepdims=0),
        ],
        "body",
        [vi("s", F, [2]), vi("x", F, [2])],
        [vi("s2", F, [2]), vi("y", F, [])],
    )
    extra = {} if axes is None else {"scan_input_axes": axes}
    scan = helper.make_node(
        "Scan", ["s0", "xs"], ["sf", "ys"], body=body, num_scan_inputs=1, name="scan", **extra
    )
    xs_shape = [length, 2] if not axes else [2, length]
    return model(
        [scan],
        [vi("s0", F, [2]), vi("xs", F, xs_shape), vi("w", F, [2])],
        [vi("sf", F, [2]), vi("ys", F, [length])],
    )


def test_a_scan_too_long_to_unroll_is_an_ir_scan() -> None:
    m = long_scan_model(5000)
    module, _ = import_model(m)
    assert [op.name for op in module.entry.ops].count("scan") == 2
    rng = np.random.default_rng(0)
    feeds = {
        "s0": rng.standard_normal(2).astype(np.float32),
        "xs": rng.standard_normal((5000, 2)).astype(np.float32),
        "w": np.float32([0.5, -0.75]),
    }
    check(m, feeds)
    # with another scan axis it is still unrolled, so over the limit it is refused by name
    with pytest.raises(Unsupported, match="unrolling the scan \\(length 5000\\) needs 5000"):
        import_model(long_scan_model(5000, axes=[1]))
    # a short scan is unrolled as before
    short, _ = import_model(long_scan_model(3))
    assert "scan" not in {op.name for op in short.entry.ops}
