"""C for the composite family: composites belong to the graph stage and are decomposed by the
pipeline's first pass; the C target never sees one in a compiled module."""

from __future__ import annotations

from gdv.backends.c.registry import unsupported
from gdv.ir.ops import REGISTRY as OPS

for _name in ("matmul", "softmax", "log_softmax", "layer_norm", "gelu"):
    unsupported(
        OPS[_name],
        f"{_name} is a graph-stage composite; compile with the pipeline, which decomposes it",
        __name__,
    )
