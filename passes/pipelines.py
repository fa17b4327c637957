"""Named pipelines per target and optimisation level."""

from __future__ import annotations

from gdv.ir.diagnostics import IRError
from gdv.ir.targets import TARGET_NAMES, target_info
from gdv.passes.base import Pass
from gdv.passes.canonicalize import Canonicalize
from gdv.passes.decompose_composites import DecomposeComposites
from gdv.passes.dedupe_operands import DedupeOperands
from gdv.passes.eliminate_common_subexpressions import EliminateCommonSubexpressions
from gdv.passes.eliminate_dead_code import EliminateDeadCode
from gdv.passes.fast_math import FastMath
from gdv.passes.fold_constants import FoldConstants
from gdv.passes.fold_layout import FoldLayout
from gdv.passes.fold_pads import FoldPads
from gdv.passes.fuse_conv_epilogues import FuseConvEpilogues
from gdv.passes.fuse_epilogues import FuseEpilogues
from gdv.passes.fuse_kernels import FuseKernels
from gdv.passes.group_rows import GroupRows
from gdv.passes.lower_to_kernels import LowerToKernels
from gdv.passes.plan_memory import PlanMemory
from gdv.passes.reassociate_reductions import ReassociateReductions
from gdv.passes.schedule_kernels import VECTOR_BYTES, ScheduleKernels
from gdv.passes.select_products import SelectProducts

PASSES: dict[str, type[Pass]] = {
    p.name: p
    for p in (
        DecomposeComposites,
        Canonicalize,
        FastMath,
        FoldConstants,
        EliminateCommonSubexpressions,
        EliminateDeadCode,
        FoldLayout,
        LowerToKernels,
        FuseKernels,
        FuseConvEpilogues,
        DedupeOperands,
        ScheduleKernels,
        SelectProducts,
        ReassociateReductions,
        FuseEpilogues,
        GroupRows,
        FoldPads,
        PlanMemory,
    )
}
"""Every pass by name."""

CONV_EPILOGUE_MIN_VECTOR_BYTES = 64
"""`fuse-conv-epilogues` runs for CPU targets with vectors of at least this many bytes
(AVX-512). Measured on mobilenet_v2 (the 2-core Zen 4 host, one thread, -O3, bound,
interleaved, whole model, 2026-12-06): with 64-byte vectors 7.62 -> 7.40 ms; with
`GDV_C_ISA=avx2` (32 bytes) 8.43 -> 8.55 and 8.54 -> 8.60, its depthwise convs taking 0.18-0.19
ms more with their relu6 and its projections only 0.06-0.16 ms less."""

LEVELS = (0, 1, 2, 3)
"""-O3 is -O2 with `reassociate-reductions` (`--reassociate` adds it at -O1 and -O2 too)."""
TARGETS = TARGET_NAMES


def pipeline(
    target: str = "reference",
    level: int = 2,
    fast_math: bool = False,
    vector_bytes: int | None = None,
    vector_registers: int | None = None,
    cache_bytes: tuple[int, int] | list[int] | None = None,
    blocking: tuple[int, int, int] | list[int] | None = None,
    reassociate: bool = False,
    chains: int | None = None,
    tuned: tuple | list = (),
    bound: frozenset[str] | tuple[str, ...] = frozenset(),
    fma: bool = True,
) -> list[Pass]:
    """The passes `gdv compile` runs for `target` at `-O{level}`. The rest are numbers from the
    target's capability descriptor (`Target.schedule_parameters()`): `vector_bytes`, its vector
    width (default `schedule_kernels.VECTOR_BYTES`), sets the schedules' `vector` lanes; with
    `vector_registers`, `chains` (add latency x pipes), `cache_bytes` ((L1 data, L2) bytes),
    `blocking` ((KC, MC, NC) imposed) and `tuned` ((dtype, MR, NV, KC, MC, NC) rows measured
    by `gdv tune`) it sizes the products of `select-products`, which runs at -O2 for every target
    that compiles what it runs (not for an interpreter, which runs the IR as written).
    `reassociate` (implied by -O3) adds `reassociate-reductions` after the schedules at -O1
    and above: float sums in vector orders and products with fused multiply-adds, each a
    `real` claim. `bound` names the parameters the caller will fix once
    (`Compilation.bind`): `select-products` then plans the products that read them for their
    factors packed at bind time (`SelectProducts.bound`), and `plan-memory` lists the kernels
    computed from them alone in the entry's `at_bind`, for the target to compute once then
    (`PlanMemory.bound`). `fma`: whether the target has a fused
    multiply-add instruction; without one `reassociate-reductions` leaves products unfused."""
    if target not in TARGETS:
        raise IRError(f"unknown target '{target}' (available: {', '.join(TARGETS)})")
    if level not in LEVELS:
        raise IRError(f"unknown optimisation level -O{level} (available: -O0, -O1, -O2, -O3)")
    reassociate = reassociate or level == 3
    level = min(level, 2)
    passes: list[Pass] = [DecomposeComposites()]
    if level >= 1:
        passes += [Canonicalize()]
        if fast_math:
            passes += [FastMath()]
        passes += [FoldConstants(), EliminateCommonSubexpressions(), EliminateDeadCode()]
    elif fast_math:
        passes += [FastMath()]
    if level >= 2:
        passes += [FoldLayout()]
    compiled = not target_info(target).interpreter
    cpu = compiled and target_info(target).cpu_schedule
    if level == 1:
        passes += [LowerToKernels(), DedupeOperands()]
        if compiled:
            # The printer decides nothing: a compiled target's kernels get their schedule and
            # products from passes at -O1 too (without fusion), as at -O2.
            passes += [ScheduleKernels(vector_bytes=vector_bytes or VECTOR_BYTES)]
    if level >= 2:
        # A depthwise conv's bias and activation run as it folds (its next conv then reads its
        # output as it is), where the vectors are wide enough for that to pay.
        conv_epilogues = cpu and (vector_bytes or VECTOR_BYTES) >= CONV_EPILOGUE_MIN_VECTOR_BYTES
        passes += [LowerToKernels(), FuseKernels(conv_epilogues=conv_epilogues)]
        if conv_epilogues:
            passes += [FuseConvEpilogues()]
        passes += [
            DedupeOperands(),
            ScheduleKernels(vector_bytes=vector_bytes or VECTOR_BYTES),
        ]
    if level >= 1 and cpu:
        passes += [
            SelectProducts(
                vector_bytes=vector_bytes or VECTOR_BYTES,
                vector_registers=vector_registers,
                cache_bytes=tuple(cache_bytes) if cache_bytes else SelectProducts.cache_bytes,
                blocking=tuple(blocking) if blocking else None,
                chains=chains or SelectProducts.chains,
                tuned=tuple(tuple(row) for row in tuned),
                vectors_in_lanes=bool(reassociate),
                bound=frozenset(bound),
            )
        ]
    if reassociate and level >= 1:
        passes += [ReassociateReductions(block_products=compiled and not cpu, fma=fma)]
    if level >= 2 and cpu:
        # A product's elementwise consumer (bias, activation, residual) runs on each of its
        # tiles while the tile is in cache.
        passes += [FuseEpilogues()]
        # Row-wise kernels run row block by row block, each row in cache for all of them.
        l1 = int(cache_bytes[0]) if cache_bytes else GroupRows.l1_bytes
        passes += [GroupRows(l1_bytes=l1)]
        # A stride-1 convolution's product reads its input unpadded, its pad folded in.
        passes += [FoldPads()]
    # A CPU target computes the kernels that read only bound weights once, at bind time.
    kept = frozenset(bound) if cpu else frozenset()
    if level >= 2:
        passes += [PlanMemory(bound=kept)]
    elif target_info(target).planned_memory:
        # The C target takes every intermediate from the planned arena: every C program has
        # a plan (on core ops at -O0, on kernels at -O1).
        passes += [PlanMemory(bound=kept)]
    return passes


def pass_names(target: str = "reference", level: int = 2, fast_math: bool = True) -> list[str]:
    return [p.name for p in pipeline(target, level, fast_math)]
