"""Flag benchmark regressions: any workload whose latest result is more than 10% slower than
its best on the same machine fingerprint (`benchmarks/history/`, see `history.py`).

    python benchmarks/check_regressions.py [--history DIR] [--threshold 0.10]

Exit status: 0 no regression, 1 regressions (listed), 2 an unreadable history file.
"""

from __future__ import annotations

import argparse
import json
import sys
from dataclasses import dataclass
from pathlib import Path

HERE = Path(__file__).resolve().parent


@dataclass(frozen=True)
class Regression:
    """A workload's latest result against its best on one fingerprint."""

    fingerprint: str
    workload: str
    latest: float
    best: float
    best_date: str

    @property
    def slowdown(self) -> float:
        return self.latest / self.best - 1.0

    def __str__(self) -> str:
        return (
            f"{self.fingerprint}: {self.workload}: {self.latest * 1e3:.4g} ms, "
            f"{100 * self.slowdown:.1f}% slower than its best {self.best * 1e3:.4g} ms "
            f"({self.best_date})"
        )


def regressions(data: dict, threshold: float = 0.10) -> list[Regression]:
    """The workloads of one history file whose latest result exceeds best * (1 + threshold)."""
    fp = data["machine"]["id"]
    series: dict[str, list[tuple[float, str]]] = {}
    for run in data["runs"]:
        for workload, seconds in run["results"].items():
            series.setdefault(workload, []).append((float(seconds), run["date"]))
    found = []
    for workload, values in sorted(series.items()):
        latest = values[-1][0]
        best, when = min(values, key=lambda v: v[0])
        if latest > best * (1.0 + threshold):
            found.append(Regression(fp, workload, latest, best, when))
    return found


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--history", default=str(HERE / "history"), help="the history folder")
    ap.add_argument("--threshold", type=float, default=0.10, help="allowed slowdown (0.10)")
    args = ap.parse_args(argv)
    files = sorted(Path(args.history).glob("*.json"))
    found: list[Regression] = []
    workloads = 0
    for path in files:
        try:
            data = json.loads(path.read_text())
            found += regressions(data, args.threshold)
            workloads += len({w for r in data["runs"] for w in r["results"]})
        except (OSError, ValueError, KeyError, TypeError) as e:
            print(f"{path}: not a history file: {e}", file=sys.stderr)
            return 2
    if found:
        print(
            f"{len(found)} workload(s) more than {100 * args.threshold:g}% slower than their best:"
        )
        for r in found:
            print(f"  {r}")
        return 1
    print(f"no regressions: {workloads} workload(s) on {len(files)} machine fingerprint(s)")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
