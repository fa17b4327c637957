"""SPMD functions against the ordinary functions they implement (issue 17; docs/IR_SPEC.md
section 7): proofs of plans that keep the fold order (fp) and of plans that split a sum (real),
refutations of seeded partitioning bugs with counterexamples replayed on the reference
backend's simulation of every rank, a 64-way plan, and the SMT meaning of every collective and
order against the simulation on concrete values."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from gdv.backends import reference
from gdv.backends.reference.compare import bit_equal
from gdv.backends.reference.spmd import run_spmd
from gdv.ir.parser import parse
from gdv.ir.verifier import verify
from gdv.validate.evaluate import evaluate
from gdv.validate.spmd import check_spmd_equivalence, spmd_pair

ROOT = Path(__file__).resolve().parents[2]
EXAMPLES = ROOT / "examples"


def load(text: str, name: str = "<test>"):
    return verify(parse(text, name))


GLOBAL = """
func @main(%x: f32[8,16] {range = [-1.0, 1.0]}, %w1: f32[16,16], %w2: f32[16,4]) -> f32[8,4] {
  %h = matmul(%x, %w1) : f32[8,16]
  %r = relu(%h) : f32[8,16]
  %p = matmul(%r, %w2) : f32[8,4]
  return %p
}
"""

HEAD = """mesh @m = {data = 2, model = 2}
func @main(%x: f32[4,16] {sharding = [["data"], []]}, %w1: f32[16,8] {sharding = [[], ["model"]]},
           %w2: f32[8,4] {sharding = [["model"], []]}) -> f32[4,4]
    {mesh = "m", out_shardings = [[["data"], []]]} {
  %h = matmul(%x, %w1) : f32[4,8]
  %r = relu(%h) : f32[4,8]
  %p = matmul(%r, %w2) : f32[4,4]
"""

MEGATRON = (
    HEAD
    + """  %y = all_reduce(%p) {axes = ["model"], combiner = "add", order = "rank"} : f32[4,4]
  return %y
}
"""
)

BUGS = {
    "dropped all_reduce": HEAD + "  return %p\n}\n",
    "reduce_scatter where an all_reduce is needed": HEAD
    + """  %s = reduce_scatter(%p) {axes = ["model"], dim = 0, combiner = "add", order = "rank"} : f32[2,4]
  %y = all_gather(%s) {axes = ["data"], dim = 0} : f32[4,4]
  return %y
}
""",
    "partial sum scaled twice": HEAD
    + """  %two = constant() {value = 2.0} : f32[4,4]
  %d = mul(%p, %two) : f32[4,4]
  %y = all_reduce(%d) {axes = ["model"], combiner = "add", order = "rank"} : f32[4,4]
  return %y
}
""",
    "all_gather on the wrong dim": """mesh @m = {data = 2, model = 2}
func @main(%x: f32[8,16], %w1: f32[16,8] {sharding = [[], ["model"]]}, %w2: f32[16,4])
    -> f32[8,4] {mesh = "m"} {
  %h = matmul(%x, %w1) : f32[8,8]
  %r = relu(%h) : f32[8,8]
  %g = all_gather(%r) {axes = ["model"], dim = 0} : f32[16,8]
  %t = reshape(%g) : f32[8,16]
  %p = matmul(%t, %w2) : f32[8,4]
  return %p
}
""",
    "shard offset off by one block": """mesh @m = {data = 2, model = 2}
func @main(%x: f32[2,16] {sharding = [["model", "data"], []]}, %w1: f32[16,16], %w2: f32[16,4])
    -> f32[2,4] {mesh = "m", out_shardings = [[["data", "model"], []]]} {
  %h = matmul(%x, %w1) : f32[2,16]
  %r = relu(%h) : f32[2,16]
  %p = matmul(%r, %w2) : f32[2,4]
  return %p
}
""",
}


def test_the_megatron_split_equals_the_global_mlp_over_the_reals_not_bit_for_bit() -> None:
    a, b = load(GLOBAL), load(MEGATRON)
    assert check_spmd_equivalence(a, b, "real", 10).verdict == "equivalent"
    fp = check_spmd_equivalence(a, b, "fp", 10)
    assert fp.verdict == "not-equivalent"  # the all_reduce splits every sum of 16 terms
    _replayed(a, b, fp)


@pytest.mark.parametrize("name", sorted(BUGS))
def test_a_seeded_partitioning_bug_is_refuted_with_a_replayed_counterexample(name: str) -> None:
    a, b = load(GLOBAL), load(BUGS[name], name)
    result = check_spmd_equivalence(a, b, "real", 3)
    assert result.verdict == "not-equivalent", (name, result.reason)
    _replayed(a, b, result)


def _replayed(a, b, result) -> None:
    """The counterexample's inputs make the reference run of A and the simulation of every
    rank of B differ at the reported rank and position."""
    cex = result.counterexample
    assert cex is not None
    va, vb = spmd_pair(a, b)
    out_a = va.run_reference(cex.inputs)[cex.output]
    out_b = vb.run_reference(cex.inputs)[cex.output]
    assert not bit_equal(out_a[cex.index], out_b[cex.index])


@pytest.mark.parametrize(
    ("example", "theory", "verdict"),
    [
        ("mlp_dp.gdv", "fp", "equivalent"),
        ("mlp_tp_gather.gdv", "fp", "equivalent"),
        ("mlp_dp_tp.gdv", "real", "equivalent"),
        ("mlp_dp_tp.gdv", "fp", "not-equivalent"),
    ],
)
def test_the_partitioned_examples_implement_the_mlp(example, theory, verdict) -> None:
    a = reference_module = verify(parse((EXAMPLES / "mlp.gdv").read_text(), "mlp.gdv"))
    b = verify(parse((EXAMPLES / "spmd" / example).read_text(), example))
    assert check_spmd_equivalence(a, b, theory, 20).verdict == verdict
    rng = np.random.default_rng(0)
    fn = reference_module.entry
    inputs = {
        p.name: rng.uniform(*p.range, size=p.type.shape).astype(np.float32) for p in fn.params
    }
    want = reference.run(a, inputs)[0]
    sim = run_spmd(b, inputs)
    assert not sim.disagreements
    if verdict == "equivalent" and theory == "fp":
        assert bit_equal(sim.outputs[0], want)
    else:
        assert np.allclose(sim.outputs[0], want, atol=1e-5)


def test_a_64_way_plan_is_proved_and_its_dropped_all_reduce_refuted() -> None:
    """The rank is an index term: an 8x8 mesh's DP x TP plan is one query per result."""
    big = """mesh @m = {data = 8, model = 8}
func @main(%x: f32[1,64] {sharding = [["data"], []]}, %w1: f32[64,8] {sharding = [[], ["model"]]},
           %w2: f32[8,4] {sharding = [["model"], []]}) -> f32[1,4]
    {mesh = "m", out_shardings = [[["data"], []]]} {
  %h = matmul(%x, %w1) : f32[1,8]
  %r = relu(%h) : f32[1,8]
  %p = matmul(%r, %w2) : f32[1,4]
  %y = all_reduce(%p) {axes = ["model"], combiner = "add", order = "rank"} : f32[1,4]
  return %y
}
"""
    glob = """func @main(%x: f32[8,64], %w1: f32[64,64], %w2: f32[64,4]) -> f32[8,4] {
  %h = matmul(%x, %w1) : f32[8,64]
  %r = relu(%h) : f32[8,64]
  %p = matmul(%r, %w2) : f32[8,4]
  return %p
}
"""
    result = check_spmd_equivalence(load(glob), load(big), "real", 20)
    assert result.verdict == "equivalent", result.reason
    dropped = big.replace(
        '  %y = all_reduce(%p) {axes = ["model"], combiner = "add", order = "rank"} : f32[1,4]\n'
        "  return %y",
        "  return %p",
    )
    assert check_spmd_equivalence(load(glob), load(dropped), "fp", 20).verdict == "not-equivalent"


def test_a_signature_that_does_not_match_is_an_input_error() -> None:
    from gdv.ir.diagnostics import IRError

    other = GLOBAL.replace("f32[8,16] {range", "f32[16,16] {range").replace(
        "%h = matmul(%x, %w1) : f32[8,16]", "%h = matmul(%x, %w1) : f32[16,16]"
    )
    other = (
        other.replace("relu(%h) : f32[8,16]", "relu(%h) : f32[16,16]")
        .replace("matmul(%r, %w2) : f32[8,4]", "matmul(%r, %w2) : f32[16,4]")
        .replace("-> f32[8,4]", "-> f32[16,4]")
    )
    with pytest.raises(IRError, match="global type is f32\\[8,16\\]"):
        check_spmd_equivalence(load(other), load(MEGATRON), "fp", 5)


# --- every collective and order: the SMT meaning against the simulation, concrete values --

SPECIALS = [0.0, -0.0, 1.0, -1.0, np.inf, -np.inf, np.nan, 1e30, -1e30, 3.0, 1e-40]


def _program(mesh, op_text, local_in, local_out, dtype="f32"):
    """x's rows split over every mesh axis; the result sharded alike (replicated when the op
    drops dims: carry_reduce)."""
    dims = ",".join(map(str, local_in))
    out = ",".join(map(str, local_out))
    axes = ", ".join(f"{a} = {n}" for a, n in mesh)
    sharding = [[] for _ in local_in]
    sharding[0] = [a for a, _ in mesh]  # every rank its own block of rows
    shard_text = "[" + ", ".join("[" + ", ".join(f'"{a}"' for a in s) + "]" for s in sharding) + "]"
    same_rank = len(local_out) == len(local_in)
    attrs = f'mesh = "m", out_shardings = [{shard_text}]' if same_rank else 'mesh = "m"'
    return (
        f"mesh @m = {{{axes}}}\n"
        f"func @main(%x: {dtype}[{dims}] {{sharding = {shard_text}}}) -> {dtype}[{out}] "
        f"{{{attrs}}} {{\n"
        f"  %y = {op_text} : {dtype}[{out}]\n  return %y\n}}\n"
    )


@st.composite
def collectives(draw):
    naxes = draw(st.integers(1, 2))
    mesh = [(f"a{k}", draw(st.integers(1, 4))) for k in range(naxes)]
    axes = draw(st.lists(st.sampled_from([a for a, _ in mesh]), min_size=1, unique=True))
    p = 1
    for a, n in mesh:
        if a in axes:
            p *= n
    kind = draw(
        st.sampled_from(
            [
                "all_reduce",
                "all_gather",
                "reduce_scatter",
                "all_to_all",
                "collective_permute",
                "shard_slice",
                "carry_reduce",
            ]
        )
    )
    rows = draw(st.integers(1, 3)) * (
        p if kind in ("reduce_scatter", "all_to_all", "shard_slice") else 1
    )
    cols = draw(st.integers(1, 3)) * (p if kind == "all_to_all" else 1)
    local = [rows, cols]
    axes_text = "[" + ", ".join(f'"{a}"' for a in axes) + "]"
    order = draw(st.sampled_from(["rank", "tree", "ring"]))
    combiner = draw(st.sampled_from(["add", "max", "min"]))
    out = list(local)
    if kind == "all_reduce":
        text = f'all_reduce(%x) {{axes = {axes_text}, combiner = "{combiner}", order = "{order}"}}'
    elif kind == "all_gather":
        d = draw(st.integers(0, 1))
        out[d] *= p
        text = f"all_gather(%x) {{axes = {axes_text}, dim = {d}}}"
    elif kind == "reduce_scatter":
        out[0] //= p
        text = (
            f'reduce_scatter(%x) {{axes = {axes_text}, dim = 0, combiner = "{combiner}", '
            f'order = "{order}"}}'
        )
    elif kind == "shard_slice":
        out[0] //= p
        text = f"shard_slice(%x) {{axes = {axes_text}, dim = 0}}"
    elif kind == "all_to_all":
        s, c = draw(st.sampled_from([(0, 1), (1, 0), (0, 0), (1, 1)]))
        out[s] //= p
        out[c] *= p
        text = f"all_to_all(%x) {{axes = {axes_text}, split_dim = {s}, concat_dim = {c}}}"
    elif kind == "carry_reduce":
        dims = draw(st.sampled_from([[0], [1], [0, 1], [1, 0]]))
        out = [n for d, n in enumerate(local) if d not in dims]
        text = f'carry_reduce(%x) {{axes = {axes_text}, dims = {dims}, combiner = "{combiner}"}}'
    else:
        perm = draw(st.permutations(range(p)))
        keep = draw(st.integers(0, p))
        pairs = [[m, perm[m]] for m in range(keep)]
        text = f"collective_permute(%x) {{axes = {axes_text}, pairs = {pairs}}}"
    return mesh, text, local, out


@given(collectives(), st.integers(0, 2**32 - 1))
def test_every_collective_means_in_smt_what_the_simulation_computes(case, seed) -> None:
    mesh, text, local, out = case
    module = load(_program(mesh, text, local, out))
    _, view = spmd_pair(_global_of(module), module)
    rng = np.random.default_rng(seed)
    shape = view.params[0].type.shape
    x = rng.choice(np.array(SPECIALS + list(rng.standard_normal(8)), dtype=np.float32), shape)
    want = view.run_reference({"x": x})[0]
    got = evaluate(view, {"x": x})[0]
    assert bit_equal(got, want), (text, x, want, got)


def _global_of(module):
    """Some ordinary function with the SPMD function's global signature (only its signature
    matters for the SPMD side's view)."""
    from gdv.backends.reference.spmd import global_function

    g = global_function(module, module.entry)
    (p,) = g.params
    (r,) = g.results
    if p.type == r:
        body = f"  %y = neg(%{p.name}) : {r}\n"
    else:
        body = f"  %y = constant() {{value = 0.0}} : {r}\n"
    return load(f"func @main(%{p.name}: {p.type}) -> {r} {{\n{body}  return %y\n}}\n")


# --- the fold orders, as the specification states them, on values where they differ -------

ORDER_MESH = [("r", 4)]


def _all_reduce(values: list[float], order: str, local=(1,)) -> np.ndarray:
    text = f'all_reduce(%x) {{axes = ["r"], combiner = "add", order = "{order}"}}'
    module = load(_program(ORDER_MESH, text, list(local), list(local)))
    x = np.array(values, dtype=np.float32).reshape((4 * local[0],) + tuple(local[1:]))
    return run_spmd(module, {"x": x}).per_rank


def test_rank_tree_and_ring_orders_fold_as_the_specification_says() -> None:
    f = np.float32
    v = [f(1.0), f(1e8), f(-1e8), f(1.0)]
    rank = ((v[0] + v[1]) + v[2]) + v[3]  # left fold in member order: 1.0
    tree = (v[0] + v[1]) + (v[2] + v[3])  # halves of ceil(4/2): 0.0
    ring0 = ((v[1] + v[2]) + v[3]) + v[0]  # one chunk (E = 1): chunk 0 from member 1: 2.0
    assert (rank, tree, ring0) == (f(1.0), f(0.0), f(2.0))  # the values tell orders apart
    for order, want in (("rank", rank), ("tree", tree), ("ring", ring0)):
        for per in _all_reduce(v, order):
            assert per[0].tolist() == [want], order


def test_a_ring_folds_each_chunk_from_the_member_after_it() -> None:
    """E = 4 elements on 4 members: element c is chunk c, folded from member c + 1 round to c."""
    f = np.float32
    members = [
        [f(1e8), f(1.0), f(-1e8), f(3.0)],
        [f(1.0), f(1e8), f(1.0), f(-1e8)],
        [f(-1e8), f(-1e8), f(1e8), f(1.0)],
        [f(1.0), f(1.0), f(1.0), f(1e8)],
    ]
    x = np.array(members, dtype=np.float32).reshape(4, 4)
    text = 'all_reduce(%x) {axes = ["r"], combiner = "add", order = "ring"}'
    module = load(_program(ORDER_MESH, text, [1, 4], [1, 4]))
    got = run_spmd(module, {"x": x}).per_rank[0][0].reshape(-1)
    for c in range(4):
        acc = members[(c + 1) % 4][c]
        for j in range(2, 5):
            acc = f(acc + members[(c + j) % 4][c])
        assert got[c] == acc, c


def test_integer_all_reduce_wraps() -> None:
    text = 'all_reduce(%x) {axes = ["r"], combiner = "add", order = "rank"}'
    module = load(_program(ORDER_MESH, text, [1], [1], "i32"))
    x = np.array([2**31 - 1, 1, 5, -3], dtype=np.int32)
    for per in run_spmd(module, {"x": x}).per_rank:
        assert per[0].tolist() == [-(2**31) + 2]  # 2^31 - 1 + 1 wraps to -2^31


def test_a_tree_over_three_members_splits_at_ceil_half() -> None:
    f = np.float32
    v = [f(1e8), f(-1e8), f(1.0)]
    want = (v[0] + v[1]) + v[2]  # h = ceil(3/2) = 2: 1.0, where v0 + (v1 + v2) gives 0.0
    assert want == f(1.0) and v[0] + (v[1] + v[2]) == f(0.0)
    text = 'all_reduce(%x) {axes = ["r"], combiner = "add", order = "tree"}'
    module = load(_program([("r", 3)], text, [1], [1]))
    for per in run_spmd(module, {"x": np.array(v, dtype=np.float32)}).per_rank:
        assert per[0].tolist() == [want]


# --- bounds: every collective's rule holds on the simulation --------------------------------

BOUND_CASES = {
    "all_reduce": (
        'all_reduce(%x) {axes = ["r"], combiner = "add", order = "ORDER"}',
        [3, 5],
        [3, 5],
    ),
    "reduce_scatter": (
        'reduce_scatter(%x) {axes = ["r"], dim = 0, combiner = "add", order = "ORDER"}',
        [8, 5],
        [2, 5],
    ),
    "all_gather": ('all_gather(%x) {axes = ["r"], dim = 1}', [3, 5], [3, 20]),
    "all_to_all": ('all_to_all(%x) {axes = ["r"], split_dim = 0, concat_dim = 1}', [8, 5], [2, 20]),
    "collective_permute": (
        'collective_permute(%x) {axes = ["r"], pairs = [[0, 1], [2, 3]]}',
        [3, 5],
        [3, 5],
    ),
    "shard_slice": ('shard_slice(%x) {axes = ["r"], dim = 1}', [3, 8], [3, 2]),
    "carry_reduce": ('carry_reduce(%x) {axes = ["r"], dims = [0], combiner = "add"}', [3, 5], [5]),
}


@pytest.mark.parametrize("name", sorted(BOUND_CASES))
@pytest.mark.parametrize("order", ["rank", "tree", "ring"])
def test_every_collective_s_error_bound_holds_on_the_simulation(name: str, order: str) -> None:
    """The rigorous bound of x -> exp(x) -> collective (an inexact operand, so the rule's
    propagation counts) against the measured error: the exact-mode simulation against the
    ideal (f64) one, on random inputs within the declared range."""
    from gdv.validate.bounds import analyze

    text, local, out = BOUND_CASES[name]
    op = text.replace("ORDER", order).replace("(%x)", "(%e)")
    dims = ",".join(map(str, local))
    module = load(
        "mesh @m = {r = 4}\n"
        f'func @main(%x: f32[{dims}] {{sharding = [["r"], []], range = [-2.0, 2.0]}}) -> '
        f'f32[{",".join(map(str, out))}] {{mesh = "m"'
        + (', out_shardings = [[["r"], []]]' if len(out) == 2 else "")
        + "} {\n"
        f"  %e = exp(%x) : f32[{dims}]\n"
        f"  %y = {op} : f32[{','.join(map(str, out))}]\n  return %y\n}}\n"
    )
    bound = analyze(module).outputs[0].abs
    assert 0 < bound < 1e-3
    rng = np.random.default_rng(1)
    worst = 0.0
    for _ in range(20):
        x = {"x": rng.uniform(-2, 2, size=(4 * local[0], local[1])).astype(np.float32)}
        exact = run_spmd(module, x).per_rank
        ideal = run_spmd(module, x, mode="ideal").per_rank
        for a, b in zip(exact, ideal, strict=True):
            worst = max(worst, float(np.max(np.abs(a[0].astype(np.float64) - b[0]))))
    assert worst <= bound


@pytest.mark.parametrize(
    ("global_x", "local_x", "result", "verdict"),
    [
        ("f32[12,3]", "f32[3,3]", "f32[]", "equivalent"),  # every dim folded: a rank-0 result
        ("f32[0,3]", "f32[0,3]", "f32[]", "equivalent"),  # an empty fold on every member
        ("f32[12,3]", "f32[3,3]", "f32[]", "not-equivalent"),  # dims in the wrong order
    ],
)
def test_carry_reduce_at_rank_0_and_size_0(global_x, local_x, result, verdict) -> None:
    """The carried fold over every dim (a scalar) and over an empty operand is the global
    reduction; folding the inner dim first is a different order, refuted bit for bit."""
    dims = "[1, 0]" if verdict == "equivalent" else "[1]"
    g = load(
        f"func @main(%x: {global_x}) -> {result} {{\n"
        f"  %s = reduce_sum(%x) {{axes = [0, 1]}} : {result}\n  return %s\n}}\n"
    )
    if verdict == "not-equivalent":
        body = (
            f'  %t = carry_reduce(%x) {{axes = ["r"], dims = {dims}, combiner = "add"}} : f32[3]\n'
            "  %s = reduce_sum(%t) {axes = [0]} : f32[]\n"
        )
    else:
        body = (
            f'  %s = carry_reduce(%x) {{axes = ["r"], dims = {dims}, combiner = "add"}}'
            f" : {result}\n"
        )
    s = load(
        "mesh @m = {r = 4}\n"
        f'func @main(%x: {local_x} {{sharding = [["r"], []]}}) -> {result} {{mesh = "m"}} {{\n'
        f"{body}  return %s\n}}\n"
    )
    assert check_spmd_equivalence(g, s, "fp", 20).verdict == verdict
