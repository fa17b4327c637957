"""Reduced cases as lit tests (`tests/lit/regress/<signature-slug>.gdv`).

```
// REGRESS: gdv reduce of NAME (sha256 HASH): N ops -> M ops
// RUN: gdv signature %s --target c -O2 --passes fold-constants
// SIGNATURE: refuted:fold-constants/fold      <- what the case showed when reduced
// EXPECT: refuted:fold-constants/fold         <- what it must show (`clean` once fixed)
// INPUTS: NAME.npz                            <- only when the signature needs inputs
func @main(...) { ... }
```

A case found by a bug stays as it was reduced (EXPECT = SIGNATURE) until the bug is fixed;
the fix changes EXPECT to `clean`, and from then on the test is the regression. A case whose
signature is the right answer (a wrong external pass that the proof must refute) keeps its
signature as EXPECT.
"""

from __future__ import annotations

import os
import shlex
from pathlib import Path

import numpy as np

from gdv.fuzzing.signature import Case, CaseOptions, parse_case_text, slug
from gdv.ir.diagnostics import IRError, Loc


def render(result, source_name: str, inputs_name: str | None = None) -> str:
    """The lit text of a reduction `result` (`gdv.fuzzing.reduce.Result`)."""
    import hashlib

    digest = hashlib.sha256(result.original.text().encode()).hexdigest()[:16]
    argv = " ".join(shlex.quote(a) for a in result.case.options.argv())
    lines = [
        f"// REGRESS: gdv reduce of {source_name} (sha256 {digest}): "
        f"{result.original.ops} ops -> {result.case.ops} ops",
        f"// RUN: gdv signature %s {argv}",
        f"// SIGNATURE: {result.signature}",
        f"// EXPECT: {result.signature}",
    ]
    if inputs_name:
        lines.append(f"// INPUTS: {inputs_name}")
    text = result.case.text()
    return "\n".join(lines) + "\n" + text + ("" if text.endswith("\n") else "\n")


def write_lit(result, directory: str | os.PathLike, source_name: str) -> Path:
    """Write the case under `directory` as `<slug>.gdv` (never over an existing file:
    `<slug>-2.gdv`, ...), with its inputs beside it when the signature needs them."""
    from gdv.fuzzing.reduce import INPUT_KINDS

    d = Path(directory)
    d.mkdir(parents=True, exist_ok=True)
    base = slug(result.signature)
    k, path = 1, d / f"{base}.gdv"
    while path.exists():
        k += 1
        path = d / f"{base}-{k}.gdv"
    needs_inputs = result.signature.split(":", 1)[0] in INPUT_KINDS
    inputs_name = None
    if needs_inputs and result.case.inputs is not None:
        inputs_name = path.with_suffix(".npz").name
        from gdv.commands.run import _write_npz_atomically

        _write_npz_atomically(str(path.with_suffix(".npz")), result.case.inputs)
    from gdv.commands import write_text_atomically

    write_text_atomically(str(path), render(result, source_name, inputs_name))
    return path


HEADER_KEYS = ("REGRESS", "RUN", "SIGNATURE", "EXPECT", "INPUTS")


def header(text: str, key: str) -> str | None:
    for line in text.splitlines():
        if line.startswith(f"// {key}:"):
            return line.split(":", 1)[1].strip()
    return None


def options_from_argv(argv: list[str]) -> CaseOptions:
    """The inverse of `CaseOptions.argv` (the RUN line's options)."""
    import argparse

    p = argparse.ArgumentParser(add_help=False)
    add_case_options(p)
    return case_options(p.parse_args(argv))


def add_case_options(p) -> None:
    """The compile options a signature depends on, shared by `gdv reduce`, `gdv signature`
    and `gdv fuzz`."""
    from gdv.commands import seconds

    p.add_argument("--target", default="c", help="the target (default c)")
    p.add_argument(
        "-O", dest="level", type=int, choices=(0, 1, 2, 3), default=2, help="level (default 2)"
    )
    p.add_argument("--reassociate", action="store_true", help="as gdv compile --reassociate")
    p.add_argument("--fast-math", action="store_true", help="as gdv compile --fast-math")
    p.add_argument(
        "--external-pass", action="append", default=[], metavar="CMD", help="as gdv compile"
    )
    p.add_argument(
        "--timeout", type=seconds, default=10.0, metavar="S", help="seconds per solver query"
    )
    p.add_argument(
        "--passes",
        default=None,
        metavar="P,Q",
        help="run these passes instead of the level's pipeline (or pipeline:N, its first N)",
    )


def case_options(args) -> CaseOptions:
    passes = None
    if args.passes is not None:
        passes = tuple(x.strip() for x in args.passes.split(",") if x.strip())
    return CaseOptions(
        target=args.target,
        level=args.level,
        reassociate=args.reassociate,
        fast_math=args.fast_math,
        external_passes=tuple(args.external_pass),
        timeout=args.timeout,
        passes=passes,
    )


def load_lit(path: str | os.PathLike) -> tuple[Case, str]:
    """A regress file's case (its RUN options and inputs) and its EXPECT line."""
    path = Path(path)
    text = path.read_text()
    run, expect = header(text, "RUN"), header(text, "EXPECT")
    if run is None or expect is None:
        raise IRError("a regress case needs // RUN: and // EXPECT: lines", Loc(str(path), 1, 1))
    words = shlex.split(run)
    if words[:3] != ["gdv", "signature", "%s"]:
        raise IRError("the RUN line must be `gdv signature %s ...`", Loc(str(path), 1, 1))
    options = options_from_argv(words[3:])
    keys = tuple(f"// {k}:" for k in HEADER_KEYS)
    body = "\n".join(line for line in text.splitlines() if not line.startswith(keys)) + "\n"
    inputs = None
    name = header(text, "INPUTS")
    if name:
        with np.load(path.parent / name, allow_pickle=False) as data:
            inputs = {k: data[k] for k in data.files}
    return Case(parse_case_text(body, str(path)), inputs, options), expect
