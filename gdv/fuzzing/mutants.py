"""`gdv selftest --mutants`: gdv's own passes and C printer with seeded bugs, and which of the
three checks catches each (issue 18).

A mutant patches one function of gdv in-process (a pass's rewrite, the C printer's loop or
fold code) so that its output is wrong in one precise way, and names the small programs
(`PROGRAMS`) whose compiles go through that code. Each mutant runs in a fresh process
(`python -c`), so neither its patch nor any in-process cache outlives it: there
it compiles each program for the C target at its level with the proof cache off (a mutant must
not meet a proof cached by the honest compiler), then runs the checks:

1. **proof**: an obligation refuted with a counterexample that replays on the reference
   backend (an equivalence), or a formula claim refuted whose violation is confirmed on the
   concrete plan (`memory-safety`: two live buffers sharing a byte; `coverage`: a point of
   the nest visited twice, never, or outside its extent);
2. **conformance**: the compiled C program against the reference backend on the *source*
   program, on seeded random inputs within the declared ranges, special values (±0, ±inf,
   NaN, subnormals, large), and every input filled with one special value (all -0.0, ...):
   bit for bit, or, where the program has transcendentals, within the two error bounds added
   (the C target's own f32 functions differ from the reference in the last bits);
3. **bounds**: on the random inputs, the C program's error against the source evaluated in
   f64 (`mode="ideal"`) within the rigorous bound of `gdv.validate.bounds` for target `c`.

A mutant is caught when any check fires. With no mutation the same programs pass all three
(`run_control`), so a catch is no false alarm.
"""

from __future__ import annotations

import concurrent.futures
import contextlib
import dataclasses
import json
import math
import os
import re
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any
from unittest import mock

import numpy as np

CHECKS = ("proof", "conformance", "bounds")

# --- the programs ------------------------------------------------------------------------------

PROGRAMS: dict[str, str] = {
    # sub and div (non-commutative), and mul + add fused into one kernel body at -O2
    "elementwise": """func @main(%x: f32[4,8] {range = [-1.0, 1.0]},
           %y: f32[4,8] {range = [0.5, 2.0]}, %z: f32[4,8] {range = [-1.0, 1.0]})
    -> (f32[4,8], f32[4,8], f32[4,8]) {
  %0 = sub(%x, %y) : f32[4,8]
  %1 = div(%x, %y) : f32[4,8]
  %2 = mul(%x, %z) : f32[4,8]
  %3 = add(%2, %y) : f32[4,8]
  return %0, %1, %3
}
""",
    # row sums and maxima: the C reduction nests (interleaved chains, vector lanes)
    "reduce": """func @main(%x: f32[6,12] {range = [-1.0, 1.0]}) -> (f32[6], f32[6], f32[6]) {
  %s = reduce_sum(%x) {axes = [1]} : f32[6]
  %m = reduce_max(%x) {axes = [1]} : f32[6]
  %p = mul(%s, %m) : f32[6]
  return %s, %m, %p
}
""",
    # a sum over two axes apart (each output folds 12 values in row-major order of the axes;
    # adjacent axes would be merged into one by canonicalize)
    "reduce2": """func @main(%x: f32[3,2,4] {range = [-1.0, 1.0]}) -> f32[2] {
  %s = reduce_sum(%x) {axes = [0, 2]} : f32[2]
  return %s
}
""",
    # a packed product whose rows and columns do not divide the micro-tile (edge tiles)
    "matmul": """func @main(%a: f32[21,24] {range = [-1.0, 1.0]},
           %b: f32[24,20] {range = [-1.0, 1.0]}) -> f32[21,20] {
  %0 = matmul(%a, %b) : f32[21,20]
  return %0
}
""",
    # a product with a bias and relu epilogue (fuse-epilogues) over several reduce blocks
    "epilogue": """func @main(%a: f32[6,400] {range = [-1.0, 1.0]},
           %b: f32[400,20] {range = [-1.0, 1.0]}, %c: f32[20] {range = [-1.0, 1.0]})
    -> f32[6,20] {
  %0 = matmul(%a, %b) : f32[6,20]
  %1 = broadcast(%c) {dims = [1]} : f32[6,20]
  %2 = add(%0, %1) : f32[6,20]
  %3 = relu(%2) : f32[6,20]
  return %3
}
""",
    # a depthwise conv with its bias and relu as its epilogue (fuse-conv-epilogues' form)
    "conv_epilogue": """func @main(%x: f32[1,16,6,6] {range = [-1.0, 1.0]},
           %w: f32[16,1,3,3] {range = [-1.0, 1.0]}, %b: f32[16] {range = [-1.0, 1.0]})
    -> f32[1,16,6,6] {
  %0 = conv2d(%x, %w, %b) {stride = [1, 1], padding = [[1, 1], [1, 1]], dilation = [1, 1],
                           groups = 16, epilogue = "e"} : f32[1,16,6,6]
  return %0
}

func @e(%acc: f32[], %bias: f32[]) -> f32[] {
  %a = add(%acc, %bias) : f32[]
  %r = relu(%a) : f32[]
  return %r
}
""",
    # an f32 -> bf16 -> f32 round trip (the rounding to bf16 is the point)
    "bf16": """func @main(%x: bf16[4,8] {range = [-1.0, 1.0]}, %y: f32[4,8] {range = [-1.0, 1.0]})
    -> f32[4,8] {
  %0 = convert(%y) : bf16[4,8]
  %1 = convert(%0) : f32[4,8]
  %2 = convert(%x) : f32[4,8]
  %3 = add(%1, %2) : f32[4,8]
  return %3
}
""",
    # two convs, the second's pad folded into its product (`fold-pads`: a `fill`), whose
    # 6-wide rows put padding lanes in most of its column slivers
    "conv_fold": """func @main(%x: f32[1,4,6,6] {range = [-1.0, 1.0]},
           %w: f32[4,4,3,3] {range = [-1.0, 1.0]}, %v: f32[4,4,3,3] {range = [-1.0, 1.0]})
    -> f32[1,4,6,6] {
  %a = conv2d(%x, %w) {stride = [1, 1], padding = [[1, 1], [1, 1]], dilation = [1, 1],
                       groups = 1} : f32[1,4,6,6]
  %b = relu(%a) : f32[1,4,6,6]
  %c = conv2d(%b, %v) {stride = [1, 1], padding = [[1, 1], [1, 1]], dilation = [1, 1],
                       groups = 1} : f32[1,4,6,6]
  return %c
}
""",
    # two intermediates (a row sum and a row max) live at once in the arena (two rows: too
    # few for a row group, whose values only the group reads would be block-local instead)
    "arena": """func @main(%x: f32[2,16] {range = [-1.0, 1.0]}, %y: f32[2,16] {range = [-1.0, 1.0]})
    -> f32[2] {
  %s = reduce_sum(%x) {axes = [1]} : f32[2]
  %m = reduce_max(%y) {axes = [1]} : f32[2]
  %p = sub(%s, %m) : f32[2]
  return %p
}
""",
}


# --- the mutants -------------------------------------------------------------------------------


FIRED = [0]
"""How many times the active mutant changed what gdv emitted (in this process): a mutant that
never fires on its programs is inert, which `run_mutant` reports instead of a miss."""


def _fire() -> None:
    FIRED[0] += 1


@dataclass(frozen=True)
class Mutant:
    """A seeded bug: where it is, what it breaks, the check meant to catch it, the programs
    whose compiles exercise it, and the patch (a context manager) that puts it in."""

    name: str
    where: str
    breaks: str
    expected: str
    programs: tuple[str, ...]
    patch: Callable[[], contextlib.AbstractContextManager]
    level: int = 2


def _lower_to_kernels_wrapper(change: Callable[[str, list, Any], None]):
    """A patch of `lower-to-kernels`' `lower_op` that lets `change(rule, kernels, bodies)`
    alter what one lowering emits (the pass's obligation then holds the altered kernels)."""
    from gdv.passes import lower_to_kernels as ltk

    original = ltk.lower_op

    def lower_op(op, types, names, bodies, owner):
        lowered = original(op, types, names, bodies, owner)
        if lowered is not None:
            change(lowered[0], lowered[1], bodies)
        return lowered

    return mock.patch.object(ltk, "lower_op", lower_op)


def _swap_operands():
    def change(rule: str, kernels: list, bodies: Any) -> None:
        if rule in ("elementwise-sub", "elementwise-div"):
            (k,) = kernels
            # new lists: a lowered kernel may share its operand list with the op it replaces
            k.operands = k.operands[::-1]
            _fire()
            k.attrs["maps"] = k.attrs["maps"][::-1]

    return _lower_to_kernels_wrapper(change)


def _short_reduce_extent():
    def change(rule: str, kernels: list, bodies: Any) -> None:
        if rule.startswith("reduce_"):
            (k,) = kernels
            last = k.attrs["reduce"][-1]
            if k.attrs["space"][last] > 1:
                k.attrs["space"] = [*k.attrs["space"]]
                k.attrs["space"][last] -= 1
                _fire()

    return _lower_to_kernels_wrapper(change)


def _reversed_reduce_axes():
    def change(rule: str, kernels: list, bodies: Any) -> None:
        if rule.startswith("reduce_"):
            (k,) = kernels
            if len(k.attrs["reduce"]) > 1:
                k.attrs["reduce"] = k.attrs["reduce"][::-1]
                _fire()

    return _lower_to_kernels_wrapper(change)


def _drop_convert():
    """canonicalize gets a rule `convert(convert(x) : bf16/f16) : T -> x` for x of type T:
    the rounding to the narrow type is dropped."""
    from gdv.passes import canonicalize
    from gdv.passes.base import Rewrite

    def round_trip(site):
        op = site.op
        inner = site.producer(0) if op.name == "convert" else None
        if inner is None or inner.name != "convert":
            return None
        if site.types[inner.operands[0]] != op.type:
            return None
        _fire()
        return Rewrite("convert-round-trip", [], inner.operands[0], [inner, op])

    return mock.patch.object(canonicalize, "RULES", [*canonicalize.RULES, round_trip])


def _unclaimed_accumulators():
    """schedule-kernels gives every float sum of an even extent 2 accumulators (folding two
    halves apart, then adding them: another order of the sum) but records it as a schedule
    only, with no `real` claim. The pass manager sees the changed fold and adds the claim the
    pass left out, bit-exact (`schedule-kernels/unclaimed-reorder/equivalence`,
    `gdv.passes.unclaimed`): the proof refutes it with a replayed counterexample."""
    from gdv.passes import schedule_kernels as sk

    original = sk.ScheduleKernels.run

    def run(self, module):
        result = original(self, module)
        for fn in result.module.functions:
            for op in fn.ops:
                a = op.attrs
                if op.name != "kernel" or a.get("combiner") != "add" or len(a["reduce"]) != 1:
                    continue
                if a.get("strategy") or not op.type.dtype.is_float:
                    continue
                n = a["space"][a["reduce"][0]]
                if n > 2 and n % 2 == 0:
                    a["accumulators"] = 2
                    _fire()
        return result

    return mock.patch.object(sk.ScheduleKernels, "run", run)


def _overlapping_buffers():
    """plan-memory places a buffer at the offset of an earlier one that is live at the same
    time."""
    from gdv.passes import plan_memory as pm

    original = pm.plan

    def plan(fn, *args):
        buffers = original(fn, *args)
        for j, b in enumerate(buffers):
            for a in buffers[:j]:
                if a.start <= b.end and b.start <= a.end and a.offset != b.offset:
                    buffers[j] = dataclasses.replace(b, offset=a.offset)
                    _fire()
                    return buffers
        return buffers

    return mock.patch.object(pm, "plan", plan)


def _c_swap_operands():
    """The C printer's scalar code computes `b - a` and `b / a` for sub(a, b) and div(a, b)."""
    from gdv.backends.c import elementwise, nest

    original = elementwise.scalar

    def scalar(prog, op, args, arg_dtypes):
        if op.name in ("sub", "div") and len(args) == 2:
            args, arg_dtypes = args[::-1], arg_dtypes[::-1]
            _fire()
        return original(prog, op, args, arg_dtypes)

    stack = contextlib.ExitStack()
    stack.enter_context(mock.patch.object(elementwise, "scalar", scalar))
    stack.enter_context(mock.patch.object(nest, "scalar", scalar))
    return stack


def _c_drop_rounding():
    """The C printer keeps an f32 kernel body's intermediate results in double: each is
    computed from its operands in double and never rounded to f32 (only the body's result
    is, when stored)."""
    from gdv.backends.c import kernel
    from gdv.backends.c.emit import comment, ctype
    from gdv.ir.dtypes import DType

    original = kernel.body_code
    arith = {"add": "+", "sub": "-", "mul": "*", "div": "/"}

    def body_code(prog, body):
        honest = original(prog, body)
        if len(body.ops) < 2 or any(b.type.dtype is not DType.F32 for b in body.ops[:-1]):
            return honest

        def emit(loads, lines, indent):
            env = {p.name: x for p, x in zip(body.params, loads, strict=True)}
            for k, b in enumerate(body.ops):
                if b.name not in arith or b.type.dtype is not DType.F32:
                    return honest(loads, lines, indent)
                x, y = (f"(double)({env[o]})" for o in b.operands)
                t = "double" if k < len(body.ops) - 1 else ctype(b.type.dtype, b, prog.module)
                lines.append(
                    f"{indent}const {t} s{k} = ({x} {arith[b.name]} {y});  "
                    f"/* %{comment(b.result)} */"
                )
                env[b.result] = f"s{k}"
            (name,) = body.returns
            _fire()
            return env[name]

        return emit

    return mock.patch.object(kernel, "body_code", body_code)


def _nest_text_patch(change: Callable[[Any, list[str]], None]):
    """A patch of the C nest printer's `_finish`, which gets every nest function's lines: lets
    `change(op, lines)` alter them before they are emitted."""
    from gdv.backends.c import nest

    original = nest._finish

    def _finish(prog, op, name, lines):
        change(op, lines)
        return original(prog, op, name, lines)

    return mock.patch.object(nest, "_finish", _finish)


def _reduce_loop(op: Any) -> tuple[int, int] | None:
    """(dim, extent) of the last reduce dim of a float sum kernel, or None."""
    a = op.attrs
    if op.name != "kernel" or a.get("combiner") != "add" or not a.get("reduce"):
        return None
    if not op.type.dtype.is_float:
        return None
    d = a["reduce"][-1]
    return d, a["space"][d]


def _reduce_loop_rewrite(new_head: Callable[[int, int], str]):
    """A patch of the C nest printer that replaces the loop head over a float sum's last
    reduce dim `d` (extent `n`, at least 2) by `new_head(d, n)`."""

    def change(op, lines):
        found = _reduce_loop(op)
        if found is None or found[1] < 2:
            return
        d, n = found
        head = re.compile(rf"for \(int64_t i{d} = 0; i{d} < INT64_C\({n}\); i{d}\+\+\)")
        for k, line in enumerate(lines):
            lines[k], hits = head.subn(new_head(d, n), line)
            if hits:
                _fire()

    return _nest_text_patch(change)


def _c_off_by_one():
    """The C nest printer's loop over a float sum's last reduce dim stops one short."""
    return _reduce_loop_rewrite(
        lambda d, n: f"for (int64_t i{d} = 0; i{d} < INT64_C({n - 1}); i{d}++)"
    )


def _c_reversed_fold():
    """The C nest printer iterates a float sum's last reduce dim backwards."""
    return _reduce_loop_rewrite(
        lambda d, n: f"for (int64_t i{d} = INT64_C({n - 1}); i{d} >= 0; i{d}--)"
    )


def _c_fold_start():
    """The C nest printer starts a float sum's fold from +0.0 instead of -0.0 (so the sum of
    -0.0s is +0.0)."""
    from gdv.backends.c import nest
    from gdv.backends.c.emit import float_literal

    original = nest._start

    def _start(combiner, dtype):
        if combiner == "add" and dtype.is_float:
            _fire()
            return float_literal(0.0, dtype)
        return original(combiner, dtype)

    return mock.patch.object(nest, "_start", _start)


_EDGE_STORE = re.compile(r"ct\[ii \* (\d+) \+ jj\] = tile\[ii \* (\d+) \+ jj\];")


def _c_skip_remainder():
    """The C product printer computes an edge tile (rows or columns past the last full
    micro-tile) but never stores it into the result."""
    from gdv.backends.c import matmul

    original = matmul._blocked

    def _blocked(*args, **kwargs):
        code, pre_slots = original(*args, **kwargs)
        code, hits = _EDGE_STORE.subn("(void)0;  /* mutant: the edge tile is dropped */", code)
        if hits:
            _fire()
        return code, pre_slots

    return mock.patch.object(matmul, "_blocked", _blocked)


def _c_epilogue_every_block():
    """The C product printer applies a kernel's epilogue after every reduce block of a tile
    instead of once, after its last (relu of a partial sum, then the rest added to it)."""
    from gdv.backends.c import matmul

    original = matmul._epilogue

    def _epilogue(*args, **kwargs):
        code = original(*args, **kwargs)
        code, hits = re.subn(r"if \(pc \+ kc == \d+\) \{", "if (1) {", code)
        if hits:
            _fire()
        return code

    return mock.patch.object(matmul, "_epilogue", _epilogue)


def _c_conv_epilogue_channel():
    """The C conv printer applies a conv2d's epilogue with output channel 0's operands (its
    bias) for every channel."""
    from gdv.backends.c import conv

    original = conv._Epilogue.code

    def code(self, acc: str, channel: str, ind: str):
        _fire()
        return original(self, acc, "0", ind)

    return mock.patch.object(conv._Epilogue, "code", code)


def _folding_everywhere() -> contextlib.ExitStack:
    """`fold-pads` folds whatever the host's vector width and the rows' width (so that the fill
    mutants below reach their code on every host: masked runs with 64-byte vectors, guarded
    packing else)."""
    from gdv.passes import fold_pads

    stack = contextlib.ExitStack()
    stack.enter_context(mock.patch.object(fold_pads, "FOLD_MIN_VECTOR_BYTES", 0))
    stack.enter_context(mock.patch.object(fold_pads, "FOLD_MIN_WIDTH_TILES", 0))
    return stack


def _fold_off_by_one():
    """`fold-pads` shifts the folded operand's maps by the pad's low side plus one (every read
    one element further along each padded dim)."""
    from gdv.passes import fold_pads

    original = fold_pads.folded

    def folded(op, k, pad):
        _fire()
        shifted = {**pad.attrs, "low": [lo + 1 for lo in pad.attrs["low"]]}
        return original(op, k, dataclasses.replace(pad, attrs=shifted))

    stack = _folding_everywhere()
    stack.enter_context(mock.patch.object(fold_pads, "folded", folded))
    return stack


def _c_unguarded_fill():
    """The C product printer takes every read of a filled operand as inside it: no masks on
    the in-place slivers, no guards in the packing (the reads outside it give whatever lies
    there instead of the fill)."""
    from gdv.backends.c import matmul

    def leaving_dims(rows, space, shape):
        _fire()
        return []

    stack = _folding_everywhere()
    stack.enter_context(mock.patch.object(matmul, "leaving_dims", leaving_dims))
    return stack


MUTANTS: dict[str, Mutant] = {
    m.name: m
    for m in (
        Mutant(
            "swapped-operands",
            "passes/lower_to_kernels.py lower_op",
            "an elementwise sub/div kernel reads its operands swapped (operands and maps)",
            "proof",
            ("elementwise",),
            _swap_operands,
        ),
        Mutant(
            "c-swapped-operands",
            "backends/c/elementwise.py + nest.py scalar",
            "the C scalar code of sub(a, b) and div(a, b) computes b - a and b / a",
            "conformance",
            ("elementwise",),
            _c_swap_operands,
        ),
        Mutant(
            "dropped-convert",
            "passes/canonicalize.py RULES",
            "an extra rule rewrites convert(convert(x) : bf16) : f32 to x (the rounding to "
            "bf16 dropped)",
            "proof",
            ("bf16",),
            _drop_convert,
        ),
        Mutant(
            "c-dropped-rounding",
            "backends/c/kernel.py body_code",
            "an f32 kernel body's intermediate results are computed and kept in double, "
            "never rounded to f32",
            "conformance",
            ("elementwise",),
            _c_drop_rounding,
        ),
        Mutant(
            "off-by-one-extent",
            "passes/lower_to_kernels.py lower_op",
            "a reduce_* kernel's last reduced extent is one short (the last element is "
            "never folded)",
            "proof",
            ("reduce",),
            _short_reduce_extent,
        ),
        Mutant(
            "c-off-by-one-loop",
            "backends/c/nest.py _finish (reduction nest text)",
            "the C loop over a float sum's last reduce dim stops one short",
            "conformance",
            ("reduce", "arena"),
            _c_off_by_one,
        ),
        Mutant(
            "c-wrong-fold-start",
            "backends/c/nest.py _start",
            "a float sum's C fold starts from +0.0 instead of -0.0 (a sum of -0.0s gives +0.0)",
            "conformance",
            ("reduce",),
            _c_fold_start,
        ),
        Mutant(
            "wrong-fold-order",
            "passes/lower_to_kernels.py lower_op",
            "a reduce_* kernel over several axes lists its reduce dims reversed (column-major "
            "fold order)",
            "proof",
            ("reduce2",),
            _reversed_reduce_axes,
        ),
        Mutant(
            "unclaimed-accumulators",
            "passes/schedule_kernels.py ScheduleKernels.run",
            "a float sum gets accumulators = 2 (two halves summed apart: another order) as a "
            "schedule only, with no real claim",
            "proof",
            ("reduce",),
            _unclaimed_accumulators,
        ),
        Mutant(
            "c-reversed-fold",
            "backends/c/nest.py _finish (reduction nest text)",
            "the C loop over a float sum's last reduce dim runs backwards",
            "conformance",
            ("reduce",),
            _c_reversed_fold,
        ),
        Mutant(
            "c-skipped-tile-remainder",
            "backends/c/matmul.py _blocked",
            "a packed product's edge tiles (past the last full micro-tile) are computed but "
            "never stored",
            "conformance",
            ("matmul",),
            _c_skip_remainder,
        ),
        Mutant(
            "c-epilogue-every-block",
            "backends/c/matmul.py _epilogue",
            "a product's epilogue (bias, relu) runs after every reduce block of a tile, not "
            "once after the last",
            "conformance",
            ("epilogue",),
            _c_epilogue_every_block,
        ),
        Mutant(
            "c-conv-epilogue-channel",
            "backends/c/conv.py _Epilogue.code",
            "a conv2d's epilogue (a depthwise conv's bias and relu) reads channel 0's bias for "
            "every output channel",
            "conformance",
            ("conv_epilogue",),
            _c_conv_epilogue_channel,
        ),
        Mutant(
            "fold-pad-off-by-one",
            "passes/fold_pads.py folded",
            "a folded pad's reads are shifted one element along each padded dim",
            "proof",
            ("conv_fold",),
            _fold_off_by_one,
        ),
        Mutant(
            "c-unguarded-fill",
            "backends/c/matmul.py leaving_dims (guard, _tap_masks)",
            "a product reads its filled operand as if every read lay inside it (no lane masks, "
            "no packing guards)",
            "conformance",
            ("conv_fold",),
            _c_unguarded_fill,
        ),
        Mutant(
            "overlapping-buffers",
            "passes/plan_memory.py plan",
            "a buffer is placed at the offset of an earlier buffer live at the same time",
            "proof",
            ("arena",),
            _overlapping_buffers,
        ),
    )
}


# --- the checks --------------------------------------------------------------------------------


@dataclass
class Finding:
    """One check that fired on one program."""

    check: str
    program: str
    detail: str

    def to_json(self) -> dict:
        return {"check": self.check, "program": self.program, "detail": self.detail}


@dataclass
class Report:
    """What the checks found for one mutant (or the control run, `mutant = ""`)."""

    mutant: str
    where: str = ""
    expected: str = ""
    findings: list[Finding] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    seconds: float = 0.0
    error: str = ""

    @property
    def caught_by(self) -> list[str]:
        fired = {f.check for f in self.findings}
        return [c for c in (*CHECKS, "error") if c in fired]

    @property
    def caught(self) -> bool:
        """Caught by one of the three checks (a crash of gdv is reported, not counted)."""
        return any(f.check in CHECKS for f in self.findings)

    @property
    def first(self) -> str:
        by = self.caught_by
        return by[0] if by else ""

    def to_json(self) -> dict:
        return {
            "mutant": self.mutant,
            "where": self.where,
            "expected": self.expected,
            "caught": self.caught,
            "caught_by": self.caught_by,
            "first": self.first,
            "findings": [f.to_json() for f in self.findings],
            "notes": self.notes,
            "seconds": round(self.seconds, 3),
            "error": self.error,
        }

    @classmethod
    def from_json(cls, data: dict) -> Report:
        return cls(
            data["mutant"],
            data.get("where", ""),
            data.get("expected", ""),
            [Finding(f["check"], f["program"], f["detail"]) for f in data["findings"]],
            list(data.get("notes", [])),
            float(data.get("seconds", 0.0)),
            data.get("error", ""),
        )


def _short(x: Any) -> str:
    a = np.asarray(x)
    if a.ndim == 0:
        if a.dtype.kind == "f" or a.dtype.name == "bfloat16":
            return repr(float(a.astype(np.float64)))
        return str(a[()])
    with np.printoptions(threshold=8, edgeitems=2, linewidth=200):
        return " ".join(str(a).split())


def _inputs_text(inputs: dict[str, np.ndarray], limit: int = 160) -> str:
    text = ", ".join(f"{k} = {_short(v)}" for k, v in inputs.items())
    return text if len(text) <= limit else text[: limit - 3] + "..."


def _proof(comp: Any, program: str) -> tuple[list[Finding], list[str]]:
    """Refuted obligations whose counterexample replays (or whose formula's violation holds on
    the concrete plan); other refutations and unknowns are notes."""
    from gdv.ir.ops.kernel import kernel_bodies
    from gdv.validate.counterexample import replay

    found, notes = [], []
    for out in comp.outcomes:
        ob = out.obligation
        if out.status == "unknown":
            notes.append(f"{program}: {ob.id} unknown: {out.reason}")
        if out.status != "refuted":
            continue
        cex = out.counterexample
        if cex is not None:
            with kernel_bodies(ob.functions):
                again = replay(ob.src, ob.tgt, cex.inputs, ob.theory)
            if again is None:
                notes.append(f"{program}: {ob.id} refuted, but its counterexample does not replay")
                continue
            o, index, a, b = again
            found.append(
                Finding(
                    "proof",
                    program,
                    f"{ob.id} refuted ({cex.origin}): out{o}{list(index)} is {_short(a)} "
                    f"before, {_short(b)} after; inputs {_inputs_text(cex.inputs)}",
                )
            )
            continue
        witness = _formula_witness(ob)
        if witness is None:
            notes.append(f"{program}: {ob.id} refuted ({out.reason}), not confirmed concretely")
        else:
            found.append(Finding("proof", program, f"{ob.id} refuted: {witness}"))
    return found, notes


def _formula_witness(ob: Any) -> str | None:
    """A formula claim's violation checked on the concrete IR, or None."""
    from gdv.validate import schedules

    if ob.kind == "memory-safety":
        try:
            buffers = schedules.live_buffers(ob.src)
        except ValueError as e:
            return f"the plan is incomplete: {e}"
        arena = int(ob.src.attrs.get("arena_bytes", 0))
        for b in buffers:
            if b.offset < 0 or b.offset + b.size > arena:
                return f"%{b.name} [{b.offset}, {b.offset + b.size}) leaves the {arena}-byte arena"
        for j, b in enumerate(buffers):
            for a in buffers[:j]:
                live = a.start <= b.end and b.start <= a.end
                if live and a.size and b.size and a.offset < b.offset + b.size:
                    if b.offset < a.offset + a.size:
                        return (
                            f"%{a.name} bytes [{a.offset}, {a.offset + a.size}) live at steps "
                            f"[{a.start}, {a.end}] and %{b.name} bytes [{b.offset}, "
                            f"{b.offset + b.size}) live at [{b.start}, {b.end}] overlap"
                        )
        return None
    if ob.kind == "coverage":
        (kernel,) = [op for op in ob.src.ops if op.name == "kernel"]
        for d, loop in enumerate(schedules.nest_of(kernel.attrs)):
            seen: dict[int, int] = {}
            for o in range(loop.tiles):
                rem = min(loop.tile, loop.extent - o * loop.tile)
                for c in range(-(-loop.tile // loop.vector)):
                    for lane in range(loop.vector):
                        if c * loop.vector + lane < rem:
                            p = o * loop.tile + c * loop.vector + lane
                            seen[p] = seen.get(p, 0) + 1
            bad = [p for p in range(loop.extent) if seen.get(p) != 1]
            bad += [p for p in seen if not 0 <= p < loop.extent]
            if bad:
                return f"dim {d} visits coordinate {bad[0]} {seen.get(bad[0], 0)} times"
        return None
    return None


def _transcendental(module: Any) -> bool:
    from gdv.ir.ops.elementwise import TRANSCENDENTAL  # every op whose last bits are not fixed

    names = {*TRANSCENDENTAL, "gelu", "softmax"}
    return any(op.name in names for fn in module.functions for op in fn.ops)


def input_sets(source: Any) -> Iterator[tuple[str, dict[str, np.ndarray], bool]]:
    """(origin, inputs, within the declared ranges) for the conformance check."""
    from gdv.backends import reference
    from gdv.validate.counterexample import UNIFORM_TRIES, special_inputs, uniform_inputs

    fn = source.entry
    for seed in range(3):
        yield f"random inputs (seed {seed})", reference.random_inputs(source, seed), True
    for seed in range(2):
        yield f"special values (seed {seed})", special_inputs(fn, seed), False
    for k in range(UNIFORM_TRIES):
        yield f"uniform inputs ({k})", uniform_inputs(fn, k), False


def _differences(want: np.ndarray, got: np.ndarray) -> np.ndarray:
    from gdv.validate.counterexample import same_bits

    return ~same_bits(np.asarray(want), np.asarray(got))


def _as_f64(a: np.ndarray) -> np.ndarray:
    return np.asarray(a).astype(np.float64)


def _conformance_and_bounds(comp: Any, program: str) -> tuple[list[Finding], list[str]]:
    """Run the compiled C program and the reference backend on the source; the first
    difference (conformance) and the first error beyond the rigorous bound (bounds)."""
    from gdv.backends import reference
    from gdv.ir.diagnostics import IRError
    from gdv.validate.bounds import analyze

    source = comp.source
    notes: list[str] = []
    found: list[Finding] = []
    try:
        exe = comp.executable()
    except IRError as e:
        return [Finding("conformance", program, f"the C program does not build: {e.message}")], []
    try:
        bounds = [o.abs for o in analyze(source, target="c").outputs]
    except IRError as e:
        bounds = None
        notes.append(f"{program}: no error bound ({e.message})")
    loose = _transcendental(source) or _transcendental(comp.module)
    limits = None
    if loose and bounds is not None:
        final = [o.abs for o in analyze(comp.module, target="c").outputs]
        limits = [a + b for a, b in zip(bounds, final, strict=True)]
    conformance = bound_hit = None
    for origin, inputs, in_range in input_sets(source):
        want = reference.run(source, inputs)
        got = exe(inputs)
        for o, (w, g) in enumerate(zip(want, got, strict=True)):
            mask = _differences(w, g)
            if conformance is None and mask.any():
                pos = tuple(int(i) for i in np.argwhere(mask)[0]) if mask.shape else ()
                if limits is not None:
                    with np.errstate(invalid="ignore"):
                        diff = np.abs(_as_f64(w) - _as_f64(g))
                    nan_mismatch = np.isnan(_as_f64(w)) != np.isnan(_as_f64(g))
                    if not nan_mismatch.any() and np.nanmax(np.where(mask, diff, 0)) <= limits[o]:
                        continue
                conformance = Finding(
                    "conformance",
                    program,
                    f"out{o}{list(pos)} on {origin}: reference {_short(np.asarray(w)[pos])}, "
                    f"C {_short(np.asarray(g)[pos])}",
                )
        if in_range and bounds is not None and bound_hit is None:
            ideal = reference.run(source, inputs, mode="ideal")
            for o, (x, g) in enumerate(zip(ideal, got, strict=True)):
                if not np.asarray(x).dtype.kind == "f":
                    continue
                xe, ge = _as_f64(x), _as_f64(g)
                with np.errstate(invalid="ignore"):
                    err = np.where(np.isnan(xe) & np.isnan(ge), 0.0, np.abs(xe - ge))
                err = np.where(np.isnan(err), np.inf, err)
                if err.size and float(err.max()) > bounds[o]:
                    pos = tuple(int(i) for i in np.unravel_index(int(err.argmax()), err.shape))
                    bound_hit = Finding(
                        "bounds",
                        program,
                        f"out{o}{list(pos)} on {origin}: error {float(err.max()):.3g} > rigorous "
                        f"bound {bounds[o]:.3g} (exact {float(xe[pos])!r}, C {float(ge[pos])!r})",
                    )
                    break
    found += [f for f in (conformance, bound_hit) if f is not None]
    return found, notes


def check_program(name: str, level: int = 2) -> tuple[list[Finding], list[str]]:
    """Compile program `name` for the C target (proof cache off) and run the three checks."""
    from gdv.driver import CompileOptions, compile_module
    from gdv.ir.diagnostics import IRError

    options = CompileOptions(target="c", level=level, use_cache=False, jobs=1, timeout=10.0)
    try:
        comp = compile_module(PROGRAMS[name], options, log=lambda *_: None)
    except IRError as e:
        return [Finding("error", name, f"the compile failed: {e}")], []
    except AssertionError as e:
        return [Finding("error", name, f"an assertion in gdv failed: {e}")], []
    found, notes = _proof(comp, name)
    more, more_notes = _conformance_and_bounds(comp, name)
    return found + more, notes + more_notes


def run_mutant(name: str) -> dict:
    """Put mutant `name` in (the control run when `name` is empty), check its programs and
    return the report as JSON. Meant for a fresh process: the patch is applied here."""
    start = time.perf_counter()
    if not name:
        report = Report("", "", "")
        programs = tuple(PROGRAMS)
        patch: contextlib.AbstractContextManager = contextlib.nullcontext()
        level = 2
    else:
        m = MUTANTS[name]
        report = Report(m.name, m.where, m.expected)
        programs, patch, level = m.programs, m.patch(), m.level
    FIRED[0] = 0
    try:
        with patch:
            for program in programs:
                found, notes = check_program(program, level)
                report.findings += found
                report.notes += notes
        if name and FIRED[0] == 0:
            report.error = (
                "inert: the mutation never changed what gdv emitted for its programs (the "
                "patched code path is not reached, or its text changed)"
            )
    except Exception as e:  # noqa: BLE001  (a crash of a mutant is reported, never raised)
        report.error = f"{type(e).__name__}: {e}"
        report.findings.append(Finding("error", "", report.error))
    report.seconds = time.perf_counter() - start
    return report.to_json()


def run_mutants(names: list[str] | None = None, jobs: int = 1, progress=None) -> list[Report]:
    """Every mutant in `names` (default: all), each in a fresh spawned process, `jobs` at a
    time; the reports in `names`' order. A KeyError names an unknown mutant."""
    names = list(MUTANTS) if names is None else list(names)
    unknown = [n for n in names if n not in MUTANTS]
    if unknown:
        raise KeyError(unknown[0])
    return run_many(names, jobs, progress)


def run_control(jobs: int = 1) -> Report:
    """Every program with no mutation, in a fresh process: every check must pass."""
    (report,) = run_many([""], jobs)
    return report


WORKER_TIMEOUT = 300.0
"""Seconds one mutant's process may take before it counts as failed (a hang is no catch)."""


def run_many(names: list[str], jobs: int = 1, progress=None) -> list[Report]:
    """`run_mutant` of each name (`""`: the control run), each in a fresh Python process
    (`python -c`, so no patch, import or cache of one run is seen by another, whatever the
    caller's main module), `jobs` at a time; the reports in `names`' order."""
    results: dict[int, Report] = {}
    with concurrent.futures.ThreadPoolExecutor(max_workers=max(1, min(jobs, len(names)))) as pool:
        futures = {pool.submit(_in_process, n): k for k, n in enumerate(names)}
        for fut in concurrent.futures.as_completed(futures):
            k = futures[fut]
            results[k] = fut.result()
            if progress:
                progress(results[k])
    return [results[k] for k in range(len(names))]


def _in_process(name: str) -> Report:
    with tempfile.TemporaryDirectory(prefix="gdv-mutant-") as tmp:
        out = os.path.join(tmp, "report.json")
        code = "import sys; from gdv.fuzzing.mutants import _main; _main(sys.argv[1], sys.argv[2])"
        env = {**os.environ, "OMP_NUM_THREADS": os.environ.get("OMP_NUM_THREADS", "1")}
        try:
            done = subprocess.run(
                [sys.executable, "-c", code, name, out],
                capture_output=True,
                text=True,
                timeout=WORKER_TIMEOUT,
                env=env,
            )
            if done.returncode == 0 and os.path.exists(out):
                with open(out) as f:
                    return Report.from_json(json.load(f))
            why = f"exit status {done.returncode}: {done.stderr.strip()[-400:]}"
        except subprocess.TimeoutExpired:
            why = f"no report within {WORKER_TIMEOUT:g} s"
    m = MUTANTS.get(name)
    report = Report(name, m.where if m else "", m.expected if m else "")
    report.error = f"the mutant's process failed: {why}"
    report.findings.append(Finding("error", "", report.error))
    return report


def _main(name: str, path: str) -> None:
    """The worker process: run one mutant and write its report to `path`."""
    report = run_mutant(name)
    with open(path, "w") as f:
        json.dump(report, f)


def score(reports: list[Report]) -> tuple[int, int, float]:
    """(caught, total, percent)."""
    caught = sum(r.caught for r in reports)
    total = len(reports)
    return caught, total, (100.0 * caught / total if total else math.nan)
