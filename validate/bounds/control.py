"""Bound rules of the control flow ops (IR_SPEC.md section 9): not analysed yet. Each gives an
infinite error bound that names the op, so `gdv bounds` reports it rather than a number."""

from __future__ import annotations

import math

from gdv.ir.core import Op
from gdv.ir.ops.control import IF, SCAN, WHILE
from gdv.validate.bounds.model import SPECIALS, TB, Err, make_tb
from gdv.validate.bounds.registry import Context, rule


@rule(IF, WHILE, SCAN)
def _control(op: Op, args: list[TB], ctx: Context) -> TB:
    specials = SPECIALS if op.type.dtype.is_float else frozenset()
    reason = f"{op.name} is a control flow op: the error bound of control flow is not analysed yet"
    return make_tb(op.type, (-math.inf, math.inf), Err.infinite(reason), None, specials)
