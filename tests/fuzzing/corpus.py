"""The reducer's corpus (issue 18): layered programs of 50 to 1,000 ops, each paired with a
wrong external pass (tests/fuzzing/wrong_pass.py) that the proof refutes, so the case fails
with signature `refuted:external-1/whole-function`.

`python tests/fuzzing/corpus.py DIR` writes the cases; benchmarks/reduce_corpus.py reduces
them and reports the acceptance figures."""

from __future__ import annotations

import random
import sys
from pathlib import Path

WRONG_PASS = Path(__file__).with_name("wrong_pass.py")
MODES = ("swap-sub", "bump-constant", "max-to-min", "relu-to-abs", "exp-to-tanh")


def layered(blocks: int, width: int = 32, rows: int = 16, seed: int = 0) -> str:
    """A residual MLP-like stack of 14-op blocks (a product, a bias, sub, a scale constant,
    relu, exp, max, a row max subtracted, a residual add, tanh: values stay in [-1, 1], so no
    block overflows and a wrong rewrite anywhere shows in the output)."""
    rnd = random.Random(seed)
    params = [f"%x: f32[{rows},{width}] {{range = [-1.0, 1.0]}}"]
    lines = []
    h = "%x"
    for b in range(blocks):
        w, c = f"%w{b}", f"%c{b}"
        params.append(f"{w}: f32[{width},{width}] {{range = [-0.1, 0.1]}}")
        params.append(f"{c}: f32[{width}] {{range = [-0.1, 0.1]}}")
        scale = rnd.choice([0.5, 0.25, 0.125])
        t = f"f32[{rows},{width}]"
        lines += [
            f"  %m{b} = matmul({h}, {w}) : {t}",
            f"  %cb{b} = broadcast({c}) {{dims = [1]}} : {t}",
            f"  %a{b} = add(%m{b}, %cb{b}) : {t}",
            f"  %s{b} = sub(%a{b}, {h}) : {t}",
            f"  %k{b} = constant() {{value = {scale!r}}} : {t}",
            f"  %q{b} = mul(%s{b}, %k{b}) : {t}",
            f"  %r{b} = relu(%q{b}) : {t}",
            f"  %e{b} = exp(%r{b}) : {t}",
            f"  %z{b} = max(%e{b}, %a{b}) : {t}",
            f"  %n{b} = reduce_max(%z{b}) {{axes = [1]}} : f32[{rows}]",
            f"  %nb{b} = broadcast(%n{b}) {{dims = [0]}} : {t}",
            f"  %o{b} = sub(%z{b}, %nb{b}) : {t}",
            f"  %t{b} = tanh(%o{b}) : {t}",
            f"  %j{b} = constant() {{value = 0.1}} : {t}",
            f"  %d{b} = mul(%t{b}, %j{b}) : {t}",
            f"  %y{b} = add({h}, %d{b}) : {t}",
        ]
        h = f"%y{b}"
    head = ",\n           ".join(params)
    return (
        f"func @main({head}) -> f32[{rows},{width}] {{\n"
        + "\n".join(lines)
        + f"\n  return {h}\n}}\n"
    )


def cases() -> list[tuple[str, str, str]]:
    """(name, program text, external pass command): 10 cases, 64 to 1,120 ops."""
    out = []
    for i, (blocks, mode) in enumerate(
        [
            (4, "swap-sub"),
            (7, "bump-constant"),
            (14, "max-to-min"),
            (21, "relu-to-abs"),
            (28, "exp-to-tanh"),
            (35, "swap-sub"),
            (42, "bump-constant"),
            (49, "max-to-min"),
            (56, "relu-to-abs"),
            (70, "exp-to-tanh"),
        ]
    ):
        cmd = f"{sys.executable} {WRONG_PASS} {mode}"
        out.append((f"case{i:02d}-{mode}-{blocks * 16}ops", layered(blocks, seed=i), cmd))
    return out


if __name__ == "__main__":
    d = Path(sys.argv[1])
    d.mkdir(parents=True, exist_ok=True)
    for name, text, cmd in cases():
        (d / f"{name}.gdv").write_text(text)
        (d / f"{name}.cmd").write_text(cmd + "\n")
    print(f"wrote {len(cases())} cases to {d}")
