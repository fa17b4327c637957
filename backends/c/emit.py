"""C source building blocks: the name mangler, exact literals, C types, and the program being
emitted.

Safety (issue 5, item 5): no text of the program reaches the C source except through this
file. C identifiers are generated from indices (`v3`, `gdv_k2`, `s5`); a program's names appear
only inside comments, after `comment()` has escaped everything but a small safe alphabet;
constants are emitted exactly, floats as hex-float literals (f16 and bf16 as their bit patterns,
in hexadecimal) and integers as decimal literals of a fixed type.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass, field

import numpy as np

from gdv.ir.core import Function, Module, Op
from gdv.ir.diagnostics import IRError, Loc
from gdv.ir.dtypes import DType
from gdv.ir.numerics import literal_to_array
from gdv.ir.ops.kernel import block_local_values, row_dim
from gdv.ir.types import TensorType

CTYPE = {
    DType.F64: "double",
    DType.F32: "float",
    DType.F16: "uint16_t",  # the IEEE binary16 bit pattern (numpy float16's bytes)
    DType.BF16: "uint16_t",  # the bfloat16 bit pattern (ml_dtypes.bfloat16's bytes)
    DType.I64: "int64_t",
    DType.I32: "int32_t",
    DType.I16: "int16_t",
    DType.I8: "int8_t",
    DType.U64: "uint64_t",
    DType.U32: "uint32_t",
    DType.U16: "uint16_t",
    DType.U8: "uint8_t",
    DType.I1: "uint8_t",  # numpy's bool: one byte holding 0 or 1
    DType.F8E4M3FN: "uint8_t",  # float8: the bit pattern (ml_dtypes' bytes), moved, never
    DType.F8E4M3FNUZ: "uint8_t",  # operated on; `convert` decodes and encodes it
    DType.F8E5M2: "uint8_t",  # (backends/c/float8.py)
    DType.F8E5M2FNUZ: "uint8_t",
    DType.F4E2M1FN: "uint8_t",  # its 4-bit code in the low bits, as ml_dtypes holds it
    DType.I4: "uint8_t",  # the sub-byte integers, one per byte as ml_dtypes holds them: the
    DType.U4: "uint8_t",  # value's low n bits (two's complement for i4, i2), the others 0;
    DType.I2: "uint8_t",  # `convert` reads and writes them (backends/c/elementwise.py)
    DType.U2: "uint8_t",
}
"""The C type holding each dtype: buffers, loaded operands, body temporaries, accumulators.

f16 and bf16 values are held as their bit patterns everywhere (never as _Float16 or __bf16):
every C expression `scalar()` (backends/c/elementwise.py) builds for them takes and gives bit
patterns, so loop nests load, store and fold them like any other value."""

NARROW = (DType.F16, DType.BF16)
"""The float dtypes held as bit patterns and computed in double (IR_SPEC.md section 7)."""

COMPUTE_CTYPE = {**CTYPE, DType.F16: "double", DType.BF16: "double"}
"""The C type a dtype's arithmetic runs in: the dtype itself, except f16 and bf16, whose values
are widened exactly to double (`load`), operated on there and rounded once back (`store`)."""

UNSUPPORTED_DTYPES: dict[DType, str] = {}
"""Dtypes the target cannot hold, with the reason (none left)."""

SUFFIX = {
    DType.F64: "f64",
    DType.F32: "f32",
    DType.F16: "f16",
    DType.BF16: "bf16",
    DType.I64: "i64",
    DType.I32: "i32",
    DType.I16: "i16",
    DType.I8: "i8",
    DType.U64: "u64",
    DType.U32: "u32",
    DType.U16: "u16",
    DType.U8: "u8",
    DType.I1: "i1",
    DType.F8E4M3FN: "f8e4m3fn",
    DType.F8E4M3FNUZ: "f8e4m3fnuz",
    DType.F8E5M2: "f8e5m2",
    DType.F8E5M2FNUZ: "f8e5m2fnuz",
    DType.F4E2M1FN: "f4e2m1fn",
    DType.I4: "i4",
    DType.U4: "u4",
    DType.I2: "i2",
    DType.U2: "u2",
}
"""A dtype's tag in generated helper names (from this table only, never from the program)."""

_SAFE_COMMENT = re.compile(r"[^A-Za-z0-9_.%@ ,=\[\]\-]")


def comment(text: str, limit: int = 80) -> str:
    """`text` made safe inside a C block comment: only [A-Za-z0-9_.%@ ,=[]-] kept, every other
    character (so `*/`, newlines, backslashes, non-ASCII) written as `?`; long text is cut."""
    shown = text if len(text) <= limit else text[:limit] + "..."
    return _SAFE_COMMENT.sub("?", shown)


def where(op: Op, module: Module) -> Loc:
    """The location to report for `op`."""
    return op.name_loc or op.loc or Loc(module.filename, 1, 1)


def ctype(dtype: DType, op: Op | None = None, module: Module | None = None) -> str:
    """The C type of `dtype`; an IRError naming `op` when the target cannot hold it."""
    if dtype in CTYPE:
        return CTYPE[dtype]
    reason = UNSUPPORTED_DTYPES.get(dtype, f"dtype {dtype} has no C type")
    if op is None:
        raise IRError(f"target c does not support dtype {dtype}: {reason}")
    loc = where(op, module) if module is not None else op.loc
    raise IRError(f"target c does not support {op.name} on {dtype}: {reason}", loc)


def load(expr: str, dtype: DType) -> str:
    """C for the `COMPUTE_CTYPE` value of the stored `dtype` value `expr` (exact). The helper it
    calls for f16/bf16 is `NARROW_HELPER` (backends/c/elementwise.py), which the caller adds to
    the program's helpers."""
    return f"gdv_widen_{SUFFIX[dtype]}({expr})" if dtype in NARROW else f"({expr})"


def store(expr: str, dtype: DType) -> str:
    """C for the stored `dtype` value of the `COMPUTE_CTYPE` value `expr`: f16/bf16 rounded once
    to nearest-even (overflow to inf, NaN kept), other dtypes unchanged."""
    return f"gdv_round_{SUFFIX[dtype]}({expr})" if dtype in NARROW else f"({expr})"


def bits(x: float, dtype: DType) -> int:
    """The bit pattern of the f16/bf16 value `x` (already a `dtype` value)."""
    return int(np.asarray(np.float64(x)).astype(dtype.np).view(np.uint16))


def float_literal(x: float, dtype: DType) -> str:
    """A float value (already a `dtype` value) as an exact C literal of type `dtype`: a hex
    float, or the bit pattern for f16/bf16."""
    t = CTYPE[dtype]
    if dtype in NARROW:
        return f"((uint16_t)0x{bits(x, dtype):04x}u)"
    if math.isnan(x):
        return f"(({t})NAN)"
    if math.isinf(x):
        return f"(({t})INFINITY)" if x > 0 else f"(-({t})INFINITY)"
    text = float(x).hex()  # exact; e.g. 0x1.8000000000000p+1, -0x0.0p+0
    return f"{text}f" if dtype is DType.F32 else text


def int_literal(v: int, dtype: DType) -> str:
    """An integer value (in range for `dtype`) as a C expression of the dtype's type."""
    if dtype is DType.I1:
        return "((uint8_t)1)" if v else "((uint8_t)0)"
    if dtype.is_unsigned:
        return f"(({CTYPE[dtype]})UINT64_C({int(v)}))"
    if v == -(2**63):
        return f"(({CTYPE[dtype]})INT64_MIN)"
    return f"(({CTYPE[dtype]})INT64_C({int(v)}))"


def value_literal(x: np.generic | float | int | bool, dtype: DType) -> str:
    """A value of `dtype` (numpy scalar or Python number, exact in the dtype) as C."""
    if dtype.is_float:
        return float_literal(float(x), dtype)
    return int_literal(int(x), dtype)


def attr_literal(value: object, dtype: DType) -> str:
    """An attribute literal rounded once to nearest-even in `dtype` (IR_SPEC.md section 2)."""
    return value_literal(literal_to_array(value, dtype)[()], dtype)  # type: ignore[arg-type]


def identity(combiner: str, dtype: DType) -> str:
    """The result of an empty fold (IR_SPEC.md section 3) as C."""
    if combiner == "add":
        return value_literal(0, dtype)
    if dtype.is_float:
        return float_literal(-math.inf if combiner == "max" else math.inf, dtype)
    return int_literal(dtype.int_min if combiner == "max" else dtype.int_max, dtype)


def strides(t: TensorType) -> list[int]:
    """Row-major element strides of `t`."""
    out = [1] * t.rank
    for d in range(t.rank - 2, -1, -1):
        out[d] = out[d + 1] * t.shape[d + 1]
    return out


@dataclass(frozen=True)
class Prepack:
    """A product factor packed once, when the weights it reads are bound
    (`Executable.bind`), instead of on every call: slot `slot` holds the packed panels
    (`elements` of `dtype`; a NULL pointer, the default, means "pack on every call"), which
    `call` (C, in `gdv_prepack`) fills from the parameters `params`."""

    kernel: str
    side: str
    slot: int
    elements: int
    dtype: DType
    params: tuple[str, ...]
    call: str


@dataclass(frozen=True)
class Hoist:
    """A kernel the entry function lists in `at_bind`, computed once when the parameters
    `params` are bound (`Executable.bind`) instead of in every call: flag `index` of the
    flags slot (`Program.bound_slot`) says so; `lines` are its C, run then by `gdv_hoist`
    (over all `rows` of its row group at once, when it is in one)."""

    value: str
    index: int
    params: frozenset[str]
    lines: tuple[str, ...]
    rows: int | None = None


ARENA_MARGIN = 16384
"""Bytes the arena's buffer has on each side of the planned arena, which no value uses: a
product reading a filled operand's column slivers in place (`matmul.IMPLICIT_COLUMNS` with a
`fill`) loads whole vectors that may reach this far outside the operand, into bytes of the
arena or its margins, and keeps only the lanes inside it (the others take the fill)."""


def _block_local(fn: Function) -> dict[str, tuple[int, int]]:
    """`fn`'s block-local values (checked: `block_local_values`), each with its elements per
    row and its group's rows per block."""
    try:
        listed = block_local_values(fn)
    except ValueError as e:
        raise IRError(str(e), fn.attr_locs.get("block_local", fn.loc)) from None
    out = {}
    for op in fn.ops:
        if op.result in listed:
            pos, _ = row_dim(op)
            per_row = op.type.num_elements // op.type.shape[pos]
            out[op.result] = (per_row, int(op.attrs["row_group"][1]))
    return out


@dataclass
class Program:
    """The C translation unit of one module's entry function, built op by op.

    The generated entry point `gdv_entry(void *const *buf)` reads its pointers from
    `buf[slot]`. Where the entry function carries a buffer plan (`plan-memory`'s `buffers` and
    `arena_bytes`), one slot holds the arena and every value the plan places lives at its
    planned offset in it; parameters, returned values (and the reshapes sharing them: the
    caller's storage, as the plan has it) and the values of an unplanned function have a slot
    of their own. A reshape shares its operand's storage (same bytes, row-major order kept)."""

    module: Module
    entry: Function
    functions: list[str] = field(default_factory=list)
    body: list[str] = field(default_factory=list)
    slot_of: dict[str, int] = field(default_factory=dict)
    slot_types: list[TensorType] = field(default_factory=list)
    libm: set[str] = field(default_factory=set)
    helpers: set[str] = field(default_factory=set)
    _var: dict[str, str] = field(default_factory=dict)
    arena_of: dict[str, tuple[int, TensorType]] = field(default_factory=dict)
    """Values living in the planned arena: (byte offset, type of the storage)."""
    arena_slot: int | None = None
    """The slot holding the arena (`arena_bytes` bytes, 64-byte aligned), None: no plan."""
    planned: dict[str, tuple[int, int]] | None = None
    """The entry function's buffer plan, name -> (offset, bytes); None: it has none."""
    choices: list[dict] = field(default_factory=list)
    """What the printer chose itself, no attribute of the IR deciding it (`record`)."""
    prepacks: list[Prepack] = field(default_factory=list)
    """Factors packed once at `bind` time (`prepack_slot`), in slot order."""
    hoists: list[Hoist] = field(default_factory=list)
    """The entry's kernels computed at bind time when their parameters are bound (`hoist`)."""
    bound_slot: int | None = None
    """The slot of the flags (one byte per hoist, 1: computed at bind time), None: no hoist."""
    is_body: bool = False
    """This program is a function a control flow op calls (`sub`), not the entry: its C
    function takes `(buf, args)`, its parameters and then its results' pointers in `args`."""
    aligned_slots: list[int] = field(default_factory=list)
    """The slots holding a planned arena (64-byte aligned buffers), the bodies' included."""
    called: dict[str, str] = field(default_factory=dict)
    """Module functions lowered as C functions (`sub`), name -> C name (shared by all)."""
    groups: dict[tuple, list[int]] = field(default_factory=dict)
    """Per group of control flow ops of this function (`backends/c/control.py`), the slots
    its first member computed every result into."""
    local: dict[str, tuple[int, int]] = field(default_factory=dict)
    """The entry's block-local values (IR_SPEC `block_local`): value -> (elements per row,
    rows per block). Each lives in a buffer of one row block, declared inside its row group's
    loop (`gdv.backends.c.function`), and has no slot and no place in the arena."""
    tables: dict[tuple[str, int, str], str] = field(default_factory=dict)
    """The translation unit's index tables (`index_table`): (C element type, size, filling
    loop with `@` for the table) -> the C name of the file-scope array, filled once when the
    library loads."""

    def __post_init__(self) -> None:
        if self.is_body:
            # Parameters and results live in the caller's storage: slot -1 - i is args[i].
            for i, p in enumerate(self.entry.params):
                self.slot_of[p.name] = -1 - i
                self._var[p.name] = f"v{len(self._var)}"
        else:
            for p in self.entry.params:
                self.new_slot(p.name, p.type)
        if not self.is_body and self.entry.attrs.get("block_local"):
            self.local = _block_local(self.entry)
        if "buffers" in self.entry.attrs:
            self.planned = {str(b[0]): (int(b[1]), int(b[2])) for b in self.entry.attrs["buffers"]}
            arena = int(self.entry.attrs.get("arena_bytes", 0))
            self.arena_slot = len(self.slot_types)
            self.aligned_slots.append(self.arena_slot)
            self.slot_types.append(TensorType(DType.I1, (max(1, arena) + 2 * ARENA_MARGIN,)))
        else:
            self.record(None, "buffers", "one per value", "the function has no buffer plan")

    def sub(self, fn: Function) -> Program:
        """The program of function `fn`, called by a control flow op: its own values and
        buffer plan, the translation unit (C functions, helpers, slots of `buf`) shared."""
        return Program(
            self.module,
            fn,
            functions=self.functions,
            slot_types=self.slot_types,
            libm=self.libm,
            helpers=self.helpers,
            choices=self.choices,
            is_body=True,
            aligned_slots=self.aligned_slots,
            called=self.called,
            tables=self.tables,
        )

    # --- names ---------------------------------------------------------------------------

    def var(self, value: str) -> str:
        """The C variable (a typed pointer) holding value `value` of the entry function."""
        return self._var[value]

    def new_slot(self, value: str, type_: TensorType) -> None:
        """Give `value` its storage: a row block's buffer where it is block-local, its planned
        place in the arena, else a buffer of its own."""
        if value in self.local:
            self._var[value] = f"v{len(self._var)}"
            return
        if self.planned is not None and value in self.planned:
            offset, size = self.planned[value]
            need = type_.num_elements * max(1, type_.dtype.bits // 8)
            if size < need:
                raise IRError(f"the buffer plan gives %{value} {size} bytes, it needs {need}")
            self.arena_of[value] = (offset, type_)
            self._var[value] = f"v{len(self._var)}"
            return
        if self.is_body and self.entry.returns.count(value) == 1:
            # written straight into the caller's result buffer
            self.slot_of[value] = -1 - len(self.entry.params) - self.entry.returns.index(value)
        else:
            self.slot_of[value] = len(self.slot_types)
            self.slot_types.append(type_)
        self._var[value] = f"v{len(self._var)}"

    def share_slot(self, value: str, operand: str) -> None:
        """Let `value` live in `operand`'s storage (a reshape)."""
        if operand in self.arena_of:
            self.arena_of[value] = self.arena_of[operand]
        else:
            self.slot_of[value] = self.slot_of[operand]
        self._var[value] = f"v{len(self._var)}"

    def param_of(self, value: str) -> str | None:
        """The entry parameter whose storage `value` is (itself, or a reshape sharing it);
        None in a called function (its parameters are never bound)."""
        if self.is_body:
            return None
        slot = self.slot_of.get(value)
        return next((p.name for p in self.entry.params if self.slot_of[p.name] == slot), None)

    def prepack_slot(
        self, kernel: str, side: str, elements: int, dtype: DType, params: list[str], call: str
    ) -> int:
        """A slot for the packed panels of a product's factor read only from `params`, filled
        by the C statement `call` (its `{dst}` the slot's pointer) in `gdv_prepack`."""
        slot = len(self.slot_types)
        self.slot_types.append(TensorType(dtype, (max(1, elements),)))
        self.prepacks.append(Prepack(kernel, side, slot, elements, dtype, tuple(params), call))
        return slot

    def hoist(self, op: Op, start: int, params: frozenset[str], rows: int | None) -> None:
        """Make the code of `op` (the body from line `start`), a kernel of the entry listed in
        `at_bind` and computed from `params` alone, run in a call only when it was not
        computed at bind time (its flag), and run it in `gdv_hoist` for the bind."""
        if self.bound_slot is None:
            self.bound_slot = len(self.slot_types)
            self.slot_types.append(TensorType(DType.I1, (1,)))
        index = len(self.hoists)
        lines = tuple(self.body[start:])
        self.body[start:] = [
            f"  if (!gdv_bound[{index}]) {{  /* unless computed at bind time */",
            *["  " + line for line in lines],
            "  }",
        ]
        self.hoists.append(Hoist(op.result, index, params, lines, rows))
        self.slot_types[self.bound_slot] = TensorType(DType.I1, (len(self.hoists),))

    def index_table(self, size: int, init: str, local: str, ctype: str = "int64_t") -> str:
        """The C name of a file-scope array of `size` `ctype` entries that the loop `init`
        fills, writing `local[v] = ...` (its only mention of `local`). Tables depend on shapes
        alone, so each is computed once, when the library loads (`gdv_index_tables`, a
        constructor), instead of on every call; kernels with the same table share it."""
        key = (ctype, size, init.replace(f"{local}[v] = ", "@[v] = "))
        assert key[2].count("@[v] = ") == 1 and local not in key[2].replace("@[v]", ""), init
        if key not in self.tables:
            self.tables[key] = f"gdv_tab{len(self.tables)}"
        return self.tables[key]

    def _table_source(self) -> list[str]:
        """The index tables' arrays and the constructor that fills them once at load."""
        if not self.tables:
            return []
        lines = ["/* index tables (shapes only): filled once, when the library loads */"]
        # (at least one entry: ISO C has no empty arrays; a size-0 table is never read)
        lines += [
            f"static {ctype} {name}[{max(1, size)}];"
            for (ctype, size, _), name in self.tables.items()
        ]
        lines += ["__attribute__((constructor)) static void gdv_index_tables(void)", "{"]
        for (_, _, init), name in self.tables.items():
            lines.append(init.replace("@[v] = ", f"{name}[v] = "))
        lines += ["}", ""]
        return lines

    def record(self, op: Op | None, choice: str, value: object, why: str) -> None:
        """Note a choice the printer makes itself (`gdv.backends.c.printer_choices`)."""
        entry = {
            "kernel": op.result if op is not None else "",
            "op": op.name if op is not None else "",
            "choice": choice,
            "value": value,
            "why": why,
        }
        if entry not in self.choices:
            self.choices.append(entry)

    def new_function(self) -> str:
        """A fresh C function name."""
        return f"gdv_k{len(self.functions)}"

    def error(self, op: Op, reason: str) -> IRError:
        """The compile-time error for an op the target cannot do."""
        return IRError(f"target c does not support {op.name}: {reason}", where(op, self.module))

    # --- source ----------------------------------------------------------------------------

    def source(self) -> str:
        """The whole C11 translation unit."""
        from gdv.backends.c.elementwise import HELPERS

        lines = [
            "/* Generated by gdv (target c). Program names appear only in comments. */",
            "#include <float.h>",
            "#include <math.h>",
            "#include <stdint.h>",
            "#include <string.h>",
            "#if !defined(FLT_EVAL_METHOD) || FLT_EVAL_METHOD != 0",
            '#error "gdv needs FLT_EVAL_METHOD == 0: float temporaries in their own type"',
            "#endif",
            "#ifdef __FAST_MATH__",
            '#error "gdv needs IEEE arithmetic: no -ffast-math"',
            "#endif",
            "",
        ]
        unknown = self.helpers - set(HELPERS)
        assert not unknown, f"unknown C helpers {sorted(unknown)}"
        for name in HELPERS:  # definition order: a helper follows the helpers it calls
            if name in self.helpers:
                lines.append(HELPERS[name])
        lines += self._table_source()
        lines += self.functions
        lines.append("int gdv_entry(void *const *buf)")
        lines.append("{")
        lines += self._prologue()
        lines += self.body
        lines.append("  return 0;")
        lines.append("}")
        lines += self._prepack_source()
        lines += self._hoist_source()
        return "\n".join(lines) + "\n"

    def _prologue(self) -> list[str]:
        """The function's pointer variables: the arena's, and one per value."""
        lines = []
        if self.arena_slot is not None:
            size = self.slot_types[self.arena_slot].num_elements - 2 * ARENA_MARGIN
            lines.append(
                f"  uint8_t *const gdv_arena = (uint8_t *)buf[{self.arena_slot}] + "
                f"{ARENA_MARGIN};  /* the planned arena: {size} bytes, between margins */"
            )
        if self.bound_slot is not None:
            lines.append(
                f"  const uint8_t *const gdv_bound = (const uint8_t *)buf[{self.bound_slot}];"
                "  /* per kernel listed in at_bind: computed at bind time */"
            )
        types = self.entry.types()
        for value, var in self._var.items():
            if value in self.local:
                continue  # declared in its row group's loop
            if value in self.arena_of:
                offset, t = self.arena_of[value]
                lines.append(
                    f"  {CTYPE[t.dtype]} *const {var} = ({CTYPE[t.dtype]} *)(gdv_arena + "
                    f"INT64_C({offset}));  /* %{comment(value)} : {comment(str(t))}, planned */"
                )
                continue
            slot = self.slot_of[value]
            t = types[value] if slot < 0 else self.slot_types[slot]
            where_ = f"args[{-1 - slot}]" if slot < 0 else f"buf[{slot}]"
            lines.append(
                f"  {CTYPE[t.dtype]} *const {var} = ({CTYPE[t.dtype]} *){where_};"
                f"  /* %{comment(value)} : {comment(str(t))} */"
            )
        return lines

    def called_source(self, name: str) -> str:
        """The C function `name(buf, args)` of this called function (`sub`): `args` holds its
        parameters' pointers, then its results' (buffers of the caller, disjoint from the
        parameters and from each other); a result not computed in place is copied there."""
        fn = self.entry
        lines = [
            f"/* @{comment(fn.name)}, called by control flow ops */",
            f"static int {name}(void *const *buf, void *const *args)",
            "{",
            "  (void)buf; (void)args;",
            *self._prologue(),
            *self.body,
        ]
        types = fn.types()
        n = len(fn.params)
        for k, r in enumerate(fn.returns):
            if self.slot_of.get(r) == -1 - n - k:
                continue
            t = types[r]
            nbytes = t.num_elements * t.dtype.itemsize
            lines.append(
                f"  memcpy(args[{n + k}], {self.var(r)}, (size_t)INT64_C({nbytes}));"
                f"  /* result {k} */"
            )
        lines += ["  return 0;", "}"]
        return "\n".join(lines) + "\n"

    def _hoist_source(self) -> list[str]:
        """`gdv_hoist(buf, now)`: the code of each hoist whose byte in `now` is 1, in program
        order, into its value's slot (the caller has given it a buffer of its own and set its
        flag, so the entry skips it). Absent when the entry lists no kernel in `at_bind`."""
        if not self.hoists:
            return []
        lines = ["int gdv_hoist(void *const *buf, const uint8_t *now)", "{", *self._prologue()]
        lines.append("  (void)gdv_bound;")
        for h in self.hoists:
            lines.append(f"  if (now[{h.index}]) {{  /* %{comment(h.value)} */")
            if h.rows is not None:  # a row group's member: all its rows
                lines.append(f"    const int64_t r0 = 0, r1 = INT64_C({h.rows});")
            lines += ["  " + line for line in h.lines]
            lines.append("  }")
        lines += ["  return 0;", "}"]
        return lines

    def _prepack_source(self) -> list[str]:
        """`gdv_prepack(buf)`: each prepack slot that holds a pointer (the caller bound its
        parameters) is filled from them; the entry reads panels from those slots instead of
        packing. Absent when the program has no prepackable factor."""
        if not self.prepacks:
            return []
        lines = ["int gdv_prepack(void *const *buf)", "{"]
        params = {p for pre in self.prepacks for p in pre.params}
        for value, var in self._var.items():
            if value in self.arena_of or self.param_of(value) not in params:
                continue
            t = self.slot_types[self.slot_of[value]]
            lines.append(
                f"  const {CTYPE[t.dtype]} *const {var} = (const {CTYPE[t.dtype]} *)"
                f"buf[{self.slot_of[value]}];  /* %{comment(value)} */"
            )
        for pre in self.prepacks:
            dst = f"(({CTYPE[pre.dtype]} *)buf[{pre.slot}])"
            lines.append(
                f"  if (buf[{pre.slot}] && {pre.call.format(dst=dst)} != 0) return -1;"
                f"  /* %{comment(pre.kernel)}: its {pre.side} factor */"
            )
        lines += ["  return 0;", "}"]
        return lines
