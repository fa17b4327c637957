"""Simulating an SPMD function (docs/IR_SPEC.md section 7): every rank of its mesh at once.

`run_spmd` shards the global inputs as the parameters' shardings say, runs the body on every
rank (ops other than collectives on each rank's own values, collectives on the values of all
ranks, stacked `[*mesh.shape, *local]`), and assembles each result from the ranks' blocks. It is
the executable meaning an MPI run of the same program is compared with, bit for bit.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from dataclasses import dataclass, field

import numpy as np

from gdv.backends.reference.evaluate import evaluate_ops
from gdv.backends.reference.interpreter import check_function, check_inputs, entry_function
from gdv.backends.reference.registry import KERNELS, Context
from gdv.ir.core import Function, Module, Param
from gdv.ir.diagnostics import IRError
from gdv.ir.mesh import (
    Mesh,
    block_offsets,
    function_mesh,
    global_type,
    out_shardings,
    param_sharding,
)
from gdv.ir.ops import get as get_spec
from gdv.ir.ops.collective import COLLECTIVES
from gdv.ir.ops.kernel import kernel_bodies
from gdv.ir.types import TensorType


@dataclass
class SpmdRun:
    """What a simulation gives: the global results, every rank's results (by linear rank id),
    and the blocks where ranks that hold the same block disagree (a program whose replicas
    differ does not implement any function; `gdv tv` refutes it)."""

    outputs: list[np.ndarray]
    per_rank: list[list[np.ndarray]]
    disagreements: list[tuple[int, int, int]] = field(default_factory=list)
    """(result index, rank whose block was kept, rank that differs)."""


def spmd_mesh(module: Module, fn: Function) -> Mesh:
    mesh = function_mesh(module, fn)
    if mesh is None:
        raise IRError(f"@{fn.name} is not an SPMD function (it has no mesh attribute)", fn.loc)
    return mesh


def global_function(module: Module, fn: Function) -> Function:
    """`fn`'s signature with global types (for checking and drawing global inputs); no ops."""
    mesh = spmd_mesh(module, fn)
    params = [
        Param(
            p.name,
            global_type(p.type, param_sharding(p.attrs, p.type.rank), mesh),
            {k: v for k, v in p.attrs.items() if k != "sharding"},
            p.loc,
            p.attr_locs,
        )
        for p in fn.params
    ]
    results = [global_type(t, s, mesh) for t, s in zip(fn.results, out_shardings(fn), strict=True)]
    return dataclasses.replace(fn, params=params, results=results, ops=[], returns=[], attrs={})


def shard(array: np.ndarray, local: TensorType, sharding, mesh: Mesh, coords) -> np.ndarray:
    """Rank `coords`'s block of a global value whose local type is `local`."""
    offsets = block_offsets(local, sharding, mesh, coords)
    return array[tuple(slice(o, o + n) for o, n in zip(offsets, local.shape, strict=True))]


def shard_inputs(
    module: Module, inputs: Mapping[str, np.ndarray], *, mode: str = "exact"
) -> list[dict[str, np.ndarray]]:
    """Every rank's local inputs (by linear rank id), from checked global `inputs`."""
    fn = entry_function(module)
    mesh = spmd_mesh(module, fn)
    env = check_inputs(global_function(module, fn), inputs, Context(mode))
    out = []
    for coords in mesh.ranks():
        out.append(
            {
                p.name: np.array(
                    shard(env[p.name], p.type, param_sharding(p.attrs, p.type.rank), mesh, coords)
                )
                for p in fn.params
            }
        )
    return out


def run_spmd(program: Module, inputs: Mapping[str, np.ndarray], *, mode: str = "exact") -> SpmdRun:
    """Simulate the entry SPMD function of `program` on global `inputs` (keyed by parameter
    name), bit-exact to the specification."""
    fn = entry_function(program)
    mesh = spmd_mesh(program, fn)
    check_function(fn, program.filename)
    ctx = Context(mode, mesh)
    ranks = list(mesh.ranks())
    envs = shard_inputs(program, inputs, mode=mode)
    keep_all = set(fn.returns)
    uses: dict[str, int] = {}
    for i, op in enumerate(fn.ops):
        for o in op.operands:
            uses[o] = i
    with kernel_bodies(program.functions):
        for i, op in enumerate(fn.ops):
            if op.name in COLLECTIVES:
                stacked = np.stack([env[op.operands[0]] for env in envs]).reshape(
                    mesh.shape + envs[0][op.operands[0]].shape
                )
                with np.errstate(all="ignore"):  # inf and NaN are defined results
                    result = KERNELS[get_spec(op.name)](op, [stacked], ctx)
                for r, coords in enumerate(ranks):
                    envs[r][op.result] = np.array(result[coords])
            else:
                for env in envs:
                    env.update(evaluate_ops([op], env, ctx, keep=[op.result]))
            for o in set(op.operands):
                if uses[o] == i and o not in keep_all:
                    for env in envs:
                        env.pop(o, None)
    per_rank = [[np.array(env[name], copy=True) for name in fn.returns] for env in envs]
    outputs, disagreements = assemble(fn, mesh, per_rank)
    return SpmdRun(outputs, per_rank, disagreements)


def assemble(
    fn: Function, mesh: Mesh, per_rank: list[list[np.ndarray]]
) -> tuple[list[np.ndarray], list[tuple[int, int, int]]]:
    """The global results from every rank's blocks: each block from the first rank (linear id)
    that holds it; later holders that differ bit for bit are listed."""
    from gdv.backends.reference.compare import bit_equal

    outputs: list[np.ndarray] = []
    disagreements: list[tuple[int, int, int]] = []
    for k, (t, s) in enumerate(zip(fn.results, out_shardings(fn), strict=True)):
        g = global_type(t, s, mesh)
        out = np.empty(g.shape, dtype=per_rank[0][k].dtype)
        owner: dict[tuple[int, ...], int] = {}
        for r, coords in enumerate(mesh.ranks()):
            offsets = block_offsets(t, s, mesh, coords)
            index = tuple(slice(o, o + n) for o, n in zip(offsets, t.shape, strict=True))
            if offsets not in owner:
                owner[offsets] = r
                out[index] = per_rank[r][k]
            elif not bit_equal(per_rank[r][k], per_rank[owner[offsets]][k]):
                disagreements.append((k, owner[offsets], r))
        outputs.append(out)
    return outputs, disagreements
