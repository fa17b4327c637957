"""Measuring alpha (latency) and beta (seconds per byte) between two MPI ranks on this host
(issue 17, item 4).

`measure_network()` starts `mpiexec -n 2 python -m gdv.backends.mpi.probe OUT`: rank 0 and
rank 1 ping-pong messages of several sizes (`SIZES`); the one-way time of a size is half the
median round trip over enough repetitions to take a few milliseconds. A least-squares fit of
`t(n) = alpha + n * beta`, weighted by 1/t(n) so that every size counts by its relative error
(small messages fix alpha, large ones beta), gives the two. The result is cached as JSON in
the MPI cache folder (`$GDV_MPI_CACHE`, else `~/.cache/gdv/mpi`), keyed by the machine (CPU
model, core count) and the MPI installation (mpiexec's path and version), like the C target's
measured peaks; `refresh=True` measures again. `cached_network()` reads the cache without
measuring.
"""

from __future__ import annotations

import hashlib
import json
import os
import platform
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from gdv.backends.mpi.cost import Network
from gdv.backends.mpi.tools import MpiError, cache_dir, require_mpi4py, require_tool

PROBE_VERSION = 1
SIZES = (8, 512, 4096, 32768, 262144, 1 << 20, 4 << 20)
"""Message sizes in bytes."""
PROBE_TIMEOUT_S = 120.0


def fit(sizes: list[float], seconds: list[float]) -> tuple[float, float]:
    """(alpha, beta) of `seconds ~ alpha + size * beta` by least squares with weights 1/t (the
    relative residuals), alpha and beta kept >= 0."""
    if len(sizes) != len(seconds) or len(sizes) < 2:
        raise ValueError("fit needs two or more (size, seconds) pairs")
    w = [1.0 / t**2 if t > 0 else 1.0 for t in seconds]
    sw = sum(w)
    sx = sum(wi * x for wi, x in zip(w, sizes, strict=True))
    sy = sum(wi * y for wi, y in zip(w, seconds, strict=True))
    sxx = sum(wi * x * x for wi, x in zip(w, sizes, strict=True))
    sxy = sum(wi * x * y for wi, x, y in zip(w, sizes, seconds, strict=True))
    det = sw * sxx - sx * sx
    if det == 0:
        raise ValueError("fit needs two or more distinct sizes")
    beta = (sw * sxy - sx * sy) / det
    alpha = (sy - beta * sx) / sw
    if beta < 0:  # no growth with size: all latency
        return sy / sw, 0.0
    if alpha < 0:  # a line through the origin
        return 0.0, sxy / sxx
    return alpha, beta


def _fingerprint(mpiexec: str) -> list[str]:
    try:
        r = subprocess.run([mpiexec, "--version"], capture_output=True, text=True, timeout=30)
        version = (r.stdout or r.stderr).strip().splitlines()[0] if r.returncode == 0 else "?"
    except (OSError, subprocess.TimeoutExpired, IndexError):
        version = "?"
    cpu = platform.processor() or platform.machine()
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                cpu = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    return [str(PROBE_VERSION), cpu, str(os.cpu_count()), mpiexec, version]


def _cache_path(mpiexec: str) -> Path:
    key = hashlib.sha256("\0".join(_fingerprint(mpiexec)).encode()).hexdigest()[:24]
    return cache_dir() / f"network-{key}.json"


def _from_record(record: dict) -> Network:
    when = record.get("measured_at", "?")
    return Network(
        float(record["alpha"]),
        float(record["beta"]),
        f"measured on this host by the MPI probe ({when}, 2 ranks, "
        f"{len(record.get('points', []))} message sizes)",
    )


def cached_network() -> tuple[Network, dict] | None:
    """The cached measurement of this machine (and its record), or None (nothing measured, or
    MPI not installed)."""
    from gdv.backends.mpi.tools import find_tool

    mpiexec = find_tool("mpiexec")
    if mpiexec is None:
        return None
    path = _cache_path(mpiexec)
    try:
        record = json.loads(path.read_text())
        if record.get("version") != PROBE_VERSION:
            return None
        return _from_record(record), record
    except (OSError, ValueError, KeyError, TypeError):
        return None


def measure_network(refresh: bool = False) -> tuple[Network, dict]:
    """alpha and beta of this host (from the cache unless `refresh`), and the probe's record
    (every size's one-way time, the fit)."""
    if not refresh:
        got = cached_network()
        if got is not None:
            return got
    mpiexec = require_tool("mpiexec")
    require_mpi4py()
    with tempfile.TemporaryDirectory(prefix="gdv-mpi-probe-") as d:
        out = Path(d) / "probe.json"
        cmd = [mpiexec, "-n", "2"]
        if (os.cpu_count() or 1) < 2:
            cmd.append("--oversubscribe")
        cmd += [sys.executable, "-m", "gdv.backends.mpi.probe", str(out)]
        env = dict(os.environ)
        env.setdefault("OMPI_ALLOW_RUN_AS_ROOT", "1")
        env.setdefault("OMPI_ALLOW_RUN_AS_ROOT_CONFIRM", "1")
        try:
            r = subprocess.run(
                cmd, capture_output=True, text=True, timeout=PROBE_TIMEOUT_S, env=env, cwd=d
            )
        except subprocess.TimeoutExpired:
            raise MpiError(f"the MPI probe did not finish within {PROBE_TIMEOUT_S:g} s") from None
        except OSError as e:
            raise MpiError(f"cannot start {mpiexec}: {e.strerror}") from None
        if r.returncode != 0 or not out.exists():
            tail = (r.stderr or r.stdout).strip()[-1500:]
            raise MpiError(f"the MPI probe failed (exit status {r.returncode})\n{tail}")
        points = json.loads(out.read_text())
    sizes = [p["bytes"] for p in points]
    times = [p["seconds"] for p in points]
    alpha, beta = fit(sizes, times)
    record = {
        "version": PROBE_VERSION,
        "alpha": alpha,
        "beta": beta,
        "measured_at": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        "points": points,
        "fingerprint": _fingerprint(mpiexec),
    }
    path = _cache_path(mpiexec)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    tmp.write_text(json.dumps(record, indent=1))
    os.replace(tmp, path)
    return _from_record(record), record


def _ping_pong(out: Path) -> None:
    """Rank 0 sends, rank 1 sends back; rank 0 writes each size's one-way seconds."""
    import numpy as np
    from mpi4py import MPI

    comm = MPI.COMM_WORLD
    rank = comm.Get_rank()
    other = 1 - rank
    points = []
    for size in SIZES:
        buf = np.zeros(size, dtype=np.uint8)
        reps = 4
        while True:  # grow the repetitions until a batch takes a few milliseconds
            comm.Barrier()
            t = time.perf_counter()
            for _ in range(reps):
                if rank == 0:
                    comm.Send(buf, dest=other, tag=7)
                    comm.Recv(buf, source=other, tag=7)
                else:
                    comm.Recv(buf, source=other, tag=7)
                    comm.Send(buf, dest=other, tag=7)
            dt = comm.bcast(time.perf_counter() - t, root=0)
            if dt > 0.005 or reps >= 1 << 16:
                break
            reps *= 4
        trips = []
        for _ in range(7):
            comm.Barrier()
            t = time.perf_counter()
            for _ in range(reps):
                if rank == 0:
                    comm.Send(buf, dest=other, tag=7)
                    comm.Recv(buf, source=other, tag=7)
                else:
                    comm.Recv(buf, source=other, tag=7)
                    comm.Send(buf, dest=other, tag=7)
            trips.append((time.perf_counter() - t) / reps)
        if rank == 0:
            points.append({"bytes": size, "seconds": statistics.median(trips) / 2, "reps": reps})
    if rank == 0:
        out.write_text(json.dumps(points))


if __name__ == "__main__":
    _ping_pong(Path(sys.argv[1]))
