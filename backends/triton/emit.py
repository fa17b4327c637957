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
from gdv.ir.dtypes import FLOAT8_DTYPES, SMALL_INT_DTYPES, DType
from gdv.ir.types import TensorType

TL = {
    DType.F64: "tl.float64",
    DType.F32: "tl.float32",
    DType.F16: "tl.float16",
    DType.BF16: "tl.bfloat16",
    DType.I64: "tl.int64",
    DType.I32: "tl.int32",
    DType.I8: "tl.int8",
    DType.I1: "tl.int1",
}
"""The dtypes the target holds, as Triton types."""
COMPUTE = {DType.F16: DType.F32, DType.BF16: DType.F32}
"""Where a kernel holds values of a dtype in another: f16 and bf16 values are held exactly in
f32 and every result is rounded back to its dtype at once (for add, sub, mul, div and sqrt the
f32 result rounded again is the correctly rounded one: 24 >= 2p + 2 bits, p = 11 and 8)."""
TORCH = {
    DType.F64: "torch.float64",
    DType.F32: "torch.float32",
    DType.F16: "torch.float16",
    DType.BF16: "torch.bfloat16",
    DType.I64: "torch.int64",
    DType.I32: "torch.int32",
    DType.I8: "torch.int8",
    DType.I1: "torch.bool",
}
POINTER = {
    DType.F64: "*fp64",
    DType.F32: "*fp32",
    DType.F16: "*fp16",
    DType.BF16: "*bf16",
    DType.I64: "*i64",
    DType.I32: "*i32",
    DType.I8: "*i8",
    DType.I1: "*i1",
}
"""`triton.compile` signature of a pointer to each dtype."""
_NARROW_INT_REASON = (
    "the Triton target holds i8, i32 and i64 only: its conversions (float to integer with "
    "saturation, unsigned to float), unsigned comparisons and folds for {d} are not written "
    "or checked on a GPU yet"
)
UNSUPPORTED_DTYPES: dict[DType, str] = {
    d: _NARROW_INT_REASON.format(d=d)
    for d in (DType.I16, DType.U8, DType.U16, DType.U32, DType.U64)
}
"""Dtypes the target refuses, with the reason: the integer dtypes added in gdv 0.6 (issue
19), which the C target and the reference run."""
UNSUPPORTED_DTYPES.update(
    {
        d: f"the Triton target holds no float8 dtype: {d}'s exact decoding and encoding "
        "with saturation (IR_SPEC.md section 8) are written and checked for the C target only"
        for d in FLOAT8_DTYPES
    }
)
UNSUPPORTED_DTYPES.update(
    {
        d: f"the Triton target holds no sub-byte integer: {d} (IR_SPEC.md section 8) is "
        "written and checked for the C target only"
        for d in SMALL_INT_DTYPES
    }
)


def compute(dtype: DType) -> DType:
    """The dtype a kernel holds `dtype`'s values in."""
    return COMPUTE.get(dtype, dtype)


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
    constexprs: dict = field(default_factory=dict)
    """Constexpr arguments the build passes besides LANES (a dot kernel's `DOT`: True)."""


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
    helpers: dict[str, str] = field(default_factory=dict)
    """The helper functions the kernels call, by name (`backends/triton/elementwise.py`)."""
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
    ones: str = "[1]"
    """The block's shape with every axis 1 (what a constant is made with, to broadcast)."""

    def fresh(self) -> str:
        self.counter[0] += 1
        return f"s{self.counter[0]}"

    def error(self, op: Op, reason: str) -> IRError:
        """An error at the kernel (body ops have no position of their own in the entry)."""
        return self.prog.error(
            self.kernel, f"its body op {op.name} (%{comment(op.result)}) {reason}"
        )
