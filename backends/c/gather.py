"""C for the gather family: `take` (data-dependent indexing) is not lowered to C yet."""

from __future__ import annotations

from gdv.backends.c.registry import unsupported
from gdv.ir.ops import REGISTRY as OPS

unsupported(OPS["take"], "take (indices read from data) is not lowered to C yet", __name__)
