"""The public Python API: load, parse, verify, format and run programs."""

from __future__ import annotations

from gdv.ir.core import Module
from gdv.ir.parser import parse as _parse
from gdv.ir.parser import parse_file
from gdv.ir.printer import print_module
from gdv.ir.verifier import verify


def parse(text: str | bytes, filename: str = "<input>", *, check: bool = True) -> Module:
    """Parse (and by default verify) a module from text."""
    module = _parse(text, filename)
    return verify(module) if check else module


def load(path: str, *, check: bool = True) -> Module:
    """Read, parse and (by default) verify the module in `path`."""
    module = parse_file(path)
    return verify(module) if check else module


def format_module(module: Module) -> str:
    """The canonical text of `module`."""
    return print_module(module)
