"""The benchmark history: results kept per machine fingerprint (issue 16, item 5).

`benchmarks/history/<fingerprint>.json` holds one machine's results, run after run:

    {"machine": {"id", "cpu", "isa", "cores", "compiler", "compiler_sha256"},
     "runs": [{"date", "suite", "command", "results": {"SUITE/WORKLOAD": seconds, ...}}, ...]}

The fingerprint is the first 16 hex digits of the SHA-256 of the CPU model, its ISA flags, the
core count and the C compiler's version line: results are compared only with results of the
same machine and compiler. `record(...)` appends a run; `benchmarks/side_by_side.py` records
gdv's medians with `record_side_by_side`; `python benchmarks/check_regressions.py` flags any
workload whose latest result is more than 10% slower than its best on the same fingerprint.
"""

from __future__ import annotations

import hashlib
import json
import os
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
HISTORY = HERE / "history"


def fingerprint() -> dict:
    """This machine's fingerprint: CPU model, ISA flags, cores and compiler version."""
    from gdv.backends.c.machine import _cpu_model
    from gdv.backends.c.toolchain import compiler, detect, isa_features

    cpu, isa, cores = _cpu_model(), isa_features(), os.cpu_count() or 1
    version = detect(compiler())["version"]
    return machine_entry(cpu, isa, cores, version)


def machine_entry(cpu: str, isa: list[str], cores: int, compiler: str) -> dict:
    """The fingerprint of a machine described by these four facts."""
    compiler_sha = hashlib.sha256(compiler.encode()).hexdigest()
    key = "\0".join([cpu, ",".join(isa), str(cores), compiler_sha])
    return {
        "id": hashlib.sha256(key.encode()).hexdigest()[:16],
        "cpu": cpu,
        "isa": list(isa),
        "cores": int(cores),
        "compiler": compiler,
        "compiler_sha256": compiler_sha,
    }


def record(
    suite: str,
    results: dict[str, float],
    *,
    command: str = "",
    machine: dict | None = None,
    directory: Path = HISTORY,
    date: str | None = None,
) -> Path:
    """Append a run of `suite` (workload -> seconds) to its machine's history file."""
    machine = machine or fingerprint()
    directory = Path(directory)
    directory.mkdir(parents=True, exist_ok=True)
    path = directory / f"{machine['id']}.json"
    data = json.loads(path.read_text()) if path.is_file() else {"machine": machine, "runs": []}
    data["runs"].append(
        {
            "date": date or time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()),
            "suite": suite,
            "command": command,
            "results": {f"{suite}/{k}": float(v) for k, v in sorted(results.items())},
        }
    )
    tmp = path.with_suffix(f".{os.getpid()}.tmp")
    tmp.write_text(json.dumps(data, indent=1, sort_keys=True) + "\n")
    os.replace(tmp, path)
    return path


def record_side_by_side(result: dict, directory: Path = HISTORY) -> Path:
    """Record gdv's median time per workload of a `side_by_side.py` result."""
    times = {
        row["workload"]: row["engines"]["gdv-c"]["median_ms"] / 1e3
        for row in result["rows"]
        if "median_ms" in row["engines"].get("gdv-c", {})
    }
    return record("side_by_side", times, command=result.get("command", ""), directory=directory)
