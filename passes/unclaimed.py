"""Fail-closed claims for kernels a pass changed without saying so.

A pass that changes a kernel's meaning (its fold order or rounding: `accumulators`, `lanes`,
`contract`, the `reduce` dims and their order, or any other attribute that is not pure
schedule) must claim it: an equivalence obligation whose pair is the kernel before and after
(`schedule_kernels.reorder_obligation`, `real` for a reordering). The coverage claims that
schedules carry ignore those attributes, so a pass that forgot the claim would compile as
"proved". The pass manager therefore compares every kernel before and after each pass (by
function and result name, the identity the loop-stage passes keep) and, for each change of a
meaning attribute that none of the pass's own equivalence obligations covers, adds the claim
the pass should have made, under `fp`, with no assumptions: a reordering the pass did not
claim must be bit-exact, which a reordered float sum is not, so the obligation is refuted,
with a counterexample that replays (`<pass>/unclaimed-reorder/equivalence`).

A change counts as covered when an equivalence obligation of the same pass has, in `src`, a
kernel of that result name with the old meaning attributes and, in `tgt`, one with the new:
the claims `schedule-kernels` (`split-accumulators`), `reassociate-reductions` (`lanes`,
`contract`), `fuse-kernels` and `dedupe-operands` make. So honest passes get no extra
obligation.
"""

from __future__ import annotations

import ast
import copy
from dataclasses import replace

from gdv.ir.core import Function, Module, Op, Param
from gdv.ir.obligation import Obligation
from gdv.ir.ops.kernel import PRODUCT_KEYS
from gdv.ir.printer import print_function

RULE = "unclaimed-reorder"

SCHEDULE_ONLY = frozenset(("tile", "order", "vector", "parallel", "row_group", "strategy"))
"""Kernel attributes that only say how a backend runs the nest (IR_SPEC, ir/ops/kernel.py):
their claim is the `coverage` formula `gdv.validate.schedules` derives, a product's reduce
blocks in increasing order included. Every other attribute (the body's name aside, whose
renaming comes with a rewrite's claim) is part of the kernel's meaning."""

SCHEDULE_ONLY |= frozenset(PRODUCT_KEYS)

DEFAULTS = {"accumulators": 1, "lanes": 1}
"""Meaning attributes whose absence means this value."""


def meaning(attrs: dict) -> dict:
    """The attributes of a kernel that set what it computes, its fold order and rounding
    (defaults dropped: `accumulators = 1` is no change)."""
    return {
        k: v
        for k, v in attrs.items()
        if k not in SCHEDULE_ONLY and k != "body" and DEFAULTS.get(k, object()) != v
    }


def _key(attrs: dict) -> str:
    """A kernel's meaning attributes as text (a snapshot that later edits cannot change;
    `ast.literal_eval` reads it back)."""
    return repr(sorted(meaning(attrs).items()))


Snapshot = dict[tuple[str, str], tuple[Op, str]]


def snapshot(module: Module) -> Snapshot:
    """Every kernel of `module` with its meaning attributes as text, taken before a pass
    runs: a pass that edits an op's attributes in place cannot hide the change."""
    return {
        (fn.name, op.result): (op, _key(op.attrs))
        for fn in module.functions
        for op in fn.ops
        if op.name == "kernel"
    }


def _claimed(obligations: list[Obligation]) -> dict[str, dict[str, set[str]]]:
    """Per kernel result name, the meaning changes the pass's equivalence obligations claim:
    {meaning in `src`: meanings in `tgt`}."""
    edges: dict[str, dict[str, set[str]]] = {}
    for ob in obligations:
        if ob.kind != "equivalence":
            continue
        tgts: dict[str, set[str]] = {}
        for o in ob.tgt.ops:
            if o.name == "kernel":
                tgts.setdefault(o.result, set()).add(_key(o.attrs))
        for o in ob.src.ops:
            if o.name == "kernel" and o.result in tgts:
                edges.setdefault(o.result, {}).setdefault(_key(o.attrs), set()).update(
                    tgts[o.result]
                )
    return edges


def _covered(before: str, after: str, edges: dict[str, set[str]]) -> bool:
    """Whether the claims (`edges`, for one kernel) take its meaning from `before` to
    `after`, in one claim or a chain of them (a consumer fused with one producer, then with
    the next, each step its own claim)."""
    seen, todo = {before}, [before]
    while todo:
        for nxt in edges.get(todo.pop(), ()):
            if nxt == after:
                return True
            if nxt not in seen:
                seen.add(nxt)
                todo.append(nxt)
    return False


def _side(name: str, op: Op, fn: Function, module: Module) -> tuple[Function, Function | None]:
    """The one-kernel function `name` computing `op` as in `fn`, and its body."""
    types = fn.types()
    params = [Param(v, types[v]) for v in dict.fromkeys(op.operands)]
    body = module.function(op.attrs.get("body", ""))
    return Function(name, params, [op.type], [op], [op.result]), body


def unclaimed_obligations(
    pass_name: str,
    before_kernels: Snapshot,
    before: Module,
    after: Module,
    obligations: list[Obligation],
) -> list[Obligation]:
    """The claims `pass_name` should have made for the kernels whose meaning attributes it
    changed from `before` to `after` without an equivalence obligation of its own
    (`obligations`) covering the change: the kernel before against after, under `fp`."""
    out: list[Obligation] = []
    functions = {f.name: f for f in before.functions}
    claimed: dict[str, dict[str, set[str]]] | None = None
    for fn in after.functions:
        for op in fn.ops:
            if op.name != "kernel" or (fn.name, op.result) not in before_kernels:
                continue
            old, old_key = before_kernels[(fn.name, op.result)]
            new_key = _key(op.attrs)
            if new_key == old_key:
                continue
            if claimed is None:
                claimed = _claimed(obligations)
            if _covered(old_key, new_key, claimed.get(op.result, {})):
                continue
            try:
                old_meaning = dict(ast.literal_eval(old_key))
            except (ValueError, SyntaxError):  # an attribute with no literal text (nan)
                old_meaning = meaning(old.attrs)
            new_meaning = meaning(op.attrs)
            # The kernel as it was: its schedule and body as they are now on the op (a pass
            # may have edited them in place: they do not change the meaning), its meaning as
            # snapshotted.
            run = {k: v for k, v in old.attrs.items() if k in SCHEDULE_ONLY or k == "body"}
            src_op = Op(
                op.result, old.name, list(old.operands), copy.deepcopy(run | old_meaning),
                old.type, old.loc,
            )  # fmt: skip
            tgt_op = Op(
                op.result, op.name, list(op.operands), copy.deepcopy(op.attrs), op.type, op.loc
            )
            src, src_body = _side("src", src_op, functions.get(fn.name, fn), before)
            tgt, tgt_body = _side("tgt", tgt_op, fn, after)
            bodies = [b for b in (src_body, tgt_body) if b is not None]
            if src_body is not None and tgt_body is not None and src_body.name == tgt_body.name:
                if print_function(src_body) == print_function(tgt_body):
                    bodies = [tgt_body]
                else:  # the same name, another body: the old one under a name of its own
                    renamed = replace(src_body, name=f"{src_body.name}.before")
                    src.ops[0] = replace(src_op, attrs={**src_op.attrs, "body": renamed.name})
                    bodies = [renamed, tgt_body]
            changed = sorted(set(old_meaning) ^ set(new_meaning)) + sorted(
                k for k in set(old_meaning) & set(new_meaning) if old_meaning[k] != new_meaning[k]
            )
            shown = ", ".join(
                f"{k} {old_meaning.get(k, DEFAULTS.get(k, '-'))} -> "
                f"{new_meaning.get(k, DEFAULTS.get(k, '-'))}"
                for k in changed
            )
            index = len(out)
            out.append(
                Obligation(
                    id=f"{pass_name}/{RULE}/equivalence" + (f"#{index}" if index else ""),
                    kind="equivalence",
                    theory="fp",
                    src=src,
                    tgt=tgt,
                    claim=f"%{op.result}: {pass_name} changed {shown} without claiming it; "
                    "unclaimed, the kernel must be the same bit for bit",
                    loc=op.loc or old.loc,
                    functions=bodies,
                )
            )
    return out
