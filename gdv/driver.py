"""The compile driver: parse, external passes, the pipeline, discharge, evidence, executable."""

from __future__ import annotations

import os
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from gdv.api import parse
from gdv.backends.targets import Artifact, get_target
from gdv.external import run_external_pass
from gdv.ir.core import Module
from gdv.ir.diagnostics import IRError, Loc, printable
from gdv.ir.parser import parse_file
from gdv.ir.targets import DEFAULT_TARGET
from gdv.ir.verifier import verify
from gdv.passes.manager import PassManager, PassRecord
from gdv.passes.pipelines import pipeline


@dataclass
class CompileOptions:
    """Everything `gdv compile` and `gdv.compile` accept besides the source."""

    target: str = DEFAULT_TARGET
    level: int = 2
    fast_math: bool = False
    reassociate: bool = False
    disable: tuple[str, ...] = ()
    print_after: tuple[str, ...] = ()
    print_ir_after_all: bool = False
    external_passes: tuple[str, ...] = ()
    external_timeout: float = 60.0
    jobs: int | None = None
    timeout: float = 10.0
    memory_mb: int = 4096
    cache_dir: str | None = None
    use_cache: bool = True
    emit_evidence: str | None = None
    progress: bool = False
    allow_fallback: bool = False
    bound: tuple[str, ...] = ()
    """Parameters (names without `%`) the caller will fix once with `Compilation.bind`: the
    products reading them are planned for factors packed at bind time (`--bound`)."""


@dataclass
class Compilation:
    """What a compile produced: the final module, every pass's record and outcome."""

    source: Module
    source_text: bytes
    module: Module
    options: CompileOptions
    records: list[PassRecord]
    stages: list[tuple[str, Module]]
    outcomes: list = field(default_factory=list)
    seconds: float = 0.0
    prove_seconds: float = 0.0
    artifact: Artifact | None = None
    _executable: Any = field(default=None, repr=False, compare=False)

    @property
    def verdict(self) -> str:
        """`proved` when every obligation is, else `refuted` or `unknown` (refuted wins)."""
        statuses = {o.status for o in self.outcomes}
        if "refuted" in statuses:
            return "refuted"
        if "unknown" in statuses:
            return "unknown"
        return "proved"

    def __call__(self, **inputs: np.ndarray) -> list[np.ndarray]:
        """Run the compiled program on keyword inputs (parameter names without `%`)."""
        if self.verdict != "proved":
            raise IRError(
                f"refusing to run a compile whose obligations are {self.verdict}",
                Loc(self.source.filename, 1, 1),
            )
        return self.executable()(inputs)

    def bind(self, **weights: np.ndarray) -> Bound:
        """The compiled program with the parameters `weights` fixed (a model's weights, as
        onnxruntime fixes its initializers), called with the other parameters as keywords.
        The weights are copied; on the C target each product factor read only from them is
        packed once here instead of on every call (`gdv.backends.c.Executable.bind`)."""
        if self.verdict != "proved":
            raise IRError(
                f"refusing to run a compile whose obligations are {self.verdict}",
                Loc(self.source.filename, 1, 1),
            )
        exe = self.executable()
        if not hasattr(exe, "bind"):
            return Bound(_Fixed(exe, {k: np.array(v, copy=True) for k, v in weights.items()}))
        return Bound(exe.bind(weights))

    def executable(self):
        """The final module's executable on the target, built once (its proof unchecked: the
        evidence writer runs it for conformance whatever the verdict)."""
        if self._executable is None:
            target = get_target(self.options.target)
            self._executable = target.executable(self.module, self.options.allow_fallback)
        return self._executable


@dataclass
class Bound:
    """A compiled program with some parameters fixed (`Compilation.bind`)."""

    executable: Any

    def __call__(self, **inputs: np.ndarray) -> list[np.ndarray]:
        """Run it on the other parameters, as keywords."""
        return self.executable(inputs)


@dataclass
class _Fixed:
    """Fixed parameters for a target whose executable cannot bind: passed on every call."""

    executable: Any
    weights: dict

    def __call__(self, inputs) -> list[np.ndarray]:
        clash = sorted(set(inputs) & set(self.weights))
        if clash:
            raise IRError(f"{', '.join(clash)}: bound by bind, not an input any more")
        return self.executable({**inputs, **self.weights})


def _load(source: str | os.PathLike) -> tuple[Module, bytes]:
    if isinstance(source, os.PathLike) or (
        isinstance(source, str) and "\n" not in source and "{" not in source
    ):
        path = os.fspath(source)
        module = verify(parse_file(path))
        with open(path, "rb") as f:
            return module, f.read()
    text = source if isinstance(source, str) else str(source)
    return parse(text, "<string>"), text.encode()


def compile_module(
    source: str | os.PathLike, options: CompileOptions | None = None, log=None
) -> Compilation:
    """Compile and prove; raises IRError on input errors. Check `.verdict` for the proof."""
    options = options or CompileOptions()
    start = time.perf_counter()
    module, text = _load(source)
    entry = module.entry
    if entry is not None and entry.attrs.get("mesh") is not None:
        # The pipeline proves per-rank rewrites of ordinary functions; an SPMD function is cut
        # into such segments by the MPI backend, which compiles each through this driver.
        raise IRError(
            f'@{entry.name} is an SPMD function (mesh "{entry.attrs["mesh"]}"): run it with '
            "`gdv run FILE --ranks N` (its segments of local ops compile for C there), prove it "
            "against its global program with `gdv tv GLOBAL FILE`",
            entry.loc,
        )
    if options.bound and entry is not None:
        params = {q.name for q in entry.params}
        unknown = sorted(set(options.bound) - params)
        if unknown:
            raise IRError(
                f"--bound names {', '.join(printable(n, 64) for n in unknown[:4])}"
                f"{' ...' if len(unknown) > 4 else ''}, not a parameter of @{entry.name}",
                entry.loc,
            )
    external: list[PassRecord] = []
    stages: list[tuple[str, Module]] = [("input", module)]
    for k, command in enumerate(options.external_passes, start=1):
        t = time.perf_counter()
        module, obligations = run_external_pass(module, command, k, options.external_timeout)
        name = f"external-{k}"
        external.append(PassRecord(name, obligations, True, time.perf_counter() - t, "graph"))
        stages.append((name, module))
    manager = PassManager(
        pipeline(
            options.target,
            options.level,
            options.fast_math,
            reassociate=options.reassociate,
            bound=frozenset(options.bound),
            **get_target(options.target).schedule_parameters(),
        ),
        disabled=frozenset(options.disable),
        print_after=frozenset(options.print_after),
        print_after_all=options.print_ir_after_all,
        printer=log or print,
    )
    result = manager.run(module)
    # What the target cannot do is a compile-time error, before any proof is attempted; the
    # artifact's build (the C compiler) runs while the obligations are proved.
    finish_build = get_target(options.target).start_build(result.module, options.allow_fallback)
    records = external + result.records
    stages += result.stages[1:]
    _record_bound_changes(records, stages)
    comp = Compilation(stages[0][1], text, result.module, options, records, stages)
    from gdv.validate.discharge import discharge

    obligations = [o for r in records for o in r.obligations]
    t = time.perf_counter()
    comp.outcomes = discharge(
        obligations,
        jobs=options.jobs,
        timeout=options.timeout,
        memory_mb=options.memory_mb,
        cache_dir=Path(options.cache_dir) if options.cache_dir else None,
        use_cache=options.use_cache,
        progress=_progress_printer() if options.progress else None,
    )
    comp.prove_seconds = time.perf_counter() - t
    comp.artifact = finish_build()
    comp.seconds = time.perf_counter() - start
    return comp


def _record_bound_changes(records: list[PassRecord], stages: list[tuple[str, Module]]) -> None:
    """A pass that made `real` claims changed the program's float error; record the rigorous
    bound of every output before and after it (IR_SPEC.md section 5)."""
    from gdv.validate.bounds import bound_change

    after = dict(stages)
    order = [name for name, _ in stages]
    for r in records:
        if not any(o.theory == "real" for o in r.obligations) or r.name not in after:
            continue
        before = dict(stages)[order[order.index(r.name) - 1]]
        r.bound_change = bound_change(before, after[r.name])


def compile(source: str | os.PathLike, target: str = DEFAULT_TARGET, **options) -> Compilation:
    """`gdv.compile(path_or_text, target=...)`: compile, prove every obligation, and return an
    executable (call it with numpy inputs as keyword arguments). Raises IRError when an
    obligation is refuted or unknown, naming it."""
    comp = compile_module(source, CompileOptions(target=target, **options))
    if comp.verdict != "proved":
        bad = next(o for o in comp.outcomes if o.status != "proved")
        raise IRError(
            f"obligation {bad.obligation.id} is {bad.status}: {bad.reason}",
            bad.obligation.loc or Loc(comp.source.filename, 1, 1),
        )
    return comp


def _progress_printer():
    if not sys.stderr.isatty():
        return None
    last = [0.0]

    def show(done: int, total: int) -> None:
        now = time.perf_counter()
        if done == total or now - last[0] > 0.2:
            last[0] = now
            end = "\n" if done == total else ""
            print(f"\r[gdv] obligations {done}/{total}", end=end, file=sys.stderr, flush=True)

    return show


# --- evidence -------------------------------------------------------------------------------


def write_evidence(
    comp: Compilation, directory: str, sign_key: str | None = None, execution: dict | None = None
) -> Path:
    """Write the evidence bundle of `comp` (see `gdv.evidence.write_bundle`), with a measured
    `execution` report (`gdv profile`) when given."""
    from gdv.evidence import write_bundle

    return write_bundle(comp, directory, sign_key=sign_key, execution=execution)
