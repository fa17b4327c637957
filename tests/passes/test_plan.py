"""The planner (issue 17, item 4): the alpha-beta cost of every collective and order against
hand-computed values, the probe's fit, the integer program's optimum against brute force, the
plans it chooses for the MLP (Megatron's split, data parallelism, both), the prediction against
the program the partition pass writes, and a Llama-like decoder on an 8x8 mesh.

The machine models here are fixed (`ROOF`, `net`), never measured, so the choices do not depend
on the host."""

from __future__ import annotations

import itertools
import math
import sys
import time
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from gdv.backends.cost import Roofline
from gdv.backends.mpi.cost import CHAIN_PIECE, Network, collective_cost
from gdv.backends.mpi.probe import fit
from gdv.fuzzing.programs import programs
from gdv.ir.parser import parse
from gdv.ir.printer import print_module
from gdv.ir.verifier import verify
from gdv.passes.partition import parse_mesh, partition, prove_steps
from gdv.passes.plan import (
    PlanError,
    apply,
    op_strategies,
    plan,
    plan_memory,
    program_cost,
    reshard_seconds,
    shard_text,
)

ROOT = Path(__file__).resolve().parents[2]
ROOF = Roofline(peak_gflops=100.0, bandwidth_gbs=20.0)
MLP = (ROOT / "examples" / "mlp.gdv").read_text()


def net(alpha: float, beta: float = 1e-10) -> Network:
    return Network(alpha, beta, "test")


def mlp(batch: int = 8):
    return verify(parse(MLP.replace("f32[8,", f"f32[{batch},"), "mlp.gdv"))


def collectives(module) -> list[str]:
    return [
        op.name
        for op in module.entry.ops
        if op.name in ("all_reduce", "all_gather", "reduce_scatter", "all_to_all")
    ]


# --- the alpha-beta model, by hand ----------------------------------------------------------

A, B = 1.0, 0.001  # one second per message, a millisecond per byte: the sums read off directly


def test_ring_all_reduce_is_the_textbook_formula() -> None:
    # 1000 f32 over 4 members: chunks of 250 elements (1000 bytes); 2(p-1) steps.
    c = collective_cost("all_reduce", 4, 4000, order="ring")
    assert c.steps == 6 and c.path_bytes == 6000
    assert c.seconds(net(A, B)) == pytest.approx(2 * 3 * A + 2 * 3 / 4 * 4000 * B)
    assert c.bytes_sent == (6000, 6000, 6000, 6000)


def test_ring_all_reduce_with_uneven_chunks_counts_what_each_member_sends() -> None:
    # 10 f32 over 4: chunks of 3, 3, 3, 1 elements = 12, 12, 12, 4 bytes; member m sends every
    # chunk but m (reduce-scatter) and every chunk but m+1 (all-gather).
    c = collective_cost("all_reduce", 4, 40, order="ring")
    assert c.bytes_sent == (80 - 12 - 12, 80 - 12 - 12, 80 - 12 - 4, 80 - 4 - 12)
    assert c.path_bytes == 6 * 12


def test_rank_order_all_reduce_is_a_chain_there_and_back() -> None:
    c = collective_cost("all_reduce", 4, 4000, order="rank")
    # one piece: 3 hops down the chain, 3 hops of the broadcast round it
    assert c.steps == 6 and c.path_bytes == 6 * 4000
    # members 0..2 send in the chain, members 3, 0, 1 in the broadcast
    assert c.bytes_sent == (8000, 8000, 4000, 4000)
    assert collective_cost("all_reduce", 2, 64, order="rank").bytes_sent == (64, 64)
    # two members: one exchange, each member folding v0 + v1 itself
    assert collective_cost("all_reduce", 2, 64, order="tree").steps == 1


def test_rank_order_all_reduce_pipelines_its_pieces() -> None:
    n = 4 * CHAIN_PIECE  # four pieces: 3 members + 4 pieces - 2 = 5 piece-times per phase
    c = collective_cost("all_reduce", 3, n, order="rank")
    assert c.steps == 10 and c.path_bytes == 10 * CHAIN_PIECE


def test_tree_all_reduce_sends_down_and_up_the_tree() -> None:
    # p = 5: halves [0..2] [3,4], then [0,1] [2], [3] [4]: depth 3.
    c = collective_cost("all_reduce", 5, 100, order="tree")
    assert c.steps == 6 and c.path_bytes == 600
    assert c.bytes_sent == (300, 100, 100, 200, 100)
    assert sum(c.bytes_sent) == 2 * 4 * 100


def test_the_other_collectives_by_hand() -> None:
    rs = collective_cost("reduce_scatter", 4, 4000, order="tree")
    assert (rs.steps, rs.path_bytes, rs.bytes_sent) == (3, 3000, (3000,) * 4)
    ag = collective_cost("all_gather", 4, 1000)
    assert (ag.steps, ag.path_bytes, ag.bytes_sent) == (3, 3000, (3000,) * 4)
    a2a = collective_cost("all_to_all", 4, 4000)
    assert (a2a.steps, a2a.path_bytes, a2a.bytes_sent) == (3, 3000, (3000,) * 4)
    perm = collective_cost("collective_permute", 4, 100, pairs=[[0, 1], [1, 0], [2, 2]])
    assert (perm.steps, perm.path_bytes, perm.bytes_sent) == (1, 100, (100, 100, 0, 0))
    copy = collective_cost("collective_permute", 2, 100, pairs=[[0, 0], [1, 1]])
    assert copy.seconds(net(A, B)) == 0
    carry = collective_cost("carry_reduce", 4, 400, result_bytes=40)
    assert (carry.steps, carry.bytes_sent) == (6, (40, 40, 40, 120))
    assert carry.seconds(net(A, B)) == pytest.approx(6 * A + 6 * 40 * B)
    assert collective_cost("shard_slice", 4, 4000).seconds(net(A, B)) == 0
    assert collective_cost("all_reduce", 1, 4000, order="ring").seconds(net(A, B)) == 0


def test_reshard_costs_what_the_partition_pass_emits() -> None:
    t = mlp().entry.param("w1").type  # f32[784,128]
    mesh = parse_mesh("data=2,model=2")
    # [model, data] -> [-, data]: one all_gather over model of the local f32[392,64]
    s, gathers = reshard_seconds(t, (("model",), ("data",)), ((), ("data",)), mesh, net(A, B))
    assert gathers == [("all_gather", ["model"], 392 * 64 * 4)]
    assert s == pytest.approx(A + 392 * 64 * 4 * B)
    # replicated -> anything: slices only, free
    assert reshard_seconds(t, ((), ()), (("data",), ("model",)), mesh, net(A, B))[0] == 0


def test_a_strategy_costs_its_local_roofline_and_its_all_reduce() -> None:
    module = mlp()
    fn = module.entry
    types = fn.types()
    mesh = parse_mesh("model=2")
    network = net(1e-6, 1e-9)

    def strategy(value: str, factors: dict, order: str = "rank"):
        op = next(o for o in fn.ops if o.result == value)
        options = op_strategies(op, [types[o] for o in op.operands], mesh, network, ROOF, order)
        return next(s for s in options if dict(s.factors) == factors)

    # %0 = matmul f32[8,784] x f32[784,128], columns split: f32[8,784] x f32[784,64] per rank,
    # 2*8*64*784 flops (8.0 us at 100 GFLOP/s) and (8*784 + 784*64 + 8*64)*4 bytes (11.4 us at
    # 20 GB/s): bound by memory.
    col = strategy("0", {"j": ("model",)})
    assert col.compute_s == pytest.approx((8 * 784 + 784 * 64 + 8 * 64) * 4 / 20e9)
    assert col.comm_s == 0 and col.result == ((), ("model",))
    assert col.operands == (((), ()), ((), ("model",)))
    # %4 = matmul f32[8,128] x f32[128,10], rows of w2 split: a partial f32[8,10] per rank,
    # finished by an all_reduce of 320 bytes over 2 members: one exchange in rank order (each
    # member folds v0 + v1 itself), 2 ring steps of 160-byte chunks in ring order.
    row = strategy("4", {"k": ("model",)})
    assert row.compute_s == pytest.approx((8 * 64 + 64 * 10 + 8 * 10) * 4 / 20e9)
    assert row.partial == ("model",)
    assert row.comm_s == pytest.approx(1e-6 + 320 * 1e-9)
    assert strategy("4", {"k": ("model",)}, "ring").comm_s == pytest.approx(2 * (1e-6 + 160e-9))
    # replicated: the whole product on every rank, bound by compute here
    whole = strategy("0", {})
    assert whole.compute_s == pytest.approx(
        max(2 * 8 * 128 * 784 / 100e9, (8 * 784 + 784 * 128 + 8 * 128) * 4 / 20e9)
    )


def test_the_fit_recovers_alpha_and_beta() -> None:
    sizes = [8, 512, 4096, 32768, 262144]
    alpha, beta = fit(sizes, [2e-6 + n * 1e-10 for n in sizes])
    assert alpha == pytest.approx(2e-6) and beta == pytest.approx(1e-10)
    # times that do not grow: all latency
    assert fit([8, 1024], [3e-6, 2e-6])[1] == 0
    with pytest.raises(ValueError):
        fit([8], [1e-6])


# --- the integer program against brute force ------------------------------------------------

SMALL = """func @main(%x: f32[4,4], %w: f32[4,4]) -> f32[4,4] {
  %0 = matmul(%x, %w) : f32[4,4]
  %1 = relu(%0) : f32[4,4]
  return %1
}
"""


def brute_force(module, mesh, network, roof, max_memory, whole, order):
    """The least step time over every combination of strategies (None: none fits)."""
    fn = module.entry
    p = plan(module, mesh, network, roof, whole_results=whole, timeout=60, order=order)
    nodes = p.nodes
    types = fn.types()
    names = list(nodes)
    best = None
    for combo in itertools.product(*(nodes[v].strategies for v in names)):
        choice = dict(zip(names, combo, strict=True))
        if max_memory is not None and plan_memory(fn, choice) > max_memory:
            continue
        total = sum(s.seconds for s in combo)
        for op in fn.ops:
            for i, o in enumerate(op.operands):
                total += reshard_seconds(
                    types[o], choice[o].result, choice[op.result].operands[i], mesh, network
                )[0]
        best = total if best is None else min(best, total)
    return best


@given(
    alpha=st.floats(1e-8, 1e-4),
    beta=st.floats(1e-12, 1e-8),
    peak=st.floats(0.1, 1000.0),
    bandwidth=st.floats(0.1, 100.0),
    two_axes=st.booleans(),
    whole=st.booleans(),
    memory=st.one_of(st.none(), st.integers(40, 200)),
    order=st.sampled_from(["rank", "tree", "ring"]),
)
def test_the_optimum_is_brute_forces(alpha, beta, peak, bandwidth, two_axes, whole, memory, order):
    module = verify(parse(SMALL, "small.gdv"))
    mesh = parse_mesh("a=2,b=2" if two_axes else "a=2")
    network, roof = net(alpha, beta), Roofline(peak, bandwidth)
    want = brute_force(module, mesh, network, roof, memory, whole, order)
    kw = {"max_memory": memory, "whole_results": whole, "order": order}
    if want is None:
        with pytest.raises(PlanError) as e:
            plan(module, mesh, network, roof, **kw)
        assert e.value.status == "infeasible"
        return
    got = plan(module, mesh, network, roof, **kw)
    assert got.objective_s == pytest.approx(want, rel=1e-5)
    if memory is not None:
        assert got.memory_bytes <= memory
    # what the partition pass writes costs what the program predicted
    cost = program_cost(apply(module, got).module, network, roof)
    assert cost.step_s == pytest.approx(got.objective_s, rel=1e-9)


@given(module=programs(max_ops=6), two_axes=st.booleans())
def test_random_programs_are_planned_partitioned_and_proved(module, two_axes) -> None:
    # Messages nearly free: the plans split whatever the factor rules let them split.
    network = net(1e-12, 1e-14)
    mesh = parse_mesh("a=2,b=3" if two_axes else "a=2")
    p = plan(module, mesh, network, ROOF)
    part = apply(module, p)
    verify(part.module)
    cost = program_cost(part.module, network, ROOF)
    if all(len(set(op.operands)) == len(op.operands) for op in module.entry.ops):
        assert cost.step_s == pytest.approx(p.objective_s, rel=1e-9, abs=1e-15)
    assert prove_steps(part, timeout=60) == "proved"


# --- the plans it chooses -------------------------------------------------------------------


def test_the_mlp_at_tp_2_is_megatrons_split() -> None:
    module = mlp()
    p = plan(module, parse_mesh("model=2"), net(1e-6), ROOF)
    # column split of the first product, row split of the second, one all_reduce
    assert dict(p.choice["0"].factors) == {"j": ("model",)}
    assert dict(p.choice["4"].factors) == {"k": ("model",)}
    assert p.choice["4"].partial == ("model",)
    assert [shard_text(n, s) for n, s in p.annotations.items()] == [
        "x=[-,-]",
        "w1=[-,model]",
        "b1=[model]",
        "w2=[model,-]",
        "b2=[-]",
    ]
    part = apply(module, p)
    assert collectives(part.module) == ["all_reduce"]
    # propagation from the annotations alone writes the same program: gdv partition's
    alone = partition(module, parse_mesh("model=2"), p.annotations)
    assert print_module(alone.module) == print_module(part.module)
    assert prove_steps(part, timeout=60) == "proved"
    cost = program_cost(part.module, net(1e-6), ROOF)
    assert cost.step_s == pytest.approx(p.objective_s, rel=1e-9)
    assert cost.memory_bytes == p.memory_bytes


def test_at_a_tenth_of_a_microsecond_per_message_the_first_product_splits_by_rows_too() -> None:
    # Over 2 members the runtime's all_reduce is one exchange (each member folds v0 + v1
    # itself). From 0.3 us per message up (this host measured 1.3 to 2.2 us) the MLP is
    # Megatron's split (above); at 0.1 us a second all_reduce (f32[8,128]) costs less than
    # reading all of x on each rank, so x arrives split by columns and w1 by rows.
    p = plan(mlp(), parse_mesh("model=2"), net(1e-7), ROOF)
    assert dict(p.choice["0"].factors) == {"k": ("model",)}
    assert dict(p.choice["4"].factors) == {"k": ("model",)}
    assert collectives(apply(mlp(), p).module) == ["all_reduce", "all_reduce"]
    assert collective_cost("all_reduce", 2, 320, order="rank").steps == 1


def test_a_big_batch_on_a_data_axis_is_data_parallel() -> None:
    module = mlp(1024)
    p = plan(module, parse_mesh("data=2"), net(1.3e-6), ROOF)
    assert p.parallelism() == ["data"]
    assert p.annotations["x"] == [["data"], []]
    assert all(not any(p.annotations[w]) for w in ("w1", "b1", "w2", "b2"))
    # the only message: the result gathered whole at the end
    assert collectives(apply(module, p).module) == ["all_gather"]
    # left split, the result needs no message at all
    q = plan(module, parse_mesh("data=2"), net(1.3e-6), ROOF, whole_results=False)
    assert collectives(apply(module, q).module) == [] and q.choice["6"].result == (("data",), ())


def test_data_x_model_combines_both() -> None:
    module = mlp(32)
    p = plan(module, parse_mesh("data=2,model=2"), net(1e-8), ROOF)
    assert dict(p.choice["0"].factors) == {"i": ("data",), "j": ("model",)}
    assert dict(p.choice["4"].factors) == {"i": ("data",), "k": ("model",)}
    assert p.parallelism() == ["data", "tensor-column", "tensor-row"]
    part = apply(module, p)
    assert "all_reduce" in collectives(part.module)
    assert prove_steps(part, timeout=60) == "proved"


def test_a_memory_limit_forces_the_weights_apart() -> None:
    module = mlp(1024)
    mesh = parse_mesh("data=2")
    free = plan(module, mesh, net(1.3e-6), ROOF)
    assert not any(free.annotations["w1"])  # data parallel: w1 whole on each device
    tight = plan(module, mesh, net(1.3e-6), ROOF, max_memory=free.memory_bytes - 100_000)
    assert tight.memory_bytes <= free.memory_bytes - 100_000
    assert any(tight.annotations["w1"])  # w1's 401 KB are split
    assert tight.objective_s >= free.objective_s
    with pytest.raises(PlanError) as e:
        plan(module, mesh, net(1.3e-6), ROOF, max_memory=50_000)
    assert e.value.status == "infeasible" and "no plan fits in 50000 bytes" in e.value.message


def test_pinned_shardings_are_kept_and_checked() -> None:
    from gdv.ir.diagnostics import IRError

    p = plan(mlp(), parse_mesh("model=2"), net(1e-7), ROOF, fixed={"w2": [[], []]})
    assert p.annotations["w2"] == [[], []]
    with pytest.raises(IRError, match="no axis 'pipe'"):
        plan(mlp(), parse_mesh("model=2"), net(1e-7), ROOF, fixed={"w2": [["pipe"], []]})
    with pytest.raises(IRError, match="no parameter"):
        plan(mlp(), parse_mesh("model=2"), net(1e-7), ROOF, fixed={"w9": [[], []]})


# --- a Llama-like decoder --------------------------------------------------------------------


def llama(layers: int, **kw):
    sys.path.insert(0, str(ROOT / "benchmarks"))
    try:
        from llama_like import decoder
    finally:
        sys.path.pop(0)
    return verify(parse(decoder(layers=layers, **kw), "llama.gdv"))


@pytest.mark.slow
def test_a_llama_like_decoder_plans_on_an_8x8_mesh_quickly() -> None:
    # 4 of the 32 layers (the README records the 32-layer measurement): hidden 4096, GQA.
    module = llama(4)
    t = time.perf_counter()
    p = plan(module, parse_mesh("data=8,model=8"), net(1.3e-6), ROOF, timeout=60)
    seconds = time.perf_counter() - t
    assert seconds < 30, seconds
    assert p.status == "optimal"
    # every weight matrix is split: the whole model would not be cheaper replicated
    weights = [n for n in p.annotations if n.split("_")[-1].startswith("w")]
    assert len(weights) == 4 * 7 and all(any(p.annotations[w]) for w in weights)
    cost = program_cost(apply(module, p).module, net(1.3e-6), ROOF)
    # the prediction of the written program; an op that reads one resharded value twice
    # (x * x in RMSNorm) reads two copies there, which the program counts once
    assert cost.step_s == pytest.approx(p.objective_s, rel=1e-3)


def test_a_small_llama_like_plan_is_applied_and_proved() -> None:
    module = llama(1, hidden=64, heads=4, kv_heads=2, ffn=128, seq=16)
    p = plan(module, parse_mesh("data=2,model=2"), net(1e-7), ROOF)
    part = apply(module, p)
    assert prove_steps(part, timeout=60) == "proved"
    assert math.isfinite(program_cost(part.module, net(1e-7), ROOF).step_s)


def test_whole_results_are_whole_even_a_returned_parameter() -> None:
    module = verify(
        parse(
            """func @main(%x: f32[1024,16], %w: f32[16,8])
    -> (f32[1024,8], f32[1024,8], f32[1024,16]) {
  %0 = matmul(%x, %w) : f32[1024,8]
  %1 = relu(%0) : f32[1024,8]
  return %1, %1, %x
}
""",
            "returns.gdv",
        )
    )
    network = net(1e-12, 1e-14)  # splitting pays: the products split their rows
    p = plan(module, parse_mesh("a=2"), network, ROOF)
    assert dict(p.choice["0"].factors) == {"i": ("a",)}
    assert p.annotations["x"] == [[], []]  # x is returned: it stays whole (sliced for %0)
    spmd = apply(module, p).module.entry
    assert spmd.attrs["out_shardings"] == [[[], []]] * 3
    q = plan(module, parse_mesh("a=2"), network, ROOF, whole_results=False)
    assert q.choice["1"].result == (("a",), ())


@pytest.mark.parametrize(("shape", "splits"), [("4,256", False), ("2,2", True)])
def test_a_wide_split_max_is_no_strategy(shape: str, splits: bool) -> None:
    # A split max is an fp claim whose fold the prover unrolls only up to 8 elements: wider,
    # the claim would be unknown, so the plan keeps the reduction whole.
    module = verify(
        parse(
            f"""func @main(%x: f32[{shape}]) -> f32[] {{
  %m = reduce_max(%x) {{axes = [0, 1]}} : f32[]
  return %m
}}
""",
            "max.gdv",
        )
    )
    p = plan(module, parse_mesh("a=2"), net(1e-12, 1e-14), ROOF)
    assert bool(p.choice["m"].partial) == splits
    part = apply(module, p)
    assert ("all_reduce" in collectives(part.module)) == splits
    assert prove_steps(part, timeout=60) == "proved"


def test_an_empty_reshape_is_kept_whole() -> None:
    # The reshape rule paired dims by their products; with a 0 among them it ran off the end.
    module = verify(
        parse(
            """func @main(%x: f64[8,0,4], %y: f64[8,4]) -> (f64[0], f64[8,4]) {
  %r = reshape(%x) : f64[0]
  %s = add(%y, %y) : f64[8,4]
  return %r, %s
}
""",
            "empty.gdv",
        )
    )
    p = plan(module, parse_mesh("a=2"), net(1e-12, 1e-14), ROOF)
    assert len(p.nodes["r"].strategies) == 1 and p.choice["r"].factors == ()
    part = apply(module, p)
    assert prove_steps(part, timeout=60) == "proved"
