"""The op registry: one `OpSpec` per op of IR_SPEC.md section 4 (and the control flow ops of
section 9).

Each family file (`elementwise`, `layout`, `reduce`, `contract`, `conv`, `gather`,
`composite`, `kernel`, `collective`, `control`) defines its specs and registers them here.
Other layers (reference backend, SMT semantics, bounds, lowerings) register their rules against
these spec objects, and `tests/test_registry.py` checks no column is missing.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterator
from collections.abc import Set as AbstractSet
from dataclasses import dataclass, field
from fractions import Fraction
from typing import Any

from gdv.ir.core import Op
from gdv.ir.diagnostics import printable
from gdv.ir.dtypes import DType
from gdv.ir.types import TensorType

FAMILIES = (
    "elementwise",
    "layout",
    "reduce",
    "contract",
    "conv",
    "gather",
    "composite",
    "kernel",
    "collective",
    "control",
)


class OpTypeError(Exception):
    """A type-rule rejection; `operand` or `attr` says which token to point at."""

    def __init__(self, message: str, operand: int | None = None, attr: str | None = None):
        super().__init__(message)
        self.message = message
        self.operand = operand
        self.attr = attr


# --- attribute kinds: each checks a parsed value and returns it, or raises ValueError ------


def _is_int(v: Any) -> bool:
    return isinstance(v, int) and not isinstance(v, bool)


def _is_number(v: Any) -> bool:
    return _is_int(v) or isinstance(v, float | Fraction)


def kind_int(v: Any) -> int:
    if not _is_int(v):
        raise ValueError(f"expected an integer, got {describe(v)}")
    return v


def kind_int_list(v: Any) -> list[int]:
    if not isinstance(v, list) or not all(_is_int(x) for x in v):
        raise ValueError(f"expected a list of integers, got {describe(v)}")
    return v


def kind_int_pairs(v: Any) -> list[list[int]]:
    if not isinstance(v, list) or not all(
        isinstance(p, list) and len(p) == 2 and all(_is_int(x) for x in p) for p in v
    ):
        raise ValueError(f"expected a list of [low, high] integer pairs, got {describe(v)}")
    return v


def kind_bool(v: Any) -> bool:
    if not isinstance(v, bool):
        raise ValueError(f"expected true or false, got {describe(v)}")
    return v


def kind_number(v: Any) -> Any:
    if not _is_number(v) and not isinstance(v, bool):
        raise ValueError(f"expected a number, got {describe(v)}")
    return v


def kind_number_or_nested(v: Any) -> Any:
    def ok(x: Any) -> bool:
        return (
            _is_number(x) or isinstance(x, bool) or (isinstance(x, list) and all(ok(y) for y in x))
        )

    if not ok(v):
        raise ValueError(f"expected a number or a nested list of numbers, got {describe(v)}")
    return v


def kind_dtype(v: Any) -> DType:
    if not isinstance(v, DType):
        raise ValueError(f"expected a dtype name, got {describe(v)}")
    return v


def kind_choice(*choices: str) -> Callable[[Any], str]:
    def check(v: Any) -> str:
        if not isinstance(v, str) or v not in choices:
            shown = ", ".join(f'"{c}"' for c in choices)
            raise ValueError(f"expected one of {shown}, got {describe(v)}")
        return v

    return check


def describe(v: Any) -> str:
    """A short description of an attribute value for messages."""
    if isinstance(v, bool):
        return "true" if v else "false"
    if isinstance(v, DType):
        return f"dtype {v}"
    if isinstance(v, str):
        return f'string "{printable(v)}"'
    if isinstance(v, list):
        return "a list" if v else "an empty list"
    if _is_int(v):
        return f"integer {v}"
    return f"float {float(v)!r}"


@dataclass(frozen=True)
class AttrSpec:
    """An attribute an op takes: its name, value check and whether it may be omitted."""

    name: str
    check: Callable[[Any], Any]
    required: bool = True


TypeRule = Callable[[list[TensorType], dict[str, Any], TensorType], TensorType]
"""(operand types, attributes, written result type) -> inferred result type.

Rules that need the written type to know the result (`convert`'s dtype, `reshape`'s shape, ...)
take those parts from it and check the rest."""


@dataclass(frozen=True)
class Combiner:
    """How a reduction folds (IR_SPEC.md section 3): `acc = op(acc, x[next])`.

    `op` is the elementwise op it folds with (so it rounds and treats NaN and -0.0 as that op
    does) and also the value of a kernel's `combiner` attribute; `fold` names the fold in the
    SMT and reference layers (`sum`, `max`, `min`)."""

    op: str
    fold: str

    def identity(self, dtype: DType) -> int | float:
        """The value of an empty fold in `dtype`: 0 (0.0) for sums, -inf (the dtype's minimum)
        for max, +inf (its maximum) for min."""
        if self.fold == "sum":
            return 0 if dtype.is_int else 0.0
        if dtype.is_int:
            return dtype.int_min if self.fold == "max" else dtype.int_max
        return -math.inf if self.fold == "max" else math.inf


@dataclass(frozen=True, eq=False)
class OpSpec:
    """Everything the IR knows of one op: name, operands, attributes, type rule, meaning."""

    name: str
    family: str
    min_operands: int
    max_operands: int | None
    attrs: tuple[AttrSpec, ...]
    infer: TypeRule
    doc: str
    stage: str = "core"
    """`core` ops exist at every stage; `graph` ops (composites, matmul) only before lowering."""
    decompose: Callable[[Op, Callable[[str], str]], list[Op]] | None = None
    """For composites: the ops it means exactly (IR_SPEC.md section 4), given a fresh-name
    function; the last op defines the composite's result name."""
    operand_names: tuple[str, ...] = field(default=())
    # --- traits: what every layer asks about an op (DESIGN.md, "Op traits, once"); no layer
    # keeps its own list of op names, it derives one from these (`names_where`).
    transcendental: bool = False
    """Last-bit results implementation-defined (IR_SPEC.md section 3): uninterpreted in `fp`,
    never constant-folded, compared within ulps rather than bit for bit."""
    body_legal: bool = False
    """May appear in a kernel body: a scalar elementwise op or a scalar constant."""
    combiner: Combiner | None = None
    """For a reduction: the fold it combines with and its identity."""
    int_legal: bool = False
    """Accepts integer operands (for generators: makes integer results)."""
    storage_legal: bool = False
    """Accepts the storage-only dtypes (float8, IR_SPEC.md section 8): conversion and data
    movement, which read and write their elements without arithmetic."""
    commutative: bool = False
    """`op(a, b)` and `op(b, a)` are equal for every a and b as IR_SPEC.md section 5 compares
    values (the same bits, all NaNs one value, +0.0 and -0.0 distinct)."""

    @property
    def attr_names(self) -> tuple[str, ...]:
        return tuple(a.name for a in self.attrs)

    @property
    def is_composite(self) -> bool:
        return self.stage == "graph"

    def __repr__(self) -> str:
        return f"OpSpec({self.name})"


REGISTRY: dict[str, OpSpec] = {}


def register(spec: OpSpec) -> OpSpec:
    assert spec.family in FAMILIES, spec.family
    assert spec.name not in REGISTRY, spec.name
    REGISTRY[spec.name] = spec
    return spec


def get(name: str) -> OpSpec | None:
    """The spec of op `name`, or None for an unknown op."""
    return REGISTRY.get(name)


def all_specs() -> Iterator[OpSpec]:
    return iter(REGISTRY.values())


def by_family(family: str) -> list[OpSpec]:
    return [s for s in REGISTRY.values() if s.family == family]


def unregister(spec: OpSpec) -> None:
    """Remove `spec` from the registry (for tests that register a scratch op)."""
    assert REGISTRY.get(spec.name) is spec, spec.name
    del REGISTRY[spec.name]


class OpNames(AbstractSet):
    """The names of the registered ops with a trait: a live, read-only set (an op registered
    later is in it at once), so a layer's `name in TRANSCENDENTAL` always asks the specs."""

    def __init__(self, trait: Callable[[OpSpec], bool], doc: str = "") -> None:
        self._trait = trait
        self.__doc__ = doc

    def __contains__(self, name: object) -> bool:
        spec = REGISTRY.get(name) if isinstance(name, str) else None
        return spec is not None and bool(self._trait(spec))

    def __iter__(self) -> Iterator[str]:
        return iter([s.name for s in REGISTRY.values() if self._trait(s)])

    def __len__(self) -> int:
        return sum(1 for s in REGISTRY.values() if self._trait(s))

    def specs(self) -> list[OpSpec]:
        return [s for s in REGISTRY.values() if self._trait(s)]

    def __repr__(self) -> str:
        return f"OpNames({sorted(self)})"


def names_where(trait: Callable[[OpSpec], bool], doc: str = "") -> OpNames:
    """The live set of op names whose spec has `trait` (e.g. `lambda s: s.transcendental`)."""
    return OpNames(trait, doc)


# Importing the families fills the registry.
from gdv.ir.ops import (  # noqa: E402, F401
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
