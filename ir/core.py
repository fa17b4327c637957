"""The IR's data: ops, parameters, functions and modules (IR_SPEC.md section 1).

Values are named, SSA: an op names its operands by their `%NAME` (without the `%`), and each
name is defined once, as a parameter or an op result, before any use (the verifier checks it).
Locations are carried for messages and ignored by equality.
"""

from __future__ import annotations

import math
import struct
from dataclasses import dataclass, field
from fractions import Fraction
from typing import Any

from gdv.ir.diagnostics import Loc
from gdv.ir.dtypes import DType
from gdv.ir.types import TensorType

AttrValue = Any
"""int | bool | float | Fraction | str | DType | list[AttrValue]."""


def attr_key(value: AttrValue) -> tuple:
    """A hashable key equal for equal attribute values: NaNs are one value, -0.0 is not 0.0."""
    if isinstance(value, bool):
        return ("b", value)
    if isinstance(value, int):
        return ("i", value)
    if isinstance(value, float):
        if math.isnan(value):
            return ("f", "nan")
        return ("f", struct.pack(">d", value))
    if isinstance(value, Fraction):
        return ("q", value.numerator, value.denominator)
    if isinstance(value, str):
        return ("s", value)
    if isinstance(value, DType):
        return ("d", value.value)
    if isinstance(value, list | tuple):
        return ("l", tuple(attr_key(v) for v in value))
    raise TypeError(f"not an attribute value: {value!r}")


def attrs_key(attrs: dict[str, AttrValue]) -> tuple:
    return tuple((k, attr_key(v)) for k, v in attrs.items())


def _attrs_equal(a: dict[str, AttrValue], b: dict[str, AttrValue]) -> bool:
    return a.keys() == b.keys() and all(attr_key(a[k]) == attr_key(b[k]) for k in a)


@dataclass(eq=False)
class Op:
    """`%result = name(operands) {attrs} : type`."""

    result: str
    name: str
    operands: list[str]
    attrs: dict[str, AttrValue]
    type: TensorType
    loc: Loc | None = None
    operand_locs: list[Loc] = field(default_factory=list)
    attr_locs: dict[str, Loc] = field(default_factory=dict)
    name_loc: Loc | None = None
    type_loc: Loc | None = None
    origin: str | None = None
    """Where an importer took the op from (`onnx:NODE (OpType)`, `torch:module.path (op)`):
    like locations, for messages and profiles only, never part of the op."""

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, Op):
            return NotImplemented
        return (
            self.result == other.result
            and self.name == other.name
            and list(self.operands) == list(other.operands)
            and self.type == other.type
            and _attrs_equal(self.attrs, other.attrs)
        )

    __hash__ = None  # type: ignore[assignment]


def _as_float(v: int | float | Fraction) -> float:
    try:
        return float(v)
    except OverflowError:  # an integer literal beyond the f64 range
        return math.inf if v > 0 else -math.inf


@dataclass(eq=False)
class Param:
    """A function parameter `%name: type {attrs}`."""

    name: str
    type: TensorType
    attrs: dict[str, AttrValue] = field(default_factory=dict)
    loc: Loc | None = None
    attr_locs: dict[str, Loc] = field(default_factory=dict)

    @property
    def range(self) -> tuple[float, float] | None:
        """The declared `range = [lo, hi]` of this input's values, if any."""
        r = self.attrs.get("range")
        if r is None:
            return None
        return _as_float(r[0]), _as_float(r[1])

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, Param):
            return NotImplemented
        return (
            self.name == other.name
            and self.type == other.type
            and _attrs_equal(self.attrs, other.attrs)
        )

    __hash__ = None  # type: ignore[assignment]


@dataclass(eq=False)
class Function:
    """`func @name(params) -> results {attrs} { ops return values }`."""

    name: str
    params: list[Param]
    results: list[TensorType]
    ops: list[Op]
    returns: list[str]
    attrs: dict[str, AttrValue] = field(default_factory=dict)
    loc: Loc | None = None
    return_loc: Loc | None = None
    return_locs: list[Loc] = field(default_factory=list)
    results_parenthesized: bool = False
    result_locs: list[Loc] = field(default_factory=list)
    attr_locs: dict[str, Loc] = field(default_factory=dict)

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, Function):
            return NotImplemented
        return (
            self.name == other.name
            and self.params == other.params
            and self.results == other.results
            and self.ops == other.ops
            and self.returns == other.returns
            and _attrs_equal(self.attrs, other.attrs)
        )

    __hash__ = None  # type: ignore[assignment]

    def param(self, name: str) -> Param | None:
        return next((p for p in self.params if p.name == name), None)

    def types(self) -> dict[str, TensorType]:
        """The type of every value defined in this function, by name."""
        env = {p.name: p.type for p in self.params}
        env.update((op.result, op.type) for op in self.ops)
        return env


@dataclass(eq=False)
class Module:
    """One or more functions; the entry is `@main`, or the only function. `meshes` are the
    module's `mesh @m = {...}` declarations (`gdv.ir.mesh.Mesh`), printed before the
    functions."""

    functions: list[Function]
    filename: str = "<input>"
    meshes: list[Any] = field(default_factory=list)

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, Module):
            return NotImplemented
        return self.functions == other.functions and self.meshes == other.meshes

    __hash__ = None  # type: ignore[assignment]

    def function(self, name: str) -> Function | None:
        return next((f for f in self.functions if f.name == name), None)

    @property
    def entry(self) -> Function | None:
        """`@main`, or the only function; None when neither exists."""
        main = self.function("main")
        if main is not None:
            return main
        return self.functions[0] if len(self.functions) == 1 else None
