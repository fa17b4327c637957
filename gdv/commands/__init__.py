"""The `gdv` subcommands, one module per group (see gdv.cli.COMMAND_MODULES).

The option value types below make a bad value a usage error (exit 3, naming the option) at
parse time, before any work starts: `--timeout nan` once reached `int(nan)` deep in the
discharger and exited 4 (issue 14)."""

from __future__ import annotations

import argparse
import math

MAX_SECONDS = 10**6
"""The longest timeout accepted (about 11 days): beyond it, a typo rather than a wish."""


def seconds(text: str) -> float:
    """A finite, positive number of seconds (at most `MAX_SECONDS`)."""
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a number of seconds, got {text!r}") from None
    if not math.isfinite(value) or not 0 < value <= MAX_SECONDS:
        raise argparse.ArgumentTypeError(
            f"expected a positive, finite number of seconds (at most {MAX_SECONDS}), got {text!r}"
        )
    return value


def positive_int(text: str) -> int:
    """An integer >= 1."""
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a whole number, got {text!r}") from None
    if value < 1:
        raise argparse.ArgumentTypeError(f"expected a whole number >= 1, got {text!r}")
    return value


def finite_float(text: str) -> float:
    """A finite number."""
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a number, got {text!r}") from None
    if not math.isfinite(value):
        raise argparse.ArgumentTypeError(f"expected a finite number, got {text!r}")
    return value
