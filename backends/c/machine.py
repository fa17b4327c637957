"""The host as the C target sees it: cores, caches, and measured peak FLOP/s and copy bandwidth.

The peaks are measured once per machine, compiler and ISA variant (`GDV_C_ISA`) by two small C
probes (compiled with the target's own compiler and flags, in vectors of the variant's width)
and cached as JSON next to the target's shared objects (`$GDV_C_CACHE`, else
`~/.cache/gdv/c/`), keyed by `fingerprint()`: the CPU model, its feature flags, the core count,
the compiler, its version and every flag. `measure(refresh=True)` measures again.

- `peak_gflops.f32_mul_add`: independent chains of separate f32 vector multiplies and adds on
  every core. This is the ceiling of bit-exact code: the target never contracts a*b+c into an
  FMA (`-ffp-contract=off`), because an FMA rounds once where the program rounds twice.
- `peak_gflops.f32_fma`: the same probe compiled with contraction allowed, so each mul+add pair
  is one FMA: what BLAS libraries (which round differently) can reach.
- `copy_bandwidth_gbs`: a 64 MiB f32 array copied on every core, counted as STREAM does (bytes
  read plus bytes written, per second); the median of several copies.
"""

from __future__ import annotations

import ctypes
import hashlib
import json
import os
import platform
import statistics
import subprocess
import tempfile
import time
from pathlib import Path

import numpy as np

from gdv.backends.c.toolchain import cache_dir, compiler, detect, flags, isa, isa_features
from gdv.ir.diagnostics import IRError

MACHINE_VERSION = 1
"""Version of the cached measurement's layout (a new version measures again)."""

_PEAK_SOURCE = r"""
#include <stdint.h>
typedef float gdv_v16 __attribute__((vector_size(GDV_VB)));
/* CHAINS independent chains of a = a * m + c per thread; returns a checksum so nothing is
   optimised away. Flops per thread: iters * CHAINS * LANES * 2. */
#define CHAINS 12
#define LANES (GDV_VB / 4)
double gdv_peak(int64_t iters)
{
  double total = 0.0;
#pragma omp parallel reduction(+ : total)
  {
    gdv_v16 a[CHAINS];
    const gdv_v16 m = {0}, c = {0};
    gdv_v16 mm = m + 0.99999994f, cc = c + 1e-7f;
    for (int j = 0; j < CHAINS; j++) a[j] = m + (float)(j + 1);
    for (int64_t i = 0; i < iters; i++) {
#pragma GCC unroll 12
      for (int j = 0; j < CHAINS; j++) a[j] = a[j] * mm + cc;
    }
    for (int j = 0; j < CHAINS; j++)
      for (int l = 0; l < LANES; l++) total += a[j][l];
  }
  return total;
}
int gdv_threads(void)
{
  int n = 0;
#pragma omp parallel reduction(+ : n)
  n += 1;
  return n;
}
void gdv_copy(float *restrict dst, const float *restrict src, int64_t n)
{
#pragma omp parallel for schedule(static)
  for (int64_t i = 0; i < n; i++) dst[i] = src[i];
}
"""

_CHAINS_FLOPS = 12 * 2
"""Flops per iteration and lane: 12 chains (12 vectors, the multiplier and the addend fit the
16 registers of SSE2 and AVX2 as well as AVX-512's 32) of one multiply and one add."""
_COPY_BYTES = 64 << 20


def caches() -> list[dict]:
    """The CPU's caches as Linux reports them for cpu0: level, type, size in bytes, and how many
    logical CPUs share each; empty where sysfs does not say."""
    out = []
    root = Path("/sys/devices/system/cpu/cpu0/cache")
    for index in sorted(root.glob("index*")) if root.is_dir() else []:
        try:
            level = int((index / "level").read_text())
            kind = (index / "type").read_text().strip()
            size = _size_bytes((index / "size").read_text().strip())
            shared = _count_cpus((index / "shared_cpu_list").read_text().strip())
        except (OSError, ValueError):
            continue
        out.append({"level": level, "type": kind, "size_bytes": size, "shared_by": shared})
    return out


def _size_bytes(text: str) -> int:
    units = {"K": 1 << 10, "M": 1 << 20, "G": 1 << 30}
    if text and text[-1] in units:
        return int(text[:-1]) * units[text[-1]]
    return int(text)


def _count_cpus(text: str) -> int:
    n = 0
    for part in text.split(","):
        lo, _, hi = part.partition("-")
        n += int(hi or lo) - int(lo) + 1
    return n


def _cpu_model() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith(("model name", "Model")):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def fingerprint(cc: str) -> list[str]:
    """What identifies this machine and compiler for a cached measurement: the CPU model, its
    feature flags, the core count, the compiler command and version, and every flag (the
    `GDV_C_ISA` variant's `-march` among them)."""
    return [_cpu_model(), ",".join(isa_features()), str(os.cpu_count())] + [
        cc,
        detect(cc)["version"],
        *flags(cc),
    ]


def _key(cc: str) -> str:
    text = "\0".join([str(MACHINE_VERSION), *fingerprint(cc)])
    return hashlib.sha256(text.encode()).hexdigest()[:24]


def _compile_probe(cc: str, work: Path, name: str, extra: list[str]) -> ctypes.CDLL:
    src = work / f"{name}.c"
    src.write_text(f"#define GDV_VB {isa(cc).vector_bytes}\n" + _PEAK_SOURCE)
    out = work / f"{name}.so"
    base = [f for f in flags(cc) if f not in ("-ffp-contract=off", "-lm")]
    cmd = [cc, *base, *extra, str(src), "-o", str(out)]
    try:
        r = subprocess.run(cmd, capture_output=True, text=True, timeout=120)
    except (OSError, subprocess.TimeoutExpired) as e:
        raise IRError(f"target c: cannot compile the machine probe: {e}") from None
    if r.returncode != 0:
        detail = (r.stderr or r.stdout).strip()[-1000:]
        raise IRError(f"target c: cannot compile the machine probe:\n{detail}")
    lib = ctypes.CDLL(str(out))
    lib.gdv_peak.argtypes = [ctypes.c_int64]
    lib.gdv_peak.restype = ctypes.c_double
    lib.gdv_threads.restype = ctypes.c_int
    lib.gdv_copy.argtypes = [ctypes.c_void_p, ctypes.c_void_p, ctypes.c_int64]
    lib.gdv_copy.restype = None
    return lib


def _gflops(lib: ctypes.CDLL, threads: int, lanes: int) -> float:
    iters = 1 << 16
    while True:  # grow the run until it takes long enough to time
        t = time.perf_counter()
        lib.gdv_peak(iters)
        dt = time.perf_counter() - t
        if dt > 0.05 or iters > 1 << 30:
            break
        iters *= 4
    runs = []
    for _ in range(5):
        t = time.perf_counter()
        lib.gdv_peak(iters)
        runs.append(time.perf_counter() - t)
    return iters * _CHAINS_FLOPS * lanes * threads / min(runs) / 1e9


def _bandwidth(lib: ctypes.CDLL) -> float:
    n = _COPY_BYTES // 4
    src = np.ones(n, dtype=np.float32)
    dst = np.zeros(n, dtype=np.float32)
    runs = []
    for _ in range(7):
        t = time.perf_counter()
        lib.gdv_copy(dst.ctypes.data, src.ctypes.data, n)
        runs.append(time.perf_counter() - t)
    return 2 * _COPY_BYTES / statistics.median(runs[1:]) / 1e9


def _measure(cc: str) -> dict:
    with tempfile.TemporaryDirectory(prefix="gdv-c-probe-") as d:
        exact = _compile_probe(cc, Path(d), "mul_add", ["-ffp-contract=off"])
        fused = _compile_probe(cc, Path(d), "fma", ["-ffp-contract=fast"])
        threads = exact.gdv_threads()
        lanes = isa(cc).vector_bytes // 4
        return {
            "threads": threads,
            "peak_gflops": {
                "f32_mul_add": round(_gflops(exact, threads, lanes), 1),
                "f32_fma": round(_gflops(fused, threads, lanes), 1),
            },
            "copy_bandwidth_gbs": round(_bandwidth(exact), 2),
        }


def measure(refresh: bool = False) -> dict:
    """The host's description with measured peaks (from the cache unless `refresh`)."""
    cc = compiler()
    path = cache_dir() / f"machine-{_key(cc)}.json"
    measured = None
    if not refresh and path.is_file():
        try:
            data = json.loads(path.read_text())
            if data.get("version") == MACHINE_VERSION:
                measured = data["measured"]
        except (OSError, ValueError, KeyError):
            measured = None
    if measured is None:
        measured = _measure(cc)
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = path.with_suffix(f".{os.getpid()}.tmp")
        tmp.write_text(json.dumps({"version": MACHINE_VERSION, "measured": measured}, indent=1))
        os.replace(tmp, path)
    return {
        "arch": platform.machine(),
        "cpu": _cpu_model(),
        "cores": os.cpu_count(),
        "caches": caches(),
        **measured,
        "notes": {
            "f32_mul_add": "separate vector multiply and add on every core: the ceiling of "
            "bit-exact code (no contraction)",
            "f32_fma": "the same probe with contraction to FMA allowed",
            "copy_bandwidth_gbs": "64 MiB f32 copy on every core, bytes read + written per "
            "second (STREAM convention), median of 6",
        },
    }
