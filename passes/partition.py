"""Sharding propagation and SPMD partitioning (issue 17, items 2 and 3).

`propagate` takes the user's shardings of some parameters to every value of an ordinary
function, through each op's factors (`gdv.ir.sharding`): a factor takes the mesh axes of the
first dim that carries it as its major factor (operands in order, then the result), so a
user's annotation outranks what propagation infers, and an earlier operand outranks a later
one; values no annotation reaches stay replicated. Every choice is recorded with its reason.

`partition` then writes the SPMD function every rank runs: each op on local values, after the
collectives that bring its operands to the shardings its factors ask for (an `all_reduce` that
finishes a pending sum, an `all_gather` for a dim that must be whole, a `shard_slice` for one
that must be split), and an `all_reduce` right after an op that sums over a sharded factor.

Each op's partitioned form is a claim of its own (`PartitionStep`): the global op on global
operands against the SPMD snippet on their blocks, with the shardings they have. It is `fp`
(bit-exact) when no float sum is split and `real` otherwise. A split max, min or integer sum
keeps its bits, but beyond `SMALL_FOLD` elements its fold is uninterpreted and no lemma splits
it, so such a claim is `unknown` (never proved) at those sizes. `prove_steps` discharges the
claims with `gdv.validate.spmd.check_spmd_equivalence`, symbolic in the rank. The steps
compose: each snippet's operand shardings are the shardings the snippets before it left, so
the proved snippets together are the SPMD function, one claim per op: linear in the
program's size.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field

from gdv.ir.core import Function, Module, Op, Param
from gdv.ir.diagnostics import IRError, Loc
from gdv.ir.mesh import Mesh, check_sharding
from gdv.ir.ops.collective import COLLECTIVES
from gdv.ir.ops.control import called_functions
from gdv.ir.sharding import FactorRule, factor_rule
from gdv.ir.types import TensorType

Sharding = list[list[str]]
ORDERS = ("rank", "tree", "ring", "carry")
"""How a split reduction is finished: an `all_reduce` in that order, or (`carry`) bit-exact: a
reduction split on its outermost reduced dim becomes a `carry_reduce`, and any other split
reduction (a product's contraction, an inner dim) is kept whole, its operands gathered."""


@dataclass
class Choice:
    """Why a value has its sharding."""

    value: str
    sharding: Sharding
    reason: str


@dataclass
class PartitionStep:
    """One op's claim: `spmd` (the SPMD snippet) implements `global_` (the op alone)."""

    op: str
    global_: Module
    spmd: Module
    theory: str
    key: str
    verdict: str = "pending"
    reason: str = ""
    seconds: float = 0.0

    def to_json(self) -> dict:
        """The claim as the partition and plan reports give it."""
        return {
            "op": self.op,
            "theory": self.theory,
            "verdict": self.verdict,
            "seconds": round(self.seconds, 6),
            "reason": self.reason,
        }


@dataclass
class Partitioned:
    module: Module
    shardings: dict[str, Sharding]
    choices: list[Choice]
    steps: list[PartitionStep] = field(default_factory=list)
    collectives: list[tuple[str, str, list[str], int]] = field(default_factory=list)
    """(op result, collective, axes, local bytes of its operand) for each one emitted."""


def parse_mesh(text: str, name: str = "m") -> Mesh:
    """`data=2,model=2` -> a mesh."""
    where = Loc("<command line>", 1, 1)
    axes: list[tuple[str, int]] = []
    for part in text.split(","):
        key, eq, size = part.partition("=")
        key = key.strip()
        if not eq or not key.isidentifier() or not size.strip().isdigit():
            raise IRError(f"--mesh: expected AXIS=SIZE[,AXIS=SIZE...], got {text!r}", where)
        axes.append((key, int(size)))
    from gdv.ir.mesh import check_meshes

    mesh = Mesh(name, axes, where)
    check_meshes(Module([], "<command line>", [mesh]))
    return mesh


def parse_shard(text: str) -> tuple[str, Sharding]:
    """`w1=[-,model]` or `x=[data+model,-]` -> (parameter, sharding)."""
    where = Loc("<command line>", 1, 1)
    name, eq, spec = text.partition("=")
    spec = spec.strip()
    if not eq or not spec.startswith("[") or not spec.endswith("]"):
        raise IRError(f"--shard: expected NAME=[AXES,...] (AXES: -, or a+b), got {text!r}", where)
    dims: Sharding = []
    for d in spec[1:-1].split(","):
        d = d.strip()
        dims.append([] if d in ("-", "") else [a.strip() for a in d.split("+")])
    return name.strip().lstrip("%"), dims


def check_annotation(fn: Function, mesh: Mesh, name: str, s: Sharding) -> None:
    """`--shard NAME=...` names a parameter of `fn`, fits its type and the mesh, and splits
    each dim into blocks of equal extent (an input error otherwise)."""
    where = fn.loc or Loc("<input>", 1, 1)
    p = fn.param(name)
    if p is None:
        params = ", ".join(f"%{q.name}" for q in fn.params)
        raise IRError(f"--shard names %{name}, which is no parameter ({params})", where)
    check_sharding(s, p.type, mesh, f"sharding of %{name}", p.loc or where)
    for d, axes in enumerate(s):
        if axes and p.type.shape[d] % mesh.group_size(axes):
            raise IRError(
                f"sharding of %{name}: dim {d} ({p.type.shape[d]}) is not a multiple of "
                f"{mesh.group_size(axes)} ranks ({'+'.join(axes)})",
                p.loc or where,
            )


def propagate(
    fn: Function, mesh: Mesh, annotations: dict[str, Sharding]
) -> tuple[dict[str, Sharding], list[Choice]]:
    """Every value's sharding, from the annotated parameters; with the reasons."""
    types = fn.types()
    shard: dict[str, list[list[str] | None]] = {}
    reason: dict[str, str] = {}
    for name, s in annotations.items():
        check_annotation(fn, mesh, name, s)
        shard[name] = [list(a) for a in s]
        reason[name] = "annotated"
    for v, t in types.items():
        shard.setdefault(v, [None] * t.rank)
    rules = {op.result: factor_rule(op, [types[o] for o in op.operands]) for op in fn.ops}
    for _ in range(2 * len(fn.ops) + 2):
        changed = False
        for op in list(fn.ops) + list(reversed(fn.ops)):
            changed |= _propagate_op(op, rules[op.result], shard, reason, mesh)
        if not changed:
            break
    final: dict[str, Sharding] = {}
    choices: list[Choice] = []
    for v in types:
        final[v] = [a if a is not None else [] for a in shard[v]]
        why = reason.get(v, "nothing reached it: replicated")
        if v in reason or any(final[v]):
            choices.append(Choice(v, final[v], why))
    return final, choices


def _values(op: Op) -> list[str]:
    return [*op.operands, op.result]


def _dims_of(rule: FactorRule) -> list[list[list[str]]]:
    return [*rule.operands, rule.result]


def _propagate_op(op: Op, rule: FactorRule, shard, reason, mesh: Mesh) -> bool:
    axes_of = factor_axes(op, rule, shard, mesh)
    changed = False
    for v, dims in zip(_values(op), _dims_of(rule), strict=True):
        cur = shard[v]
        used = {a for d in cur if d for a in d}
        for d, factors in enumerate(dims):
            if cur[d] is not None or not factors:
                continue
            axes = axes_of.get(factors[0])
            if not axes or used & set(axes):
                continue
            cur[d] = list(axes)
            used |= set(axes)
            changed = True
            reason.setdefault(
                v, f"from %{op.result} = {op.name}(...): factor {factors[0]} on {'+'.join(axes)}"
            )
    return changed


def factor_axes(op: Op, rule: FactorRule, shard, mesh: Mesh) -> dict[str, list[str]]:
    """The mesh axes of each of the op's factors, from its operands' and result's decided
    dims (first come first served), leaving out what cannot be sharded."""
    out: dict[str, list[str]] = {}
    used: set[str] = set()
    for v, dims in zip(_values(op), _dims_of(rule), strict=True):
        for d, factors in enumerate(dims):
            axes = shard[v][d]
            if not factors or not axes:
                continue
            f = factors[0]
            if f in out or f in rule.replicated or used & set(axes):
                continue
            if rule.sizes[f] % mesh.group_size(axes):
                continue
            out[f] = list(axes)
            used |= set(axes)
    return out


class _Builder:
    def __init__(self, mesh: Mesh, order: str) -> None:
        self.mesh = mesh
        self.order = order
        self.ops: list[Op] = []
        self.count = 0
        self.collectives: list[tuple[str, str, list[str], int]] = []

    def fresh(self, hint: str) -> str:
        self.count += 1
        return f"{hint}.p{self.count}"

    def emit(self, name: str, operand: str, t: TensorType, attrs: dict, out: TensorType) -> str:
        result = self.fresh(operand)
        self.ops.append(Op(result, name, [operand], attrs, out))
        if name in COLLECTIVES and name != "shard_slice":
            self.collectives.append(
                (result, name, list(attrs["axes"]), t.num_elements * t.dtype.itemsize)
            )
        return result


def _local(t: TensorType, s: Sharding, mesh: Mesh) -> TensorType:
    return t.with_shape(tuple(n // mesh.group_size(a) for n, a in zip(t.shape, s, strict=True)))


def _reshard(b: _Builder, name: str, t_global: TensorType, have: Sharding, want: Sharding) -> str:
    """Collectives taking value `name` (global type `t_global`) from `have` to `want`."""
    mesh = b.mesh
    cur = [list(a) for a in have]
    for d in range(t_global.rank):
        if cur[d] == want[d]:
            continue
        if cur[d]:
            before = _local(t_global, cur, mesh)
            cur[d] = []
            name = b.emit(
                "all_gather",
                name,
                before,
                {"axes": list(have[d]), "dim": d},
                _local(t_global, cur, mesh),
            )
    for d in range(t_global.rank):
        if want[d] and cur[d] != want[d]:
            before = _local(t_global, cur, mesh)
            cur[d] = list(want[d])
            name = b.emit(
                "shard_slice",
                name,
                before,
                {"axes": list(want[d]), "dim": d},
                _local(t_global, cur, mesh),
            )
    return name


def partition(
    module: Module,
    mesh: Mesh,
    annotations: dict[str, Sharding],
    order: str = "rank",
    strategies: dict[str, dict[str, list[str]]] | None = None,
    whole_results: bool = False,
) -> Partitioned:
    """The SPMD module of `module`'s entry function on `mesh`, with every op's claim.

    `strategies` (a plan of `gdv.passes.plan`) gives the mesh axes of each named op's factors
    instead of taking them from its operands' shardings; `whole_results` gathers each result
    whole on every rank right after the op that makes it (inside that op's claim)."""
    fn = module.entry
    if fn is None:
        raise IRError("the module has no entry function", Loc(module.filename, 1, 1))
    if fn.attrs.get("mesh") is not None:
        raise IRError("the function is SPMD already", fn.loc or Loc(module.filename, 1, 1))
    if order not in ORDERS:
        raise IRError(f"--order must be one of {', '.join(ORDERS)}", Loc("<command line>", 1, 1))
    for callee in called_functions(fn.ops, module):  # every rank runs them whole
        if callee.attrs.get("mesh") is not None:
            raise IRError(
                f"@{callee.name}, which @{fn.name}'s ops call, is an SPMD function: the "
                "functions ops name are ordinary ones (every rank runs them whole)",
                callee.loc or Loc(module.filename, 1, 1),
            )
    types = fn.types()
    shardings, choices = propagate(fn, mesh, annotations)
    b = _Builder(mesh, order)
    local: dict[str, str] = {}
    have: dict[str, Sharding] = {}
    params: list[Param] = []
    for p in fn.params:
        s = shardings[p.name]
        attrs = dict(p.attrs)
        if any(s):
            attrs = {"sharding": [list(a) for a in s], **attrs}
        params.append(Param(p.name, _local(p.type, s, mesh), attrs, p.loc, p.attr_locs))
        local[p.name] = p.name
        have[p.name] = s
    steps: list[PartitionStep] = []
    seen: dict[str, PartitionStep] = {}
    for op in fn.ops:
        operand_types = [types[o] for o in op.operands]
        rule = factor_rule(op, operand_types)
        view = {o: [list(a) for a in have[o]] for o in op.operands}
        view[op.result] = shardings[op.result]
        axes_of = factor_axes(op, rule, view, mesh)
        if strategies is not None and op.result in strategies:
            axes_of = {f: list(a) for f, a in strategies[op.result].items() if a}
        split = [f for f in rule.reduction if f in axes_of]
        carried = order == "carry" and bool(split) and _carries(op, rule, split)
        if order == "carry" and split and not carried:
            axes_of = {f: a for f, a in axes_of.items() if f not in rule.reduction}
        start = len(b.ops)
        in_names = [local[o] for o in op.operands]
        args = []
        wants = []
        for o, dims, t in zip(op.operands, rule.operands, operand_types, strict=True):
            want = _want(dims, axes_of)
            wants.append(want)
            args.append(_reshard(b, local[o], t, have[o], want))
        out_s = _want(rule.result, axes_of)
        partial = sorted(
            {a for f in rule.reduction if f in axes_of for a in axes_of[f]}, key=mesh.names.index
        )
        result = op.result
        body_out = _local(op.type, out_s, mesh)
        if carried:
            # The fold itself runs as a chain over the members: no local reduction first. Its
            # message is the accumulator (the result's block).
            attrs = {"axes": list(axes_of[split[0]]), "dims": list(op.attrs["axes"])}
            local[op.result] = b.emit(
                "carry_reduce", args[0], body_out, {**attrs, "combiner": _combiner(op)}, body_out
            )
        elif partial:
            b.ops.append(_local_op(op, args, body_out, operand_types, wants, mesh))
            fin = b.emit(
                "all_reduce",
                result,
                body_out,
                {"axes": partial, "combiner": _combiner(op), "order": b.order},
                body_out,
            )
            local[op.result] = fin
        else:
            b.ops.append(_local_op(op, args, body_out, operand_types, wants, mesh))
            local[op.result] = result
        if whole_results and op.result in fn.returns and any(out_s):
            whole: Sharding = [[] for _ in out_s]
            local[op.result] = _reshard(b, local[op.result], op.type, out_s, whole)
            out_s = whole
        have[op.result] = out_s
        snippet = b.ops[start:]
        step = _step(
            op,
            operand_types,
            [have[o] for o in op.operands],
            snippet,
            in_names,
            local[op.result],
            out_s,
            mesh,
            not carried and _reorders(op, partial),
            seen,
            module,
        )
        steps.append(step)
    results = list(fn.results)
    spmd_fn = Function(
        name=fn.name,
        params=params,
        results=[_local(t, have[r], mesh) for t, r in zip(results, fn.returns, strict=True)],
        ops=b.ops,
        returns=[local[r] for r in fn.returns],
        attrs={
            "mesh": mesh.name,
            "out_shardings": [[list(a) for a in have[r]] for r in fn.returns],
        },
        loc=fn.loc,
    )
    out = Module(
        [spmd_fn, *[f for f in module.functions if f is not fn]],
        module.filename,
        [Mesh(mesh.name, list(mesh.axes))],
    )
    return Partitioned(out, shardings, choices, steps, b.collectives)


def _local_op(op: Op, args, out: TensorType, operand_types, wants, mesh: Mesh) -> Op:
    """`op` on its operands' blocks: a slice keeps a split dim whole, so its limit there is the
    block's extent (no other op's attributes name an extent a sharding changes)."""
    attrs = op.attrs
    if op.name == "slice":
        block = _local(operand_types[0], wants[0], mesh).shape
        attrs = {**attrs, "limit": list(attrs["limit"])}
        for d, axes in enumerate(wants[0]):
            if axes:
                attrs["limit"][d] = block[d]
    return dataclasses.replace(op, operands=args, type=out, attrs=attrs)


def _carries(op: Op, rule: FactorRule, split: list[str]) -> bool:
    """Whether `carry_reduce` folds `op` exactly: a reduction (`reduce_*`) with one split
    factor, which is the whole of its operand's outermost reduced dim (so the members' blocks
    come one after another in the fold's row-major order)."""
    from gdv.ir.ops import REGISTRY

    if REGISTRY[op.name].combiner is None or len(split) != 1 or "axes" not in op.attrs:
        return False
    d = min(op.attrs["axes"])
    return rule.operands[0][d] == [split[0]]


def _reorders(op: Op, partial: list[str]) -> bool:
    """Whether finishing a split reduction changes its value's bits: a float sum does (its
    claim is `real`); max and min of the IR are associative and commutative bit for bit, and
    integer sums wrap exactly, so theirs stay `fp`."""
    return bool(partial) and _combiner(op) == "add" and op.type.dtype.is_float


def _combiner(op: Op) -> str:
    """How the partial results of an op with a split reduction factor combine: a product's
    sums add; a reduction folds with its own combiner (the op trait)."""
    from gdv.ir.ops import REGISTRY

    if op.name in ("dot", "matmul"):
        return "add"
    combiner = REGISTRY[op.name].combiner
    if combiner is None:
        raise AssertionError(f"{op.name}'s sharding rule has a reduction factor but no combiner")
    return combiner.op


def _want(dims: list[list[str]], axes_of: dict[str, list[str]]) -> Sharding:
    return [list(axes_of.get(f[0], [])) if f else [] for f in dims]


def _step(
    op: Op,
    operand_types,
    operand_shardings,
    snippet,
    in_names,
    result,
    out_s,
    mesh,
    split,
    seen,
    module: Module | None = None,
) -> PartitionStep:
    # One parameter per distinct operand (`add(%x, %x)` reads one value twice).
    distinct = list(dict.fromkeys(op.operands))
    names = [f"a{k}" for k in range(len(distinct))]
    by_operand = dict(zip(distinct, names, strict=True))
    firsts = [op.operands.index(o) for o in distinct]
    g_params = [Param(n, operand_types[k]) for n, k in zip(names, firsts, strict=True)]
    g_op = dataclasses.replace(op, operands=[by_operand[o] for o in op.operands], result="y")
    g_fn = Function("main", g_params, [op.type], [g_op], ["y"])
    rename = {in_names[k]: by_operand[op.operands[k]] for k in range(len(op.operands))}
    s_params = []
    for n, k in zip(names, firsts, strict=True):
        t, s = operand_types[k], operand_shardings[k]
        attrs = {"sharding": [list(a) for a in s]} if any(s) else {}
        s_params.append(Param(n, _local(t, s, mesh), attrs))
    s_ops = [
        dataclasses.replace(o, operands=[rename.get(x, x) for x in o.operands]) for o in snippet
    ]
    s_fn = Function(
        "main",
        s_params,
        [_local(op.type, out_s, mesh)],
        s_ops,
        [rename.get(result, result)],
        attrs={"mesh": mesh.name, "out_shardings": [[list(a) for a in out_s]]},
    )
    from gdv.ir.printer import print_module

    mesh_copy = Mesh(mesh.name, list(mesh.axes))
    # The functions the op names (control flow bodies, kernel bodies) are in both programs
    # of the claim, so in scope of its proof and in its key: a changed body is another claim.
    called = called_functions([op], module) if module is not None else []
    g_mod = Module([g_fn, *called], "<partition>")
    s_mod = Module([s_fn, *called], "<partition>", [mesh_copy])
    key = print_module(g_mod) + print_module(s_mod)
    step = PartitionStep(op.result, g_mod, s_mod, "real" if split else "fp", key)
    if key in seen:
        step.verdict = "same as %" + seen[key].op
    else:
        seen[key] = step
    return step


def prove_steps(part: Partitioned, timeout: float = 10.0) -> str:
    """Discharge every distinct step; the overall verdict (`proved`, `refuted`, `unknown`)."""
    import time

    from gdv.ir.verifier import verify
    from gdv.validate.semantics.control import NotEncoded
    from gdv.validate.spmd import check_spmd_equivalence

    verdict = "proved"
    by_key: dict[str, PartitionStep] = {}
    for step in part.steps:
        if step.key in by_key:
            first = by_key[step.key]
            step.verdict, step.reason = first.verdict, f"same claim as %{first.op}"
            continue
        by_key[step.key] = step
        verify(step.global_)
        verify(step.spmd)
        t = time.perf_counter()
        try:
            r = check_spmd_equivalence(step.global_, step.spmd, step.theory, timeout)
        except NotEncoded as e:  # a control op too large to encode: not proved, not refuted
            step.seconds = time.perf_counter() - t
            step.verdict, step.reason = "unknown", e.message
        else:
            step.seconds = time.perf_counter() - t
            step.verdict = {"equivalent": "proved", "not-equivalent": "refuted"}.get(
                r.verdict, "unknown"
            )
            step.reason = r.reason
        if step.verdict == "refuted":
            verdict = "refuted"
        elif step.verdict == "unknown" and verdict == "proved":
            verdict = "unknown"
    return verdict


def communication_bytes(part: Partitioned) -> int:
    """Bytes each rank sends in one call, by the collectives' simplest schedules (each member
    sends its operand to every other member of its group): a first alpha-beta-free estimate."""
    total = 0
    for _, _name, axes, nbytes in part.collectives:
        p = part.module.meshes[0].group_size(axes)
        total += (p - 1) * nbytes
    return total


__all__ = [
    "Choice",
    "check_annotation",
    "PartitionStep",
    "Partitioned",
    "communication_bytes",
    "parse_mesh",
    "parse_shard",
    "partition",
    "propagate",
    "prove_steps",
]
