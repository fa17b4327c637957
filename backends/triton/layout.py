"""The launcher's rules for ops that stay ops at the loop stage and only move data (reshape,
slice, concat, pad, take) or make it (constant, iota): torch operations on the device, exact
by nature; constants and iotas are computed by the reference backend when the artifact is
written and kept as their bytes. Every other op is refused by name, with the reason."""

from __future__ import annotations

import numpy as np

from gdv.backends.triton.elementwise import scalar_literal
from gdv.backends.triton.emit import TORCH, Program, check_dtype
from gdv.backends.triton.registry import host, unsupported
from gdv.ir.core import Op
from gdv.ir.ops import REGISTRY as OPS
from gdv.ir.ops import all_specs

DATA_LIMIT = 1 << 20
"""The most elements a constant or iota kept in the artifact may have."""


def _operand_types(prog: Program, op: Op):
    types = prog.types()
    ts = [types[o] for o in op.operands]
    for t in [op.type, *ts]:
        check_dtype(prog.module, op, t.dtype)
    return ts


@host(OPS["reshape"])
def _reshape(prog: Program, op: Op) -> None:
    _operand_types(prog, op)
    x = prog.var(op.operands[0])
    prog.launcher.append(f"    {prog.var(op.result)} = {x}.reshape({tuple(op.type.shape)})")


@host(OPS["slice"])
def _slice(prog: Program, op: Op) -> None:
    _operand_types(prog, op)
    a = op.attrs
    index = ", ".join(
        f"{s}:{lim}:{st}" for s, lim, st in zip(a["start"], a["limit"], a["stride"], strict=True)
    )
    x = prog.var(op.operands[0])
    if not op.type.shape:
        index = "..."
    prog.launcher.append(f"    {prog.var(op.result)} = {x}[{index}].contiguous()")


@host(OPS["concat"])
def _concat(prog: Program, op: Op) -> None:
    _operand_types(prog, op)
    xs = ", ".join(prog.var(o) for o in op.operands)
    prog.launcher.append(
        f"    {prog.var(op.result)} = torch.cat([{xs}], dim={op.attrs['axis']}).contiguous()"
    )


@host(OPS["pad"])
def _pad(prog: Program, op: Op) -> None:
    (t,) = _operand_types(prog, op)
    y = prog.var(op.result)
    value = scalar_literal(op.attrs["value"], op.type.dtype)
    if op.type.dtype.is_bool:
        value = "True" if value == "1" else "False"
    prog.launcher.append(
        f"    {y} = torch.full({tuple(op.type.shape)}, {value}, dtype={TORCH[op.type.dtype]}, "
        "device=device)"
    )
    index = (
        ", ".join(f"{lo}:{lo + n}" for lo, n in zip(op.attrs["low"], t.shape, strict=True)) or "..."
    )
    prog.launcher.append(f"    {y}[{index}] = {prog.var(op.operands[0])}")


@host(OPS["take"])
def _take(prog: Program, op: Op) -> None:
    table, idx = _operand_types(prog, op)
    axis = op.attrs["axis"]
    n = table.shape[axis]
    if n == 0 and idx.num_elements:
        raise prog.error(op, "a take from an empty axis has nothing to clamp to")
    t, i = prog.var(op.operands[0]), prog.var(op.operands[1])
    flat = f"{i}.reshape(-1).to(torch.int64).clamp(0, {max(n - 1, 0)})"
    prog.launcher.append(
        f"    {prog.var(op.result)} = torch.index_select({t}, {axis}, {flat})"
        f".reshape({tuple(op.type.shape)}).contiguous()"
    )


@host(OPS["constant"], OPS["iota"])
def _data(prog: Program, op: Op) -> None:
    from gdv.backends.reference import Context
    from gdv.backends.reference.evaluate import evaluate_ops

    _operand_types(prog, op)
    if op.type.num_elements > DATA_LIMIT:
        raise prog.error(op, f"a value of more than {DATA_LIMIT} elements kept in the artifact")
    value = evaluate_ops([op], {}, Context(), keep=[op.result])[op.result]
    arr = np.ascontiguousarray(np.asarray(value, dtype=op.type.dtype.np))
    name = f"DATA{len(prog.data)}"
    prog.data.append(
        f'{name} = ("{arr.tobytes().hex()}", "{op.type.dtype.value}", {tuple(arr.shape)})'
    )
    prog.launcher.append(f"    {prog.var(op.result)} = _rt.tensor({name}, device)")


_KERNELS_ONLY = (
    "computed by kernels only on this target: lower-to-kernels makes it one at -O1 and above "
    "(compile at -O1 or above)"
)
_REASONS = {
    "cumsum": "a running fold (scan) stays an op at every stage and has no Triton kernel yet",
    "cumprod": "a running fold (scan) stays an op at every stage and has no Triton kernel yet",
    "argsort": "a sort stays an op at every stage and has no Triton kernel yet",
}
for _spec in all_specs():
    if _spec.name in ("reshape", "slice", "concat", "pad", "take", "constant", "iota", "kernel"):
        continue
    if _spec.name == "conv2d":
        continue  # backends/triton/conv.py
    if _spec.family == "control":
        unsupported(
            _spec, "control flow ops (if, while, scan) are not lowered by the Triton target yet"
        )
    elif _spec.family == "collective":
        unsupported(_spec, "collectives run on the MPI target (gdv run --ranks N), not on a GPU")
    elif _spec.family == "composite" or _spec.name == "matmul":
        unsupported(_spec, "a graph-stage op: decompose-composites removes it")
    elif _spec.name in _REASONS:
        unsupported(_spec, _REASONS[_spec.name])
    else:
        unsupported(_spec, _KERNELS_ONLY)
