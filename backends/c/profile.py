"""Per-op timers in the generated C (`gdv profile`; issue 16, item 5).

An opt-in lowering: `instrument(lowered)` is the program `lower` prints with a monotonic clock
read (`clock_gettime(CLOCK_MONOTONIC)`) before and after the code of each op of the entry
function that emits any (a reshape shares its operand's bytes and emits none), and around the
whole entry. The readings go to `int64_t gdv_prof[2 * (N + 1)]`, exported from the shared
object: op k's start and end in nanoseconds at `[2k]` and `[2k + 1]`, the entry's at `[2N]`
and `[2N + 1]`. Nothing else changes: the computation, its order and its results are those
of the plain program, and `lower` never emits the timers (the evidence bundle regenerates the
plain text byte for byte).

`run(executable, inputs, runs)` calls an executable built with `profile=True` and reads the
timers after each call; `run_threads(executable, inputs, runs, counts)` does so at several
OpenMP thread counts, interleaved call by call (`gdv profile --threads`).
"""

from __future__ import annotations

import copy
import ctypes
import time
from collections.abc import Mapping
from dataclasses import dataclass, field

import numpy as np

from gdv.backends.c.emit import comment

FEATURES = "#define _POSIX_C_SOURCE 199309L  /* clock_gettime under -std=c11 */"

PRELUDE = """/* gdv profile: a monotonic clock read before and after each op's code. */
#include <time.h>
int64_t gdv_prof[{size}];
const int64_t gdv_prof_ops = INT64_C({count});
static inline int64_t gdv_prof_now(void)
{{
  struct timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return (int64_t)t.tv_sec * INT64_C(1000000000) + (int64_t)t.tv_nsec;
}}
"""


@dataclass(frozen=True)
class Timed:
    """One timed op: its timer slot, its index in the entry function, result and op name."""

    slot: int
    index: int
    value: str
    op: str


def timed_ops(lowered) -> list[Timed]:
    """The ops `instrument` times, in program order."""
    ops = lowered.program.entry.ops
    return [
        Timed(k, index, ops[index].result, ops[index].name)
        for k, (index, _, _) in enumerate(lowered.spans)
    ]


def instrument(lowered) -> str:
    """The C source of `lowered` (`gdv.backends.c.Lowered`) with the timers."""
    prog = lowered.program
    n = len(lowered.spans)
    begins = {start: k for k, (_, start, _) in enumerate(lowered.spans)}
    ends = {end: k for k, (_, _, end) in enumerate(lowered.spans)}
    ops = prog.entry.ops
    body = [f"  gdv_prof[{2 * n}] = gdv_prof_now();  /* the whole entry */"]
    for i, line in enumerate([*prog.body, None]):
        if i in ends:
            body.append(f"  gdv_prof[{2 * ends[i] + 1}] = gdv_prof_now();")
        if i in begins:
            k = begins[i]
            op = ops[lowered.spans[k][0]]
            body.append(
                f"  gdv_prof[{2 * k}] = gdv_prof_now();  /* timer {k}: "
                f"%{comment(op.result)} = {comment(op.name)} */"
            )
        if line is not None:
            body.append(line)
    body.append(f"  gdv_prof[{2 * n + 1}] = gdv_prof_now();")
    timed = copy.copy(prog)  # the same program; only the body and its prelude differ
    timed.body = body
    timed.functions = [PRELUDE.format(size=2 * n + 2, count=n), *prog.functions]
    head, rest = timed.source().split("\n", 1)
    return f"{head}\n{FEATURES}\n{rest}"


@dataclass
class Runs:
    """What `run` measured: per call, each timed op's (start, end) in ns, the entry's (start,
    end) and the call's wall time in Python (ns, `time.perf_counter_ns`)."""

    timed: list[Timed]
    op_times: list[np.ndarray] = field(default_factory=list)
    """Per call, an int64 array [N, 2] of start and end times."""
    entry: list[tuple[int, int]] = field(default_factory=list)
    wall: list[int] = field(default_factory=list)

    def durations(self) -> np.ndarray:
        """[calls, N] nanoseconds per timed op."""
        if not self.op_times:
            return np.zeros((0, len(self.timed)), dtype=np.int64)
        return np.stack([o[:, 1] - o[:, 0] for o in self.op_times])

    def totals(self) -> np.ndarray:
        """Nanoseconds of the whole entry, per call."""
        return np.array([b - a for a, b in self.entry], dtype=np.int64)


def counters(executable) -> ctypes.Array:
    """The exported `gdv_prof` array of an executable built with `profile=True`."""
    n = len(executable.lowered.spans)
    return (ctypes.c_int64 * (2 * n + 2)).in_dll(executable._lib, "gdv_prof")


def _timed_call(executable, inputs: Mapping[str, np.ndarray], prof, out: Runs) -> None:
    """One call of `executable`, its timers appended to `out`."""
    n = len(executable.lowered.spans)
    t = time.perf_counter_ns()
    executable(inputs)
    wall = time.perf_counter_ns() - t
    raw = np.frombuffer(prof, dtype=np.int64).copy()
    out.op_times.append(raw[: 2 * n].reshape(n, 2))
    out.entry.append((int(raw[2 * n]), int(raw[2 * n + 1])))
    out.wall.append(wall)


def run(executable, inputs: Mapping[str, np.ndarray], runs: int, warmup: int = 1) -> Runs:
    """Call `executable` (built with `profile=True`) `warmup` times, then `runs` times, reading
    its timers after each measured call."""
    prof = counters(executable)
    out = Runs(timed_ops(executable.lowered))
    for _ in range(warmup):
        executable(inputs)
    for _ in range(runs):
        _timed_call(executable, inputs, prof, out)
    return out


def _omp(executable, name: str):
    """The OpenMP runtime's function `name` as the executable's library sees it; None where
    the library links no OpenMP runtime (none of its ops opens a parallel region, or the C
    compiler has no OpenMP): it then runs on one thread whatever the setting."""
    try:
        return getattr(executable._lib, name)
    except AttributeError:
        return None


def has_openmp(executable) -> bool:
    """Whether the executable's library links an OpenMP runtime (`omp_set_num_threads`)."""
    return _omp(executable, "omp_set_num_threads") is not None


def threads(executable) -> int:
    """The OpenMP thread count the executable's next call runs with (`omp_get_max_threads`;
    1 without OpenMP)."""
    get = _omp(executable, "omp_get_max_threads")
    if get is None:
        return 1
    get.restype = ctypes.c_int
    return int(get())


def set_threads(executable, count: int) -> int:
    """Make the executable's next calls from this thread run with `count` OpenMP threads
    (`omp_set_num_threads`, the calling thread's setting, which every parallel region the
    entry opens follows); the count before. Without OpenMP nothing changes (1)."""
    before = threads(executable)
    put = _omp(executable, "omp_set_num_threads")
    if put is not None:
        put.argtypes = [ctypes.c_int]
        put(int(count))
    return before


def run_threads(
    executable,
    inputs: Mapping[str, np.ndarray],
    runs: int,
    counts: list[int],
    warmup: int = 1,
) -> list[Runs]:
    """`run` at each of the thread `counts`, interleaved so that a slow spell of the machine
    falls on every count alike: `warmup` rounds, then `runs` rounds, each round one untimed and
    one timed call per count in turn (the untimed call after each switch lets the thread pool
    settle). One `Runs` per count, in the order of `counts`; the thread count is restored."""
    prof = counters(executable)
    out = [Runs(timed_ops(executable.lowered)) for _ in counts]
    before = set_threads(executable, counts[0])
    try:
        for _ in range(warmup):
            for count in counts:
                set_threads(executable, count)
                executable(inputs)
        for _ in range(runs):
            for count, into in zip(counts, out, strict=True):
                set_threads(executable, count)
                executable(inputs)
                _timed_call(executable, inputs, prof, into)
    finally:
        set_threads(executable, before)
    return out
