"""Hooks: Safety & Formal Verification's say in a compile (contract in evidence/README.md).

Python hooks are entry points in the group `gdv.hooks`. Each loads to an object (a module, a
class instance, ...) with any of `on_obligation(result: dict) -> bool | None` and
`on_bundle(path: pathlib.Path, manifest: dict) -> bool | None`; returning False vetoes, and so
does raising (fail closed). External hooks (`gdv compile --hook CMD`) are executables run as
`CMD BUNDLE_DIR` after the bundle is written; a non-zero exit status vetoes.
"""

from __future__ import annotations

import shlex
import subprocess
from dataclasses import dataclass
from importlib.metadata import entry_points
from pathlib import Path
from typing import Any

from gdv.evidence.bundle import EvidenceError

GROUP = "gdv.hooks"
EXTERNAL_TIMEOUT = 120.0


@dataclass(frozen=True)
class Veto:
    """A hook that said no, and why."""

    hook: str
    reason: str

    def __str__(self) -> str:
        return f"hook {self.hook} vetoed the compile: {self.reason}"


def python_hooks() -> list[tuple[str, Any]]:
    """The installed `gdv.hooks` entry points, loaded, in name order."""
    hooks = []
    for ep in sorted(entry_points(group=GROUP), key=lambda e: e.name):
        try:
            hooks.append((ep.name, ep.load()))
        except Exception as e:  # a broken hook must not pass silently
            raise EvidenceError(f"hook {ep.name} ({ep.value}) cannot be loaded: {e}") from None
    return hooks


def _ask(name: str, fn: Any, *args: Any) -> Veto | None:
    try:
        answer = fn(*args)
    except Exception as e:
        return Veto(name, f"raised {type(e).__name__}: {e}")
    return Veto(name, "returned False") if answer is False else None


def on_obligations(hooks: list[tuple[str, Any]], results: list[dict]) -> Veto | None:
    """Call every hook's `on_obligation` on every result; the first veto, if any."""
    for name, hook in hooks:
        fn = getattr(hook, "on_obligation", None)
        if fn is None:
            continue
        for result in results:
            veto = _ask(name, fn, result)
            if veto is not None:
                return Veto(name, f"{veto.reason} on {result['id']}")
    return None


def on_bundle(hooks: list[tuple[str, Any]], path: Path, manifest: dict) -> Veto | None:
    """Call every hook's `on_bundle`; the first veto, if any."""
    for name, hook in hooks:
        fn = getattr(hook, "on_bundle", None)
        if fn is not None:
            veto = _ask(name, fn, path, manifest)
            if veto is not None:
                return veto
    return None


def run_external(command: str, path: Path, timeout: float = EXTERNAL_TIMEOUT) -> Veto | None:
    """Run `command BUNDLE_DIR`; a non-zero exit status (or failing to run) vetoes."""
    argv = [*shlex.split(command), str(path)]
    try:
        done = subprocess.run(argv, capture_output=True, text=True, timeout=timeout)
    except FileNotFoundError:
        return Veto(command, "not found")
    except PermissionError:
        return Veto(command, "not executable")
    except subprocess.TimeoutExpired:
        return Veto(command, f"did not finish within {timeout:g} s")
    if done.returncode != 0:
        said = (done.stderr or done.stdout).strip().splitlines()
        tail = f": {said[-1][:200]}" if said else ""
        return Veto(command, f"exit status {done.returncode}{tail}")
    return None
