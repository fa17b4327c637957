"""Evaluation of op sequences on concrete values, and the verification it relies on."""

from __future__ import annotations

import itertools
from collections.abc import Iterable, Mapping

import numpy as np

from gdv.backends.reference.registry import KERNELS, Context
from gdv.ir.core import Op
from gdv.ir.diagnostics import UNKNOWN_LOC, IRError, Loc
from gdv.ir.ops import get as get_spec
from gdv.ir.types import TensorType
from gdv.ir.verifier import verify_op


def _where(loc: Loc | None) -> Loc:
    return loc if loc is not None else UNKNOWN_LOC


def decompose(op: Op) -> list[Op]:
    """The ops the composite `op` means (its spec's `decompose`), with fresh names for the
    intermediate values; operands keep their names and the last op defines `op.result`."""
    spec = get_spec(op.name)
    assert spec is not None and spec.decompose is not None, op.name
    taken = set(op.operands) | {op.result}
    counter = itertools.count()

    def fresh(base: str) -> str:
        while True:
            name = f"{base}.{next(counter)}"
            if name not in taken:
                taken.add(name)
                return name

    return spec.decompose(op, fresh)


def check_ops(ops: Iterable[Op], types: dict[str, TensorType]) -> dict[str, TensorType]:
    """Verify ops outside a function (a single op, a decomposition): names defined before use
    and once, and each op as the verifier checks it, composites' decompositions included.
    `types` holds the values defined before the first op. Returns every value's type."""
    types = dict(types)
    for op in ops:
        for i, name in enumerate(op.operands):
            if name not in types:
                loc = op.operand_locs[i] if i < len(op.operand_locs) else op.loc
                raise IRError(f"use of undefined value %{name}", _where(loc))
        if op.result in types:
            raise IRError(f"%{op.result} is defined twice; values are SSA", _where(op.loc))
        operand_types = [types[name] for name in op.operands]
        verify_op(op, operand_types, "graph", _where)
        check_decomposition(op, operand_types)
        types[op.result] = op.type
    return types


def check_decomposition(op: Op, operand_types: list[TensorType]) -> None:
    """For a composite `op`, verify the ops it decomposes into (a defect of gdv if it fails,
    caught before any evaluation rather than as a wrong-shaped array later)."""
    spec = get_spec(op.name)
    if spec is not None and spec.is_composite:
        check_ops(decompose(op), dict(zip(op.operands, operand_types, strict=True)))


def evaluate_ops(
    ops: list[Op],
    env: Mapping[str, np.ndarray],
    ctx: Context,
    keep: Iterable[str] = (),
) -> dict[str, np.ndarray]:
    """Run checked `ops` in order on `env` (values by name, in their storage dtypes). Values
    not named in `keep` are dropped after their last use, so memory follows the live set.
    Returns the values named in `keep`."""
    keep = set(keep)
    last_use: dict[str, int] = {}
    for i, op in enumerate(ops):
        for name in op.operands:
            last_use[name] = i
    values = dict(env)
    with np.errstate(all="ignore"):  # wrap-around, inf and NaN are the defined results
        for i, op in enumerate(ops):
            spec = get_spec(op.name)
            assert spec is not None and spec in KERNELS, op.name
            args = [values[name] for name in op.operands]
            result = np.asarray(KERNELS[spec](op, args, ctx))
            expected = ctx.storage(op.type.dtype).np
            if result.dtype != expected or result.shape != op.type.shape:
                raise AssertionError(
                    f"reference kernel of {op.name} gave {result.dtype}{list(result.shape)} "
                    f"for %{op.result}, expected {expected}{list(op.type.shape)}"
                )
            values[op.result] = result
            for name in set(op.operands):
                if last_use[name] == i and name not in keep:
                    del values[name]
            if last_use.get(op.result, -1) < i and op.result not in keep:
                del values[op.result]  # never used
    return {name: values[name] for name in keep}
