"""The C target: loop-stage modules lowered to C11, compiled with the system C compiler, loaded
with ctypes and run (issue 5).

`lower(module)` gives the C source (an IRError naming the op, its location and the reason for
anything the target cannot do: no silent fallback); `build(module)` compiles it (cached by
content hash); `run(module, inputs)` executes the entry function like the reference backend's
`run`, bit-exact to it except for the last bits of transcendentals (libm, see
`backends/c/elementwise.py`); `capabilities()` describes the target. Lowering rules live in one
file per op family, registered in `RULES` against the op specs of `gdv.ir.ops`.
"""

from __future__ import annotations

import ctypes
import functools
import os
from collections.abc import Mapping
from pathlib import Path

import numpy as np

from gdv.backends.c import (  # noqa: F401  (importing the families fills RULES)
    composite,
    contract,
    conv,
    elementwise,
    gather,
    kernel,
    layout,
    reduce,
)
from gdv.backends.c.emit import CTYPE, UNSUPPORTED_DTYPES, Program, ctype
from gdv.backends.c.registry import LOWERINGS, RULES, UNSUPPORTED
from gdv.backends.c.toolchain import compiler, detect, flags, isa_features
from gdv.ir.core import Module
from gdv.ir.diagnostics import IRError, Loc
from gdv.ir.ops import get as get_spec

CAPABILITY_VERSION = 1
"""Version of the capability descriptor's schema."""

__all__ = ["RULES", "build", "capabilities", "lower", "run"]


def _program(module: Module) -> Program:
    entry = module.entry
    if entry is None:
        raise IRError("module has no entry function (@main or a single function)")
    prog = Program(module, entry)
    for p in entry.params:
        if p.type.dtype not in CTYPE:
            raise IRError(
                f"target c does not support parameter %{p.name} of type {p.type}: "
                f"{UNSUPPORTED_DTYPES.get(p.type.dtype, 'no C type')}",
                p.loc or Loc(module.filename, 1, 1),
            )
    for op in entry.ops:
        spec = get_spec(op.name)
        if spec is None:
            raise prog.error(op, "unknown op")
        if spec in UNSUPPORTED:
            raise prog.error(op, UNSUPPORTED[spec].reason)
        ctype(op.type.dtype, op, module)
        LOWERINGS[spec](prog, op)
    return prog


def lower(module: Module) -> str:
    """The C11 source of `module`'s entry function; an IRError for what the target cannot do."""
    return _program(module).source()


def build(module: Module) -> Path:
    """The shared object of `module` (compiled now or taken from the cache)."""
    from gdv.backends.c.toolchain import build as build_source

    return build_source(lower(module))


@functools.cache
def _load(path: str) -> ctypes.CDLL:
    lib = ctypes.CDLL(path)
    lib.gdv_entry.argtypes = [ctypes.POINTER(ctypes.c_void_p)]
    lib.gdv_entry.restype = ctypes.c_int
    return lib


def run(module: Module, inputs: Mapping[str, np.ndarray]) -> list[np.ndarray]:
    """Execute `module`'s entry function on the C target; arrays keyed by parameter name."""
    from gdv.backends.reference import Context, check_memory
    from gdv.backends.reference.interpreter import check_inputs

    prog = _program(module)
    from gdv.backends.c.toolchain import build as build_source

    lib = _load(str(build_source(prog.source())))
    fn = prog.entry
    check_memory(fn)
    env = check_inputs(fn, inputs, Context())
    buffers: list[np.ndarray] = []
    for t in prog.slot_types:
        buffers.append(np.empty(max(1, t.num_elements), dtype=t.dtype.np))
    for p in fn.params:
        buffers[prog.slot_of[p.name]][: p.type.num_elements] = env[p.name].reshape(-1)
    pointers = (ctypes.c_void_p * max(1, len(buffers)))(*[b.ctypes.data for b in buffers])
    status = lib.gdv_entry(pointers)
    if status != 0:
        raise IRError(f"target c: the compiled program returned status {status}")
    types = fn.types()
    outs = []
    for name in fn.returns:
        t = types[name]
        flat = buffers[prog.slot_of[name]][: t.num_elements]
        outs.append(np.array(flat.reshape(t.shape), copy=True))
    return outs


def capabilities() -> dict:
    """The target's capability descriptor (JSON-ready)."""
    from gdv import __version__
    from gdv.backends.c.elementwise import LIBM

    cc = compiler()
    info = detect(cc)
    return {
        "schema": CAPABILITY_VERSION,
        "target": "c",
        "version": __version__,
        "ops": {
            "supported": sorted(s.name for s in LOWERINGS),
            "unsupported": {
                s.name: u.reason for s, u in sorted(UNSUPPORTED.items(), key=lambda kv: kv[0].name)
            },
        },
        "dtypes": {
            "supported": [str(d) for d in CTYPE],
            "unsupported": {str(d): r for d, r in UNSUPPORTED_DTYPES.items()},
        },
        "isa": isa_features(),
        "cores": os.cpu_count(),
        "compiler": {
            "command": cc,
            "version": info["version"],
            "flags": flags(cc),
            "openmp": info["openmp"],
        },
        "libm": sorted(set(LIBM.values())),
        "schedule": {
            "honoured": [
                "order (out dims)",
                "tile (out dims)",
                "parallel (outermost loop)",
                "accumulators",
            ],
            "not_yet": ["vector (no explicit SIMD: left to the C compiler)"],
        },
    }


assert set(RULES) == set(LOWERINGS) | set(UNSUPPORTED)
