"""How `gdv plan` scales with depth: the Llama-like decoder (benchmarks/llama_like.py) cut to
1, 4, 8, 16 and 32 layers, planned on an 8x8 mesh (issue 17, item 4).

    python benchmarks/plan_scaling.py [--layers 1 4 8 16 32] [--mesh data=8,model=8]
        [--apply] [--out FILE]

Each depth runs `gdv plan --json` as its own process (so every figure includes what a user
waits for: imports, parsing, building and solving the integer program, partitioning on the
plan, and with `--apply` proving every claim) and records its wall seconds, the solver's
figures and the plan's predictions. Prints a table and writes `benchmarks/plan_scaling.json`.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import subprocess
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

from llama_like import decoder  # noqa: E402


def run(layers: int, mesh: str, apply: bool) -> dict:
    with tempfile.TemporaryDirectory(prefix="gdv-plan-") as d:
        prog = Path(d) / f"llama{layers}.gdv"
        prog.write_text(decoder(layers=layers))
        cmd = [sys.executable, "-m", "gdv", "plan", str(prog), "--mesh", mesh, "--json"]
        if apply:
            cmd.append("--apply")
        t = time.perf_counter()
        r = subprocess.run(cmd, capture_output=True, text=True, timeout=3600)
        wall = time.perf_counter() - t
    if r.returncode != 0:
        return {"layers": layers, "exit": r.returncode, "error": r.stderr.strip()[-500:]}
    report = json.loads(r.stdout)
    sv, pr = report["solver"], report["predicted"]
    out = {
        "layers": layers,
        "exit": 0,
        "wall_s": round(wall, 2),
        "variables": sv["variables"],
        "rows": sv["rows"],
        "build_s": sv["build_s"],
        "solve_s": sv["solve_s"],
        "step_s": pr["step_s"],
        "communication_s": pr["communication_s"],
        "memory_bytes_per_device": pr["memory_bytes_per_device"],
        "collectives": len(report["collectives"]),
        "parallelism": report["parallelism"],
        "network_source": report["network"]["source"],
    }
    if apply:
        claims = report["claims"]
        out["claims"] = len(claims)
        out["claims_proved"] = sum(1 for c in claims if c["verdict"] == "proved")
    return out


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--layers", type=int, nargs="+", default=[1, 4, 8, 16, 32])
    ap.add_argument("--mesh", default="data=8,model=8")
    ap.add_argument("--apply", action="store_true", help="also prove every claim")
    ap.add_argument("--out", default=str(HERE / "plan_scaling.json"))
    a = ap.parse_args(argv)
    rows = []
    print(
        f"{'layers':>6} {'wall s':>8} {'solve s':>8} {'variables':>10} {'step s':>8} {'GiB/dev':>8}"
    )
    for n in a.layers:
        row = run(n, a.mesh, a.apply)
        rows.append(row)
        if row["exit"]:
            print(f"{n:>6} exit {row['exit']}: {row['error']}")
            continue
        print(
            f"{n:>6} {row['wall_s']:>8.2f} {row['solve_s']:>8.2f} {row['variables']:>10} "
            f"{row['step_s']:>8.3f} {row['memory_bytes_per_device'] / 2**30:>8.3f}"
        )
    result = {
        "benchmark": "gdv plan on the Llama-like decoder (benchmarks/llama_like.py)",
        "mesh": a.mesh,
        "apply": a.apply,
        "machine": {"cpu": platform.processor() or platform.machine(), "cores": os.cpu_count()},
        "load_average": os.getloadavg(),
        "date": time.strftime("%Y-%m-%d", time.gmtime()),
        "runs": rows,
    }
    Path(a.out).write_text(json.dumps(result, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
