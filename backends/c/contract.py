"""C for the contract family: `dot` is lowered to kernels by the pipeline (-O1 and above); a
`dot` left outside a kernel is not lowered to C yet."""

from __future__ import annotations

from gdv.backends.c.registry import unsupported
from gdv.ir.ops import REGISTRY as OPS

unsupported(
    OPS["dot"],
    "a dot outside a kernel is not lowered to C yet (compile at -O1 or -O2 to make it a kernel)",
    __name__,
)
