"""The trusted base that evidence/README.md lists, file by file with line counts, is the one in
the tree: a change to a trusted file must show in the README (and so in review).

    python tests/evidence/test_trusted_base.py    # print the table for the README
"""

from __future__ import annotations

import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]

GROUPS: list[tuple[str, str, list[str]]] = [
    (
        "replayer",
        "rebuilds each stage from the one before by its certificate",
        ["evidence/replay.py"],
    ),
    (
        "checker",
        "the checks and their order; reading and hashing the bundle; solver drivers; policy",
        [
            "evidence/verify.py",
            "evidence/bundle.py",
            "evidence/solvers.py",
            "evidence/policy.py",
            "evidence/schema/manifest-2.json",
            "evidence/schema/reports-*.json",
        ],
    ),
    (
        "partition checker",
        "a partition bundle's checks: composition of the per-op claims, the SPMD encoding "
        "symbolic in the rank, segment slicing",
        [
            "evidence/partition.py",
            "evidence/schema/manifest-partition-1.json",
            "validate/spmd.py",
            "backends/mpi/segments.py",
        ],
    ),
    (
        "cross-target checker",
        "a cross-target bundle's checks: one source, each target's bundle verified, the "
        "cross-target table rerun and compared",
        ["evidence/cross_target.py", "evidence/schema/manifest-cross-target-1.json"],
    ),
    (
        "MPI runtime",
        "runs each collective in its declared order from point-to-point messages (differential "
        "tests against the simulation)",
        ["backends/mpi/runtime.c", "backends/mpi/collective.py"],
    ),
    (
        "IR",
        "grammar, parser, printer, verifier, types, op specs",
        ["grammar/gdv.lark", "ir/*.py", "ir/ops/*.py"],
    ),
    (
        "SMT encoding",
        "every op's SMT meaning, the queries, their canonical text, schedules and arenas",
        [
            "validate/semantics/*.py",
            "validate/equivalence.py",
            "validate/discharge.py",
            "validate/schedules.py",
            "validate/lemmas.py",
        ],
    ),
    (
        "C printer",
        "loop-stage IR to C; trusted to follow the proved schedule and plan (differential tests)",
        ["backends/c/*.py"],
    ),
    (
        "reference interpreter",
        "the executable meaning conformance is checked against",
        ["backends/reference/*.py"],
    ),
    (
        "error bounds",
        "recomputed from stage 0 and compared",
        ["validate/bounds/*.py"],
    ),
]
"""Besides these: Z3 and cvc5 (their versions are in each bundle's `tools`), the C compiler
that builds the artifact, Python and numpy."""


def files(patterns: list[str]) -> list[Path]:
    out: list[Path] = []
    for pattern in patterns:
        found = sorted(REPO.glob(pattern))
        assert found, f"no trusted file matches {pattern}"
        out += [p for p in found if p.name != "__pycache__"]
    return out


def lines(path: Path) -> int:
    return len(path.read_bytes().splitlines())


def table() -> str:
    rows = ["| part | what | files | lines |", "|---|---|---|---|"]
    total = 0
    for name, what, patterns in GROUPS:
        fs = files(patterns)
        n = sum(lines(p) for p in fs)
        total += n
        listed = ", ".join(f"`{p.relative_to(REPO)}` ({lines(p)})" for p in fs)
        rows.append(f"| {name} | {what} | {listed} | {n} |")
    rows.append(f"| **total** | | | **{total}** |")
    return "\n".join(rows)


def test_the_readme_lists_the_trusted_base_as_it_is() -> None:
    readme = (REPO / "evidence" / "README.md").read_text()
    assert table() in readme, (
        "evidence/README.md's trusted-base table is out of date; regenerate it with "
        "`python tests/evidence/test_trusted_base.py`"
    )


if __name__ == "__main__":
    sys.stdout.write(table() + "\n")
