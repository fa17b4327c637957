"""C for the control flow ops (IR_SPEC.md section 9): not lowered yet. `gdv compile` refuses a
module that holds one before any pass runs (`gdv.driver`), naming the op; the reference
backend runs them (`gdv run --target reference`)."""

from __future__ import annotations

from gdv.backends.c.registry import unsupported
from gdv.ir.ops.control import CONTROL

for _spec in CONTROL.specs():
    unsupported(
        _spec,
        f"{_spec.name} is a control flow op: control flow ops are not lowered by the C target "
        "yet (the reference backend runs them)",
        __name__,
    )
