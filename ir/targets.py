"""The plain data of every target: name, description, artifact kind, and what IR_SPEC.md leaves
to the target (the accuracy of its transcendentals).

The target objects live in `gdv.backends.targets` (lowering, executable, capability
descriptor); this table is what the layers below the backends may know of them: the pass
pipelines and the error-bound analysis import `gdv.ir`, never `gdv.backends` (DESIGN.md,
"Dependency direction"), and `gdv --help` needs nothing heavier. Adding a target adds an entry
here and its object in `gdv.backends.targets`; a test keeps the two equal.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from types import MappingProxyType

from gdv.ir.diagnostics import IRError, Loc, printable


@dataclass(frozen=True)
class TargetInfo:
    """What every layer may know of a target without importing its backend."""

    name: str
    description: str
    """One line, for `gdv targets` and the capability descriptor."""
    artifact_kind: str
    """The kind of artifact it produces (the evidence bundle's `artifact.kind`)."""
    artifact_suffix: str
    """The file name suffix of the artifact's text (`.c`, `.gdv`)."""
    interpreter: bool = False
    """Executes a module of any stage as written, without compiling it (the reference
    backend); other targets run what the pipeline compiled and proved."""
    f32_ulps: Mapping[str, float] = field(default_factory=dict)
    """Transcendentals whose f32 results the target computes directly in f32, with their
    largest error in ulps of the exact value (every f32 input measured); the rest, and f16,
    bf16 and f64 results, are evaluated in f64 and rounded once, as the reference does."""
    reference_transcendentals: bool = True
    """Its transcendentals give the reference backend's bits (else only within a few ulps:
    conformance compares outputs within the error bounds, not bit for bit)."""
    planned_memory: bool = False
    """Its programs take every intermediate from the planned arena, so every pipeline for it
    ends with the memory plan (`plan-memory`), at every level."""
    cpu_schedule: bool = True
    """Its compiled pipeline adds the CPU passes: packed products (`select-products`), fused
    epilogues and row groups (a GPU target runs the scheduled nests as they are)."""


TARGET_INFO: Mapping[str, TargetInfo] = MappingProxyType(
    {
        "c": TargetInfo(
            "c",
            "C11 with OpenMP and the host's SIMD, compiled by the system C compiler, run via "
            "ctypes",
            "c-source",
            ".c",
            # backends/c/vmath.py, F32_MAX_ULP (tests/validate/bounds/test_c_target.py keeps
            # the two equal): gdv's own f32 exp, tanh, erf and sigmoid.
            f32_ulps=MappingProxyType({"exp": 0.77, "tanh": 2.43, "erf": 0.98, "sigmoid": 2.41}),
            reference_transcendentals=False,
            planned_memory=True,
        ),
        "triton": TargetInfo(
            "triton",
            "Triton kernels for CUDA GPUs (built for sm_90 without a GPU; run on a GPU, or "
            "under the Triton interpreter where there is none)",
            "triton-python",
            ".py",
            # CUDA C Programming Guide, "Mathematical Functions", maximum ulp errors of the
            # single-precision functions libdevice implements (expf 2, logf 1, tanhf 2, erff 2,
            # sinf and cosf 2, powf 4, rsqrtf 2); sigmoid is libdevice's expf and two IEEE
            # operations (backends/triton/runtime.py): 2 ulp + 2 roundings <= 6 ulp. Since gdv
            # 0.6 (issue 19), from the same table: tanf 4, asinf 2, acosf 2, atanf 2, sinhf 3,
            # coshf 2, asinhf 3, acoshf 4, atanhf 3 (CUDA states them as measured, "extensive
            # but not exhaustive" tests, like the ones above).
            f32_ulps=MappingProxyType(
                {
                    "exp": 2.0,
                    "log": 1.0,
                    "tanh": 2.0,
                    "erf": 2.0,
                    "sin": 2.0,
                    "cos": 2.0,
                    "pow": 4.0,
                    "rsqrt": 2.0,
                    "sigmoid": 6.0,
                    "tan": 4.0,
                    "asin": 2.0,
                    "acos": 2.0,
                    "atan": 2.0,
                    "sinh": 3.0,
                    "cosh": 2.0,
                    "asinh": 3.0,
                    "acosh": 4.0,
                    "atanh": 3.0,
                }
            ),
            reference_transcendentals=False,
            cpu_schedule=False,
        ),
        "reference": TargetInfo(
            "reference",
            "the numpy interpreter: the executable meaning of every op (IR_SPEC.md)",
            "reference-ir",
            ".gdv",
            interpreter=True,
        ),
    }
)
"""Every target by name."""

TARGET_NAMES: tuple[str, ...] = tuple(sorted(TARGET_INFO))
"""The targets' names, sorted (the order messages list them in)."""

DEFAULT_TARGET = "c"
"""The target `gdv compile`, `gdv.compile(...)` and the driver use when none is named."""


def target_info(name: str, loc: Loc | None = None) -> TargetInfo:
    """The data of target `name`; an IRError (at `loc`) naming the available ones otherwise."""
    info = TARGET_INFO.get(name) if isinstance(name, str) else None
    if info is None:
        raise IRError(
            f"unknown target '{printable(str(name))}' (available: {', '.join(TARGET_NAMES)})",
            loc,
        )
    return info
