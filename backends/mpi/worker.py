"""One rank of an MPI run: `python -m gdv.backends.mpi.worker WORKDIR`, started by `mpiexec`.

The launcher (`gdv.backends.mpi.run_mpi`) leaves in WORKDIR the program (`program.gdv`), the
plan (`plan.json`: the steps, the runtime's shared object, the number of input sets), each
compiled segment's final module (`segK.gdv`) and one input file per rank and input set
(`in.R.B.npz`; inputs common to every set once, `in.R.shared.npz`). Rank R loads its
segments once, then for each input set B reads only its own
inputs, runs the steps in order (segments on the C target, collectives on the runtime), and
writes `out.R.B.npz` (its local results `out0`, `out1`, ...) and `report.R.B.json` (bytes sent
per collective, seconds per step, seconds spent loading the segments); last, the marker
`done.R`. It writes `K` to `status.R` as it enters step K and `K done` as it leaves it, so that
the launcher can name a rank that died or hung. An exception is written to `error.R` and
aborts the whole job.

`GDV_MPI_FAULT=exit:R`, `hang:R` or `raise:R` (a test hook) makes rank R exit without a word,
sleep forever or raise an exception where it would enter the first collective (or finish, when
there is none).
"""

from __future__ import annotations

import json
import os
import sys
import time
import traceback
from pathlib import Path

import numpy as np


def _write(path: Path, data: bytes | str) -> None:
    tmp = path.with_name(path.name + ".tmp")
    if isinstance(data, str):
        tmp.write_text(data)
    else:
        tmp.write_bytes(data)
    os.replace(tmp, path)


def _fault(rank: int) -> None:
    spec = os.environ.get("GDV_MPI_FAULT", "")
    kind, _, who = spec.partition(":")
    if not who.strip().isdigit() or int(who) != rank:
        return
    if kind == "exit":
        os._exit(17)
    if kind == "hang":
        while True:
            time.sleep(3600)
    if kind == "raise":
        raise RuntimeError(f"GDV_MPI_FAULT={spec}: a failure on purpose")


def _as_dtype(arr: np.ndarray, dtype) -> np.ndarray:
    # bf16 arrays survive np.savez only as raw 2-byte voids; view them back.
    if arr.dtype.kind == "V" and arr.dtype.itemsize == np.dtype(dtype.np).itemsize:
        return arr.view(dtype.np)
    return arr


def run_rank(workdir: Path, rank: int) -> None:
    from gdv.api import parse
    from gdv.backends.mpi.collective import Runtime
    from gdv.ir.mesh import function_mesh

    plan = json.loads((workdir / "plan.json").read_text())
    module = parse((workdir / "program.gdv").read_text(), plan["filename"])
    fn = module.entry
    mesh = function_mesh(module, fn)
    types = fn.types()
    runtime = Runtime(plan["runtime"])
    if plan["ranks"] != mesh.size:
        raise RuntimeError(f"the plan is for {plan['ranks']} ranks, the mesh has {mesh.size}")
    start = time.perf_counter()
    executables = {
        k: _executable(parse((workdir / step["file"]).read_text(), step["file"]), plan)
        for k, step in enumerate(plan["steps"])
        if step["kind"] == "segment"
    }
    load_seconds = time.perf_counter() - start
    # Each value is dropped after the last step that reads it (unless it is returned).
    last_read: dict[str, int] = {}
    for k, step in enumerate(plan["steps"]):
        reads = step["params"] if step["kind"] == "segment" else fn.ops[step["op"]].operands
        last_read.update((name, k) for name in reads)
    dead_after: dict[int, list[str]] = {}
    for name, k in last_read.items():
        if name not in set(fn.returns):
            dead_after.setdefault(k, []).append(name)
    shared: dict = {}
    if (workdir / f"in.{rank}.shared.npz").exists():  # the inputs every set has in common
        with np.load(workdir / f"in.{rank}.shared.npz", allow_pickle=False) as data:
            shared = {k: _as_dtype(data[k], types[k].dtype) for k in data.files}
    for b in range(plan.get("batches", 1)):
        with np.load(workdir / f"in.{rank}.{b}.npz", allow_pickle=False) as data:
            env = {**shared, **{k: _as_dtype(data[k], types[k].dtype) for k in data.files}}
        report = _run_steps(
            plan, fn, mesh, runtime, executables, env, dead_after, workdir, rank, b == 0
        )
        report["load_seconds"] = load_seconds
        report["batch"] = b
        tmp = workdir / f"out.{rank}.{b}.tmp.npz"
        np.savez(tmp, **{f"out{i}": env[name] for i, name in enumerate(fn.returns)})
        os.replace(tmp, workdir / f"out.{rank}.{b}.npz")
        _write(workdir / f"report.{rank}.{b}.json", json.dumps(report, indent=1))
    _write(workdir / f"done.{rank}", "done")


def _executable(module, plan: dict):
    """A segment's runner: compiled C, or the reference backend (`plan["target"]`)."""
    if plan.get("target", "c") == "reference":
        from gdv.backends import reference

        return lambda inputs: reference.run(module, inputs)
    from gdv.backends import c

    return c.Executable(module, plan["allow_fallback"])


def _run_steps(plan, fn, mesh, runtime, executables, env, dead_after, workdir, rank, first):
    """One input set through every step; this rank's report."""
    report: dict = {"rank": rank, "coords": list(mesh.coords(rank)), "steps": []}
    faulted = not first  # a planted fault (tests) strikes in the first input set only
    for k, step in enumerate(plan["steps"]):
        if step["kind"] == "collective" and not faulted:
            faulted = True
            _fault(rank)
        _write(workdir / f"status.{rank}", str(k))
        t = time.perf_counter()
        if step["kind"] == "segment":
            results = executables[k]({name: env[name] for name in step["params"]})
            for name, value in zip(step["results"], results, strict=True):
                env[name] = np.array(value, copy=True)
            report["steps"].append(
                {
                    "step": k,
                    "kind": "segment",
                    "ops": [step["first"], step["end"]],
                    "seconds": time.perf_counter() - t,
                }
            )
        else:
            op = fn.ops[step["op"]]
            env[op.result], sent = runtime.run(op, env[op.operands[0]], mesh, rank, k)
            report["steps"].append(
                {
                    "step": k,
                    "kind": "collective",
                    "op": op.name,
                    "result": op.result,
                    "index": step["op"],
                    "bytes_sent": sent,
                    "seconds": time.perf_counter() - t,
                }
            )
        for name in dead_after.get(k, []):
            env.pop(name, None)
        _write(workdir / f"status.{rank}", f"{k} done")
    if not faulted:
        _fault(rank)
    report["bytes_sent"] = sum(s.get("bytes_sent", 0) for s in report["steps"])
    return report


def main(argv: list[str]) -> int:
    workdir = Path(argv[1])
    from mpi4py import MPI

    comm = MPI.COMM_WORLD
    rank = comm.Get_rank()
    _write(workdir / f"pid.{rank}", str(os.getpid()))
    _write(workdir / f"status.{rank}", "-1")
    try:
        run_rank(workdir, rank)
    except BaseException as e:  # noqa: BLE001  (reported to the launcher, then the job ends)
        text = "".join(traceback.format_exception(e))
        _write(workdir / f"error.{rank}", f"{type(e).__name__}: {e}\n{text}")
        sys.stderr.write(text)
        sys.stderr.flush()
        comm.Abort(3)
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv))
