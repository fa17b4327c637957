"""A cost model of a compiled module, read from its IR: floating-point operations and bytes per
op of the entry function, and the roofline time they allow on a machine whose peaks the
capability descriptor gives (issue 16, item 5).

- A kernel costs its iteration space times its body's ops (constants excluded), plus one
  combine per point when it reduces: a product kernel (`mul` folded with `add`) is 2 M N K.
  Every scalar op counts one, a transcendental too.
- A core op: elementwise ops one per result element (`constant` and `iota` none), reductions
  one per operand element, `dot` 2 per multiply-add, `conv2d` 2 per multiply-add of its
  window, layout ops and `take` none.
- Bytes are the compulsory traffic: each distinct operand read once and the result written
  once (a `reshape` shares its operand's bytes: none).
- The roofline of an op is max(flops / peak, bytes / bandwidth): `peak_gflops.f32_mul_add` (the
  bit-exact ceiling: separate multiplies and adds on every core), halved for f64 (half the
  lanes), and `copy_bandwidth_gbs`. Its percent of the roofline is that time over the time
  measured.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from gdv.ir.core import Module, Op
from gdv.ir.dtypes import DType
from gdv.ir.ops import get as get_spec
from gdv.ir.types import TensorType

FREE = frozenset({"constant", "iota"})
"""Elementwise ops that compute nothing per element (they write their result)."""


@dataclass(frozen=True)
class OpCost:
    """What one op of the entry function costs: its position, result, op, how it runs
    (`kind`), result dtype, flops and compulsory bytes, and where it came from."""

    index: int
    value: str
    op: str
    kind: str
    dtype: str
    flops: int
    bytes: int
    location: str | None

    @property
    def intensity(self) -> float | None:
        """Flops per byte (None: no bytes)."""
        return self.flops / self.bytes if self.bytes else None


@dataclass(frozen=True)
class Roofline:
    """The machine's peaks: f32 GFLOP/s and copy bandwidth in GB/s (bytes read + written)."""

    peak_gflops: float
    bandwidth_gbs: float

    @classmethod
    def from_descriptor(cls, descriptor: dict) -> Roofline:
        """The peaks of a capability descriptor (`gdv.backends.capabilities.descriptor`)."""
        machine = descriptor.get("machine") or {}
        peaks = machine.get("peak_gflops") or {}
        return cls(
            float(peaks.get("f32_mul_add", 0.0)), float(machine.get("copy_bandwidth_gbs", 0.0))
        )

    def peak(self, dtype: str) -> float:
        """GFLOP/s available to an op computing in `dtype`."""
        return self.peak_gflops / 2 if dtype == DType.F64.value else self.peak_gflops

    def seconds(self, cost: OpCost) -> float:
        """The least time the op can take: bound by compute or by memory."""
        compute = cost.flops / (self.peak(cost.dtype) * 1e9) if self.peak_gflops > 0 else 0.0
        memory = cost.bytes / (self.bandwidth_gbs * 1e9) if self.bandwidth_gbs > 0 else 0.0
        return max(compute, memory)

    def bound(self, cost: OpCost) -> str:
        """`compute` or `memory`: which ceiling the op meets first (`none`: it costs nothing)."""
        if not cost.flops and not cost.bytes:
            return "none"
        compute = cost.flops / (self.peak(cost.dtype) * 1e9) if self.peak_gflops > 0 else 0.0
        memory = cost.bytes / (self.bandwidth_gbs * 1e9) if self.bandwidth_gbs > 0 else 0.0
        return "compute" if compute >= memory else "memory"


def nbytes(t: TensorType) -> int:
    return t.num_elements * max(1, t.dtype.bits // 8)


def kind(op: Op) -> str:
    """How an op runs on the C target: `product` (a packed matrix product), `reduction` or
    `elementwise` kernel, or the op's family (`layout`, `reduce`, `contract`, ...)."""
    if op.name == "kernel":
        if op.attrs.get("strategy") == "product":
            return "product"
        return "reduction" if op.attrs.get("reduce") else "elementwise"
    spec = get_spec(op.name)
    return spec.family if spec is not None else "unknown"


def op_cost(module: Module, op: Op, types: dict[str, TensorType]) -> tuple[int, int]:
    """(flops, bytes) of `op` in `module`'s entry function."""
    result = op.type
    if op.name == "reshape":
        return 0, 0
    operands = list(dict.fromkeys(op.operands))  # a value read twice is read once
    traffic = sum(nbytes(types[o]) for o in operands) + nbytes(result)
    if op.name == "kernel":
        points = math.prod(int(s) for s in op.attrs["space"])
        body = module.function(op.attrs["body"])
        per_point = sum(1 for b in body.ops if b.name not in FREE) if body is not None else 0
        if op.attrs.get("reduce") and op.attrs.get("combiner", "none") != "none":
            per_point += 1
        flops = points * per_point
        epi = module.function(op.attrs["epilogue"]) if "epilogue" in op.attrs else None
        if epi is not None:  # once per result element
            flops += result.num_elements * sum(1 for b in epi.ops if b.name not in FREE)
        return flops, traffic
    spec = get_spec(op.name)
    family = spec.family if spec is not None else ""
    if family == "elementwise":
        return (0 if op.name in FREE else result.num_elements), traffic
    if family == "reduce":
        return types[op.operands[0]].num_elements, traffic
    if op.name == "dot":
        lhs = types[op.operands[0]]
        inner = math.prod(lhs.shape[d] for d in op.attrs["lhs_contract"])
        return 2 * result.num_elements * inner, traffic
    if op.name == "matmul":
        inner = types[op.operands[0]].shape[-1]
        return 2 * result.num_elements * inner, traffic
    if op.name == "conv2d":
        window = math.prod(types[op.operands[1]].shape[1:])
        return 2 * result.num_elements * window, traffic
    if family == "composite":  # never in a compiled module (the pipeline decomposes them)
        return 5 * result.num_elements, traffic
    return 0, traffic  # layout ops, take: data movement only


def module_costs(module: Module) -> list[OpCost]:
    """The cost of every op of `module`'s entry function, in program order."""
    entry = module.entry
    if entry is None:
        return []
    types = entry.types()
    out = []
    for index, op in enumerate(entry.ops):
        flops, traffic = op_cost(module, op, types)
        out.append(
            OpCost(
                index,
                op.result,
                op.name,
                kind(op),
                op.type.dtype.value,
                int(flops),
                int(traffic),
                str(op.loc) if op.loc is not None else None,
            )
        )
    return out
