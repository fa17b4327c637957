"""The system C compiler: detection, flags, compiling in a private directory, the .so cache.

Flags: `-O3 -std=c11 -fPIC -shared -ffp-contract=off -fno-fast-math` (no FMA contraction, no
reassociation: bit-exact IEEE arithmetic; -O3's vectoriser keeps IEEE semantics without
-ffast-math, so it vectorises packing and elementwise loops but never reorders a fold;
measured: an 8x784x128 product 83 -> 33 us, the layernorm_gelu example 430 -> 180 us, one
core), `-fno-math-errno` (libm calls need not set errno, so
`sqrt` is the correctly rounded instruction and vectorises; no value changes), `-fopenmp` when
the compiler accepts it (threads, and `omp simd` loops: vectorised without reassociation), and
`-march=native` when it accepts that (the detected ISA features are recorded; with contraction
off, wider instructions never change a result), or, with `GDV_C_ISA` (`backends/c/isa.py`), the
`-march` flags of another host class instead. A shared object is cached under
`~/.cache/gdv/c/` (or `$GDV_C_CACHE`) by the SHA-256 of the source, compiler and flags.
"""

from __future__ import annotations

import functools
import hashlib
import os
import platform
import shutil
import subprocess
import tempfile
from pathlib import Path

from gdv.backends.c import isa as isas
from gdv.ir.diagnostics import IRError

BASE_FLAGS = (
    "-O3",
    "-std=c11",
    "-fPIC",
    "-shared",
    "-ffp-contract=off",
    "-fno-fast-math",
    "-fno-math-errno",
)
COMPILE_TIMEOUT_S = 120.0


def compiler() -> str:
    """The C compiler command: `$CC`, else `cc`."""
    return os.environ.get("CC", "cc")


def cache_dir() -> Path:
    """Where compiled shared objects are kept."""
    env = os.environ.get("GDV_C_CACHE")
    return Path(env) if env else Path.home() / ".cache" / "gdv" / "c"


def _accepts(cc: str, flag: str) -> bool:
    """Whether `cc` compiles and links a trivial shared object with `flag`."""
    with tempfile.TemporaryDirectory(prefix="gdv-c-probe-") as d:
        src = Path(d, "probe.c")
        src.write_text("int gdv_probe(void) { return 0; }\n")
        try:
            r = subprocess.run(
                [cc, *BASE_FLAGS, flag, str(src), "-o", str(Path(d, "probe.so"))],
                capture_output=True,
                timeout=60,
            )
        except (OSError, subprocess.TimeoutExpired):
            return False
        return r.returncode == 0


@functools.cache
def detect(cc: str) -> dict:
    """The compiler's version and the extra flags it accepts."""
    try:
        r = subprocess.run([cc, "--version"], capture_output=True, text=True, timeout=30)
        version = r.stdout.splitlines()[0] if r.returncode == 0 and r.stdout else "unknown"
    except (OSError, subprocess.TimeoutExpired):
        version = "unavailable"
    try:
        r = subprocess.run([cc, "-dumpmachine"], capture_output=True, text=True, timeout=30)
        machine = r.stdout.strip().split("-")[0] if r.returncode == 0 else ""
    except (OSError, subprocess.TimeoutExpired):
        machine = ""
    extra = [f for f in ("-fopenmp", "-march=native") if _accepts(cc, f)]
    return {
        "version": version,
        "openmp": "-fopenmp" in extra,
        "extra_flags": extra,
        "machine": {"amd64": "x86_64", "arm64": "aarch64"}.get(machine, machine),
    }


@functools.cache
def _accepted_march(cc: str, march: tuple[str, ...]) -> bool:
    return all(_accepts(cc, f) for f in march)


def isa(cc: str | None = None) -> isas.Isa:
    """The host class the code is generated and compiled for: `GDV_C_ISA`'s, else the host's
    own (`-march=native` when the compiler accepts it)."""
    name = isas.requested()
    if name != "native":
        return isas.ISAS[name]
    info = detect(cc or compiler())
    return isas.native(set(isa_features()), "-march=native" in info["extra_flags"])


def flags(cc: str) -> list[str]:
    """Every flag a program is compiled with (the libm link last): the base flags, OpenMP when
    accepted, and the active ISA's `-march` flags."""
    info = detect(cc)
    openmp = ["-fopenmp"] if info["openmp"] else []
    return [*BASE_FLAGS, *openmp, *isa(cc).march, "-lm"]


def unbuildable(cc: str) -> str:
    """Why `cc` cannot compile for the active ISA ('' when it can)."""
    target = isa(cc)
    machine = detect(cc)["machine"] or isas.host_arch()
    if target.arch != machine:
        return (
            f"ISA {target.name} is {target.arch} code and '{cc}' compiles for {machine}: set CC "
            f"to a compiler for {target.arch} (such as {target.arch}-linux-gnu-gcc)"
        )
    if target.march and not _accepted_march(cc, target.march):
        return f"'{cc}' does not accept {' '.join(target.march)} (ISA {target.name})"
    return ""


def isa_features() -> list[str]:
    """The host's SIMD features of interest (from /proc/cpuinfo on Linux)."""
    wanted = ("sse2", "sse4_2", "avx", "avx2", "fma", "avx512f", "avx512bw", "neon", "asimd")
    try:
        text = Path("/proc/cpuinfo").read_text()
    except OSError:
        return [platform.machine()]
    found: set[str] = set()
    for line in text.splitlines():
        if line.startswith(("flags", "Features")):
            found.update(line.split(":", 1)[1].split())
    return [f for f in wanted if f in found]


def build(source: str) -> Path:
    """The shared object of `source`: from the cache, or compiled now (then cached).

    A compiler failure is an IRError naming the generated source, which is kept."""
    cc = compiler()
    if shutil.which(cc) is None and not os.path.exists(cc):
        raise IRError(f"target c: no C compiler found (tried '{cc}'; set CC)")
    refused = unbuildable(cc)
    if refused:
        raise IRError(f"target c: cannot build for {isas.ISA_ENV}={isa(cc).name}: {refused}")
    all_flags = flags(cc)
    key = hashlib.sha256(
        "\0".join([source, cc, detect(cc)["version"], *all_flags]).encode()
    ).hexdigest()
    cached = cache_dir() / f"{key}.so"
    if cached.exists():
        return cached
    work = Path(tempfile.mkdtemp(prefix="gdv-c-"))  # private: mode 0700
    src = work / "program.c"
    src.write_text(source)
    out = work / "program.so"
    cmd = [cc, *all_flags[:-1], str(src), "-o", str(out), "-lm"]
    try:
        r = subprocess.run(cmd, capture_output=True, text=True, timeout=COMPILE_TIMEOUT_S)
        failed = r.returncode != 0 or not out.exists()
        detail = (r.stderr or r.stdout or "").strip()[-2000:]
        status = f"exit status {r.returncode}"
    except (OSError, subprocess.TimeoutExpired) as e:
        failed, detail, status = True, str(e), "did not run"
    if failed:
        raise IRError(
            f"target c: the C compiler failed ({status}); the generated source is kept at "
            f"{src}" + (f"\n{detail}" if detail else "")
        )
    cache_dir().mkdir(parents=True, exist_ok=True)
    tmp = cache_dir() / f".{key}.{os.getpid()}.tmp"
    shutil.copyfile(out, tmp)
    os.replace(tmp, cached)
    shutil.rmtree(work, ignore_errors=True)
    return cached
