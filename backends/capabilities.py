"""Capability descriptors: one versioned JSON shape for every target (issue 5, item 2).

`descriptor(name)` describes a target: the ops and dtypes it executes and, for each it cannot,
the reason; how it falls back (only when asked); and, for compiled targets, the machine (ISA,
cores, caches, measured peak FLOP/s and copy bandwidth) and the compiler with its flags.
`SCHEMA` is the JSON Schema every descriptor satisfies; `gdv targets` lists the targets and
`gdv capabilities --target T --json` prints one descriptor.
"""

from __future__ import annotations

from typing import Any

from gdv.ir.diagnostics import Loc
from gdv.ir.targets import TARGET_INFO

CAPABILITY_SCHEMA = "gdv.capabilities/1"
"""The descriptor's schema identifier (a new major number for an incompatible change)."""

TARGETS: dict[str, str] = {name: info.description for name, info in TARGET_INFO.items()}
"""Every target, with a one-line description (from `gdv.ir.targets`)."""

_REASONS = {"type": "object", "additionalProperties": {"type": "string"}}
_NAMES = {"type": "array", "items": {"type": "string"}, "uniqueItems": True}

SCHEMA: dict[str, Any] = {
    "$schema": "https://json-schema.org/draft/2020-12/schema",
    "$id": "https://gdv.dev/schema/capabilities-1.json",
    "title": "gdv target capability descriptor",
    "type": "object",
    "additionalProperties": False,
    "required": [
        "schema",
        "name",
        "version",
        "description",
        "available",
        "ops",
        "unsupported_ops",
        "dtypes",
        "unsupported_dtypes",
        "fallback",
        "machine",
        "compiler",
        "execution",
    ],
    "properties": {
        "schema": {"const": CAPABILITY_SCHEMA},
        "name": {"type": "string"},
        "version": {"type": "string"},
        "description": {"type": "string"},
        "available": {
            "type": "object",
            "required": ["ok", "reason"],
            "properties": {"ok": {"type": "boolean"}, "reason": {"type": "string"}},
        },
        "ops": _NAMES,
        "unsupported_ops": _REASONS,
        "dtypes": _NAMES,
        "unsupported_dtypes": _REASONS,
        "fallback": {"type": ["string", "null"]},
        "machine": {
            "type": ["object", "null"],
            "required": ["arch", "cores", "caches", "isa", "simd"],
            "properties": {
                "arch": {"type": "string"},
                "cpu": {"type": "string"},
                "cores": {"type": "integer", "minimum": 1},
                "threads": {"type": "integer", "minimum": 1},
                "caches": {
                    "type": "array",
                    "items": {
                        "type": "object",
                        "required": ["level", "type", "size_bytes", "shared_by"],
                        "properties": {
                            "level": {"type": "integer"},
                            "type": {"type": "string"},
                            "size_bytes": {"type": "integer", "minimum": 0},
                            "shared_by": {"type": "integer", "minimum": 1},
                        },
                    },
                },
                "isa": _NAMES,
                "simd": {"type": "string"},
                "peak_gflops": {
                    "type": "object",
                    "required": ["f32_mul_add", "f32_fma"],
                    "additionalProperties": {"type": "number", "exclusiveMinimum": 0},
                },
                "copy_bandwidth_gbs": {"type": "number", "exclusiveMinimum": 0},
            },
        },
        "compiler": {
            "type": ["object", "null"],
            "required": ["command", "version", "flags", "openmp"],
            "properties": {
                "command": {"type": "string"},
                "version": {"type": "string"},
                "flags": {"type": "array", "items": {"type": "string"}},
                "openmp": {"type": "boolean"},
            },
        },
        "execution": {"type": "object"},
    },
}


def descriptor(name: str, measure: bool = True, refresh: bool = False) -> dict[str, Any]:
    """The capability descriptor of target `name` (an IRError for an unknown target).

    `measure=False` leaves out the measured peaks (no probe runs); `refresh` measures again
    instead of using the cached measurement."""
    from gdv.backends.targets import get_target

    return get_target(name, Loc("<target>", 1, 1)).capabilities(measure=measure, refresh=refresh)


def reference_descriptor() -> dict[str, Any]:
    """The reference target's descriptor (`gdv.backends.targets.TARGETS["reference"]`)."""
    from gdv import __version__
    from gdv.backends.reference import KERNELS
    from gdv.ir import ops
    from gdv.ir.dtypes import DType

    names = {spec.name for spec in KERNELS}
    return {
        "schema": CAPABILITY_SCHEMA,
        "name": "reference",
        "version": __version__,
        "description": TARGETS["reference"],
        "available": {"ok": True, "reason": ""},
        "ops": sorted(names),
        "unsupported_ops": {
            s.name: "no reference kernel" for s in ops.all_specs() if s.name not in names
        },
        "dtypes": sorted(d.value for d in DType),
        "unsupported_dtypes": {},
        "fallback": None,
        "machine": None,
        "compiler": None,
        "execution": {
            "engine": "numpy",
            "order": "every fold in the spec's order; narrow floats computed in f64 and "
            "rounded once",
        },
    }
