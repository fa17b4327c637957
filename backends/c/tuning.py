"""The autotune cache: a measured micro-kernel and blocking per machine, compiler and ISA.

`gdv tune` (`gdv.tune`) times a few candidate (MR, NV, KC, MC, NC) on a product of
representative size and stores the fastest here, as JSON in the C cache directory
(`toolchain.cache_dir()`), under a key made of `machine.fingerprint()` (CPU model, feature flags,
core count, compiler and version, every flag: the `GDV_C_ISA` variant's `-march` among them),
the generated vector width and `TUNE_VERSION`. Compiles use it only when `GDV_C_AUTOTUNE=1`
(opt-in): without it, or without a stored result, the analytical model of `gdv.ir.products`
decides, so a compile is reproducible from its inputs. The capability descriptor says which
source each dtype's numbers came from. A stored file that cannot be read (truncated, edited,
an older layout) is ignored with a warning, never an error: the model decides instead.
"""

from __future__ import annotations

import hashlib
import json
import os
import warnings
from pathlib import Path
from typing import Any

from gdv.backends.c.toolchain import cache_dir, compiler
from gdv.ir.products import Tuned

AUTOTUNE_ENV = "GDV_C_AUTOTUNE"
TUNE_VERSION = 1
"""Version of the stored layout and of the tuning method (a new one ignores older files)."""

TUNED_DTYPES = ("f32",)
"""The dtypes `gdv tune` measures (the others always follow the model)."""


class TuneCacheWarning(UserWarning):
    """A stored autotune result was ignored (unreadable or not for this machine)."""


def enabled() -> bool:
    """Whether compiles use a stored autotune result (`GDV_C_AUTOTUNE` is 1, true, yes or on)."""
    return os.environ.get(AUTOTUNE_ENV, "").strip().lower() in ("1", "true", "yes", "on")


def path(vector_bytes: int) -> Path:
    """Where this machine's, compiler's and ISA's result for `vector_bytes` vectors is kept."""
    from gdv.backends.c.machine import fingerprint

    text = "\0".join([str(TUNE_VERSION), *fingerprint(compiler()), str(vector_bytes)])
    return cache_dir() / f"tune-{hashlib.sha256(text.encode()).hexdigest()[:24]}.json"


def _tuned(entry: Any) -> Tuned:
    if not isinstance(entry, dict):
        raise ValueError("an entry is not an object")
    values = [entry.get(k) for k in ("mr", "nv", "kc", "mc", "nc")]
    if not all(isinstance(v, int) and not isinstance(v, bool) and v > 0 for v in values):
        raise ValueError("mr, nv, kc, mc and nc must be positive integers")
    mr, nv, kc, mc, nc = values
    return Tuned(mr, nv, kc, mc, nc)


def load(vector_bytes: int) -> dict[str, Tuned] | None:
    """The stored choice per dtype for `vector_bytes` vectors, or None (no file, or an
    unreadable one: then a `TuneCacheWarning` says why)."""
    p = path(vector_bytes)
    if not p.is_file():
        return None
    try:
        data = json.loads(p.read_text())
        if not isinstance(data, dict) or data.get("version") != TUNE_VERSION:
            raise ValueError(f"not a version {TUNE_VERSION} autotune result")
        if data.get("vector_bytes") != vector_bytes:
            raise ValueError(f"made for {data.get('vector_bytes')}-byte vectors")
        choice = data.get("choice")
        if not isinstance(choice, dict) or not choice:
            raise ValueError("no choice recorded")
        return {dtype: _tuned(entry) for dtype, entry in choice.items()}
    except (OSError, ValueError, UnicodeDecodeError) as e:
        warnings.warn(
            f"gdv: ignoring the autotune cache {p} ({e}); the analytical model decides "
            "(run `gdv tune` to measure again)",
            TuneCacheWarning,
            stacklevel=2,
        )
        return None


def store(vector_bytes: int, record: dict[str, Any]) -> Path:
    """Write `record` (with its `choice`; `version` and `vector_bytes` are set here) atomically."""
    p = path(vector_bytes)
    p.parent.mkdir(parents=True, exist_ok=True)
    out = {**record, "version": TUNE_VERSION, "vector_bytes": vector_bytes}
    tmp = p.with_suffix(f".{os.getpid()}.tmp")
    tmp.write_text(json.dumps(out, indent=1, sort_keys=True) + "\n")
    os.replace(tmp, p)
    return p


def active(vector_bytes: int) -> tuple[dict[str, Tuned], str]:
    """The stored choices compiles use now and where they come from: ({}, 'model') unless
    `GDV_C_AUTOTUNE` is on and a readable result exists."""
    if not enabled():
        return {}, "model"
    found = load(vector_bytes)
    if not found:
        return {}, f"model ({AUTOTUNE_ENV} is on but no autotune cache: run `gdv tune`)"
    return found, f"autotune cache {path(vector_bytes)}"
