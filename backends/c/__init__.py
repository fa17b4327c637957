"""The C target: loop-stage modules lowered to C11, compiled with the system C compiler, loaded
with ctypes and run (issue 5).

`lower(module)` gives the C source (an IRError naming the op, its location and the reason for
anything the target cannot do: no silent fallback); `build(module)` compiles it (cached by
content hash); `run(module, inputs)` executes the entry function like the reference backend's
`run`, bit-exact to it except for the last bits of transcendentals (gdv's f32 and double
functions, libm: see `backends/c/vmath.py` and `backends/c/elementwise.py`);
`capabilities()` describes the target. Lowering rules live in one file per op family,
registered in `RULES` against the op specs of `gdv.ir.ops`.
"""

from __future__ import annotations

import copy
import ctypes
import functools
import os
import platform
import weakref
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from gdv.backends.c import (  # noqa: F401  (importing the families fills RULES)
    collective,
    composite,
    contract,
    control,
    conv,
    elementwise,
    gather,
    kernel,
    layout,
    reduce,
)
from gdv.backends.c.emit import (
    ARENA_MARGIN,
    CTYPE,
    UNSUPPORTED_DTYPES,
    Program,
    comment,
    where,
)
from gdv.backends.c.function import lower_ops
from gdv.backends.c.registry import LOWERINGS, RULES, UNSUPPORTED
from gdv.backends.c.simd import simd_choice
from gdv.backends.c.toolchain import compiler, detect, flags, isa_features
from gdv.backends.targets import Fallback
from gdv.ir.core import Module, Op
from gdv.ir.diagnostics import IRError, Loc

__all__ = [
    "RULES",
    "Executable",
    "Fallback",
    "Lowered",
    "build",
    "capabilities",
    "fallbacks",
    "lower",
    "lower_module",
    "printer_choices",
    "run",
    "schedule_parameters",
]


@dataclass
class Lowered:
    """A module lowered to C: the program, and the ops left to reference kernels."""

    program: Program
    fallbacks: list[tuple[Fallback, Op]] = field(default_factory=list)
    spans: list[tuple[int, int, int]] = field(default_factory=list)
    """Per op of the entry function that emitted code: (its index, first and end line of its
    code in `program.body`), for the profiling timers (`gdv.backends.c.profile`)."""

    @property
    def source(self) -> str:
        return self.program.source()

    @property
    def choices(self) -> list[dict]:
        """What the printer chose itself (see `printer_choices`)."""
        return self.program.choices


_FALLBACK_DECL = """/* Ops this target cannot do, run by reference kernels (--allow-fallback). */
typedef int (*gdv_fallback_fn)(int64_t, void *const *);
static gdv_fallback_fn gdv_fallback = 0;
void gdv_set_fallback(gdv_fallback_fn f) { gdv_fallback = f; }
"""


def lower_module(module: Module, allow_fallback: bool = False) -> Lowered:
    """`module` lowered to C, with the ops left to reference kernels (`allow_fallback`)."""
    entry = module.entry
    if entry is None:
        raise IRError("module has no entry function (@main or a single function)")
    for p in entry.params:
        if p.type.dtype not in CTYPE:
            raise IRError(
                f"target c does not support parameter %{p.name} of type {p.type}: "
                f"{UNSUPPORTED_DTYPES.get(p.type.dtype, 'no C type')}",
                p.loc or Loc(module.filename, 1, 1),
            )
    lowered = Lowered(Program(module, entry))
    prog = lowered.program

    def fallback(index: int, op: Op, error: IRError) -> bool:
        if not allow_fallback or op.type.dtype not in CTYPE:
            return False
        _emit_fallback(lowered, index, op, error)
        return True

    lowered.spans = lower_ops(prog, fallback)
    for r in entry.returns:
        if r in prog.arena_of:
            raise IRError(
                f"the buffer plan places returned value %{r} in the arena: returned values are "
                "written into the caller's buffers",
                entry.loc or Loc(module.filename, 1, 1),
            )
    return lowered


def _emit_fallback(lowered: Lowered, index: int, op: Op, error: IRError) -> None:
    prog = lowered.program
    if not lowered.fallbacks:
        prog.functions.append(_FALLBACK_DECL)
    k = len(lowered.fallbacks)
    loc = str(where(op, prog.module))
    lowered.fallbacks.append((Fallback(index, op.name, loc, error.message), op))
    prog.new_slot(op.result, op.type)
    prog.body.append(
        f"  if (gdv_fallback == 0 || gdv_fallback(INT64_C({k}), buf) != 0) "
        f"return {k + 1};  /* fallback: %{comment(op.result)} = {comment(op.name)} */"
    )


def lower(module: Module, allow_fallback: bool = False) -> str:
    """The C11 source of `module`'s entry function; an IRError naming the op, its location and
    the reason for what the target cannot do, unless `allow_fallback` (then such ops call back
    into the reference backend; see `fallbacks`)."""
    return lower_module(module, allow_fallback).source


def fallbacks(module: Module) -> list[Fallback]:
    """The ops of `module` that would run on reference kernels with `allow_fallback`."""
    return [f for f, _ in lower_module(module, allow_fallback=True).fallbacks]


def build(module: Module, allow_fallback: bool = False) -> Path:
    """The shared object of `module` (compiled now or taken from the cache)."""
    from gdv.backends.c.toolchain import build as build_source

    return build_source(lower(module, allow_fallback))


_FALLBACK_FN = ctypes.CFUNCTYPE(ctypes.c_int, ctypes.c_int64, ctypes.POINTER(ctypes.c_void_p))


@functools.cache
def _load(path: str) -> ctypes.CDLL:
    lib = ctypes.CDLL(path)
    lib.gdv_entry.argtypes = [ctypes.POINTER(ctypes.c_void_p)]
    lib.gdv_entry.restype = ctypes.c_int
    return lib


def _aligned(nbytes: int, align: int = 64) -> np.ndarray:
    """`nbytes` (at least one) bytes starting at an `align`-byte boundary, as numpy bools (the
    arena's slot type)."""
    raw = np.empty(max(1, nbytes) + align, dtype=np.uint8)
    skip = -raw.ctypes.data % align
    return raw[skip : skip + max(1, nbytes)].view(np.bool_)


FRESH_MIN_BYTES = 1 << 18
"""Results at least this large are computed into a new array each call instead of being copied
out of the executable's buffer (a copy costs more than a new array from there on)."""


class Executable:
    """A module compiled for the C target and loaded, ready to be called many times: the C
    source is generated and the shared object loaded once, the buffers allocated once (so one
    Executable must not be called from two threads at the same time)."""

    def __init__(self, module: Module, allow_fallback: bool = False, profile: bool = False) -> None:
        from gdv.backends.c.toolchain import build as build_source
        from gdv.backends.reference import check_memory

        self.module = module
        self.lowered = lower_module(module, allow_fallback)
        prog = self.lowered.program
        self.entry = prog.entry
        check_memory(self.entry)
        source = prog.source()
        if profile:  # the same program with a clock read around each op's code
            from gdv.backends.c.profile import instrument

            source = instrument(self.lowered)
        self.library = build_source(source)
        _check_runnable()
        self._lib = _load(str(self.library))
        self._types = self.entry.types()
        self._slot_of = dict(prog.slot_of)
        aligned = set(prog.aligned_slots)
        self._buffers = [
            _aligned(t.num_elements)
            if k in aligned
            else np.empty(max(1, t.num_elements), dtype=t.dtype.np)
            for k, t in enumerate(prog.slot_types)
        ]
        """One buffer per slot: parameters (replaced by the caller's arrays in each call),
        returned values, values of an unplanned function, and the planned arena."""
        for k in aligned:
            # The arenas are committed now, when the program is loaded, as onnxruntime sets up
            # its buffers when a session is created: a call then touches no new page (no page
            # faults in the first call, and no growth of the process while it runs).
            self._buffers[k].fill(False)
        self._arena_of = {v: (offset, t) for v, (offset, t) in prog.arena_of.items()}
        self._prepacks = list(prog.prepacks)
        """Factors the program can pack once (`bind`): their slots hold NULL until then."""
        for pre in self._prepacks:
            self._buffers[pre.slot] = np.empty(0, np.uint8)
        self._hoists = list(prog.hoists)
        """Kernels computed once at bind time when their parameters are bound (`bind`)."""
        if prog.bound_slot is not None:
            self._buffers[prog.bound_slot] = np.zeros(len(self._hoists), np.uint8)  # none yet
        self._pointers = (ctypes.c_void_p * max(1, len(self._buffers)))(
            *[b.ctypes.data if b.size else None for b in self._buffers]
        )
        self._held: dict[str, np.ndarray] = {}
        """Parameters bound by `bind` (read-only copies), by name."""
        self._read_in_place: dict[int, np.ndarray] = {}
        self._params = [
            (p.name, np.dtype(p.type.dtype.np), p.type.shape, self._slot_of[p.name])
            for p in self.entry.params
        ]
        self._fast_inputs = all(p.type.num_elements for p in self.entry.params)
        """Every parameter has elements: an array of its exact dtype, shape and layout is read
        in place (an empty one takes the checked path)."""
        self._results = [
            (self._slot_of[r], self._types[r].shape, self._types[r].num_elements)
            for r in self.entry.returns
        ]
        param_slots = {slot for _, _, _, slot in self._params}
        once = [slot for slot, _, _ in self._results]
        self._fresh = [
            (i, slot, shape, self._buffers[slot].dtype)
            for i, (slot, shape, size) in enumerate(self._results)
            if slot not in param_slots
            and once.count(slot) == 1
            and size * self._buffers[slot].itemsize >= FRESH_MIN_BYTES
        ]
        """Large results (each in a slot of its own) written straight into a new array per
        call, which is returned: no copy out (their slots keep no buffer of their own)."""
        fresh = {i for i, _, _, _ in self._fresh}
        for _, slot, _, dt in self._fresh:
            self._buffers[slot] = np.empty(1, dt)
            self._pointers[slot] = self._buffers[slot].ctypes.data  # set again by each call
        self._result_views = [
            None if slot in param_slots or i in fresh else self._buffers[slot][:size].reshape(shape)
            for i, (slot, shape, size) in enumerate(self._results)
        ]
        """Per result not computed fresh, its buffer's elements as the result's array (None: a
        parameter's slot, whose elements are the caller's array in each call)."""
        self._keep_read = bool(self.lowered.fallbacks) or any(s in param_slots for s in once)
        """Whether a call needs the arrays it read in place by slot (a result that is a
        parameter, or a fallback reading its operands)."""
        self._seen: dict[int, weakref.ref] = {}
        """Per parameter slot, the array whose data address `_pointers` holds (weakly):
        `ndarray.ctypes.data` costs about a microsecond, and a live array's address is fixed
        (NumPy refuses to resize an array that has a weak reference)."""
        self._callback = _FALLBACK_FN(self._fallback)  # alive as long as the executable
        if self.lowered.fallbacks:
            self._lib.gdv_set_fallback.argtypes = [_FALLBACK_FN]

    def bind(self, weights: Mapping[str, np.ndarray]) -> Executable:
        """An executable with the parameters `weights` fixed, as onnxruntime fixes a model's
        initializers: it is called with the other parameters only. Each weight is checked as
        a call checks it and copied (later changes to the caller's arrays change nothing);
        every product factor read only from bound weights is packed once, here, into the
        slivers the per-call packing would build (the same C code), and the calls read those.
        The result shares this executable's buffers: call one of them at a time."""
        from gdv.backends.reference import Context
        from gdv.backends.reference.interpreter import check_inputs

        names = {p.name for p in self.entry.params}
        unknown = sorted(set(weights) - names)
        if unknown:
            raise IRError(f"bind: no parameter named {', '.join(unknown)}")
        if set(weights) & set(self._held):
            raise IRError(
                f"bind: {', '.join(sorted(set(weights) & set(self._held)))} already bound"
            )
        sub = self.entry.__class__(
            self.entry.name,
            [p for p in self.entry.params if p.name in weights],
            [],
            [],
            [],
        )
        env = check_inputs(sub, dict(weights), Context())
        bound = copy.copy(self)
        bound._held = dict(self._held)
        for name in weights:
            x = np.array(env[name], copy=True, order="C")
            x.setflags(write=False)
            bound._held[name] = x
        bound._seen = {}
        bound._read_in_place = {}
        bound._buffers = list(self._buffers)
        bound._pointers = (ctypes.c_void_p * len(self._pointers))(*self._pointers)
        slots = {p.name: self._slot_of[p.name] for p in self.entry.params}
        for name, x in bound._held.items():
            bound._pointers[slots[name]] = (
                x.ctypes.data if x.size else self._buffers[slots[name]].ctypes.data
            )
        bound._params = [spec for spec in self._params if spec[0] not in bound._held]
        bound._fast_inputs = all(
            p.type.num_elements for p in self.entry.params if p.name not in bound._held
        )
        bound._hoist(self._lib)
        packed = [pre for pre in self._prepacks if set(pre.params) <= set(bound._held)]
        for pre in packed:
            if bound._pointers[pre.slot]:
                continue  # packed by an earlier bind (its weights are bound here too)
            panels = _aligned(pre.elements * pre.dtype.itemsize).view(pre.dtype.np)
            bound._buffers[pre.slot] = panels
            bound._pointers[pre.slot] = panels.ctypes.data
        if packed:
            self._lib.gdv_prepack.argtypes = [ctypes.POINTER(ctypes.c_void_p)]
        if packed and self._lib.gdv_prepack(bound._pointers) != 0:
            raise IRError("target c: out of memory (packing the bound weights)")
        return bound

    def _hoist(self, lib: ctypes.CDLL) -> None:
        """Compute, into buffers of this executable's own, each kernel listed in `at_bind`
        whose parameters are all bound now and that no earlier bind computed, and set their
        flags, so that calls skip them (`gdv_hoist`: the code a call would run)."""
        slot = self.lowered.program.bound_slot
        if slot is None:
            return
        flags = self._buffers[slot]
        now = [h for h in self._hoists if not flags[h.index] and h.params <= self._held.keys()]
        if not now:
            return
        flags = flags.copy()  # the executable bound before keeps its own
        mask = np.zeros(len(flags), np.uint8)
        slot_of = self.lowered.program.slot_of
        for h in now:
            k = slot_of[h.value]
            fresh = np.empty_like(self._buffers[k])
            self._buffers[k] = fresh
            self._pointers[k] = fresh.ctypes.data
            mask[h.index] = flags[h.index] = 1
        lib.gdv_hoist.argtypes = [ctypes.POINTER(ctypes.c_void_p), ctypes.c_void_p]
        if lib.gdv_hoist(self._pointers, mask.ctypes.data) != 0:
            raise IRError("target c: out of memory (computing from the bound weights)")
        self._buffers[slot] = flags
        self._pointers[slot] = flags.ctypes.data

    @property
    def bound(self) -> tuple[str, ...]:
        """The parameters `bind` fixed, in the entry's order."""
        return tuple(p.name for p in self.entry.params if p.name in self._held)

    def _value(self, name: str) -> np.ndarray:
        """`name`'s elements in this call (see `_slot_view`); a planned value's are its bytes
        in the arena."""
        t = self._types[name]
        if name in self._arena_of:
            offset, stored = self._arena_of[name]
            arena = self._buffers[self.lowered.program.arena_slot].view(np.uint8)
            size = t.num_elements * np.dtype(stored.dtype.np).itemsize
            at = ARENA_MARGIN + offset
            return arena[at : at + size].view(stored.dtype.np).reshape(t.shape)
        return self._slot_view(self._slot_of[name], t.shape, t.num_elements)

    def _slot_view(self, slot: int, shape: tuple[int, ...], size: int) -> np.ndarray:
        """A slot's elements in this call: a parameter's slot (the parameter, or a reshape
        sharing it) is the caller's array, any other slot a buffer of the executable."""
        arr = self._read_in_place.get(slot)
        if arr is not None:
            return arr.reshape(shape)
        return self._buffers[slot][:size].reshape(shape)

    def _fallback(self, k: int, _buf) -> int:
        from gdv.backends.reference import Context
        from gdv.backends.reference.evaluate import evaluate_ops
        from gdv.ir.ops.kernel import kernel_bodies

        try:
            _, op = self.lowered.fallbacks[k]
            with kernel_bodies(self.module.functions):
                env = {o: self._value(o) for o in op.operands}
                out = evaluate_ops([op], env, Context(), keep=[op.result])[op.result]
            self._value(op.result)[...] = out
        except Exception:  # noqa: BLE001  (reported as the op's status, never across C)
            return 1
        return 0

    def __call__(self, inputs: Mapping[str, np.ndarray]) -> list[np.ndarray]:
        """The entry function's results on `inputs` (arrays keyed by parameter name).

        Inputs of exactly the parameter's dtype and shape, C-contiguous, are read in place
        (the generated code never writes a parameter's buffer); anything else goes through
        the reference backend's input checks and is copied."""
        specs = self._params
        read = self._read_in_place = {}
        seen, pointers = self._seen, self._pointers
        held = self._held
        if held:
            clash = [name for name in inputs if name in held]
            if clash:
                raise IRError(f"{', '.join(sorted(clash))}: bound by bind, not an input any more")
        fast = (
            self._fast_inputs
            and (type(inputs) is dict or isinstance(inputs, Mapping))
            and len(inputs) == len(specs)
        )
        if fast:
            get, keep = inputs.get, self._keep_read
            for name, dtype, shape, slot in specs:
                x = get(name)
                if not (
                    type(x) is np.ndarray
                    and x.shape == shape
                    and (x.dtype is dtype or x.dtype == dtype)
                    and x.flags.c_contiguous
                ):
                    fast = False
                    break
                if keep:
                    read[slot] = x
                last = seen.get(slot)
                if last is None or last() is not x:
                    # the pointer stays in place while the same array comes back
                    seen[slot] = weakref.ref(x)
                    pointers[slot] = x.ctypes.data
        if not fast:
            from gdv.backends.reference import Context
            from gdv.backends.reference.interpreter import check_inputs

            env = check_inputs(self.entry, {**inputs, **held}, Context())
            read.clear()
            for name, _, _, slot in specs:
                seen.pop(slot, None)  # its pointer now goes to this call's copy
                x = np.ascontiguousarray(env[name])
                if x.size:
                    read[slot] = x
                    pointers[slot] = x.ctypes.data
                else:
                    pointers[slot] = self._buffers[slot].ctypes.data
        if held and self._keep_read:
            for name, x in held.items():
                if x.size:
                    read[self._slot_of[name]] = x
        fresh = {}
        for i, slot, shape, dt in self._fresh:
            arr = fresh[i] = np.empty(shape, dt)
            pointers[slot] = arr.ctypes.data
            read[slot] = arr  # what a fallback reads and writes for this slot
        fallbacks = self.lowered.fallbacks
        if fallbacks:
            self._lib.gdv_set_fallback(self._callback)
        status = self._lib.gdv_entry(self._pointers)
        if status == -1:
            raise IRError("target c: out of memory (a product kernel's packing buffers)")
        if status != 0:
            if 0 < status <= len(fallbacks):
                bad = fallbacks[status - 1][0]
                raise IRError(f"target c: the reference fallback for {bad.op} at {bad.loc} failed")
            raise IRError(f"target c: the compiled program returned status {status}")
        outs = []
        for i, (view, result) in enumerate(zip(self._result_views, self._results, strict=True)):
            if i in fresh:
                outs.append(fresh[i])
            else:
                outs.append((self._slot_view(*result) if view is None else view).copy())
        self._read_in_place = {}  # hold no reference to the caller's arrays
        return outs


def _check_runnable() -> None:
    """An IRError when this host cannot execute code of the active ISA (`GDV_C_ISA`)."""
    from gdv.backends.c.isa import ISA_ENV, runnable
    from gdv.backends.c.toolchain import isa

    why = runnable(isa(), set(isa_features()))
    if why:
        raise IRError(f"target c: cannot run code built for {ISA_ENV}={isa().name}: {why}")


def schedule_parameters() -> dict:
    """What the C target's pipeline takes from its capability descriptor: `vector_bytes`, the
    width of the vectors its code is written with (`execution.vectorization.vector_bytes`),
    for `pipeline(..., vector_bytes=...)` to put into every schedule's `vector` lanes; and for
    `select-products`, the vector registers of that width, the add chains (latency x pipes)
    of the active ISA (`GDV_C_ISA`), the (L1 data, L2) cache bytes, the (KC, MC, NC) blocking
    `GDV_C_BLOCKING` imposes (None: none) and the autotune cache's choices when
    `GDV_C_AUTOTUNE` is on (`tuned`: (dtype, MR, NV, KC, MC, NC) rows; empty: the model);
    for `reassociate-reductions`, whether the ISA has a fused multiply-add (`fma`)."""
    from gdv.backends.c.simd import (
        active_isa,
        add_chains,
        blocking_override,
        l1_l2,
        tuned,
        vector_bytes,
        vector_registers,
    )

    vb = vector_bytes()
    rows = tuple((dtype, t.mr, t.nv, t.kc, t.mc, t.nc) for dtype, t in sorted(tuned()[0].items()))
    return {
        "vector_bytes": vb,
        "vector_registers": vector_registers(vb),
        "chains": add_chains(),
        "cache_bytes": l1_l2(),
        "blocking": blocking_override(),
        "tuned": rows,
        "fma": active_isa().fma,
    }


def printer_choices(module: Module, allow_fallback: bool = True) -> list[dict]:
    """What the C printer chooses itself for `module`, no attribute of the IR deciding it: one
    {kernel, op, choice, value, why} per choice (for the artifact's manifest entry)."""
    return list(lower_module(module, allow_fallback).program.choices)


def run(
    module: Module, inputs: Mapping[str, np.ndarray], allow_fallback: bool = False
) -> list[np.ndarray]:
    """Execute `module`'s entry function on the C target; arrays keyed by parameter name.

    With `allow_fallback`, ops the target cannot do run on the reference backend's kernels."""
    return Executable(module, allow_fallback)(inputs)


def capabilities(measure: bool = True, refresh: bool = False) -> dict:
    """The target's capability descriptor (`gdv.backends.capabilities.SCHEMA`); `measure`
    includes the measured peaks (cached per machine; `refresh` measures again)."""
    import shutil

    from gdv import __version__
    from gdv.backends.c.elementwise import LIBM
    from gdv.backends.c.isa import runnable
    from gdv.backends.c.toolchain import isa, unbuildable
    from gdv.backends.capabilities import CAPABILITY_SCHEMA, TARGETS

    cc = compiler()
    found = shutil.which(cc) is not None or os.path.exists(cc)
    info = detect(cc)
    active = isa(cc)
    why = "" if found else f"no C compiler found (tried '{cc}'; set CC)"
    why = why or unbuildable(cc) or runnable(active, set(isa_features()))
    host: dict = {"arch": platform.machine(), "cores": os.cpu_count() or 1}
    if measure and not why:
        from gdv.backends.c.machine import measure as measure_machine

        host = measure_machine(refresh=refresh)
    else:
        from gdv.backends.c.machine import caches

        host["caches"] = caches()
    vectors = simd_choice()
    host = {**host, "isa": isa_features(), "simd": f"{vectors['isa']} ({vectors['method']})"}
    return {
        "schema": CAPABILITY_SCHEMA,
        "name": "c",
        "version": __version__,
        "description": TARGETS["c"],
        "available": {"ok": not why, "reason": why},
        "ops": sorted(s.name for s in LOWERINGS),
        "unsupported_ops": {
            s.name: u.reason for s, u in sorted(UNSUPPORTED.items(), key=lambda kv: kv[0].name)
        },
        "dtypes": [str(d) for d in CTYPE],
        "unsupported_dtypes": {str(d): r for d, r in UNSUPPORTED_DTYPES.items()},
        "fallback": "only with --allow-fallback (allow_fallback=True): an op the target cannot "
        "do runs on the reference backend's kernel, called back from the C code, and is "
        "recorded",
        "machine": host,
        "compiler": {
            "command": cc,
            "version": info["version"],
            "flags": flags(cc),
            "openmp": info["openmp"],
        },
        "execution": {
            "libm": sorted(set(LIBM.values())),
            "vectorization": vectors,
            "schedule": {
                "honoured": [
                    "order (out dims)",
                    "tile (out dims)",
                    "parallel (outermost loop)",
                    "accumulators",
                    "vector (lanes x element bytes is the width of the generated vectors)",
                    "strategy = product, with batch/rows/cols/row_factor, micro, blocks and "
                    "split (select-products): the packed product as recorded",
                ],
                "vector_bytes": vectors["vector_bytes"],
                "printer_choices": "gdv.backends.c.printer_choices(module): what the printer "
                "still chooses itself (factors read in place, loop forms, widths of "
                "unscheduled ops), each with its reason",
            },
            "kernels": {
                "contraction": "a kernel with strategy = product (select-products: a fold of "
                "mul(X, Y) with add, f32 or f64) runs as a packed, cache-blocked product with a "
                "register-blocked vector micro-kernel; each output still folds in the spec's "
                "order (separate multiply and add, no FMA)",
                "reduction": "blocks of outputs fold together in independent chains (vector "
                "lanes across contiguous outputs), each output alone and in order",
                "elementwise": "omp simd on a contiguous innermost loop; ops that do not depend "
                "on it are computed once per row",
            },
            "exactness": "bit-exact to the reference backend (every fold in the spec's order, "
            "no contraction to FMA), except the last bits of transcendentals: f32 exp, tanh, "
            "erf and sigmoid are gdv's f32 functions (within these ulps of the exact value on "
            "every f32 input: exp 0.77, tanh 2.43, erf 0.98, sigmoid 2.41); f16/bf16 results use "
            "gdv's double functions rounded once; the others libm in double",
        },
    }


assert set(RULES) == set(LOWERINGS) | set(UNSUPPORTED)
