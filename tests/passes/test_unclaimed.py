"""A pass that changes a kernel's fold order or rounding without claiming it gets, from the pass
manager, the claim it should have made (`gdv.passes.unclaimed`), under `fp`: refuted at compile
time with a counterexample that replays. Honest passes, whose own claims cover their changes,
get nothing extra."""

from __future__ import annotations

from dataclasses import dataclass, replace

from gdv.api import parse
from gdv.ir.core import Module, Op
from gdv.ir.ops.kernel import kernel_bodies
from gdv.passes.base import Pass, PassResult, Step, reordered, rescheduled
from gdv.passes.lower_to_kernels import LowerToKernels
from gdv.passes.manager import PassManager
from gdv.passes.reassociate_reductions import ReassociateReductions
from gdv.passes.schedule_kernels import ScheduleKernels, reorder_obligation
from gdv.validate.counterexample import replay
from gdv.validate.discharge import discharge

ROWS = """func @main(%x: f32[6,64]) -> f32[6] {
  %s = reduce_sum(%x) {axes = [1]} : f32[6]
  return %s
}
"""


@dataclass(frozen=True)
class Rescheduler(Pass):
    """A loop-stage pass that gives every float sum kernel `attrs`, recording a schedule
    step (no claim) unless `claim`, in place on the input's ops when `in_place`."""

    name = "fake-schedule"
    stage_in = "loop"
    attrs: tuple = (("accumulators", 2),)
    claim: bool = False
    in_place: bool = False

    def run(self, module: Module) -> PassResult:
        obligations, steps, functions = [], [], []
        for fn in module.functions:
            types = fn.types()
            ops = []
            for op in fn.ops:
                if op.name != "kernel" or op.attrs.get("combiner") != "add":
                    ops.append(op)
                    continue
                if self.in_place:
                    op.attrs.update(dict(self.attrs))
                    new = op
                else:
                    attrs = {**op.attrs, **dict(self.attrs)}
                    new = Op(op.result, op.name, list(op.operands), attrs, op.type, op.loc)
                ops.append(new)
                if self.claim:
                    steps.append(reordered(fn.name, len(ops) - 1, new, len(obligations)))
                    body = module.function(op.attrs["body"])
                    obligations.append(
                        reorder_obligation(
                            self.name, "split", op, new, types, body, 0, "claimed", ["split"]
                        )
                    )
                else:
                    steps.append(rescheduled(fn.name, len(ops) - 1, new))
            functions.append(replace(fn, ops=ops))
        return PassResult(Module(functions, module.filename), obligations, True, steps)


def _run(*passes: Pass):
    return PassManager([LowerToKernels(), *passes]).run(parse(ROWS))


def _unclaimed(result) -> list:
    return [o for o in result.obligations if "/unclaimed-reorder/" in o.id]


def _refuted_with_replaying_counterexample(ob) -> None:
    (out,) = discharge([ob], jobs=1, use_cache=False)
    assert out.status == "refuted", (out.status, out.reason)
    cex = out.counterexample
    assert cex is not None and out.seconds < 5
    with kernel_bodies(ob.functions):
        assert replay(ob.src, ob.tgt, cex.inputs, "fp") is not None


def test_unclaimed_accumulators_get_an_fp_claim_that_is_refuted() -> None:
    result = _run(Rescheduler())
    (kernel,) = result.module.entry.ops
    assert kernel.attrs["accumulators"] == 2
    (ob,) = _unclaimed(result)
    assert ob.id == "fake-schedule/unclaimed-reorder/equivalence"
    assert ob.theory == "fp" and ob.assumptions == [] and ob.kind == "equivalence"
    assert "accumulators 1 -> 2" in ob.claim
    assert "accumulators" not in ob.src.ops[0].attrs
    assert ob.tgt.ops[0].attrs["accumulators"] == 2
    assert result.records[-1].changed
    _refuted_with_replaying_counterexample(ob)


def test_unclaimed_lanes_are_refuted() -> None:
    (ob,) = _unclaimed(_run(Rescheduler(attrs=(("lanes", 8),))))
    assert "lanes 1 -> 8" in ob.claim
    _refuted_with_replaying_counterexample(ob)


def test_a_change_made_in_place_on_the_input_is_still_seen() -> None:
    (ob,) = _unclaimed(_run(Rescheduler(in_place=True)))
    assert "accumulators" not in ob.src.ops[0].attrs
    _refuted_with_replaying_counterexample(ob)


def test_a_claimed_change_and_a_schedule_only_change_get_nothing_extra() -> None:
    claimed = _run(Rescheduler(claim=True))
    assert _unclaimed(claimed) == []
    assert [o.id for o in claimed.records[-1].obligations] == ["fake-schedule/split/equivalence"]
    schedule = (("tile", [6, 64]), ("order", [0, 1]), ("vector", 8), ("parallel", [0]))
    assert _unclaimed(_run(Rescheduler(attrs=schedule))) == []


def test_the_real_passes_claims_cover_their_changes() -> None:
    split = _run(ScheduleKernels(accumulators=4))
    assert split.module.entry.ops[0].attrs["accumulators"] == 4
    assert _unclaimed(split) == []
    lanes = _run(ScheduleKernels(vector_bytes=32), ReassociateReductions())
    assert lanes.module.entry.ops[0].attrs["lanes"] > 1
    assert _unclaimed(lanes) == []
    assert [o.id for o in lanes.records[-1].obligations] == [
        "reassociate-reductions/lanes/equivalence"
    ]


def test_the_step_records_are_unchanged() -> None:
    # the extra claim is appended: the steps' obligation numbers still name the pass's own
    result = _run(Rescheduler())
    steps = result.records[-1].steps
    assert steps and all(isinstance(s, Step) and s.obligation is None for s in steps)
