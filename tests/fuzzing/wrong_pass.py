"""A deliberately wrong external pass for the reducer's corpus: reads a module on stdin and
writes it back with one seeded bug, at the K-th place it applies (default the middle one).

    python tests/fuzzing/wrong_pass.py MODE [K]

Modes: swap-sub (sub(%a, %b) -> sub(%b, %a)), bump-constant (a float constant's value + 1),
max-to-min, relu-to-abs, exp-to-tanh. A module where the mode finds nothing comes back as it
was (so the pass is then right, and the case no longer fails)."""

from __future__ import annotations

import re
import sys

PATTERNS = {
    "swap-sub": (re.compile(r"= sub\((%[\w.]+), (%[\w.]+)\)"), lambda m: f"= sub({m[2]}, {m[1]})"),
    "bump-constant": (
        re.compile(r"constant\(\) \{value = (-?\d+\.\d+(?:e[-+]?\d+)?)\}"),
        lambda m: f"constant() {{value = {float(m[1]) + 1.0!r}}}",
    ),
    "max-to-min": (re.compile(r"= max\("), lambda m: "= min("),
    "relu-to-abs": (re.compile(r"= relu\("), lambda m: "= abs("),
    "exp-to-tanh": (re.compile(r"= exp\("), lambda m: "= tanh("),
}


def main() -> int:
    mode = sys.argv[1]
    pattern, repl = PATTERNS[mode]
    text = sys.stdin.read()
    hits = list(pattern.finditer(text))
    if not hits:
        sys.stdout.write(text)
        return 0
    k = int(sys.argv[2]) if len(sys.argv) > 2 else len(hits) // 2
    m = hits[min(k, len(hits) - 1)]
    sys.stdout.write(text[: m.start()] + repl(m) + text[m.end() :])
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
