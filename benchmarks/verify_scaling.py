"""Independent checking against compiling, on MiniLM (all-MiniLM-L6-v2, torch.export path)
cut to 1, 2, 4 and 6 encoder layers (issue 15's acceptance).

    HF_HUB_OFFLINE=1 python benchmarks/verify_scaling.py [--layers 1 2 4 6] [--out FILE]

For each depth: export and import the encoder, write its textual IR, then (each as its own
`gdv` process, so every figure includes what a user waits for) a cold compile with
`--emit-evidence` (a fresh proof cache and a fresh C object cache), `gdv evidence verify
--solver z3` and `gdv evidence verify --solver all`, each verify with a fresh C object cache
too (the checker builds the C it reruns itself, as on a machine that never compiled it).
Prints and writes (`benchmarks/verify_scaling.json`) the seconds of each, the obligation
count and what the default verify reported.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent


def export(layers: int, path: Path) -> None:
    """Write MiniLM's encoder with its first `layers` layers as textual IR to `path`."""
    import torch

    import gdv
    from gdv.ir.printer import print_module

    sys.path.insert(0, str(HERE))
    from minilm import load_encoder

    encoder, inputs = load_encoder(layers)
    ep = torch.export.export(encoder, (), kwargs=inputs)
    module, _ = gdv.import_torch(ep)
    path.write_text(print_module(module), encoding="utf-8")


def timed(argv: list[str], env: dict) -> tuple[float, int, str]:
    t = time.perf_counter()
    p = subprocess.run(argv, capture_output=True, text=True, env=env)
    return time.perf_counter() - t, p.returncode, (p.stdout + p.stderr)[-2000:]


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--layers", type=int, nargs="+", default=[1, 2, 4, 6])
    ap.add_argument("--out", default=str(HERE / "verify_scaling.json"))
    ap.add_argument("--keep", help="keep the sources and bundles in this directory")
    args = ap.parse_args(argv)
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    gdv = [sys.executable, "-m", "gdv"]
    rows = []
    with tempfile.TemporaryDirectory(prefix="gdv-verify-") as tmp:
        root = Path(args.keep or tmp)
        root.mkdir(parents=True, exist_ok=True)
        for n in args.layers:
            source = root / f"minilm-{n}.gdv"
            export(n, source)
            bundle = root / f"minilm-{n}.evidence"
            env = dict(
                os.environ,
                XDG_CACHE_HOME=str(root / f"cache-{n}"),
                GDV_C_CACHE=str(root / f"c-cache-{n}-compile"),
            )
            compile_s, rc, out = timed(
                [*gdv, "compile", str(source), "--emit-evidence", str(bundle)], env
            )
            row = {"layers": n, "compile_s": round(compile_s, 2), "compile_rc": rc}
            obligations = json.loads((bundle / "manifest.json").read_text())["obligations"]
            row["obligations"] = len(obligations)
            for solver in ("z3", "all"):
                env["GDV_C_CACHE"] = str(root / f"c-cache-{n}-verify-{solver}")
                s, rc, out = timed(
                    [*gdv, "evidence", "verify", str(bundle), "--solver", solver], env
                )
                row[f"verify_{solver}_s"] = round(s, 2)
                row[f"verify_{solver}_rc"] = rc
                if solver == "z3":
                    row["verify_report"] = out.strip().splitlines()[-12:]
            rows.append(row)
            print(json.dumps(row), flush=True)
    result = {
        "command": "HF_HUB_OFFLINE=1 python benchmarks/verify_scaling.py",
        "date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()),
        "cpus": os.cpu_count(),
        "rows": rows,
    }
    Path(args.out).write_text(json.dumps(result, indent=1) + "\n")
    print(f"wrote {args.out}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
