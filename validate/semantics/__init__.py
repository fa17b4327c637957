"""Z3 meaning of every op, one file per op family (DESIGN.md, "One op, one column per layer").

`registry.SEMANTICS` maps each `OpSpec` to its rule; importing the family modules fills it.
"""

from __future__ import annotations

_LOADED = False


def load_all() -> None:
    """Import every family file, registering its rules."""
    global _LOADED
    if _LOADED:
        return
    from gdv.validate.semantics import (  # noqa: F401
        collective,
        composite,
        contract,
        control,
        conv,
        elementwise,
        gather,
        kernel,
        layout,
        reduce,
    )

    _LOADED = True
