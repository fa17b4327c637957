"""C for the collectives: a compiled module never holds one. An SPMD function runs under MPI as
compiled segments of local ops with the collectives between them (`gdv run --ranks N`), never
as one C function."""

from __future__ import annotations

from gdv.backends.c.registry import unsupported
from gdv.ir.ops.collective import COLLECTIVES

for _spec in COLLECTIVES.specs():
    unsupported(
        _spec,
        f"{_spec.name} is a collective: an SPMD function runs under MPI (gdv run --ranks N), "
        "its local ops compiled in segments between the collectives",
        __name__,
    )
