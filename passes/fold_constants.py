"""`fold-constants`: an op whose operands are all constants becomes a constant, computed by the
reference backend (the executable meaning of the op). Transcendentals are not folded: their
last bits are implementation-defined, and the proof treats them as unknown functions."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from gdv.backends.reference import apply
from gdv.ir.core import Module
from gdv.ir.ops.control import CONTROL
from gdv.ir.ops.elementwise import TRANSCENDENTAL
from gdv.passes.base import Pass, PassResult, Rewrite, Site, rewrite_module

MAX_FOLDED_ELEMENTS = 4096
"""Larger results stay ops unless every element is equal (then they fold to a splat)."""


def _literal(x: np.generic) -> object:
    if x.dtype == np.bool_:
        return bool(x)
    if np.issubdtype(x.dtype, np.integer):
        return int(x)
    return float(x)  # every f16/bf16/f32 value is exactly an f64


def _nested(array: np.ndarray) -> object:
    if array.ndim == 0:
        return _literal(array[()])
    return [_nested(a) for a in array]


def _value(array: np.ndarray) -> object | None:
    """The `value` attribute for `array`: a splat when all elements have the same bits (or
    there are none), a nested list when small enough, else None."""
    flat = array.reshape(-1)
    if flat.size == 0:
        return _literal(np.zeros((), array.dtype)[()])
    raw = flat.view(np.uint8).reshape(flat.size, -1)
    if (raw == raw[0]).all():
        return _literal(flat[0])
    if flat.size > MAX_FOLDED_ELEMENTS:
        return None
    return _nested(array)


def _fold(site: Site) -> Rewrite | None:
    op = site.op
    if op.name in ("constant", "iota") or op.name in TRANSCENDENTAL or not op.operands:
        return None
    if op.name in CONTROL:  # calls functions of the module; a loop may run 2^31 - 1 trips
        return None
    if op.type.dtype.is_storage:  # the IR has no float8 or sub-byte literal (IR_SPEC.md sec. 8)
        return None
    producers = [site.producer(i) for i in range(len(op.operands))]
    if any(p is None or p.name != "constant" for p in producers):
        return None
    if op.type.num_elements > 16 * MAX_FOLDED_ELEMENTS:
        return None
    args = [apply("constant", [], p.attrs, p.type) for p in producers]
    result = apply(op.name, args, op.attrs, op.type)
    value = _value(result)
    if value is None:
        return None
    new = site.new_op("constant", [], op.type, value=value)
    unique = list({id(p): p for p in producers}.values())
    return Rewrite("fold", [new], new.result, [*unique, op])


@dataclass(frozen=True)
class FoldConstants(Pass):
    name = "fold-constants"

    def run(self, module: Module) -> PassResult:
        return rewrite_module(module, self.name, [_fold])
