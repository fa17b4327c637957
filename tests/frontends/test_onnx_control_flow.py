"""ONNX If, Loop and Scan, imported where the control flow is static at import: an If's taken
branch inlined, Scan and Loop unrolled (one scoped copy of the body per iteration, outer names
read through the scope chain). Checked bit for bit against ONNX's reference evaluator; where
that evaluator does not implement the case (Scan axes other than 0 and reverse directions, a
Loop without a condition input), against the same computation written without them and run by
the reference evaluator, and against onnxruntime. Refusals name the op, the node and the reason;
the body-instance limit refuses huge trip counts at once; the C target runs an unrolled Scan."""

from __future__ import annotations

import time
from typing import Any

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from hypothesis.extra import numpy as hnp
from onnx import TensorProto, helper, numpy_helper
from onnx.reference import ReferenceEvaluator

from gdv.backends import reference
from gdv.frontends.onnx import MAX_UNROLLED, Unsupported, import_model
from gdv.frontends.provenance import annotated_text, origins
from gdv.validate.counterexample import same_bits

F, I64, B = TensorProto.FLOAT, TensorProto.INT64, TensorProto.BOOL
FLOATS = st.floats(-100, 100, width=32, allow_subnormal=False)


def vi(name: str, t: int, shape: Any = None) -> onnx.ValueInfoProto:
    return helper.make_tensor_value_info(name, t, shape)


def const(name: str, arr: Any) -> onnx.TensorProto:
    return numpy_helper.from_array(np.asarray(arr), name)


def model(nodes, inputs, outputs, inits=(), opset: int = 17) -> onnx.ModelProto:
    g = helper.make_graph(nodes, "g", inputs, outputs, list(inits))
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", opset)])
    m.ir_version = 8
    return m


def gdv_run(m: onnx.ModelProto, feeds: dict[str, np.ndarray], **kw: Any) -> list[np.ndarray]:
    module, weights = import_model(m, **kw)
    fn = module.entry
    args = dict(weights)
    for p in fn.params:
        if p.name not in args:
            args[p.name] = feeds[p.attrs.get("onnx_name", p.name)]
    return reference.run(module, args)


def assert_bits(got: list[np.ndarray], want: list[np.ndarray]) -> None:
    assert len(got) == len(want)
    for g, w in zip(got, want, strict=True):
        w = np.asarray(w)
        assert g.shape == w.shape and g.dtype == w.dtype, (g.shape, w.shape, g.dtype, w.dtype)
        assert same_bits(g, w).all(), (g, w)


def ort_run(m: onnx.ModelProto, feeds: dict[str, np.ndarray]) -> list[np.ndarray]:
    s = ort.InferenceSession(m.SerializeToString(), providers=["CPUExecutionProvider"])
    return s.run(None, feeds)


# --- If ---------------------------------------------------------------------------------------


def if_model(cond: Any) -> onnx.ModelProto:
    """y = If(cond) then x * 2 + c else x - c, both branches reading x and c (outer names);
    `cond` is a bool initializer value, or "constant" for a Constant node (true), or "shape"
    for a condition computed from x's shape (Size(x) == 6: true for x of 6 elements)."""
    then_g = helper.make_graph(
        [helper.make_node("Mul", ["x", "two"], ["t"]), helper.make_node("Add", ["t", "c"], ["ty"])],
        "then", [], [vi("ty", F, [2, 3])], [const("two", np.float32(2))],
    )  # fmt: skip
    else_g = helper.make_graph(
        [helper.make_node("Sub", ["x", "c"], ["ey"])], "else", [], [vi("ey", F, [2, 3])]
    )
    nodes = []
    inits = [const("c", np.float32([1.5, -0.25, 3]))]
    if cond == "constant":
        nodes.append(helper.make_node("Constant", [], ["cond"], value=const("v", np.bool_(True))))
    elif cond == "shape":
        nodes += [
            helper.make_node("Size", ["x"], ["n"]),
            helper.make_node("Equal", ["n", "six"], ["cond"]),
        ]
        inits.append(const("six", np.int64(6)))
    else:
        inits.append(const("cond", np.bool_(cond)))
    nodes.append(
        helper.make_node("If", ["cond"], ["y"], then_branch=then_g, else_branch=else_g, name="sel")
    )
    return model(nodes, [vi("x", F, [2, 3])], [vi("y", F, [2, 3])], inits)


@given(x=hnp.arrays(np.float32, (2, 3), elements=FLOATS), which=st.sampled_from(
    [True, False, "constant", "shape"]))  # fmt: skip
def test_if_with_a_constant_condition_inlines_the_taken_branch(x: np.ndarray, which: Any) -> None:
    m = if_model(which)
    got = gdv_run(m, {"x": x})
    assert_bits(got, ReferenceEvaluator(m).run(None, {"x": x}))
    module, _ = import_model(m)
    ops = {op.name for op in module.entry.ops}
    assert ("mul" in ops) == (which is not False)  # only the taken branch is in the IR


def test_a_data_dependent_if_imports_as_an_ir_if() -> None:
    m = if_model(True)
    m.graph.initializer.pop()  # cond becomes a graph input
    m.graph.input.append(vi("cond", B, []))
    module, _ = import_model(m)
    (op,) = [op for op in module.entry.ops if op.name == "if"]
    then, other = module.function(op.attrs["then"]), module.function(op.attrs["else"])
    assert "mul" in {o.name for o in then.ops} and "sub" in {o.name for o in other.ops}
    x = np.arange(6, dtype=np.float32).reshape(2, 3)
    for c in (True, False):
        feeds = {"x": x, "cond": np.bool_(c)}
        assert_bits(gdv_run(m, feeds), ReferenceEvaluator(m).run(None, feeds))
        # a condition given at import (known_inputs) still selects the branch
        got = gdv_run(m, feeds, known_inputs={"cond": np.bool_(c)})
        assert_bits(got, ReferenceEvaluator(m).run(None, feeds))


# --- Scan -------------------------------------------------------------------------------------


def _reverse0(name: str, out: str) -> list[onnx.NodeProto]:
    """out = name reversed along axis 0 (a Slice with step -1)."""
    s, e, a, st_ = (f"{out}.{k}" for k in ("s", "e", "a", "st"))
    return [
        helper.make_node("Constant", [], [s], value=const("s", np.int64([-1]))),
        helper.make_node("Constant", [], [e], value=const("e", np.int64([np.iinfo(np.int64).min]))),
        helper.make_node("Constant", [], [a], value=const("a", np.int64([0]))),
        helper.make_node("Constant", [], [st_], value=const("st", np.int64([-1]))),
        helper.make_node("Slice", [name, s, e, a, st_], [out]),
    ]


def scan_models(shape: tuple[int, ...], n: int, in_axes, in_dirs, out_axes, out_dirs):
    """(the Scan with these axes and directions, the same computation for the reference
    evaluator: inputs moved to axis 0 and reversed, a Scan with the defaults, outputs reversed
    and moved back).

    Body: s' = s * 0.5 + x1 - x2; outputs s' and x1 * x2 (per-iteration shape `shape`); x1
    and x2 are scanned along `in_axes` (length n), s is the state."""
    r = len(shape)
    raw_in_axes, in_axes = list(in_axes), [a + r + 1 if a < 0 else a for a in in_axes]
    body = helper.make_graph(
        [
            helper.make_node("Mul", ["s", "half"], ["sh"]),
            helper.make_node("Add", ["sh", "x1"], ["sa"]),
            helper.make_node("Sub", ["sa", "x2"], ["s2"]),
            helper.make_node("Mul", ["x1", "x2"], ["p"]),
            helper.make_node("Identity", ["s2"], ["o1"]),
        ],
        "body",
        [vi("s", F, list(shape)), vi("x1", F, list(shape)), vi("x2", F, list(shape))],
        [vi("s2", F, list(shape)), vi("o1", F, list(shape)), vi("p", F, list(shape))],
    )
    ins_shape = [list(shape[:a]) + [n] + list(shape[a:]) for a in in_axes]
    inputs = [vi("s0", F, list(shape)), vi("x1", F, ins_shape[0]), vi("x2", F, ins_shape[1])]
    outs = [vi("sf", F, None), vi("y1", F, None), vi("y2", F, None)]
    inits = [const("half", np.float32(0.5))]
    scan = helper.make_node(
        "Scan", ["s0", "x1", "x2"], ["sf", "y1", "y2"], body=body, num_scan_inputs=2,
        scan_input_axes=raw_in_axes, scan_input_directions=list(in_dirs),
        scan_output_axes=list(out_axes), scan_output_directions=list(out_dirs), name="scan",
    )  # fmt: skip
    direct = model([scan], inputs, outs, inits)

    nodes = []
    for k, (a, d) in enumerate(zip(in_axes, in_dirs, strict=True)):
        perm = [a] + [i for i in range(r + 1) if i != a]
        nodes.append(helper.make_node("Transpose", [f"x{k + 1}"], [f"t{k}"], perm=perm))
        if d:
            nodes += _reverse0(f"t{k}", f"u{k}")
        else:
            nodes.append(helper.make_node("Identity", [f"t{k}"], [f"u{k}"]))
    nodes.append(helper.make_node("Scan", ["s0", "u0", "u1"], ["sf", "z1", "z2"], body=body,
                                  num_scan_inputs=2))  # fmt: skip
    for k, (a, d) in enumerate(zip(out_axes, out_dirs, strict=True)):
        b = a + r + 1 if a < 0 else a
        src = f"z{k + 1}"
        if d:
            nodes += _reverse0(src, f"w{k}")
            src = f"w{k}"
        perm = list(range(1, r + 1))
        perm.insert(b, 0)
        nodes.append(helper.make_node("Transpose", [src], [f"y{k + 1}"], perm=perm))
    return direct, model(nodes, inputs, outs, inits)


@settings(max_examples=30)
@given(data=st.data())
def test_scan_axes_and_directions_match_the_reference(data: st.DataObject) -> None:
    shape = data.draw(hnp.array_shapes(min_dims=1, max_dims=2, max_side=3))
    n = data.draw(st.integers(1, 4))
    r = len(shape)
    in_axes = data.draw(st.lists(st.integers(-(r + 1), r), min_size=2, max_size=2))
    out_axes = data.draw(st.lists(st.integers(-(r + 1), r), min_size=2, max_size=2))
    in_dirs = data.draw(st.lists(st.integers(0, 1), min_size=2, max_size=2))
    out_dirs = data.draw(st.lists(st.integers(0, 1), min_size=2, max_size=2))
    norm_in = [a + r + 1 if a < 0 else a for a in in_axes]
    direct, oracle = scan_models(shape, n, in_axes, in_dirs, out_axes, out_dirs)
    feeds = {"s0": data.draw(hnp.arrays(np.float32, shape, elements=FLOATS))}
    for k, a in enumerate(norm_in):
        full = shape[:a] + (n,) + shape[a:]
        feeds[f"x{k + 1}"] = data.draw(hnp.arrays(np.float32, full, elements=FLOATS))
    got = gdv_run(direct, feeds)
    assert_bits(got, ReferenceEvaluator(oracle).run(None, feeds))
    assert_bits(got, ort_run(direct, feeds))  # onnxruntime runs the Scan as written


def test_scan_opset_8_batches_match_the_reference() -> None:
    # opset 8: a batch axis first on every input and output, the sequence along axis 1
    body = helper.make_graph(
        [helper.make_node("Add", ["s", "x"], ["s2"]), helper.make_node("Mul", ["s2", "x"], ["o"])],
        "body", [vi("s", F, [2]), vi("x", F, [2])], [vi("s2", F, [2]), vi("o", F, [2])],
    )  # fmt: skip
    m = model(
        [helper.make_node("Scan", ["", "s0", "x"], ["sf", "y"], body=body, num_scan_inputs=1,
                          directions=[1])],
        [vi("s0", F, [3, 2]), vi("x", F, [3, 4, 2])], [vi("sf", F, None), vi("y", F, None)],
        opset=8,
    )  # fmt: skip
    rng = np.random.default_rng(0)
    feeds = {"s0": rng.standard_normal((3, 2), np.float32),
             "x": rng.standard_normal((3, 4, 2), np.float32)}  # fmt: skip
    got = gdv_run(m, feeds)
    sf, ys = [], []  # the oracle: opset 9+ Scans per batch element, the reversed x
    for b in range(3):
        one = model(
            [helper.make_node("Scan", ["s0", "x"], ["sf", "y"], body=body, num_scan_inputs=1)],
            [vi("s0", F, [2]), vi("x", F, [4, 2])], [vi("sf", F, None), vi("y", F, None)],
        )  # fmt: skip
        s, y = ReferenceEvaluator(one).run(None, {"s0": feeds["s0"][b], "x": feeds["x"][b, ::-1]})
        sf.append(s)
        ys.append(y)
    assert_bits(got, [np.stack(sf), np.stack(ys)])


# --- Loop -------------------------------------------------------------------------------------


def loop_model(m_count: int | None, cond: bool | None, stop_at: int | None = None):
    """y, ys = Loop(M, cond, y0): y = y + x[i] (x read from the enclosing graph), ys collects
    y + i (1-d pieces: stacked the same way by every evaluator); with `stop_at` the body's
    condition is i + 1 < stop_at (a constant at import in every iteration), else cond_in."""
    nodes = [
        helper.make_node("Gather", ["x", "i"], ["xi"], axis=0),
        helper.make_node("Add", ["y", "xi"], ["y2"]),
        helper.make_node("Cast", ["i"], ["fi"], to=F),
        helper.make_node("Add", ["y2", "fi"], ["sc"]),
    ]
    if stop_at is None:
        nodes.append(helper.make_node("Identity", ["c"], ["c2"]))
    else:
        nodes += [
            helper.make_node("Add", ["i", "one"], ["i1"]),
            helper.make_node("Less", ["i1", "stop"], ["c2"]),
        ]
    body = helper.make_graph(
        nodes, "body", [vi("i", I64, []), vi("c", B, []), vi("y", F, [3])],
        [vi("c2", B, []), vi("y2", F, [3]), vi("sc", F, [3])],
        [const("one", np.int64(1)), const("stop", np.int64(stop_at or 0))],
    )  # fmt: skip
    inits = []
    if m_count is not None:
        inits.append(const("M", np.int64(m_count)))
    if cond is not None:
        inits.append(const("cond", np.bool_(cond)))
    loop = helper.make_node(
        "Loop", ["M" if m_count is not None else "", "cond" if cond is not None else "", "y0"],
        ["y", "ys"], body=body, name="loop",
    )  # fmt: skip
    return model([loop], [vi("x", F, [6, 3]), vi("y0", F, [3])],
                 [vi("y", F, [3]), vi("ys", F, None)], inits)  # fmt: skip


@given(
    x=hnp.arrays(np.float32, (6, 3), elements=FLOATS),
    y0=hnp.arrays(np.float32, (3,), elements=FLOATS),
    m_count=st.integers(1, 6),
    stop_at=st.one_of(st.none(), st.integers(1, 6)),
)
def test_loop_unrolled_matches_the_reference(x, y0, m_count, stop_at) -> None:
    m = loop_model(m_count, True, stop_at)
    feeds = {"x": x, "y0": y0}
    got = gdv_run(m, feeds)
    want = ReferenceEvaluator(m).run(None, feeds)
    assert_bits(got, want)
    assert got[1].shape[0] == min(m_count, stop_at or m_count)


def test_loop_without_a_condition_runs_m_times_as_the_spec_says() -> None:
    # ONNX: `input (trip_count, "")` is a for loop. (The reference evaluator runs it 0 times,
    # `while None`, then fails to stack the scan outputs; onnxruntime follows the spec.)
    x = np.arange(18, dtype=np.float32).reshape(6, 3) / 7
    y0 = np.float32([0.5, -1, 2])
    m = loop_model(4, None)
    got = gdv_run(m, {"x": x, "y0": y0})
    assert got[1].shape == (4, 3)
    assert_bits(got, ort_run(m, {"x": x, "y0": y0}))
    assert_bits(got, ReferenceEvaluator(loop_model(4, True)).run(None, {"x": x, "y0": y0}))


def test_a_loop_run_zero_times_passes_its_state_through() -> None:
    x = np.ones((6, 3), np.float32)
    feeds = {"x": x, "y0": np.float32([1, -2, 3])}
    for m_count, cond in ((0, True), (3, False)):
        m = loop_model(m_count, cond)
        m.graph.node[0].attribute[0].g.output.pop()  # no scan output
        m.graph.node[0].output.pop()
        m.graph.output.pop()
        assert_bits(gdv_run(m, feeds), ReferenceEvaluator(m).run(None, feeds))
    with pytest.raises(Unsupported, match="runs 0 times and has scan outputs: their shapes"):
        import_model(loop_model(0, True))  # (the reference evaluator fails on it too)


def test_nested_control_flow_and_provenance() -> None:
    # A Loop whose body holds an If on the iteration number (a constant in every copy) and a
    # Scan over an outer value: every copy has its own scope, origins name the iterations.
    then_g = helper.make_graph([helper.make_node("Add", ["y", "x0"], ["a"])], "t", [],
                               [vi("a", F, [3])])  # fmt: skip
    else_g = helper.make_graph([helper.make_node("Mul", ["y", "x0"], ["b"])], "e", [],
                               [vi("b", F, [3])])  # fmt: skip
    inner_body = helper.make_graph(
        [helper.make_node("Add", ["s", "r"], ["s2"])], "ib", [vi("s", F, [3]), vi("r", F, [3])],
        [vi("s2", F, [3])],
    )  # fmt: skip
    body = helper.make_graph(
        [
            helper.make_node("Less", ["i", "two"], ["early"]),
            helper.make_node("If", ["early"], ["z"], then_branch=then_g, else_branch=else_g,
                             name="pick"),
            helper.make_node("Scan", ["z", "x"], ["y2"], body=inner_body, num_scan_inputs=1,
                             name="acc"),
            helper.make_node("Identity", ["c"], ["c2"]),
        ],
        "body", [vi("i", I64, []), vi("c", B, []), vi("y", F, [3])],
        [vi("c2", B, []), vi("y2", F, [3])], [const("two", np.int64(2))],
    )  # fmt: skip
    m = model(
        [helper.make_node("Gather", ["x", "zero"], ["x0"], axis=0),
         helper.make_node("Loop", ["M", "cond", "y0"], ["y"], body=body, name="outer")],
        [vi("x", F, [2, 3]), vi("y0", F, [3])], [vi("y", F, [3])],
        [const("M", np.int64(4)), const("cond", np.bool_(True)), const("zero", np.int64(0))],
    )  # fmt: skip
    rng = np.random.default_rng(1)
    feeds = {"x": rng.standard_normal((2, 3), np.float32),
             "y0": rng.standard_normal(3, np.float32)}  # fmt: skip
    assert_bits(gdv_run(m, feeds), ReferenceEvaluator(m).run(None, feeds))
    module, _ = import_model(m)
    named = set(origins(annotated_text(module)).values())
    assert "onnx:outer/iter0/pick/then/#0 (a) (Add)" in named
    assert "onnx:outer/iter3/pick/else/#0 (b) (Mul)" in named
    assert "onnx:outer/iter1/acc/iter1/#0 (s2) (Add)" in named
    assert not any("iter4" in o for o in named)


def test_a_trip_count_computed_from_known_inputs_is_evaluated_at_import() -> None:
    # ONNX's Range function body: M = Cast(Ceil((limit - start) / delta)), float arithmetic
    # on graph inputs whose values are given at import (they are then fixed).
    body = helper.make_graph(
        [helper.make_node("Identity", ["c"], ["c2"]), helper.make_node("Add", ["p", "d"], ["q"]),
         helper.make_node("Identity", ["p"], ["o"])],
        "body", [vi("i", I64, []), vi("c", B, []), vi("p", F, [])],
        [vi("c2", B, []), vi("q", F, []), vi("o", F, [])],
    )  # fmt: skip
    nodes = [
        helper.make_node("Sub", ["limit", "start"], ["span"]),
        helper.make_node("Div", ["span", "d"], ["steps"]),
        helper.make_node("Ceil", ["steps"], ["up"]),
        helper.make_node("Cast", ["up"], ["M"], to=I64),
        helper.make_node("Loop", ["M", "", "start"], ["last", "out"], body=body, name="range"),
    ]
    m = model(nodes, [vi("start", F, []), vi("limit", F, []), vi("d", F, [])],
              [vi("out", F, None)])  # fmt: skip
    feeds = {k: np.array(v, np.float32) for k, v in (("start", 1.25), ("limit", 4), ("d", 0.5))}
    got = gdv_run(m, feeds, known_inputs=feeds)
    assert got[0].shape == (6,)
    assert_bits(got, [np.arange(6, dtype=np.float32) * np.float32(0.5) + np.float32(1.25)])
    assert_bits(got, ort_run(m, feeds))
    with pytest.raises(Unsupported, match="trip count depends on the data has 1 scan output"):
        import_model(m)  # without the values: data-dependent, and so is out's length


def test_control_flow_inside_function_bodies() -> None:
    # LinearAttention's function body holds a Scan and AffineGrid's holds Ifs: their bodies
    # read names of the function, which the expansion renames. AffineGrid's `size` input is
    # given at import (a shape: the Ifs test its length, Range and Expand read its values).
    # Their products are MatMuls, which ONNX's reference runs with numpy's BLAS (summation
    # order unspecified): compared to a few ulps rather than bit for bit.
    rng = np.random.default_rng(5)
    q, k, v = (rng.standard_normal((2, 3, 8), np.float32) for _ in range(3))
    la = model(
        [helper.make_node("LinearAttention", ["q", "k", "v"], ["o", "s"], q_num_heads=2,
                          kv_num_heads=2, update_rule="linear")],
        [vi(n, F, [2, 3, 8]) for n in "qkv"], [vi("o", F, None), vi("s", F, None)], opset=27,
    )  # fmt: skip
    feeds = {"q": q, "k": k, "v": v}
    for g, w in zip(gdv_run(la, feeds), ReferenceEvaluator(la).run(None, feeds), strict=True):
        np.testing.assert_allclose(g, w, rtol=1e-5, atol=1e-6)
    for size in ([2, 3, 4, 5], [2, 3, 2, 4, 5]):
        theta = rng.standard_normal((2, len(size) - 2, len(size) - 1), np.float32)
        ag = model(
            [helper.make_node("AffineGrid", ["theta", "size"], ["grid"], align_corners=0)],
            [vi("theta", F, list(theta.shape)), vi("size", I64, [len(size)])],
            [vi("grid", F, None)], opset=20,
        )  # fmt: skip
        feeds = {"theta": theta, "size": np.int64(size)}
        got = gdv_run(ag, feeds, known_inputs={"size": feeds["size"]})
        (want,) = ReferenceEvaluator(ag).run(None, feeds)
        assert got[0].shape == want.shape == (2, *size[2:], len(size) - 2)
        np.testing.assert_allclose(got[0], want, rtol=1e-5, atol=1e-6)
    with pytest.raises(Unsupported, match="must be a constant"):
        import_model(ag)  # the size unknown: the grid's shape depends on the data


def test_conditions_evaluated_at_import_keep_each_iteration_apart() -> None:
    # The body's condition, q - p > 0 with q = p + d, is computed from given inputs: each
    # iteration's copy of the same ONNX node has its own inputs (p of iteration k is q of
    # iteration k - 1), so the evaluation must never mistake one copy for another.
    body = helper.make_graph(
        [helper.make_node("Add", ["p", "d"], ["q"]), helper.make_node("Sub", ["q", "p"], ["e"]),
         helper.make_node("Greater", ["e", "zero"], ["c2"]),
         helper.make_node("Identity", ["q"], ["o"])],
        "body", [vi("i", I64, []), vi("c", B, []), vi("p", F, [])],
        [vi("c2", B, []), vi("q", F, []), vi("o", F, [])], [const("zero", np.float32(0))],
    )  # fmt: skip
    m = model(
        [helper.make_node("Loop", ["M", "cond", "start"], ["last", "out"], body=body)],
        [vi("start", F, []), vi("d", F, [])], [vi("last", F, []), vi("out", F, None)],
        [const("M", np.int64(4)), const("cond", np.bool_(True))],
    )  # fmt: skip
    for d in (0.5, 0.0):
        feeds = {"start": np.array(1.5, np.float32), "d": np.array(d, np.float32)}
        got = gdv_run(m, feeds, known_inputs=feeds)
        assert got[1].shape == ((4,) if d else (1,))
        assert_bits(got, ort_run(m, feeds))
        last, out = ReferenceEvaluator(m).run(None, feeds)  # its vstack makes out (n, 1)
        assert_bits(got, [last, out.reshape(-1)])


# --- refusals ---------------------------------------------------------------------------------


def test_a_data_dependent_loop_with_scan_outputs_is_refused_by_name() -> None:
    m = loop_model(5, True)
    body = m.graph.node[0].attribute[0].g
    body.node[4].CopyFrom(helper.make_node("ReduceSum", ["y2"], ["tot"], keepdims=0))
    body.node.append(helper.make_node("Less", ["tot", "lim"], ["c2"]))
    body.initializer.append(const("lim", np.float32(10)))
    with pytest.raises(Unsupported) as e:
        import_model(m)
    msg = e.value.message
    assert msg == (
        "unsupported ONNX op Loop (opset 17) at node loop: a loop whose trip count depends on "
        "the data has 1 scan output(s), whose length depends on the data too"
    )
    m = loop_model(5, True)
    m.graph.initializer.pop()
    m.graph.input.append(vi("cond", B, []))
    with pytest.raises(Unsupported, match="at node loop: a loop whose trip count depends on"):
        import_model(m)


def test_trip_counts_over_the_limit_are_refused_at_once() -> None:
    assert MAX_UNROLLED == 4096
    start = time.perf_counter()
    for count in (MAX_UNROLLED + 1, 10**12):
        with pytest.raises(Unsupported) as e:
            import_model(loop_model(count, None))
        assert f"needs {count} body instances, over the limit of 4096" in e.value.message
    assert time.perf_counter() - start < 10  # refused before unrolling anything
    # nested: the limit counts every body instance, inner ones too
    inner = loop_model(MAX_UNROLLED - 1, None).graph.node[0]
    body = helper.make_graph(
        [inner, helper.make_node("Identity", ["c"], ["c2"])], "outer",
        [vi("j", I64, []), vi("c", B, []), vi("y0", F, [3])],
        [vi("c2", B, []), vi("y", F, [3])],
        [const("M", np.int64(MAX_UNROLLED - 1))],
    )  # fmt: skip
    m = model([helper.make_node("Loop", ["N", "", "y00"], ["yy"], body=body, name="nest")],
              [vi("x", F, [6, 3]), vi("y00", F, [3])], [vi("yy", F, [3])],
              [const("N", np.int64(2))])  # fmt: skip
    with pytest.raises(Unsupported, match=r"already unrolled\), over the limit of 4096"):
        import_model(m)
    # a loop whose condition ends it early is counted as it goes
    x = np.ones((6, 3), np.float32)
    m = loop_model(10**12, True, stop_at=3)
    assert_bits(
        gdv_run(m, {"x": x, "y0": x[0]}), ReferenceEvaluator(m).run(None, {"x": x, "y0": x[0]})
    )
    body = helper.make_graph(  # a while loop: i + 1 < stop
        [helper.make_node("Add", ["i", "one"], ["i1"]),
         helper.make_node("Less", ["i1", "stop"], ["c2"]),
         helper.make_node("Add", ["y", "i1"], ["y2"])],
        "body", [vi("i", I64, []), vi("c", B, []), vi("y", I64, [])],
        [vi("c2", B, []), vi("y2", I64, [])],
        [const("one", np.int64(1)), const("stop", np.int64(MAX_UNROLLED + 1))],
    )  # fmt: skip
    m = model([helper.make_node("Loop", ["M", "cond", "y0"], ["y"], body=body, name="w")],
              [vi("y0", I64, [])], [vi("y", I64, [])],
              [const("M", np.int64(10**12)), const("cond", np.bool_(True))])  # fmt: skip
    with pytest.raises(Unsupported) as e:
        import_model(m)
    msg = e.value.message
    assert "unrolling the loop (M = 1000000000000) beyond iteration 4095 needs 1 body" in msg
    assert "(4096 already unrolled), over the limit of 4096" in msg


def test_malformed_control_flow_is_an_input_error_with_the_node() -> None:
    from gdv.ir.diagnostics import IRError

    m = if_model(True)
    del m.graph.node[0].attribute[1]  # then_branch (attributes are sorted by name)
    with pytest.raises(IRError, match="ONNX node sel \\(If\\) lacks the attribute 'then_branch'"):
        import_model(m)
    m = loop_model(3, True)
    m.graph.node[0].attribute[0].g.input.pop()
    with pytest.raises(IRError, match="node loop \\(Loop\\): its body has 2 inputs and 3 out"):
        import_model(m)


def test_other_subgraph_ops_stay_refused() -> None:
    body = helper.make_graph([helper.make_node("Identity", ["a"], ["b"])], "f",
                             [vi("a", F, [])], [vi("b", F, [])])  # fmt: skip
    m = model([helper.make_node("SequenceMap", ["x"], ["y"], body=body)], [vi("x", F, [2])],
              [vi("y", F, None)])  # fmt: skip
    with pytest.raises(Unsupported, match="attribute 'body' \\(subgraphs\\) is not supported"):
        import_model(m)


# --- the C target -----------------------------------------------------------------------------


def test_the_c_target_runs_an_unrolled_scan() -> None:
    from gdv.driver import CompileOptions, compile_module
    from gdv.ir.printer import print_module

    direct, oracle = scan_models((2, 3), 4, [1, 0], [1, 0], [-1, 0], [0, 1])
    rng = np.random.default_rng(4)
    feeds = {"s0": rng.standard_normal((2, 3), np.float32),
             "x1": rng.standard_normal((2, 4, 3), np.float32),
             "x2": rng.standard_normal((4, 2, 3), np.float32)}  # fmt: skip
    module, weights = import_model(direct)
    comp = compile_module(print_module(module), CompileOptions(target="c", level=2, jobs=1))
    assert comp.verdict == "proved"
    got = [np.asarray(g) for g in comp(**feeds, **weights)]
    assert_bits(got, ReferenceEvaluator(oracle).run(None, feeds))


def test_gdv_import_compile_and_run_on_c_an_unrolled_loop(
    tmp_path: Any, capsys: pytest.CaptureFixture[str]
) -> None:
    from gdv.cli import main

    m = loop_model(5, True, stop_at=4)
    path = tmp_path / "loop.onnx"
    onnx.save(m, str(path))
    ir, weights = tmp_path / "loop.gdv", tmp_path / "w.npz"
    assert main(["import", str(path), "-o", str(ir), "--weights", str(weights)]) == 0
    text = ir.read_text()
    assert "// from onnx:loop/iter3/#1 (y2) (Add)" in text and "iter4" not in text
    assert main(["compile", str(ir), "-o", str(tmp_path / "loop.so"), "--no-cache"]) == 0
    rng = np.random.default_rng(6)
    feeds = {"x": rng.standard_normal((6, 3), np.float32),
             "y0": rng.standard_normal(3, np.float32)}  # fmt: skip
    np.savez(tmp_path / "in.npz", **feeds)
    out = tmp_path / "out.npz"
    argv = ["run", str(ir), "--target", "c", "--inputs", str(weights), "--inputs"]
    assert main([*argv, str(tmp_path / "in.npz"), "--output", str(out)]) == 0
    got = np.load(out)
    assert_bits([got["out0"], got["out1"]], ReferenceEvaluator(m).run(None, feeds))
    capsys.readouterr()
