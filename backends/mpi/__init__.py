"""Running an SPMD function under MPI (docs/IR_SPEC.md section 7; issue 17).

`run_mpi(module, global_inputs, ranks)` cuts the entry SPMD function into segments of local
ops with the collectives between them (`segments.py`), compiles every segment for the C target
with its obligations proved (as `gdv run --target c` does), builds the collectives' runtime
with `mpicc` (`runtime.c`: each collective in its declared order from point-to-point messages,
never an MPI reduction), writes one input file per rank (`shard_inputs`) and starts `mpiexec -n
N python -m gdv.backends.mpi.worker`. It returns what `run_spmd` returns (the global results,
every rank's results, the blocks where replicas disagree) and each rank's report (bytes sent per
collective): bit for bit the simulation's results, which the tests check.

A rank that dies or hangs ends the run within `timeout` seconds with an `MpiError` naming it;
missing tools (mpiexec, mpicc, mpi4py) are an `MpiUnavailable` naming what to install.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from gdv.backends.mpi.segments import Collective, Segment, check_runnable, segment_module, split
from gdv.backends.mpi.tools import MpiError, MpiUnavailable, build_runtime, require_all
from gdv.ir.core import Module
from gdv.ir.diagnostics import IRError, Loc
from gdv.ir.mesh import function_mesh
from gdv.ir.targets import target_info

__all__ = [
    "MpiError",
    "MpiRun",
    "MpiUnavailable",
    "compile_segments",
    "run_mpi",
    "run_mpi_many",
]

DEFAULT_TIMEOUT_S = 300.0


@dataclass
class MpiRun:
    """What an MPI run gives, like `gdv.backends.reference.spmd.SpmdRun`, with each rank's
    report (`bytes_sent` per collective and in all, seconds per step, `load_seconds`)."""

    outputs: list[np.ndarray]
    per_rank: list[list[np.ndarray]]
    disagreements: list[tuple[int, int, int]] = field(default_factory=list)
    reports: list[dict] = field(default_factory=list)
    seconds: float = 0.0
    """Wall time of `mpiexec`, start to exit."""


@dataclass
class CompiledSegment:
    segment: Segment
    text: str
    """The final (loop-stage) module, printed: what each rank loads and runs."""
    compilation: Any = None
    """The segment's `gdv.driver.Compilation` (its stages, obligations and artifact), from
    which `gdv compile --mesh --emit-evidence` writes the segment's own bundle."""


_COMPILED: dict[tuple[str, bool, str], list[CompiledSegment | Collective]] = {}
SEGMENT_TARGETS = ("c", "reference")
"""What runs a rank's local ops: the C target (compiled, proved) or the reference backend."""


def compile_segments(
    module: Module, allow_fallback: bool = False, target: str = "c"
) -> list[CompiledSegment | Collective]:
    """The entry SPMD function's steps, each segment compiled for the C target (the options of
    `gdv run --target c`) with every obligation proved; kept for the process by module text.
    With `target="reference"` each segment is its source, run by the reference backend on
    every rank (no compile): the ranks then compute what the simulation computes, bit for
    bit, transcendentals included."""
    from gdv.driver import CompileOptions, compile_module
    from gdv.ir.printer import print_module

    if target not in SEGMENT_TARGETS:
        raise IRError(
            f"--ranks runs the local ops on target {' or '.join(SEGMENT_TARGETS)}, not {target}",
            Loc("<command line>", 1, 1),
        )
    key = (print_module(module), allow_fallback, target)
    if key in _COMPILED:
        return _COMPILED[key]
    fn = module.entry
    steps: list[CompiledSegment | Collective] = []
    for step in split(fn):
        if isinstance(step, Collective):
            steps.append(step)
            continue
        source = print_module(segment_module(module, fn, step))
        if target_info(target).interpreter:  # the reference backend runs the source itself
            steps.append(CompiledSegment(step, source))
            continue
        comp = compile_module(source, CompileOptions(target="c", allow_fallback=allow_fallback))
        for f in comp.artifact.fallbacks:
            print(
                f"gdv: {f.loc}: {f.op} runs on the reference kernel (fallback): {f.reason}",
                file=sys.stderr,
            )
        if comp.verdict != "proved":
            where = fn.ops[step.first].loc or Loc(module.filename, 1, 1)
            raise IRError(
                f"refusing to run: the obligations of the segment of ops {step.first} .. "
                f"{step.end - 1} are {comp.verdict}",
                where,
            )
        steps.append(CompiledSegment(step, print_module(comp.module), comp))
    _COMPILED[key] = steps
    return steps


def run_mpi(
    module: Module,
    inputs: Mapping[str, np.ndarray],
    ranks: int,
    *,
    timeout: float = DEFAULT_TIMEOUT_S,
    allow_fallback: bool = False,
    target: str = "c",
) -> MpiRun:
    """Run the entry SPMD function of `module` on `ranks` MPI processes on this machine, on
    global `inputs` (keyed by parameter name). `ranks` must be the mesh's size; `target` runs
    the local ops (`compile_segments`)."""
    return run_mpi_many(
        module, [inputs], ranks, timeout=timeout, allow_fallback=allow_fallback, target=target
    )[0]


def run_mpi_many(
    module: Module,
    input_sets: list[Mapping[str, np.ndarray]],
    ranks: int,
    *,
    timeout: float = DEFAULT_TIMEOUT_S,
    allow_fallback: bool = False,
    target: str = "c",
) -> list[MpiRun]:
    """`run_mpi` on each input set in turn, in one MPI job (one start of `mpiexec` and of
    the ranks, whose segments load once); one `MpiRun` per set (`seconds` is the whole job's
    wall time in each)."""
    from gdv.backends.reference.interpreter import check_function, entry_function
    from gdv.backends.reference.spmd import assemble, shard_inputs, spmd_mesh
    from gdv.ir.printer import print_module

    fn = entry_function(module)
    mesh = spmd_mesh(module, fn)
    if ranks != mesh.size:
        shape = " x ".join(f"{a} = {n}" for a, n in mesh.axes)
        raise IRError(
            f"--ranks {ranks}, but mesh @{mesh.name} ({shape}) has {mesh.size} rank(s): an SPMD "
            "function runs on exactly its mesh's ranks",
            mesh.loc or fn.attr_locs.get("mesh") or fn.loc,
        )
    check_function(fn, module.filename)
    check_runnable(fn, module)
    # An input that is the same object in every set (a model's weights) is written once per
    # rank; the others once per rank and set. Sets are sharded one at a time (memory).
    first = input_sets[0]
    shared = [
        n for n in first if len(input_sets) > 1 and all(s.get(n) is first[n] for s in input_sets)
    ]
    shard_inputs(module, first)  # checks the inputs before anything starts
    mpiexec, mpicc = require_all()
    runtime = build_runtime(mpicc)
    steps = compile_segments(module, allow_fallback, target)
    work = Path(tempfile.mkdtemp(prefix="gdv-mpi-run-"))
    runs: list[MpiRun] = []
    try:
        _write_plan(
            work,
            module,
            steps,
            runtime,
            allow_fallback,
            print_module(module),
            len(input_sets),
            target,
        )
        for b, inputs in enumerate(input_sets):
            for r, shard in enumerate(shard_inputs(module, inputs)):
                if b == 0 and shared:
                    np.savez(work / f"in.{r}.shared.npz", **{n: shard[n] for n in shared})
                np.savez(
                    work / f"in.{r}.{b}.npz", **{n: v for n, v in shard.items() if n not in shared}
                )
        seconds = _launch(mpiexec, work, ranks, timeout, steps)
        for b in range(len(input_sets)):
            per_rank = []
            reports = []
            for r in range(ranks):
                with np.load(work / f"out.{r}.{b}.npz", allow_pickle=False) as data:
                    per_rank.append(
                        [_as_dtype(data[f"out{i}"], t) for i, t in enumerate(fn.results)]
                    )
                reports.append(json.loads((work / f"report.{r}.{b}.json").read_text()))
            outputs, disagreements = assemble(fn, mesh, per_rank)
            runs.append(MpiRun(outputs, per_rank, disagreements, reports, seconds))
    finally:
        shutil.rmtree(work, ignore_errors=True)
    return runs


def _as_dtype(arr: np.ndarray, t) -> np.ndarray:
    if arr.dtype.kind == "V":
        return arr.view(t.dtype.np)
    return arr


def _write_plan(
    work: Path,
    module: Module,
    steps,
    runtime: Path,
    allow_fallback: bool,
    program: str,
    batches: int = 1,
    target: str = "c",
) -> None:
    (work / "program.gdv").write_text(program)
    plan_steps = []
    for k, step in enumerate(steps):
        if isinstance(step, Collective):
            plan_steps.append({"kind": "collective", "op": step.index})
            continue
        name = f"seg{k}.gdv"
        (work / name).write_text(step.text)
        seg = step.segment
        plan_steps.append(
            {
                "kind": "segment",
                "file": name,
                "params": seg.params,
                "results": seg.results,
                "first": seg.first,
                "end": seg.end,
            }
        )
    plan = {
        "filename": module.filename,
        "ranks": function_mesh(module, module.entry).size,
        "runtime": str(runtime),
        "allow_fallback": allow_fallback,
        "batches": batches,
        "target": target,
        "steps": plan_steps,
    }
    (work / "plan.json").write_text(json.dumps(plan, indent=1))


def _launch(mpiexec: str, work: Path, ranks: int, timeout: float, steps) -> float:
    """Run the job; return its wall time, or raise an MpiError naming the ranks that failed."""
    cores = _cores()
    cmd = [mpiexec, "-n", str(ranks)]
    if ranks > cores:
        cmd.append("--oversubscribe")
    cmd += [sys.executable, "-m", "gdv.backends.mpi.worker", str(work)]
    env = dict(os.environ)
    env.setdefault("OMPI_ALLOW_RUN_AS_ROOT", "1")
    env.setdefault("OMPI_ALLOW_RUN_AS_ROOT_CONFIRM", "1")
    # Each rank's OpenMP threads share the cores with the other ranks.
    env.setdefault("OMP_NUM_THREADS", str(max(1, cores // ranks)))
    start = time.perf_counter()
    with open(work / "mpiexec.log", "wb") as log:
        try:
            proc = subprocess.Popen(
                cmd,
                stdin=subprocess.DEVNULL,
                stdout=log,
                stderr=subprocess.STDOUT,
                env=env,
                cwd=work,
                start_new_session=True,
            )
        except OSError as e:
            raise MpiUnavailable(f"cannot start {mpiexec}: {e.strerror}") from None
        timed_out = False
        try:
            rc = proc.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            timed_out = True
            _stop(proc, work, ranks)
            rc = proc.returncode
    seconds = time.perf_counter() - start
    done = [(work / f"done.{r}").exists() for r in range(ranks)]
    if all(done) and rc == 0 and not timed_out:
        return seconds
    raise MpiError(_diagnose(work, ranks, done, rc, timed_out, timeout, steps))


def _cores() -> int:
    """The cores this process may run on."""
    try:
        return len(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        return os.cpu_count() or 1


def _stop(proc: subprocess.Popen, work: Path, ranks: int) -> None:
    """End the job: mpiexec's process group, then any worker still alive (by the pid each
    wrote), first politely, then for good."""
    pids = []
    for r in range(ranks):
        try:
            pids.append(int((work / f"pid.{r}").read_text()))
        except (OSError, ValueError):
            pass
    for sig, grace in ((signal.SIGTERM, 2.0), (signal.SIGKILL, 5.0)):
        try:
            os.killpg(proc.pid, sig)
        except (ProcessLookupError, PermissionError):
            pass
        for pid in pids:
            try:
                os.kill(pid, sig)
            except (ProcessLookupError, PermissionError):
                pass
        try:
            proc.wait(timeout=grace)
            if sig == signal.SIGTERM and not any(_alive(pid) for pid in pids):
                return
        except subprocess.TimeoutExpired:
            continue


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    # A zombie is no longer running: it waits for its parent (mpiexec) to collect it.
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0] != "Z"
    except OSError:
        return True


def _progress(text: str) -> int:
    """A rank's `status.R` as a number that grows as it goes: 2K entering step K, 2K+1
    leaving it, -1 before the first step."""
    k, _, done = text.strip().partition(" ")
    return -1 if int(k) < 0 else 2 * int(k) + (1 if done == "done" else 0)


def _describe_step(progress: int, steps) -> str:
    """Where a rank with `progress` (see `_progress`) stopped."""
    if progress < 0:
        return f"before step 0 ({_what(0, steps)})" if steps else "before it started"
    k, done = divmod(progress, 2)
    if not done:
        return f"in step {k} ({_what(k, steps)})"
    if k + 1 >= len(steps):
        return f"after its last step, step {k}"
    return f"after step {k}, before step {k + 1} ({_what(k + 1, steps)})"


def _what(k: int, steps) -> str:
    step = steps[k]
    if isinstance(step, Collective):
        op = step.op
        return f"%{op.result} = {op.name}" + (f" at {op.loc}" if op.loc else "")
    seg = step.segment
    return f"the segment of ops {seg.first} .. {seg.end - 1}"


def _diagnose(
    work: Path, ranks: int, done: list[bool], rc, timed_out: bool, timeout: float, steps
) -> str:
    """Which ranks failed, how, and where (from their `status.R` and `error.R` files)."""
    status: dict[int, int | None] = {}
    for r in range(ranks):
        try:
            status[r] = _progress((work / f"status.{r}").read_text())
        except (OSError, ValueError):
            status[r] = None
    errors = {}
    for r in range(ranks):
        path = work / f"error.{r}"
        if path.exists():
            errors[r] = path.read_text().splitlines()[0][:500]
    log = (work / "mpiexec.log").read_text(errors="replace").strip()
    tail = log[-1500:]
    how = (
        f"the MPI run did not finish within {timeout:g} s and was stopped"
        if timed_out
        else f"the MPI run failed (mpiexec exit status {rc})"
    )
    if errors:
        first = min(errors)
        parts = [f"rank {r} failed: {msg}" for r, msg in sorted(errors.items())]
        return f"{how}: " + "; ".join(parts) + (f" (rank {first} first)" if len(errors) > 1 else "")
    missing = [r for r in range(ranks) if not done[r]]
    started = {r: s for r, s in status.items() if s is not None}
    if not started:
        return f"{how}: no rank started" + (f"\nmpiexec said:\n{tail}" if tail else "")
    if not missing:
        return f"{how} after every rank had finished" + (f"\nmpiexec said:\n{tail}" if tail else "")
    # The ranks that got least far are the ones the others waited for.
    least = min(started.get(r, -2) for r in missing)
    culprits = [r for r in missing if started.get(r, -2) == least]
    waiting = [r for r in missing if r not in culprits]
    verb = "hung" if timed_out else "died"
    names = ", ".join(str(r) for r in culprits)
    plural = "s" if len(culprits) > 1 else ""
    where = _describe_step(least, steps) if least > -2 else "before it started"
    text = f"{how}: rank{plural} {names} {verb} {where}"
    if waiting:
        groups: dict[int, list[int]] = {}
        for r in waiting:
            groups.setdefault(started.get(r, -2), []).append(r)
        text += "; " + "; ".join(
            f"rank{'s' if len(rs) > 1 else ''} {', '.join(map(str, rs))} "
            f"{'waited' if timed_out else 'stopped'} {_describe_step(k, steps)}"
            for k, rs in sorted(groups.items())
        )
    if not timed_out and tail:
        text += f"\nmpiexec said:\n{tail}"
    return text
