"""Targets as objects (DESIGN.md, "Turn 2 additions"): the driver, the commands, the bounds and
the evidence ask the target, never compare its name.

A `Target` has a name and description, the kind of artifact it produces, its lowering (the
artifact's text and the ops left to reference kernels), its build (the artifact the driver
keeps), its executable, the ulp table the error bounds charge its transcendentals with, and its
capability descriptor. Its pass pipeline is `gdv.passes.pipelines.pipeline(target.name, level,
fast_math)`: the driver composes the two, since backends import no pass (DESIGN.md,
"Dependency direction"). The plain data (`gdv.ir.targets.TargetInfo`) is what the layers below
may know of a target; `TARGETS` holds one object per entry of `gdv.ir.targets.TARGET_INFO`.

Every backend is imported only when a target is asked to lower, build or run, so importing
this module stays cheap and the reference target works where no C compiler is installed.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from types import MappingProxyType
from typing import Any

import numpy as np

from gdv.ir.core import Module
from gdv.ir.diagnostics import Loc
from gdv.ir.targets import DEFAULT_TARGET, TARGET_INFO, TARGET_NAMES, TargetInfo, target_info

__all__ = [
    "DEFAULT_TARGET",
    "TARGETS",
    "TARGET_NAMES",
    "Artifact",
    "Fallback",
    "Lowered",
    "Target",
    "get_target",
]

Runner = Callable[[Mapping[str, np.ndarray]], list[np.ndarray]]
"""A compiled program: inputs keyed by parameter name (no `%`) -> outputs."""


@dataclass(frozen=True)
class Fallback:
    """An op a target cannot do, run by the reference backend instead (only with
    `allow_fallback`): its position in the entry function, name, location and the reason."""

    index: int
    op: str
    loc: str
    reason: str

    def to_json(self) -> dict:
        return {"index": self.index, "op": self.op, "location": self.loc, "reason": self.reason}


@dataclass
class Lowered:
    """A module lowered for a target: the artifact's text and the ops left to reference
    kernels (`Fallback` entries; none for targets without fallbacks)."""

    text: str
    fallbacks: list = field(default_factory=list)
    choices: list[dict] = field(default_factory=list)
    """What the printer chose itself, no attribute of the IR deciding it (`c`:
    `gdv.backends.c.printer_choices`); recorded in the bundle's artifact entry."""


@dataclass
class Artifact:
    """What the target produced: for `c`, the C source, the shared object built from it, and
    the ops left to reference kernels (`allow_fallback`); for `reference`, the final IR."""

    kind: str
    text: str
    library: Path | None = None
    fallbacks: list = field(default_factory=list)
    choices: list[dict] = field(default_factory=list)
    binaries: list[dict] = field(default_factory=list)
    """Per kernel built for a device the host need not have (`triton`: PTX and cubin for
    sm_90), its name, launch, and the sha256 and size of each binary."""


@dataclass(frozen=True)
class Target:
    """One target: its plain data (`info`) and the functions that lower, build and run."""

    info: TargetInfo
    _lower: Callable[[Module, bool], Lowered]
    _build: Callable[[Module, bool], Artifact]
    _executable: Callable[[Module, bool], Runner]
    _capabilities: Callable[[bool, bool], dict[str, Any]]
    _build_info: Callable[[], dict[str, Any] | None] = lambda: None
    _schedule_parameters: Callable[[], dict[str, Any]] = dict
    _start_build: Callable[[Module, bool], Callable[[], Artifact]] | None = None

    @property
    def name(self) -> str:
        return self.info.name

    @property
    def description(self) -> str:
        return self.info.description

    @property
    def artifact_kind(self) -> str:
        """`c-source`, `reference-ir`, ...: the evidence bundle's `artifact.kind`."""
        return self.info.artifact_kind

    @property
    def artifact_suffix(self) -> str:
        """The file name suffix of the artifact's text (`.c`, `.gdv`)."""
        return self.info.artifact_suffix

    @property
    def interpreter(self) -> bool:
        """Runs a module of any stage as written (no compile, no proof needed first)."""
        return self.info.interpreter

    @property
    def f32_ulps(self) -> Mapping[str, float]:
        """The ulp table of its own f32 transcendentals (`gdv.ir.targets.TargetInfo`)."""
        return self.info.f32_ulps

    @property
    def reference_transcendentals(self) -> bool:
        """Its transcendentals give the reference's bits (else within the error bounds)."""
        return self.info.reference_transcendentals

    @property
    def is_default(self) -> bool:
        return self.name == DEFAULT_TARGET

    def lower(self, module: Module, allow_fallback: bool = False) -> Lowered:
        """The artifact's text for the final module (regenerated byte for byte from it), and
        the ops left to reference kernels; an IRError naming the op, its location and the
        reason for anything the target cannot do, unless `allow_fallback`."""
        return self._lower(module, allow_fallback)

    def build(self, module: Module, allow_fallback: bool = False) -> Artifact:
        """Lower and build (for `c`, compile the shared object: an IRError when no C compiler
        is found)."""
        return self._build(module, allow_fallback)

    def start_build(self, module: Module, allow_fallback: bool = False) -> Callable[[], Artifact]:
        """`build`, started: lowering's errors (what the target cannot do) are raised now, and
        the returned function gives the artifact, waiting for what still runs (for `c`, the C
        compiler, in a thread, so that proving can run meanwhile) and raising its errors."""
        if self._start_build is not None:
            return self._start_build(module, allow_fallback)
        artifact = self._build(module, allow_fallback)
        return lambda: artifact

    def executable(self, module: Module, allow_fallback: bool = False) -> Runner:
        """A callable running `module`'s entry function on this target."""
        return self._executable(module, allow_fallback)

    def run(
        self, module: Module, inputs: Mapping[str, np.ndarray], allow_fallback: bool = False
    ) -> list[np.ndarray]:
        """Run `module` on `inputs` once."""
        return self.executable(module, allow_fallback)(inputs)

    def capabilities(self, measure: bool = True, refresh: bool = False) -> dict[str, Any]:
        """The capability descriptor (`gdv.backends.capabilities.SCHEMA`)."""
        return self._capabilities(measure, refresh)

    def build_info(self) -> dict[str, Any] | None:
        """How the artifact is built from its text (`c`: compiler command, version, flags);
        None when it is executed as it is."""
        return self._build_info()

    def schedule_parameters(self) -> dict[str, Any]:
        """What its pipeline takes from its capability descriptor (`c`: `vector_bytes`, the
        vector width every schedule's `vector` lanes are chosen for), as keyword arguments of
        `gdv.passes.pipelines.pipeline`."""
        return self._schedule_parameters()

    def __repr__(self) -> str:
        return f"Target({self.name})"


# --- reference ---------------------------------------------------------------------------------


def _reference_lower(module: Module, allow_fallback: bool) -> Lowered:
    from gdv.ir.printer import print_module

    return Lowered(print_module(module))


def _reference_build(module: Module, allow_fallback: bool) -> Artifact:
    return Artifact("reference-ir", _reference_lower(module, allow_fallback).text)


def _reference_executable(module: Module, allow_fallback: bool) -> Runner:
    def run(inputs: Mapping[str, np.ndarray]) -> list[np.ndarray]:
        from gdv.backends import reference

        return reference.run(module, inputs)

    return run


def _reference_capabilities(measure: bool, refresh: bool) -> dict[str, Any]:
    from gdv.backends.capabilities import reference_descriptor

    return reference_descriptor()


# --- c -----------------------------------------------------------------------------------------


def _c_lower(module: Module, allow_fallback: bool) -> Lowered:
    from gdv.backends import c

    lowered = c.lower_module(module, allow_fallback)
    return Lowered(lowered.source, [f for f, _ in lowered.fallbacks], list(lowered.choices))


def _c_build(module: Module, allow_fallback: bool) -> Artifact:
    return _c_start_build(module, allow_fallback)()


def _c_start_build(module: Module, allow_fallback: bool) -> Callable[[], Artifact]:
    from gdv.backends.c.toolchain import build

    lowered = _c_lower(module, allow_fallback)
    done: dict[str, Any] = {}

    def compile_it() -> None:
        try:
            done["library"] = build(lowered.text)
        except BaseException as e:  # raised by `finish`, in the caller's thread
            done["error"] = e

    worker = threading.Thread(target=compile_it, name="gdv-c-build", daemon=True)
    worker.start()

    def finish() -> Artifact:
        worker.join()
        if "error" in done:
            raise done["error"]
        return Artifact(
            "c-source", lowered.text, done["library"], lowered.fallbacks, lowered.choices
        )

    return finish


def _c_executable(module: Module, allow_fallback: bool) -> Runner:
    from gdv.backends import c

    return c.Executable(module, allow_fallback)


def _c_capabilities(measure: bool, refresh: bool) -> dict[str, Any]:
    from gdv.backends import c

    return c.capabilities(measure=measure, refresh=refresh)


def _c_build_info() -> dict[str, Any]:
    from gdv.backends.c.toolchain import compiler, detect, flags

    cc = compiler()
    return {"compiler": cc, "compiler_version": detect(cc)["version"], "flags": flags(cc)}


def _c_schedule_parameters() -> dict[str, Any]:
    from gdv.backends import c

    return c.schedule_parameters()


# --- triton ------------------------------------------------------------------------------------


def _triton_lower(module: Module, allow_fallback: bool) -> Lowered:
    from gdv.backends import triton

    lowered = triton.lower_module(module, allow_fallback)
    return Lowered(lowered.text, [f for f, _ in lowered.fallbacks], list(lowered.choices))


def _triton_build(module: Module, allow_fallback: bool) -> Artifact:
    from gdv.backends import triton

    lowered, binaries = triton.build(module, allow_fallback)
    return Artifact(
        "triton-python",
        lowered.text,
        None,
        [f for f, _ in lowered.fallbacks],
        list(lowered.choices),
        binaries,
    )


def _triton_start_build(module: Module, allow_fallback: bool) -> Callable[[], Artifact]:
    # lowering's errors now, the kernels' compiles (triton.compile, no GPU) when finished
    _triton_lower(module, allow_fallback)
    return lambda: _triton_build(module, allow_fallback)


def _triton_executable(module: Module, allow_fallback: bool) -> Runner:
    from gdv.backends import triton

    return triton.Executable(module, allow_fallback)


def _triton_capabilities(measure: bool, refresh: bool) -> dict[str, Any]:
    from gdv.backends import triton

    return triton.capabilities(measure=measure, refresh=refresh)


def _triton_build_info() -> dict[str, Any]:
    from gdv.backends.triton.toolchain import flags, version

    return {"compiler": "triton.compile", "compiler_version": version(), "flags": flags()}


TARGETS: Mapping[str, Target] = MappingProxyType(
    {
        "c": Target(
            TARGET_INFO["c"],
            _c_lower,
            _c_build,
            _c_executable,
            _c_capabilities,
            _c_build_info,
            _c_schedule_parameters,
            _c_start_build,
        ),
        "triton": Target(
            TARGET_INFO["triton"],
            _triton_lower,
            _triton_build,
            _triton_executable,
            _triton_capabilities,
            _triton_build_info,
            dict,
            _triton_start_build,
        ),
        "reference": Target(
            TARGET_INFO["reference"],
            _reference_lower,
            _reference_build,
            _reference_executable,
            _reference_capabilities,
        ),
    }
)
"""Every target by name (the same names as `gdv.ir.targets.TARGET_INFO`)."""

assert tuple(sorted(TARGETS)) == TARGET_NAMES


def get_target(name: str, loc: Loc | None = None) -> Target:
    """The target `name`; an IRError (at `loc`) naming the available ones otherwise."""
    return TARGETS[target_info(name, loc).name]
