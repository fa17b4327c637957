"""Automatic SPMD planning (issue 17, item 4): an Alpa-style integer program over each op's
sharding strategies, with resharding costs on the edges, solved with HiGHS.

- A **strategy** of an op gives each of its shardable factors (`gdv.ir.sharding`) mesh axes
  (each mesh axis at most one factor; several axes on one factor in mesh order; a factor's
  size a multiple of its group). It fixes the shardings its operands must have, its result's
  sharding, and the axes its split reductions leave pending. Its cost is the op's roofline time
  on its local shapes plus the `all_reduce` that finishes a pending sum (the partition pass
  emits one right after the op, in the declared order). A parameter's strategies are its
  shardings (no cost; its local bytes count towards memory).
- An **edge** (a value used as an operand) costs what the partition pass does to bring the
  producer's sharding to the one the consumer asks for: an `all_gather` per dim split the wrong
  way (in dim order, each on the local size it has then), then a free `shard_slice`.
- The program: one binary per (node, strategy), one per node summing to 1; for every edge
  with a cost, continuous `e[σ, τ] >= 0` over (producer's result sharding σ, consumer's
  required sharding τ) whose row sums are the producer's choice of σ and column sums the
  consumer's choice of τ (Alpa's formulation: with one-hot choices exactly one e is 1, so the
  products of choices are linear). The objective is the step time: every op's compute and
  collective seconds plus every edge's. With a memory limit, each program point adds one row:
  the parameters' local bytes plus the live intermediate values' local bytes <= the limit.

The plan is handed to the partition pass (`apply`) as every parameter's annotation (`--shard`)
and each op's factors' axes (`partition(strategies=...)`), so the SPMD program written is the
one costed: its cost by the same model (`program_cost`) is what the plan report predicts, and
equals the integer program's objective (but for an op that reads one resharded value twice,
which reads two copies in the program). With `whole_results` (the default) each returned value
is gathered whole after the op that makes it, in the cost and in the program alike.
"""

from __future__ import annotations

import dataclasses
import itertools
import math
import os
import sys
import time
from dataclasses import dataclass, field

from gdv.backends.cost import Roofline, op_cost
from gdv.backends.mpi.cost import Network, collective_cost
from gdv.ir.core import Function, Module, Op
from gdv.ir.diagnostics import IRError, Loc
from gdv.ir.mesh import Mesh, member_index
from gdv.ir.ops.collective import COLLECTIVES
from gdv.ir.sharding import FactorRule, factor_rule
from gdv.ir.types import TensorType
from gdv.passes.partition import check_annotation

SCALE = 1e4
"""The largest cost in the integer program, after scaling (see `plan`)."""

Shard = tuple[tuple[str, ...], ...]
"""A sharding as a tuple (hashable): one tuple of mesh axes per dim."""

DEFAULT_ROOFLINE = Roofline(peak_gflops=100.0, bandwidth_gbs=20.0)
"""Used when no capability descriptor with measured peaks is at hand (documented, not
measured)."""


class PlanError(IRError):
    """A plan that cannot be made (no plan fits the memory limit, the solver failed or timed
    out, or is not installed). `status` is `infeasible`, `timeout`, `failed` or
    `unavailable`."""

    def __init__(self, message: str, status: str) -> None:
        super().__init__(message, Loc("<plan>", 1, 1))
        self.status = status

    def __str__(self) -> str:
        return f"gdv: error: {self.message}"


@dataclass(frozen=True)
class Strategy:
    """One way to run a node: its factors' axes, the operand shardings it needs, its result's
    sharding, the axes its split sums leave pending, and its costs."""

    factors: tuple[tuple[str, tuple[str, ...]], ...]
    operands: tuple[Shard, ...]
    result: Shard
    partial: tuple[str, ...]
    compute_s: float
    comm_s: float
    local_bytes: int

    @property
    def seconds(self) -> float:
        return self.compute_s + self.comm_s


@dataclass
class Node:
    value: str
    kind: str
    """`param` or the op's name."""
    type: TensorType
    strategies: list[Strategy]
    op: Op | None = None


@dataclass
class Plan:
    """The chosen strategy of every node, the annotations for the partition pass, and the
    integer program's figures."""

    mesh: Mesh
    choice: dict[str, Strategy]
    annotations: dict[str, list[list[str]]]
    objective_s: float
    variables: int
    rows: int
    solve_seconds: float
    build_seconds: float
    memory_bytes: int
    status: str = "optimal"
    mip_gap: float = 0.0
    nodes: dict[str, Node] = field(default_factory=dict)
    whole_results: bool = True
    order: str = "rank"

    def strategies(self) -> dict[str, dict[str, list[str]]]:
        """Each op's factors' mesh axes, for the partition pass (`partition(strategies=...)`)."""
        return {
            v: {f: list(a) for f, a in s.factors}
            for v, s in self.choice.items()
            if self.nodes[v].op is not None
        }

    def parallelism(self) -> list[str]:
        """The kinds of parallelism the products use: `data` (the rows of the left operand
        split), `tensor-column` (the right operand's columns), `tensor-row` (the contraction),
        `batch` (a batch dim of both, as attention heads)."""
        kinds: set[str] = set()
        for v, s in self.choice.items():
            node = self.nodes.get(v)
            if node is None or node.op is None or node.op.name not in ("matmul", "dot"):
                continue
            for f, axes in s.factors:
                if not axes:
                    continue
                kind = {"k": "tensor-row", "j": "tensor-column", "b": "batch"}.get(f[0], "data")
                kinds.add(kind)
        return sorted(kinds)


def _local(t: TensorType, s: Shard, mesh: Mesh) -> TensorType:
    return t.with_shape(tuple(n // mesh.group_size(a) for n, a in zip(t.shape, s, strict=True)))


def _nbytes(t: TensorType) -> int:
    return t.num_elements * max(1, t.dtype.bits // 8)


def op_seconds(op: Op, local_types: list[TensorType], local_out: TensorType, roof: Roofline):
    """The roofline time of `op` on local operand types."""
    names = [f"a{k}" for k in range(len(local_types))]
    # a value read twice is read once: keep the op's own operand identities
    distinct = {o: names[op.operands.index(o)] for o in op.operands}
    local_op = dataclasses.replace(
        op, operands=[distinct[o] for o in op.operands], type=local_out, result="y"
    )
    types = {names[k]: t for k, t in enumerate(local_types)}
    types["y"] = local_out
    flops, traffic = op_cost(Module([], "<plan>"), local_op, types)
    return roof.seconds(_as_cost(local_op, flops, traffic))


def _as_cost(op: Op, flops: int, traffic: int):
    from gdv.backends.cost import OpCost, kind

    return OpCost(0, op.result, op.name, kind(op), op.type.dtype.value, flops, traffic, None)


def reshard_seconds(
    t: TensorType, have: Shard, want: Shard, mesh: Mesh, net: Network
) -> tuple[float, list[tuple[str, list[str], int]]]:
    """What the partition pass's resharding of a value of global type `t` from `have` to
    `want` costs: one all_gather per dim split otherwise (dim order), then free slices."""
    cur = [tuple(a) for a in have]
    seconds = 0.0
    gathers: list[tuple[str, list[str], int]] = []
    for d in range(t.rank):
        if cur[d] == want[d] or not cur[d]:
            continue
        local = _nbytes(_local(t, tuple(cur), mesh))
        p = mesh.group_size(cur[d])
        seconds += collective_cost("all_gather", p, local).seconds(net)
        gathers.append(("all_gather", list(cur[d]), local))
        cur[d] = ()
    return seconds, gathers


def _axis_choices(mesh: Mesh, slots: list[str], sizes: dict[str, int]):
    """Every map of slot -> axes (each axis of size > 1 to at most one slot, mesh order),
    keeping a slot's size a multiple of its group."""
    axes = [a for a, n in mesh.axes if n > 1]
    seen: set[tuple] = set()
    for pick in itertools.product([None, *slots], repeat=len(axes)):
        got: dict[str, tuple[str, ...]] = {}
        for a, slot in zip(axes, pick, strict=True):
            if slot is not None:
                got[slot] = (*got.get(slot, ()), a)
        if any(sizes[s] % mesh.group_size(g) for s, g in got.items()):
            continue
        key = tuple(sorted(got.items()))
        if key not in seen:
            seen.add(key)
            yield got


def _want(dims: list[list[str]], axes_of: dict[str, tuple[str, ...]]) -> Shard:
    return tuple(tuple(axes_of.get(f[0], ())) if f else () for f in dims)


def op_strategies(
    op: Op, types: list[TensorType], mesh: Mesh, net: Network, roof: Roofline, order: str
) -> list[Strategy]:
    """Every strategy of `op` its factor rule admits on `mesh`."""
    rule: FactorRule = factor_rule(op, types)
    every = [d for dims in [*rule.operands, rule.result] for d in dims if d]
    majors = {d[0] for d in every}
    # a factor inside a compound dim, after its first, can split no dim: never sharded
    minors = {f for d in every for f in d[1:]}
    slots = sorted(f for f in majors - minors if f not in rule.replicated and rule.sizes[f] > 1)
    out = []
    for axes_of in _axis_choices(mesh, slots, rule.sizes):
        if not _provable(op, rule, axes_of):
            continue
        operands = tuple(_want(d, axes_of) for d in rule.operands)
        result = _want(rule.result, axes_of)
        partial = tuple(
            a for a in mesh.names if any(a in axes_of.get(f, ()) for f in rule.reduction)
        )
        local_in = [_local(t, s, mesh) for t, s in zip(types, operands, strict=True)]
        local_out = _local(op.type, result, mesh)
        compute = op_seconds(op, local_in, local_out, roof)
        comm = 0.0
        if partial:
            comm = collective_cost(
                "all_reduce",
                mesh.group_size(partial),
                _nbytes(local_out),
                itemsize=max(1, op.type.dtype.bits // 8),
                order=order,
            ).seconds(net)
        out.append(
            Strategy(
                tuple(sorted(axes_of.items())),
                operands,
                result,
                partial,
                compute,
                comm,
                _nbytes(local_out),
            )
        )
    return out


def _provable(op: Op, rule: FactorRule, axes_of: dict[str, tuple[str, ...]]) -> bool:
    """Whether the partition pass's claim for this split can be proved: a split float sum is a
    `real` claim (the split-sum lemma proves it); a split max, min or integer sum is an `fp`
    claim whose fold the prover unrolls only up to `SMALL_FOLD` elements (beyond, `unknown`:
    docs of `gdv.passes.partition`), so wider ones are no strategy."""
    if not any(f in axes_of for f in rule.reduction):
        return True
    from gdv.ir.ops import REGISTRY
    from gdv.validate.semantics.registry import SMALL_FOLD

    spec = REGISTRY[op.name]
    combiner = "add" if op.name in ("dot", "matmul") else spec.combiner.op
    if combiner == "add" and op.type.dtype.is_float:
        return True
    return math.prod(rule.sizes[f] for f in rule.reduction) <= SMALL_FOLD


def param_strategies(t: TensorType, mesh: Mesh, fixed: Shard | None = None) -> list[Strategy]:
    """A parameter's shardings (only `fixed` when the user gave one)."""
    if fixed is not None:
        shardings = [fixed]
    else:
        dims = [str(d) for d in range(t.rank)]
        sizes = {str(d): n for d, n in enumerate(t.shape)}
        shardings = [
            tuple(tuple(got.get(str(d), ())) for d in range(t.rank))
            for got in _axis_choices(mesh, dims, sizes)
        ]
    return [Strategy((), (), s, (), 0.0, 0.0, _nbytes(_local(t, s, mesh))) for s in shardings]


def _liveness(fn: Function) -> list[set[str]]:
    """The intermediate values live at each op (defined before or at it, used at or after it,
    or returned)."""
    last: dict[str, int] = {}
    n = len(fn.ops)
    for k, op in enumerate(fn.ops):
        for o in op.operands:
            last[o] = k
    for r in fn.returns:
        last[r] = n
    live = []
    defined: dict[str, int] = {op.result: k for k, op in enumerate(fn.ops)}
    for k in range(n):
        live.append({v for v, d in defined.items() if d <= k <= last.get(v, d)})
    return live


def build_nodes(
    fn: Function,
    mesh: Mesh,
    net: Network,
    roof: Roofline,
    order: str,
    fixed: dict[str, Shard],
    whole_results: bool = True,
) -> dict[str, Node]:
    """Every parameter's and op's strategies. With `whole_results`, an op whose value the
    function returns gathers it whole after it (its cost, and its result's sharding, say so:
    the partition pass does the same), and a returned parameter stays whole."""
    types = fn.types()
    nodes: dict[str, Node] = {}
    for p in fn.params:
        fix = fixed.get(p.name)
        if whole_results and p.name in fn.returns and fix is None:
            # returned as it came: the partition pass gathers only the values ops make
            fix = tuple(() for _ in p.type.shape)
        nodes[p.name] = Node(p.name, "param", p.type, param_strategies(p.type, mesh, fix))
    for op in fn.ops:
        strategies = op_strategies(op, [types[o] for o in op.operands], mesh, net, roof, order)
        if whole_results and op.result in fn.returns:
            whole: Shard = tuple(() for _ in op.type.shape)
            strategies = [
                dataclasses.replace(
                    s,
                    result=whole,
                    comm_s=s.comm_s + reshard_seconds(op.type, s.result, whole, mesh, net)[0],
                    local_bytes=_nbytes(op.type),
                )
                for s in strategies
            ]
        nodes[op.result] = Node(op.result, op.name, op.type, strategies, op)
    return nodes


def _highspy():
    try:
        import highspy
    except ImportError:
        raise PlanError(
            "gdv plan needs the HiGHS solver, which is not installed: pip install -e '.[plan]'",
            "unavailable",
        ) from None
    return highspy


def _new_highs():
    """A HiGHS instance that prints nothing (its banner goes to the process's stdout)."""
    highspy = _highspy()

    sys.stdout.flush()
    saved = os.dup(1)
    try:
        with open(os.devnull, "w") as null:
            os.dup2(null.fileno(), 1)
            h = highspy.Highs()
            h.setOptionValue("output_flag", False)
    finally:
        os.dup2(saved, 1)
        os.close(saved)
    return h


def plan(
    module: Module,
    mesh: Mesh,
    net: Network,
    roof: Roofline,
    *,
    order: str = "rank",
    max_memory: int | None = None,
    timeout: float = 60.0,
    fixed: dict[str, list[list[str]]] | None = None,
    whole_results: bool = True,
    gap: float = 1e-6,
) -> Plan:
    """The cheapest plan of `module`'s entry function on `mesh` (a `PlanError` when there is
    none within `max_memory` bytes per device, or the solver stops short of an optimum proved
    within the relative `gap`)."""
    import numpy as np

    highspy = _highspy()
    t0 = time.perf_counter()
    fn = module.entry
    where = Loc(module.filename, 1, 1)
    if fn is None:
        raise IRError("the module has no entry function", where)
    if fn.attrs.get("mesh") is not None:
        raise IRError("the function is SPMD already: plan the global program", fn.loc or where)
    pinned: dict[str, Shard] = {}
    for name, s in (fixed or {}).items():
        check_annotation(fn, mesh, name, s)
        pinned[name] = tuple(tuple(a) for a in s)
    nodes = build_nodes(fn, mesh, net, roof, order, pinned, whole_results)
    types = fn.types()

    # columns: strategy choices first
    offset: dict[str, int] = {}
    costs: list[float] = []
    for v, node in nodes.items():
        offset[v] = len(costs)
        costs.extend(s.seconds for s in node.strategies)
    n_choice = len(costs)
    row_lo: list[float] = []
    row_hi: list[float] = []
    starts: list[int] = []
    index: list[int] = []
    value: list[float] = []

    def row(cols: list[int], coefs: list[float], lo: float, hi: float) -> None:
        starts.append(len(index))
        index.extend(cols)
        value.extend(coefs)
        row_lo.append(lo)
        row_hi.append(hi)

    for v, node in nodes.items():
        k = len(node.strategies)
        row(list(range(offset[v], offset[v] + k)), [1.0] * k, 1.0, 1.0)

    edges = 0
    for op in fn.ops:
        consumer = nodes[op.result]
        for i, o in enumerate(op.operands):
            producer = nodes[o]
            have: dict[Shard, list[int]] = {}
            for k, s in enumerate(producer.strategies):
                have.setdefault(s.result, []).append(offset[o] + k)
            want: dict[Shard, list[int]] = {}
            for k, s in enumerate(consumer.strategies):
                want.setdefault(s.operands[i], []).append(offset[op.result] + k)
            cost = {
                (a, b): reshard_seconds(types[o], a, b, mesh, net)[0] for a in have for b in want
            }
            if not any(cost.values()):
                continue
            edges += 1
            base = len(costs)
            pairs = list(cost)
            costs.extend(cost[p] for p in pairs)
            col = {p: base + k for k, p in enumerate(pairs)}
            for a, cols in have.items():
                es = [col[(a, b)] for b in want]
                row(es + cols, [1.0] * len(es) + [-1.0] * len(cols), 0.0, 0.0)
            for b, cols in want.items():
                es = [col[(a, b)] for a in have]
                row(es + cols, [1.0] * len(es) + [-1.0] * len(cols), 0.0, 0.0)

    mem_col = None
    if max_memory is not None:
        # P = the parameters' local bytes; each program point: P + live values <= limit
        mem_col = len(costs)
        costs.append(0.0)
        cols, coefs = [mem_col], [1.0]
        for p in fn.params:
            for k, s in enumerate(nodes[p.name].strategies):
                cols.append(offset[p.name] + k)
                coefs.append(-float(s.local_bytes))
        row(cols, coefs, 0.0, 0.0)
        for live in _liveness(fn):
            cols, coefs = [mem_col], [1.0]
            for v in sorted(live):
                for k, s in enumerate(nodes[v].strategies):
                    cols.append(offset[v] + k)
                    coefs.append(float(s.local_bytes))
            row(cols, coefs, -math.inf, float(max_memory))

    n = len(costs)
    # HiGHS's tolerances are absolute (about 1e-7): in seconds, the costs of small ops would
    # vanish under them. The largest cost is scaled to SCALE, the objective scaled back.
    scale = SCALE / max(max(costs, default=0.0), 1e-300)
    costs = [c * scale for c in costs]
    h = _new_highs()
    inf = highspy.kHighsInf
    upper = np.ones(n)
    if mem_col is not None:
        upper[mem_col] = inf
    h.addCols(
        n,
        np.asarray(costs, dtype=float),
        np.zeros(n),
        upper,
        0,
        np.zeros(0, dtype=np.int32),
        np.zeros(0, dtype=np.int32),
        np.zeros(0),
    )
    h.changeColsIntegrality(
        n_choice,
        np.arange(n_choice, dtype=np.int32),
        np.array([highspy.HighsVarType.kInteger] * n_choice),
    )
    lo = np.array([x if math.isfinite(x) else -inf for x in row_lo])
    h.addRows(
        len(row_lo),
        lo,
        np.asarray(row_hi, dtype=float),
        len(index),
        np.asarray(starts, dtype=np.int32),
        np.asarray(index, dtype=np.int32),
        np.asarray(value, dtype=float),
    )
    h.setOptionValue("time_limit", float(timeout))
    h.setOptionValue("mip_rel_gap", gap)
    h.setOptionValue("threads", 1)
    built = time.perf_counter() - t0
    t1 = time.perf_counter()
    h.run()
    solved = time.perf_counter() - t1
    status = h.getModelStatus()
    if status == highspy.HighsModelStatus.kInfeasible:
        raise PlanError(
            f"no plan fits in {max_memory} bytes per device on this mesh (the parameters and "
            "live values of every admitted plan need more): raise --max-memory or use a larger "
            "mesh",
            "infeasible",
        )
    if status == highspy.HighsModelStatus.kTimeLimit:
        raise PlanError(
            f"the solver stopped at the time limit ({timeout:g} s) before proving a plan "
            "optimal: raise --timeout (a time-out is never a plan)",
            "timeout",
        )
    if status != highspy.HighsModelStatus.kOptimal:
        raise PlanError(f"the solver failed: {h.modelStatusToString(status)} (no plan)", "failed")
    x = h.getSolution().col_value
    choice: dict[str, Strategy] = {}
    for v, node in nodes.items():
        k = max(range(len(node.strategies)), key=lambda j: x[offset[v] + j])
        choice[v] = node.strategies[k]
    annotations = _annotations(fn, nodes, choice)
    info = h.getInfo()
    memory = plan_memory(fn, choice)
    return Plan(
        mesh,
        choice,
        annotations,
        float(info.objective_function_value) / scale,
        n,
        len(row_lo),
        solved,
        built,
        memory,
        "optimal",
        float(info.mip_gap) if math.isfinite(info.mip_gap) else 0.0,
        nodes,
        whole_results,
        order,
    )


def apply(module: Module, p: Plan):
    """The partition pass run on the plan: its annotations, and each op's factors' axes."""
    from gdv.passes.partition import partition

    return partition(
        module,
        p.mesh,
        p.annotations,
        p.order,
        strategies=p.strategies(),
        whole_results=p.whole_results,
    )


def _annotations(fn: Function, nodes: dict[str, Node], choice: dict[str, Strategy]):
    """Each parameter's chosen sharding as a `--shard` annotation (all of them, so that
    propagation adds nothing). A replicated parameter
    whose every use asks for one sharding takes that sharding (the slice was free; this saves
    its memory)."""
    uses: dict[str, set[Shard]] = {}
    for op in fn.ops:
        s = choice[op.result]
        for i, o in enumerate(op.operands):
            uses.setdefault(o, set()).add(s.operands[i])
    out = {}
    for p in fn.params:
        s = choice[p.name].result
        if not any(s) and len(uses.get(p.name, ())) == 1:
            (s,) = uses[p.name]
            choice[p.name] = next(
                (t for t in nodes[p.name].strategies if t.result == s), choice[p.name]
            )
            s = choice[p.name].result
        # every parameter is annotated, replicated ones too: propagation must not shard them
        out[p.name] = [list(a) for a in s]
    return out


def plan_memory(fn: Function, choice: dict[str, Strategy]) -> int:
    """Bytes per device the plan holds at its peak: parameters plus live values."""
    params = sum(choice[p.name].local_bytes for p in fn.params)
    peak = max((sum(choice[v].local_bytes for v in live) for live in _liveness(fn)), default=0)
    return params + peak


def shard_text(name: str, s: list[list[str]]) -> str:
    """The `--shard` text of a sharding: `w1=[-,model]`."""
    return f"{name}=[{','.join('+'.join(a) if a else '-' for a in s)}]"


@dataclass
class ProgramCost:
    """The cost model applied to an SPMD program's ops, as each rank runs them."""

    compute_s: float
    comm_s: float
    collectives: list[dict]
    memory_bytes: int
    bytes_sent_per_rank: list[int]
    """What each rank sends in one step, by linear rank id (what an MPI run reports)."""

    @property
    def step_s(self) -> float:
        return self.compute_s + self.comm_s


def program_cost(spmd: Module, net: Network, roof: Roofline) -> ProgramCost:
    """Compute and communication seconds of the entry SPMD function (every op in sequence),
    every collective's predicted bytes, and the bytes per device at the peak."""
    fn = spmd.entry
    mesh = spmd.meshes[0]
    types = fn.types()
    compute = comm = 0.0
    collectives = []
    for op in fn.ops:
        operand_types = [types[o] for o in op.operands]
        if op.name in COLLECTIVES:
            axes = op.attrs["axes"]
            p = mesh.group_size(axes)
            x = operand_types[0]
            c = collective_cost(
                op.name,
                p,
                _nbytes(x),
                itemsize=max(1, x.dtype.bits // 8),
                order=op.attrs.get("order", "rank"),
                result_bytes=_nbytes(op.type),
                pairs=op.attrs.get("pairs"),
            )
            s = c.seconds(net)
            comm += s
            if op.name != "shard_slice":
                collectives.append(
                    {
                        "result": op.result,
                        "op": op.name,
                        "axes": list(axes),
                        "order": op.attrs.get("order"),
                        "group_size": p,
                        "operand_bytes": _nbytes(x),
                        "steps": c.steps,
                        "bytes_sent_per_member": list(c.bytes_sent),
                        "seconds": s,
                    }
                )
        else:
            compute += op_seconds(op, operand_types, op.type, roof)
    live = _liveness(fn)
    params = sum(_nbytes(p.type) for p in fn.params)
    per_rank = [0] * mesh.size
    for c in collectives:
        for rank in range(mesh.size):
            me = member_index(mesh, c["axes"], mesh.coords(rank))
            per_rank[rank] += c["bytes_sent_per_member"][me]
    peak = max((sum(_nbytes(types[v]) for v in vs) for vs in live), default=0)
    return ProgramCost(compute, comm, collectives, params + peak, per_rank)


__all__ = [
    "DEFAULT_ROOFLINE",
    "Plan",
    "PlanError",
    "ProgramCost",
    "Strategy",
    "apply",
    "op_strategies",
    "param_strategies",
    "plan",
    "plan_memory",
    "program_cost",
    "reshard_seconds",
    "shard_text",
]
