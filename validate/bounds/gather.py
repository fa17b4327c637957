"""Bound rules of the gather family: `take` copies table elements, so the result has the
table's interval and error, as long as the indices are exact; an index that may differ from the
exact one picks another element, adding the table's whole span."""

from __future__ import annotations

from gdv.ir.core import Op
from gdv.ir.ops import REGISTRY as OPS
from gdv.validate.bounds.model import TB, Err, make_tb, up
from gdv.validate.bounds.registry import Context, rule


@rule(OPS["take"])
def _take(op: Op, args: list[TB], ctx: Context) -> TB:
    table, idx = args
    err = table.err
    if idx.err.total > 0:
        if table.specials:
            err = Err.infinite("take with inexact indices from a table with special values")
        else:
            err = Err.make(err.lin, err.total + up(table.hi - table.lo))
    return make_tb(op.type, table.exact, err, table.computed, table.specials)
