"""`reassociate-reductions` (`-O3`, `--reassociate`): run float sums in the orders vector
hardware wants, each change a `real` claim (IR_SPEC.md sections 5 and 7).

Two rewrites of a scheduled kernel's attributes, each changing its meaning, so each comes with
an `equivalence` obligation under the `real` theory:

- a product (`strategy = "product"`, f32; for triton, which has no packed products, a nest that
  is a matrix product, `matrix_product`) gets `contract = "fma"`: every step of its fold is
  one fused multiply-add, acc = fma(x, y, acc), instead of a rounded multiply and a rounded
  add. Over the reals fma(x, y, acc) = acc + x * y, so the two kernels are the same term and
  the claim proves by congruence.
- a float sum over one reduce dim read contiguously, whose outputs are not adjacent in memory
  (a row sum: softmax's sum of exp, layer_norm's mean and variance), gets `lanes = L`:
  position p goes to lane p mod L, the lanes are folded apart and then in lane order, so L
  vector lanes add independently. L is the kernel's `vector` lanes times 4, 2 or 1, the
  largest that divides the extent at least twice. The claim holds over the reals by the `nest`
  lemma (sum_{k<A*L} f(k) = sum_{l<L} sum_{i<A} f(i*L + l)), the one assumption it cites.

The rigorous error bound of the program does not grow: a summation tree's error is at most u
times the sum over terms of |term| times the additions the term goes through, and the
sequential order (every term through the most) maximises it, so the bound of the sequential
fold bounds the lanes too (`gdv.validate.bounds.kernel`); a fused multiply-add is the case of
that bound where the product's rounding error is zero. The driver records every output's bound
before and after the pass (`PassRecord.bound_change`), the evidence bundle stores it, and the
policy's `max_abs_error` is checked against the final program's bound.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

from gdv.ir.core import Module, Op
from gdv.ir.obligation import Obligation
from gdv.ir.ops.kernel import bodies_used, contracted_factors, params_of
from gdv.passes.base import Pass, PassResult, Step, operand_step, reordered
from gdv.passes.schedule_kernels import reorder_obligation

LANE_FACTORS = (4, 2, 1)
"""Vector accumulators per sum, most first (4 x 16 f32 lanes hide an AVX-512 add's latency)."""


def lanes_for(op: Op, types: dict) -> int:
    """The lanes a kernel's sum gets (1: left as it is)."""
    a = op.attrs
    red = a["reduce"]
    if (
        a["combiner"] != "add"
        or not op.type.dtype.is_float
        or len(red) != 1
        or a.get("accumulators", 1) > 1
        or a.get("lanes", 1) > 1
        or a.get("strategy") == "product"
    ):
        return 1
    (r,) = red
    n = len(a["space"])
    steps = [[operand_step(op, types, k, d) for d in range(n)] for k in range(len(op.operands))]
    if not all(s[r] in (0, 1) for s in steps) or not any(s[r] == 1 for s in steps):
        return 1  # the sum does not run along memory
    # the result's unit-stride dim (one of extent 1 holds no adjacent outputs)
    last_out = next((d for d in reversed(a["out"]) if a["space"][d] > 1), None)
    if last_out is not None and all(s[last_out] in (0, 1) for s in steps):
        return 1  # adjacent outputs: the nest already folds them in vector lanes, in order
    vector = max(1, int(a.get("vector", 1)))
    extent = a["space"][r]
    for f in LANE_FACTORS:
        lanes = vector * f
        if lanes > 1 and extent % lanes == 0 and extent >= 2 * lanes:
            return lanes
    return 1


def contracts(op: Op, module: Module, types: dict | None = None) -> bool:
    """Whether a product kernel's multiply may fuse with its add (f32, one accumulator). With
    `types` a nest (no `strategy`) qualifies too when it is a matrix product (`matrix_product`):
    a target without packed products (triton) runs those as blocked dots."""
    a = op.attrs
    if "contract" in a or op.type.dtype.value != "f32":
        return False
    if a.get("strategy") != "product" and not (
        types is not None and matrix_product(op, module, types)
    ):
        return False
    body = module.function(a["body"])
    return body is not None and contracted_factors(body) is not None


def matrix_product(op: Op, module: Module, types: dict) -> bool:
    """Whether a kernel nest is a matrix product: an f32 `add` fold over one reduce dim of a
    body that returns the product of two factors, each computed from some of its parameters
    (a producer fused in: a normalisation, an activation), the operands of each reading an out
    dim (of extent above 1) that the other's never read."""
    a = op.attrs
    if (
        a.get("strategy") is not None
        or a["combiner"] != "add"
        or len(a["reduce"]) != 1
        or a.get("accumulators", 1) > 1
        or a.get("lanes", 1) > 1
        or op.type.dtype.value != "f32"
    ):
        return False
    body = module.function(a["body"])
    factors = contracted_factors(body) if body is not None else None
    if factors is None or factors[0] == factors[1]:
        return False
    params = [p.name for p in body.params]
    kx, ky = ({params.index(p) for p in params_of(body, f)} for f in factors)

    def reads(ks: set[int], d: int) -> bool:
        return any(operand_step(op, types, k, d) != 0 for k in ks)

    def only(mine: set[int], other: set[int]) -> bool:
        return any(a["space"][d] > 1 and reads(mine, d) and not reads(other, d) for d in a["out"])

    return only(kx, ky) and only(ky, kx)


@dataclass(frozen=True)
class ReassociateReductions(Pass):
    name = "reassociate-reductions"
    stage_in = "loop"
    block_products: bool = False
    """Nests that are matrix products get `contract` too (`matrix_product`): set for a target
    without packed products that runs them as blocked dots of fused multiply-adds (triton)."""
    fma: bool = True
    """Whether the target has a fused multiply-add instruction: without one (x86-64 baseline,
    SSE2) every fused step is a software `fmaf`, far slower than the separate multiply and add,
    so products are left as they are (sums still get lanes)."""

    def run(self, module: Module) -> PassResult:
        bodies = bodies_used(module.functions)
        obligations: list[Obligation] = []
        steps: list[Step] = []
        functions = []
        for fn in module.functions:
            types = fn.types()
            ops = []
            for op in fn.ops:
                change = None
                if op.name == "kernel" and fn.name not in bodies and "tile" in op.attrs:
                    if self.fma and contracts(op, module, types if self.block_products else None):
                        change = ({"contract": "fma"}, [], "fuses each multiply with its add")
                    elif (lanes := lanes_for(op, types)) > 1:
                        change = ({"lanes": lanes}, ["nest"], f"sums in {lanes} lanes")
                if change is None:
                    ops.append(op)
                    continue
                attrs, assumptions, what = change
                new = Op(op.result, op.name, list(op.operands), {**op.attrs, **attrs}, op.type)
                new.loc, new.name_loc = op.loc, op.name_loc
                ops.append(new)
                rule = "contract" if "contract" in attrs else "lanes"
                body = module.function(op.attrs["body"])
                steps.append(reordered(fn.name, len(ops) - 1, new, len(obligations)))
                obligations.append(
                    reorder_obligation(
                        self.name, rule, op, new, types, body, len(obligations),
                        f"{what}, the same sum over the reals", assumptions,
                    )
                )  # fmt: skip
            functions.append(replace(fn, ops=ops))
        return PassResult(Module(functions, module.filename), obligations, bool(obligations), steps)
