"""gdv: a verification-first ML compiler.

Public API: `load`, `parse`, `format_module`, `run` (the reference backend), `IRError`.
"""

__version__ = "0.1.0"

from gdv.api import format_module, load, parse  # noqa: E402
from gdv.ir.diagnostics import IRError  # noqa: E402


def run(module, inputs, *, mode: str = "exact"):
    """Execute the entry function of `module` on the reference backend."""
    from gdv.backends import reference

    return reference.run(module, inputs, mode=mode)


__all__ = ["IRError", "__version__", "format_module", "load", "parse", "run"]
