"""Helpers shared by test files (importable as `support`: tests/conftest.py puts this folder
on sys.path, since pytest runs with --import-mode=importlib and test folders are no packages)."""

from __future__ import annotations

import importlib.util
import sys
from dataclasses import dataclass
from pathlib import Path
from types import ModuleType

from gdv.ir.core import Module
from gdv.passes.base import Pass, PassResult, Rewrite, Site, rewrite_module

TESTS = Path(__file__).resolve().parent


def load_module(relative: str) -> ModuleType:
    """The helper module at `tests/<relative>` (e.g. "ir/strategies.py"), loaded once."""
    path = TESTS / relative
    key = "gdv_tests_" + relative.removesuffix(".py").replace("/", "_")
    if key not in sys.modules:
        spec = importlib.util.spec_from_file_location(key, path)
        module = importlib.util.module_from_spec(spec)
        sys.modules[key] = module
        spec.loader.exec_module(module)
    return sys.modules[key]


def _wrong_rule(site: Site) -> Rewrite | None:
    """A deliberately wrong rule: x + 0.0 -> x claimed bit-exact (false for x = -0.0)."""
    op = site.op
    if op.name == "add":
        c = site.producer(1)
        if c is not None and c.name == "constant" and c.attrs["value"] == 0.0:
            return Rewrite("add-zero-bitexact", [], op.operands[0], [c, op])
    return None


@dataclass(frozen=True)
class WrongPass(Pass):
    """A pass with one wrong rule, for tests that the proofs catch miscompiles."""

    name = "wrong-pass"

    def run(self, module: Module) -> PassResult:
        return rewrite_module(module, self.name, [_wrong_rule])
