"""Where an imported op came from, written into and read back from the module's text.

The importers set `Op.origin` (`onnx:NODE (OpType)`, `torch:module.path (node)`); `gdv import`
writes the module with `annotated_text`, which ends each op line of the entry function with a
comment `// from ORIGIN`. Comments mean nothing to the IR (IR_SPEC.md section 1), so the file
is an ordinary module and every old program stays valid; `origins` reads the comments back,
by line, for tools that point from a compiled kernel to its source (`gdv profile`, the
evidence bundle's cost reports: a kernel's location is the line of the op it came from).
"""

from __future__ import annotations

import re

from gdv.ir.core import Module
from gdv.ir.printer import print_module

COMMENT = "// from "
"""What starts the origin comment at the end of an op's line."""

_OP_LINE = re.compile(r"^  %([A-Za-z0-9_.]+) = ")
_ORIGIN = re.compile(r"//\s*from\s+((?:onnx|torch):[^\n]*?)\s*$")
_SAFE = re.compile(r"[\x00-\x1f\x7f]")


def annotated_text(module: Module) -> str:
    """The canonical text of `module` with `// from ORIGIN` after each op of the entry function
    whose `origin` is set (removing the comments gives `print_module(module)` exactly)."""
    entry = module.entry
    origin = {op.result: op.origin for op in entry.ops if op.origin} if entry else {}
    if not origin:
        return print_module(module)
    out = []
    inside = False
    for line in print_module(module).split("\n"):
        if line.startswith("func @"):
            inside = line.startswith(f"func @{entry.name}(")
        m = _OP_LINE.match(line) if inside else None
        if m is not None and m.group(1) in origin:
            line = f"{line}  {COMMENT}{_SAFE.sub('?', origin[m.group(1)])}"
        out.append(line)
    return "\n".join(out)


def origins(text: str | bytes) -> dict[int, str]:
    """Line number (from 1) -> the origin its comment names, for every line ending in
    `// from onnx:...` or `// from torch:...`."""
    if isinstance(text, bytes):
        text = text.decode("utf-8", errors="replace")
    found = {}
    for n, line in enumerate(text.splitlines(), start=1):
        if "//" not in line:
            continue
        m = _ORIGIN.search(line)
        if m is not None:
            found[n] = m.group(1)
    return found
