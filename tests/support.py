"""Helpers shared by test files (importable as `support`: tests/conftest.py puts this folder
on sys.path, since pytest runs with --import-mode=importlib and test folders are no packages)."""

from __future__ import annotations

import importlib.util
import math
import sys
from dataclasses import dataclass
from pathlib import Path
from types import ModuleType

import ml_dtypes
import numpy as np
from hypothesis import strategies as st
from hypothesis.extra import numpy as hnp

from gdv.ir.core import Module
from gdv.ir.dtypes import DType, from_numpy
from gdv.passes.base import Pass, PassResult, Rewrite, Site, rewrite_module

TESTS = Path(__file__).resolve().parent


def load_module(relative: str) -> ModuleType:
    """The helper module at `tests/<relative>` (e.g. "ir/strategies.py"), loaded once."""
    path = TESTS / relative
    key = "gdv_tests_" + relative.removesuffix(".py").replace("/", "_")
    if key not in sys.modules:
        spec = importlib.util.spec_from_file_location(key, path)
        module = importlib.util.module_from_spec(spec)
        sys.modules[key] = module
        spec.loader.exec_module(module)
    return sys.modules[key]


def _wrong_rule(site: Site) -> Rewrite | None:
    """A deliberately wrong rule: x + 0.0 -> x claimed bit-exact (false for x = -0.0)."""
    op = site.op
    if op.name == "add":
        c = site.producer(1)
        if c is not None and c.name == "constant" and c.attrs["value"] == 0.0:
            return Rewrite("add-zero-bitexact", [], op.operands[0], [c, op])
    return None


@dataclass(frozen=True)
class WrongPass(Pass):
    """A pass with one wrong rule, for tests that the proofs catch miscompiles."""

    name = "wrong-pass"

    def run(self, module: Module) -> PassResult:
        return rewrite_module(module, self.name, [_wrong_rule])


# --- values for backend conformance tests ------------------------------------------------


def special_values(dtype: DType) -> np.ndarray:
    """Every float dtype's edge values: zeros, infinities, NaN, its largest, smallest normal
    and subnormal values, and values that overflow or underflow when narrowed."""
    fi = ml_dtypes.finfo(dtype.np)
    big, tiny, sub = float(fi.max), float(fi.tiny), float(fi.smallest_subnormal)
    vals = [0.0, -0.0, np.inf, -np.inf, np.nan, 1.0, -1.0, 0.5, big, -big, tiny, -sub, sub]
    vals += [3 * sub, -tiny / 2, 1e308, 65520.0]  # 1e308 and 65520: infinities when narrowed
    with np.errstate(all="ignore"):
        return np.array(vals, dtype=np.float64).astype(dtype.np)


def sprinkle_specials(x: np.ndarray, every: int = 5) -> np.ndarray:
    """`x` (a float array, changed in place and returned) with every `every`-th element, in
    row-major order, replaced by `special_values` of its dtype in turn."""
    flat = x.reshape(-1)
    special = special_values(from_numpy(x.dtype))
    with np.errstate(all="ignore"):
        flat[::every] = np.resize(special, flat[::every].size).astype(x.dtype)
    return x


@st.composite
def float_array(draw, dtype: DType, shape: tuple[int, ...]) -> np.ndarray:
    """Seeded normal values at a drawn scale, some positions replaced by special values."""
    rng = np.random.default_rng(draw(st.integers(0, 2**32 - 1)))
    scale = draw(st.sampled_from([1.0, 1e-3, 1e4, 1e30]))
    with np.errstate(all="ignore"):
        x = np.array(rng.standard_normal(shape) * scale, dtype=np.float64, ndmin=0)
        x = x.astype(dtype.np)
    special = special_values(dtype)
    share = draw(st.sampled_from([0.0, 0.2, 0.6]))
    mask = np.asarray(rng.random(shape) < share)
    x[mask] = special[np.asarray(rng.integers(0, len(special), shape))][mask]
    return x


def array_of(dtype: DType, shape: tuple[int, ...]) -> st.SearchStrategy:
    """Arrays of `dtype`: floats from `float_array`, booleans, or any integers."""
    if dtype.is_float:
        return float_array(dtype, shape)
    if dtype is DType.I1:
        return hnp.arrays(np.bool_, shape)
    return hnp.arrays(dtype.np, shape)


def ir_type(dtype: DType, shape: tuple[int, ...]) -> str:
    """The IR's spelling of a tensor type, e.g. `f32[2,3]`."""
    return f"{dtype}[{','.join(map(str, shape))}]"


# --- evidence bundles, for the tests that tamper with them -------------------------------


def verify_cli(capsys, *args) -> tuple[int, str, str]:
    """`gdv evidence verify ARGS`: exit status, stdout, stderr."""
    from gdv.cli import main

    rc = main(["evidence", "verify", *map(str, args)])
    captured = capsys.readouterr()
    return rc, captured.out, captured.err


def manifest_of(bundle: Path) -> dict:
    import json

    return json.loads((bundle / "manifest.json").read_text())


def save_manifest(bundle: Path, manifest: dict) -> None:
    """Write `manifest` back as the writer does (canonical JSON); no hash covers it."""
    import json

    (bundle / "manifest.json").write_text(json.dumps(manifest, indent=2, sort_keys=True) + "\n")


def rehash(bundle: Path, entry: dict) -> None:
    """Fix the recorded sha256 of a file entry `{file, sha256}` after editing the file."""
    import hashlib

    entry["sha256"] = hashlib.sha256((bundle / entry["file"]).read_bytes()).hexdigest()


def from_float(x: float, d) -> int:
    """The IR convert of float x to integer dtype d (the oracle): truncate toward zero,
    saturate to d's range, NaN -> 0."""
    if math.isnan(x):
        return 0
    if math.isinf(x):
        return d.int_max if x > 0 else d.int_min
    return min(max(math.trunc(x), d.int_min), d.int_max)
