"""The translation-validation corpus (`tests/lit/tv/`): src/tgt pairs with expected verdicts.

A pair is one file: the source function, a line `// -----`, the target function, and header
lines `// VERDICT fp: V` and `// VERDICT real: V` (V one of equivalent, not-equivalent,
unknown), as Alive2 writes the expected outcome into its test files.

`python -m gdv.validate.corpus [DIR] [--timeout S]` checks every pair in both theories and
prints each time, then the median and the slowest.
"""

from __future__ import annotations

import argparse
import re
import statistics
import sys
import time
from dataclasses import dataclass
from pathlib import Path

from gdv.api import parse
from gdv.ir.core import Function
from gdv.validate.equivalence import VERDICTS, EquivalenceResult, check_equivalence

SEPARATOR = re.compile(r"^// -----\s*$", re.MULTILINE)
VERDICT = re.compile(r"^// VERDICT (fp|real): (\S+)\s*$", re.MULTILINE)
DEFAULT_DIR = Path(__file__).resolve().parent.parent / "tests" / "lit" / "tv"
CORPUS_TIMEOUT = 4.0
"""Seconds per solver query in the corpus: a pair the solver cannot settle is unknown
after one such timeout, well within the 10 s each pair is allowed."""


@dataclass
class Pair:
    """One corpus entry."""

    name: str
    path: Path
    src: Function
    tgt: Function
    expected: dict[str, str]
    """theory -> expected verdict."""


def load_pair(path: Path) -> Pair:
    """Parse a pair file; raises ValueError when its header or separator is malformed."""
    text = path.read_text()
    parts = SEPARATOR.split(text)
    if len(parts) != 2:
        raise ValueError(f"{path}: expected one '// -----' separator, found {len(parts) - 1}")
    expected = dict(VERDICT.findall(parts[0]))
    if set(expected) != {"fp", "real"} or not set(expected.values()) <= set(VERDICTS):
        raise ValueError(f"{path}: needs '// VERDICT fp: V' and '// VERDICT real: V' headers")
    src = parse(parts[0], str(path)).entry
    tgt = parse(parts[1], f"{path} (target)").entry
    assert src is not None and tgt is not None
    return Pair(path.stem, path, src, tgt, expected)


def corpus_files(directory: Path = DEFAULT_DIR) -> list[Path]:
    """The pair files of the corpus, sorted by name."""
    return sorted(directory.glob("*.gdv"))


def run_pair(
    pair: Pair, theory: str, timeout: float = CORPUS_TIMEOUT
) -> tuple[EquivalenceResult, float]:
    """The verdict on one pair in one theory and the wall time it took."""
    start = time.perf_counter()
    result = check_equivalence(pair.src, pair.tgt, theory, timeout, names=(pair.name, pair.name))
    return result, time.perf_counter() - start


def main(argv: list[str] | None = None) -> int:
    """Check every pair in both theories; print times, the median and the slowest."""
    ap = argparse.ArgumentParser(prog="python -m gdv.validate.corpus")
    ap.add_argument("directory", nargs="?", default=str(DEFAULT_DIR))
    ap.add_argument("--timeout", type=float, default=CORPUS_TIMEOUT, help="seconds per query")
    args = ap.parse_args(argv)
    times: list[tuple[float, str]] = []
    wrong = 0
    for path in corpus_files(Path(args.directory)):
        pair = load_pair(path)
        for theory in ("fp", "real"):
            result, secs = run_pair(pair, theory, args.timeout)
            ok = result.verdict == pair.expected[theory]
            wrong += not ok
            times.append((secs, f"{pair.name} [{theory}]"))
            mark = "ok " if ok else "BAD"
            print(
                f"{mark} {secs:7.3f}s  {pair.name:40s} {theory:4s} {result.verdict}"
                + ("" if ok else f" (expected {pair.expected[theory]}: {result.reason})")
            )
    secs_only = [t for t, _ in times]
    slowest = max(times)
    print(
        f"\n{len(times) // 2} pairs, {len(times)} checks: "
        f"median {statistics.median(secs_only):.3f}s"
        f", slowest {slowest[0]:.3f}s ({slowest[1]}), total {sum(secs_only):.1f}s, "
        f"{wrong} unexpected verdict(s)"
    )
    return 1 if wrong else 0


if __name__ == "__main__":
    sys.exit(main())
