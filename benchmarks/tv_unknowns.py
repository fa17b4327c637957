"""How many pairs of the tv corpus (`tests/lit/tv/`) end `unknown` (issue 15, item 4).

Every pair is checked in both theories with the corpus test's per-query timeout
(`gdv.validate.corpus.CORPUS_TIMEOUT`, 4 s), exactly as `tests/validate/test_corpus.py` runs
it; the script counts the verdicts per theory (equivalent / not-equivalent / unknown), lists
the pairs that end `unknown` and those whose verdict differs from the expected one, and writes
the counts to `--out` (JSON) when given.

    python benchmarks/tv_unknowns.py [--timeout S] [--out FILE] [DIR]
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from collections import Counter
from pathlib import Path

from gdv.validate.corpus import CORPUS_TIMEOUT, DEFAULT_DIR, corpus_files, load_pair, run_pair


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python benchmarks/tv_unknowns.py")
    ap.add_argument("directory", nargs="?", default=str(DEFAULT_DIR))
    ap.add_argument("--timeout", type=float, default=CORPUS_TIMEOUT, help="seconds per query")
    ap.add_argument("--out", help="write the counts as JSON here")
    args = ap.parse_args(argv)
    counts: dict[str, Counter] = {"fp": Counter(), "real": Counter()}
    unknown: dict[str, list[str]] = {"fp": [], "real": []}
    unexpected: list[str] = []
    start = time.perf_counter()
    files = corpus_files(Path(args.directory))
    for path in files:
        pair = load_pair(path)
        for theory in ("fp", "real"):
            result, secs = run_pair(pair, theory, args.timeout)
            counts[theory][result.verdict] += 1
            if result.verdict == "unknown":
                unknown[theory].append(f"{pair.name} ({secs:.2f}s)")
            if result.verdict != pair.expected[theory]:
                unexpected.append(
                    f"{pair.name} [{theory}]: {result.verdict}, expected {pair.expected[theory]}"
                )
    total = time.perf_counter() - start
    print(f"{len(files)} pairs, timeout {args.timeout:g} s per query, {total:.1f} s in all")
    for theory in ("fp", "real"):
        c = counts[theory]
        print(
            f"{theory:4s}: equivalent {c['equivalent']}, not-equivalent {c['not-equivalent']}, "
            f"unknown {c['unknown']}"
        )
        for name in unknown[theory]:
            print(f"      unknown: {name}")
    for line in unexpected:
        print(f"unexpected: {line}")
    if args.out:
        data = {
            "pairs": len(files),
            "timeout_s": args.timeout,
            "counts": {t: dict(c) for t, c in counts.items()},
            "unknown": unknown,
            "unexpected": unexpected,
        }
        Path(args.out).write_text(json.dumps(data, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
