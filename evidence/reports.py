"""The reports of an evidence bundle's `reports/` (issue 16, item 5), for a runtime or placement
service to read, each under a versioned JSON Schema (`schema/reports-<name>-<N>.json`):

- `compile-cost`: per pass, its wall time, obligations (by status), solver seconds and proof
  cache hits; measured at every compile, so, like `timings.json`, no hash covers it;
- `predicted-cost`: per op of the final stage, its flops and bytes (`gdv.backends.cost`), the
  roofline time they allow on the target's measured peaks, and its source (line, and the
  ONNX node or torch module it was imported from); derived, hashed;
- `execution` (`gdv compile --emit-evidence --profile`, and `gdv profile --json`): per op, the
  time measured by the timers in the generated C, as GFLOP/s, GB/s and percent of roofline;
- `scaling` (`gdv profile --threads 1,2 --json`; not a bundle report): the execution report
  at each of several thread counts, measured interleaved, and per op its medians, speedup and
  the time it loses against perfect scaling from the first count.

`chrome_trace` turns an execution's runs into a Chrome-trace / Perfetto JSON timeline.
"""

from __future__ import annotations

import os
import statistics
from typing import Any

from gdv.backends.cost import OpCost, Roofline, module_costs
from gdv.frontends.provenance import origins
from gdv.ir.core import Module

VERSIONS = {"compile-cost": 1, "predicted-cost": 1, "execution": 1, "scaling": 1}
"""The current schema version of each report."""

MEASURED = frozenset({"compile-cost"})
"""Reports written by every compile that hold measurements: no hash covers them."""


def schema_name(name: str) -> str:
    """The schema file stem of report `name` (`reports-compile-cost-1`)."""
    return f"reports-{name}-{VERSIONS[name]}"


def schema_id(name: str) -> str:
    """The `schema` field of report `name` (`gdv.reports.compile-cost/1`)."""
    return f"gdv.reports.{name}/{VERSIONS[name]}"


def machine(descriptor: dict) -> dict:
    """What the reports say of the machine: its CPU, cores and the peaks the roofline uses."""
    host = descriptor.get("machine") or {}
    roof = Roofline.from_descriptor(descriptor)
    return {
        "cpu": str(host.get("cpu", host.get("arch", "unknown"))),
        "cores": int(host.get("cores") or 1),
        "isa": list(host.get("isa", [])),
        "peak_gflops_f32": roof.peak_gflops,
        "copy_bandwidth_gbs": roof.bandwidth_gbs,
    }


def compile_cost(comp: Any) -> dict:
    """The compile-cost report of a `gdv.driver.Compilation`."""
    rows: dict[str, dict] = {}
    for r in comp.records:
        rows[r.name] = {
            "name": r.name,
            "stage": r.stage,
            "changed": bool(r.changed),
            "seconds": float(r.seconds),
            "obligations": 0,
            "proved": 0,
            "refuted": 0,
            "unknown": 0,
            "solver_seconds": 0.0,
            "cache_hits": 0,
            "shared": 0,
        }
    for out in comp.outcomes:
        row = rows.get(out.obligation.pass_name)
        if row is None:
            continue
        row["obligations"] += 1
        row[out.status] += 1
        row["solver_seconds"] += float(out.seconds)
        row["cache_hits"] += int(bool(out.cached))
        row["shared"] += int(bool(out.shared_with))
    passes = list(rows.values())
    return {
        "schema": schema_id("compile-cost"),
        "source": os.path.basename(comp.source.filename),
        "target": comp.options.target,
        "level": comp.options.level,
        "total": {
            "seconds": float(comp.seconds),
            "prove_seconds": float(comp.prove_seconds),
            "pass_seconds": sum(p["seconds"] for p in passes),
            "obligations": sum(p["obligations"] for p in passes),
            "solver_seconds": sum(p["solver_seconds"] for p in passes),
            "cache_hits": sum(p["cache_hits"] for p in passes),
        },
        "passes": passes,
    }


def source_of(cost: OpCost, module: Module, lines: dict[int, str]) -> dict:
    """Where an op of the final stage came from: its location in the input (the line of the
    op it was lowered from) and what that line was imported from, if known."""
    op = module.entry.ops[cost.index]
    origin = lines.get(op.loc.line) if op.loc is not None else None
    return {"location": cost.location, "origin": origin}


def predicted_cost(module: Module, descriptor: dict, source_text: bytes | str = b"") -> dict:
    """The predicted cost report of the final `module` on the machine of `descriptor`."""
    roof = Roofline.from_descriptor(descriptor)
    lines = origins(source_text)
    kernels = []
    for c in module_costs(module):
        if not c.flops and not c.bytes:
            continue  # emits no code (a reshape)
        kernels.append(
            {
                "index": c.index,
                "value": c.value,
                "op": c.op,
                "kind": c.kind,
                "dtype": c.dtype,
                "flops": c.flops,
                "bytes": c.bytes,
                "intensity": c.intensity,
                "seconds": roof.seconds(c),
                "bound": roof.bound(c),
                "source": source_of(c, module, lines),
            }
        )
    return {
        "schema": schema_id("predicted-cost"),
        "machine": machine(descriptor),
        "model": "flops: iteration space x body ops for kernels (a product 2MNK), one per "
        "element for core ops; bytes: each distinct operand read once and the result written "
        "once; seconds: max(flops / peak, bytes / copy bandwidth), the f32 peak halved for f64",
        "total": {
            "flops": sum(k["flops"] for k in kernels),
            "bytes": sum(k["bytes"] for k in kernels),
            "seconds": sum(k["seconds"] for k in kernels),
        },
        "kernels": kernels,
    }


def execution(
    module: Module,
    runs: Any,
    descriptor: dict,
    source_text: bytes | str = b"",
    *,
    source: str = "",
    level: int = 2,
    warmup: int = 1,
    bound: list[str] | None = None,
) -> dict:
    """The execution report of `runs` (`gdv.backends.c.profile.Runs`) of the final `module`:
    per timed op the median over the runs, its share of the whole entry's median, GFLOP/s, GB/s
    and percent of the roofline; sorted by time, longest first. `bound`: the parameters fixed
    before the runs (`Executable.bind`), written only when there are some."""
    roof = Roofline.from_descriptor(descriptor)
    costs = {c.index: c for c in module_costs(module)}
    lines = origins(source_text)
    durations = runs.durations()
    total = statistics.median(runs.totals().tolist()) / 1e9 if runs.entry else 0.0
    kernels = []
    for k, t in enumerate(runs.timed):
        c = costs[t.index]
        col = durations[:, k].tolist()
        median = statistics.median(col) / 1e9 if col else 0.0
        best = roof.seconds(c)
        kernels.append(
            {
                "index": t.index,
                "value": t.value,
                "op": t.op,
                "kind": c.kind,
                "dtype": c.dtype,
                "flops": c.flops,
                "bytes": c.bytes,
                "median_seconds": median,
                "min_seconds": min(col) / 1e9 if col else 0.0,
                "share": median / total if total > 0 else 0.0,
                "gflops": c.flops / median / 1e9 if median > 0 else 0.0,
                "gbs": c.bytes / median / 1e9 if median > 0 else 0.0,
                "predicted_seconds": best,
                "roofline_percent": 100.0 * best / median if median > 0 else 0.0,
                "bound": roof.bound(c),
                "source": source_of(c, module, lines),
            }
        )
    kernels.sort(key=lambda r: (-r["median_seconds"], r["index"]))
    # Per run, the kernels' timers against the whole entry (a sum of medians is no median).
    sums = durations.sum(axis=1).tolist() if runs.entry else []
    timed = statistics.median(sums) / 1e9 if sums else 0.0
    shares = [a / b for a, b in zip(sums, runs.totals().tolist(), strict=True) if b > 0]
    return {
        "schema": schema_id("execution"),
        "source": source,
        "target": "c",
        "level": level,
        "runs": len(runs.entry),
        "warmup": warmup,
        "machine": machine(descriptor),
        "total": {
            "median_seconds": total,
            "wall_median_seconds": statistics.median(runs.wall) / 1e9 if runs.wall else 0.0,
            "timed_seconds": timed,
            "timed_share": statistics.median(shares) if shares else 0.0,
            "predicted_seconds": sum(r["predicted_seconds"] for r in kernels),
        },
        "kernels": kernels,
    } | ({"bound": list(bound)} if bound else {})


def scaling(counts: list[int], executions: list[dict]) -> dict:
    """The scaling report of the execution reports `executions` of one program measured at the
    thread `counts` (in that order, interleaved: `gdv.backends.c.profile.run_threads`): per op
    its median at each count, its speedup from the first count to the last, and the seconds it
    loses against perfect scaling (its median at the last count minus the first count's median
    times first / last), ops sorted by the time lost, most first; and the same for the whole
    entry, with its parallel efficiency."""
    first = executions[0]
    ratio = counts[0] / counts[-1]

    def speedup(a: float, b: float) -> float | None:
        return a / b if b > 0 else None

    per = [{k["index"]: k for k in e["kernels"]} for e in executions]
    kernels = []
    for k in first["kernels"]:
        medians = [p[k["index"]]["median_seconds"] for p in per]
        kernels.append(
            {
                "index": k["index"],
                "value": k["value"],
                "op": k["op"],
                "kind": k["kind"],
                "median_seconds": medians,
                "speedup": speedup(medians[0], medians[-1]),
                "lost_seconds": medians[-1] - medians[0] * ratio,
                "source": k["source"],
            }
        )
    kernels.sort(key=lambda r: (-r["lost_seconds"], r["index"]))
    totals = [e["total"]["median_seconds"] for e in executions]
    up = speedup(totals[0], totals[-1])
    return {
        "schema": schema_id("scaling"),
        "source": first["source"],
        "target": first["target"],
        "level": first["level"],
        "runs": first["runs"],
        "warmup": first["warmup"],
        "machine": first["machine"],
        "threads": list(counts),
        "total": {
            "median_seconds": totals,
            "speedup": up,
            "efficiency": up * ratio if up is not None else None,
            "lost_seconds": totals[-1] - totals[0] * ratio,
        },
        "kernels": kernels,
        "executions": executions,
    }


def chrome_trace(runs: Any, report: dict) -> dict:
    """A Chrome-trace / Perfetto timeline of `runs`: one complete event (`ph: "X"`, `ts` and
    `dur` in microseconds) per run of the entry (thread 1) and per timed op in each run
    (thread 2), each op's `args` naming its source."""
    by_index = {k["index"]: k for k in report["kernels"]}
    events: list[dict] = [
        {"name": "process_name", "ph": "M", "pid": 1, "tid": 0, "args": {"name": "gdv (c)"}},
        {"name": "thread_name", "ph": "M", "pid": 1, "tid": 1, "args": {"name": "entry"}},
        {"name": "thread_name", "ph": "M", "pid": 1, "tid": 2, "args": {"name": "kernels"}},
    ]
    if not runs.entry:
        return {"traceEvents": events, "displayTimeUnit": "ms"}
    base = runs.entry[0][0]
    for r, ((start, end), ops) in enumerate(zip(runs.entry, runs.op_times, strict=True)):
        events.append(
            {
                "name": f"run {r}",
                "cat": "entry",
                "ph": "X",
                "ts": (start - base) / 1e3,
                "dur": (end - start) / 1e3,
                "pid": 1,
                "tid": 1,
                "args": {"run": r},
            }
        )
        for t, (a, b) in zip(runs.timed, ops.tolist(), strict=True):
            k = by_index[t.index]
            events.append(
                {
                    "name": f"%{t.value} ({k['kind']})",
                    "cat": k["kind"],
                    "ph": "X",
                    "ts": (a - base) / 1e3,
                    "dur": (b - a) / 1e3,
                    "pid": 1,
                    "tid": 2,
                    "args": {
                        "run": r,
                        "op": t.op,
                        "value": t.value,
                        "flops": k["flops"],
                        "bytes": k["bytes"],
                        "location": k["source"]["location"],
                        "origin": k["source"]["origin"],
                    },
                }
            )
    return {"traceEvents": events, "displayTimeUnit": "ms"}
