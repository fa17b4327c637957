"""Passes: each returns the new module and the obligations that justify it, never calling a
solver (DESIGN.md). `gdv.passes.manager` runs pipelines; `gdv.passes.pipelines` names them."""

from gdv.passes.base import Pass, PassResult

__all__ = ["Pass", "PassResult"]
