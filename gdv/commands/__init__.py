"""The `gdv` subcommands, one module per group (see gdv.cli.COMMAND_MODULES).

The option value types below make a bad value a usage error (exit 3, naming the option) at
parse time, before any work starts: `--timeout nan` once reached `int(nan)` deep in the
discharger and exited 4 (issue 14)."""

from __future__ import annotations

import argparse
import math
import os
import tempfile

from gdv.ir.diagnostics import IRError, Loc, printable

MAX_SECONDS = 10**6
"""The longest timeout accepted (about 11 days): beyond it, a typo rather than a wish."""


def _value(text: str, convert, ok, want: str):
    try:
        value = convert(text)
    except ValueError:
        value = None
    if value is None or not ok(value):
        raise argparse.ArgumentTypeError(f"expected {want}, got {text!r}")
    return value


def seconds(text: str) -> float:
    """A finite, positive number of seconds (at most `MAX_SECONDS`)."""
    return _value(
        text,
        float,
        lambda v: math.isfinite(v) and 0 < v <= MAX_SECONDS,
        f"a positive, finite number of seconds (at most {MAX_SECONDS})",
    )


def positive_int(text: str) -> int:
    """An integer >= 1."""
    return _value(text, int, lambda v: v >= 1, "a whole number >= 1")


def finite_float(text: str) -> float:
    """A finite number."""
    return _value(text, float, math.isfinite, "a finite number")


def write_text_atomically(path: str, text: str) -> None:
    """Write through a temporary file renamed into place: a failure leaves `path` intact."""
    path = os.fspath(path)
    directory = os.path.dirname(os.path.abspath(path))
    try:
        fd, tmp = tempfile.mkstemp(suffix=".tmp", dir=directory)
    except OSError as e:
        raise IRError(
            f"cannot write {printable(path, 200)}: {e.strerror}", Loc(path, 1, 1)
        ) from None
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as f:
            f.write(text)
        os.replace(tmp, path)
    except OSError as e:
        os.unlink(tmp)
        raise IRError(
            f"cannot write {printable(path, 200)}: {e.strerror}", Loc(path, 1, 1)
        ) from None
