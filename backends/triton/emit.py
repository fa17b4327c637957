"""The Python program the Triton target writes: its kernels, its host launcher, the printer's
own choices, and the dtypes it holds.

The artifact is one Python module: one `@triton.jit` function per loop-stage kernel, a table
`KERNELS` of their signatures and launch constants (what `triton.compile` needs to build them
for a GPU that is not there), and `run(inputs, device, fallbacks)`, the launcher, which takes
torch tensors keyed by parameter name and returns the entry function's results. Program names
appear only in comments.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from gdv.ir.core import Function, Module, Op
from gdv.ir.diagnostics import IRError, Loc
from gdv.ir.dtypes import DType
from gdv.ir.types import TensorType

TL = {DType.F32: "tl.float32", DType.I64: "tl.int64", DType.I32: "tl.int32", DType.I1: "tl.int1"}
"""The dtypes the target claims, as Triton types."""
TORCH = {
    DType.F32: "torch.float32",
    DType.I64: "torch.int64",
    DType.I32: "torch.int32",
    DType.I1: "torch.bool",
}
POINTER = {DType.F32: "*fp32", DType.I64: "*i64", DType.I32: "*i32", DType.I1: "*i1"}
"""`triton.compile` signature of a pointer to each dtype."""
UNSUPPORTED_DTYPES: dict[DType, str] = {
    DType.F64: "not claimed yet: no conformance run for f64 on this target",
    DType.F16: "not claimed yet: no conformance run for f16 on this target",
    DType.BF16: "not claimed yet: no conformance run for bf16 on this target",
    DType.I8: "not claimed yet: no conformance run for i8 on this target",
}
"""Dtypes the target refuses, with the reason."""

INDEX_LIMIT = 2**31 - 1
"""Kernels index with 32-bit integers: no tensor or iteration space may have more elements."""


def where(op: Op, module: Module) -> Loc:
    """The location to report for `op`."""
    return op.name_loc or op.loc or Loc(module.filename, 1, 1)


def comment(text: str) -> str:
    """`text` safe inside a Python comment (one line, ASCII)."""
    return "".join(c if 32 <= ord(c) < 127 else "?" for c in text)


def error(module: Module, op: Op, reason: str) -> IRError:
    """The compile-time error for an op the target cannot do."""
    return IRError(f"target triton does not support {op.name}: {reason}", where(op, module))


def check_dtype(module: Module, op: Op, dtype: DType) -> None:
    """An IRError naming `op` when the target does not hold `dtype`."""
    if dtype not in TL:
        reason = UNSUPPORTED_DTYPES.get(dtype, f"no Triton type for {dtype}")
        raise IRError(
            f"target triton does not support {op.name} on {dtype}: {reason}", where(op, module)
        )


@dataclass
class KernelInfo:
    """What the build needs of one generated kernel."""

    name: str
    signature: dict[str, str]
    lanes: int
    num_warps: int
    grid: int
    note: str


@dataclass
class Program:
    """The artifact being written for one module."""

    module: Module
    entry: Function
    kernels: list[str] = field(default_factory=list)
    """Source of each `@triton.jit` function."""
    launcher: list[str] = field(default_factory=list)
    """Lines of `run`'s body."""
    data: list[str] = field(default_factory=list)
    """Module-level constants (non-splat constant and iota values, exact bytes)."""
    infos: list[KernelInfo] = field(default_factory=list)
    choices: list[dict] = field(default_factory=list)
    """What the printer chose itself (no IR attribute deciding it), with the reason."""
    helpers: set[str] = field(default_factory=set)
    """Names of the helper functions (`backends/triton/elementwise.py`) the kernels call."""
    names: dict[str, str] = field(default_factory=dict)
    """IR value name -> Python variable of the launcher."""

    def types(self) -> dict[str, TensorType]:
        return self.entry.types()

    def var(self, value: str) -> str:
        """The launcher's variable holding IR value `value`."""
        if value not in self.names:
            self.names[value] = f"v{len(self.names)}"
        return self.names[value]

    def error(self, op: Op, reason: str) -> IRError:
        return error(self.module, op, reason)

    def choose(self, op: Op, choice: str, value, why: str) -> None:
        self.choices.append(
            {"kernel": op.result, "op": op.name, "choice": choice, "value": value, "why": why}
        )


@dataclass
class BodyWriter:
    """One kernel body being written: its lines and the block shape every value has."""

    prog: Program
    kernel: Op
    lines: list[str]
    indent: str
    counter: list[int]

    def fresh(self) -> str:
        self.counter[0] += 1
        return f"s{self.counter[0]}"

    def error(self, op: Op, reason: str) -> IRError:
        """An error at the kernel (body ops have no position of their own in the entry)."""
        return self.prog.error(
            self.kernel, f"its body op {op.name} (%{comment(op.result)}) {reason}"
        )
