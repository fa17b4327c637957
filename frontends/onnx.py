"""ONNX models to graph-stage IR, and an `onnx.backend.base.Backend` that runs them on gdv.

`import_model(model)` turns an ONNX `ModelProto` into a verified IR `Module` and a weights
dict (initializers that the graph uses as tensors become parameters; their values go to the
weights). Shapes must be static; shape subgraphs (Shape, Gather on shapes, Concat, Range,
Reshape targets, axes given as inputs, ...) are evaluated at import time, on integers only.
Every ONNX op maps to IR ops with ONNX's own meaning (the order of a function body where the
ONNX spec defines the op by one); an op or attribute combination that cannot be expressed
exactly is refused with `unsupported ONNX op X (opset N) at node NAME: reason`. If, Loop and
Scan whose control flow is static at import are inlined and unrolled (section "control flow"),
each copy in a scope of its own; a data-dependent If or Loop becomes the IR's `if` or `while`
(IR_SPEC.md section 9), its branches or body functions of the module; RNN, GRU and LSTM have
their time steps unrolled over the static sequence length (section "recurrent layers").

Names: ONNX names become IR names by `mangle` (reversible, collision-free); a parameter whose
name changed keeps the original in its `onnx_name` attribute.
"""

from __future__ import annotations

import hashlib
import math
from abc import ABC, abstractmethod
from collections import ChainMap
from collections.abc import Callable, Mapping, MutableMapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from gdv.ir.core import Function, Module, Op, Param
from gdv.ir.diagnostics import IRError, Loc, printable
from gdv.ir.dtypes import DType, from_numpy
from gdv.ir.ops import REGISTRY, OpTypeError
from gdv.ir.ops.elementwise import is_signed
from gdv.ir.types import TensorType
from gdv.ir.verifier import verify

try:  # onnx is an optional dependency (the `onnx` extra)
    import onnx
    from onnx import numpy_helper
    from onnx.backend.base import Backend as _OnnxBackend
    from onnx.backend.base import BackendRep as _OnnxBackendRep
except ModuleNotFoundError:  # pragma: no cover - exercised only without the extra
    onnx = None  # type: ignore[assignment]
    _OnnxBackend = object  # type: ignore[assignment,misc]
    _OnnxBackendRep = object  # type: ignore[assignment,misc]

# --- names ------------------------------------------------------------------------------------

MAX_NAME = 128


def mangle(name: str) -> str:
    """An IR name for an ONNX name: `[A-Za-z0-9_]` kept, every other UTF-8 byte (`.` too)
    written `.xx` (two lowercase hex digits). Injective, so collision-free; `unmangle` inverts
    it. The empty name is `_.e`; a result over 128 characters keeps a prefix and appends `.h`
    and a hash (neither form can come out of the escape scheme, so no collision with it)."""
    if name == "":
        return "_.e"
    out = []
    for ch in name:
        if ch.isascii() and (ch.isalnum() or ch == "_"):
            out.append(ch)
        else:
            out.extend(f".{b:02x}" for b in ch.encode("utf-8"))
    text = "".join(out)
    if len(text) <= MAX_NAME:
        return text
    digest = hashlib.sha256(name.encode("utf-8")).hexdigest()[:24]
    cut = MAX_NAME - 2 - len(digest)
    prefix = text[:cut]
    dot = prefix.rfind(".", max(0, cut - 2))
    if dot != -1:  # never cut an escape in half
        prefix = prefix[:dot]
    return f"{prefix}.h{digest}"


def unmangle(text: str) -> str:
    """The ONNX name `mangle` turned into `text` (for names that were not hashed)."""
    if text == "_.e":
        return ""
    raw = bytearray()
    i = 0
    while i < len(text):
        if text[i] == ".":
            raw.append(int(text[i + 1 : i + 3], 16))
            i += 3
        else:
            raw.extend(text[i].encode())
            i += 1
    return raw.decode("utf-8")


# --- dtypes -----------------------------------------------------------------------------------

_ONNX_DTYPES: dict[int, DType] = {
    1: DType.F32,  # FLOAT
    11: DType.F64,  # DOUBLE
    10: DType.F16,  # FLOAT16
    16: DType.BF16,  # BFLOAT16
    7: DType.I64,  # INT64
    6: DType.I32,  # INT32
    5: DType.I16,  # INT16
    3: DType.I8,  # INT8
    13: DType.U64,  # UINT64
    12: DType.U32,  # UINT32
    4: DType.U16,  # UINT16
    2: DType.U8,  # UINT8
    9: DType.I1,  # BOOL
    17: DType.F8E4M3FN,  # FLOAT8E4M3FN (storage only, IR_SPEC.md section 8)
    18: DType.F8E4M3FNUZ,  # FLOAT8E4M3FNUZ
    19: DType.F8E5M2,  # FLOAT8E5M2
    20: DType.F8E5M2FNUZ,  # FLOAT8E5M2FNUZ
    23: DType.F4E2M1FN,  # FLOAT4E2M1 (unpacked: one value per byte)
    22: DType.I4,  # INT4 (unpacked: one value per byte, IR_SPEC.md section 8)
    21: DType.U4,  # UINT4
    26: DType.I2,  # INT2
    25: DType.U2,  # UINT2
}
_ONNX_OF: dict[DType, int] = {v: k for k, v in _ONNX_DTYPES.items()}
_NARROW = (DType.F16, DType.BF16)
"""The float types `narrow_in_f32` computes in f32."""


_WHY_NO_DTYPE = {
    "FLOAT8E8M0": "the scale format E8M0 (a power of two, rounded up by Cast's round_mode) has "
    "no IR dtype; the e4m3/e5m2 float8 formats do",
    "STRING": "strings are not numbers",
    "COMPLEX64": "complex numbers are not supported",
    "COMPLEX128": "complex numbers are not supported",
}
"""Why an ONNX element type has no IR dtype, by its name."""


def _no_ir_dtype(code: int) -> str:
    """`NAME, which has no IR dtype (why)` for an ONNX element type gdv refuses."""
    name = _dtype_name(code)
    why = _WHY_NO_DTYPE.get(name)
    return f"{name}, which has no IR dtype" + (f" ({why})" if why else "")


def _dtype_name(code: int) -> str:
    if onnx is None:
        return str(code)
    try:
        return onnx.TensorProto.DataType.Name(code)
    except ValueError:
        return str(code)


def _np_to_ir(dtype: np.dtype) -> DType | None:
    for d in DType:
        if d.np == dtype:
            return d
    return None


class Unsupported(IRError):
    """An ONNX op or attribute combination gdv cannot express exactly."""


class DataDependent(Unsupported):
    """A control value (an If's condition, a Loop's trip count or condition) that is not a
    constant at import: the If and Loop handlers then emit the IR's control flow ops."""


# --- values -----------------------------------------------------------------------------------


@dataclass
class Val:
    """An ONNX value during import: its IR type, the IR value holding it (once emitted), its
    statically known contents (constants, shape computations), and for initializers and
    specialisable inputs the parameter that supplies it."""

    type: TensorType
    name: str | None = None
    static: np.ndarray | None = None
    param: str | None = None
    known: np.ndarray | None = None
    init: str | None = None
    """For an initializer: its ONNX name."""
    """A graph input's value given for specialisation: used only where a static value is
    required (a Reshape target, axes, pads, ...), never to fold arithmetic."""
    producer: tuple[Any, int, list[Val | None], int] | None = None
    """The node that computed it (node, opset, its input values): lets a control-flow value
    (a Loop's trip count, an If's condition) be evaluated at import from known inputs; the
    last entry is which of its outputs."""


_INT_FOLDABLE = {
    "Shape", "Size", "Gather", "Concat", "Unsqueeze", "Squeeze", "Reshape", "Slice", "Cast",
    "CastLike", "Add", "Sub", "Mul", "Div", "Mod", "Neg", "Abs", "Equal", "Less", "Greater",
    "LessOrEqual", "GreaterOrEqual", "Not", "And", "Or", "Xor", "Where", "Range", "Identity",
    "Expand", "Max", "Min", "ReduceProd", "ReduceSum", "ReduceMax", "ReduceMin", "Transpose",
    "Flatten", "ConstantOfShape", "Tile", "Sign", "Split",
}  # fmt: skip
"""Ops evaluated at import time when every input is static and every input and output is an
integer or boolean tensor (shape arithmetic: exact in numpy)."""

_DATA_MOVEMENT = {
    "Gather", "Concat", "Unsqueeze", "Squeeze", "Reshape", "Slice", "Identity", "Expand",
    "Transpose", "Flatten", "Tile", "Split",
}  # fmt: skip
"""Ops that only move elements: evaluated at import time on static inputs of any dtype."""


@dataclass
class _State:
    params: list[Param] = field(default_factory=list)
    weights: dict[str, np.ndarray] = field(default_factory=dict)
    ops: list[Op] = field(default_factory=list)
    types: dict[str, TensorType] = field(default_factory=dict)
    counter: int = 0


class GraphEmitter(ABC):
    """Appending graph-stage ops with inferred types: the interface every importer's op helpers
    (`reshape`, `bcast`, `convert`, `_matmul`, ...) use. A subclass has `st` (ops, types and a
    name counter) and `unsupported(reason)`, its refusal for the node being imported."""

    st: Any
    origin: str | None = None
    """The source node of the ops being emitted (`Op.origin`), set by the importer per node."""

    @abstractmethod
    def unsupported(self, reason: str) -> IRError:
        """The refusal of the node being imported, naming it and `reason`."""

    def fresh(self) -> str:
        self.st.counter += 1
        return f"tmp.v{self.st.counter}"

    def emit(
        self, name: str, operands: Sequence[str], type_: TensorType | None = None, **attrs: Any
    ) -> str:
        """Append `name(operands) {attrs}`; its type is inferred (`type_` supplies the parts
        the rule reads from the written type)."""
        spec = REGISTRY[name]
        types = [self.st.types[o] for o in operands]
        written = type_ if type_ is not None else types[0]
        storage = [t.dtype for t in [*types, written] if t.dtype.is_storage]
        if storage and not spec.storage_legal:
            raise self.unsupported(
                f"{name} on {storage[0]}: a float8 value is storage only (converted and moved, "
                "IR_SPEC.md section 8); arithmetic on it is refused"
            )
        try:
            t = spec.infer(types, attrs, written)
        except OpTypeError as e:
            raise self.unsupported(f"cannot express as IR {name}: {e.message}") from None
        result = self.fresh()
        self.st.ops.append(Op(result, name, list(operands), dict(attrs), t, origin=self.origin))
        self.st.types[result] = t
        return result

    def type_of(self, name: str) -> TensorType:
        return self.st.types[name]

    def const(self, value: Any, t: TensorType) -> str:
        """A constant of type `t`: a scalar splat or an array of t's shape. A float8 constant
        is an f32 constant of its exact values converted back (the same values: the IR has no
        float8 literal, IR_SPEC.md section 8)."""
        if t.dtype.is_float8:
            wide = np.asarray(value).astype(t.dtype.np).astype(np.float32)
            return self.emit("convert", [self.const(wide, t.with_dtype(DType.F32))], t)
        if t.dtype.is_small_int:  # likewise through a byte of its signedness (exact)
            byte = DType.I8 if t.dtype.int_min < 0 else DType.U8
            held = np.asarray(value).astype(t.dtype.np).astype(byte.np)
            return self.emit("convert", [self.const(held, t.with_dtype(byte))], t)
        if isinstance(value, np.ndarray):
            arr = value.astype(t.dtype.np)
            if arr.size and _same_bits(arr):
                value = _py(arr.flat[0], t.dtype)
            else:
                value = _nested(arr, t.dtype)
        else:
            value = _py(np.asarray(value).astype(t.dtype.np)[()], t.dtype)
        return self.emit("constant", [], t, value=value)


class Importer(GraphEmitter):
    """Imports one ONNX graph. Use `import_model`."""

    def __init__(
        self,
        model: Any,
        *,
        input_shapes: Mapping[str, Sequence[int]] | None = None,
        known_inputs: Mapping[str, np.ndarray] | None = None,
        filename: str = "<onnx>",
        narrow_in_f32: bool = False,
        accumulate_in_f32: bool = False,
    ) -> None:
        self.model = model
        self.narrow_in_f32 = narrow_in_f32
        """f16 and bf16 values computed in f32 (`import_model`)."""
        self.accumulate_in_f32 = accumulate_in_f32
        """f16 and bf16 matrix products, and f16 Softmax row sums, accumulated in f32
        (`import_model`)."""
        self.graph = model.graph
        self.filename = filename
        self.opset = 1
        for imp in model.opset_import:
            if imp.domain in ("", "ai.onnx"):
                self.opset = imp.version
        self.input_shapes = dict(input_shapes or {})
        self.known_inputs = dict(known_inputs or {})
        self.vals: MutableMapping[str, Val] = {}
        """ONNX name -> value; inside a subgraph a `ChainMap` whose first map is the body's own
        scope (one per unrolled copy), the enclosing scopes behind it."""
        self.st = _State()
        self.node: Any = None
        self.node_label = ""
        self.specialised: set[str] = set()
        self.input_params: dict[str, Param] = {}
        self.used_inits: list[str] = []
        self.expansions = 0
        self.unrolled = 0
        """Body instances imported so far by unrolled Loop and Scan nodes (`MAX_UNROLLED`)."""
        self.functions: list[Function] = []
        """Functions the control flow ops of data-dependent If and Loop nodes name."""
        self.named_functions = 0
        """Names given to such functions so far (bodies nested in bodies included)."""

    # --- errors -------------------------------------------------------------------------------

    def loc(self) -> Loc:
        return Loc(self.filename, 1, 1)

    def unsupported(self, reason: str) -> Unsupported:
        op = self.node.op_type if self.node is not None else "?"
        return Unsupported(
            f"unsupported ONNX op {printable(op)} (opset {self.opset}) at node "
            f"{printable(self.node_label, 80)}: {reason}",
            self.loc(),
        )

    # --- values -------------------------------------------------------------------------------

    def val(self, name: str) -> Val:
        if name not in self.vals:  # a malformed model: an input error, not a refusal
            where = f" at node {printable(self.node_label, 80)}" if self.node is not None else ""
            raise IRError(
                f"ONNX value '{printable(name)}' is used{where} but never defined", self.loc()
            )
        return self.vals[name]

    def dyn(self, name: str) -> str:
        """The IR value holding ONNX value `name`, emitting a constant or parameter if needed."""
        return self.dyn_val(self.val(name))

    def dyn_val(self, v: Val) -> str:
        """The IR value holding `v`, emitting a constant or parameter if needed."""
        if v.name is not None:
            return v.name
        if v.param is not None:
            v.name = v.param
            self.st.types[v.param] = v.type
            if v.init is not None and v.param not in self.st.weights:
                self.st.weights[v.param] = np.asarray(v.static)
                self.used_inits.append(v.init)
            return v.name
        assert v.static is not None
        v.name = self.const(v.static, v.type)
        return v.name

    def static(self, name: str, what: str) -> np.ndarray:
        """The value of `name`, which must be known at import time."""
        v = self.val(name)
        if v.static is not None:
            return v.static
        if v.known is not None:
            self.specialised.add(name)
            v.static = v.known
            return v.static
        arr = _evaluate(self, v)  # computed from given inputs' values (`known_inputs`)
        if arr is not None:
            return arr
        raise self.unsupported(f"{what} must be a constant (input '{printable(name)}' is not)")

    def is_static(self, name: str) -> bool:
        return self.val(name).static is not None

    def widen(self, arr: np.ndarray) -> np.ndarray:
        """An f16 or bf16 array as f32 (exact) when narrow floats are computed in f32."""
        if self.narrow_in_f32 and _np_to_ir(arr.dtype) in _NARROW:
            return arr.astype(np.float32)
        return arr

    def set_static(self, name: str, arr: np.ndarray) -> None:
        arr = self.widen(arr)
        dt = _np_to_ir(arr.dtype)
        if dt is None:
            raise self.unsupported(f"a value of numpy dtype {arr.dtype} has no IR dtype")
        self.vals[name] = Val(TensorType(dt, arr.shape), static=arr)

    def set(self, name: str, ir: str) -> None:
        self.vals[name] = Val(self.st.types[ir], name=ir)

    # --- driving ------------------------------------------------------------------------------

    def run(self) -> tuple[Module, dict[str, np.ndarray]]:
        g = self.graph
        init_names = set()
        for init in g.initializer:
            arr = self.widen(_tensor_to_numpy(init, self))
            init_names.add(init.name)
            dt = _np_to_ir(arr.dtype)
            if dt is None:
                raise Unsupported(
                    f"initializer '{printable(init.name)}' has dtype "
                    f"{_no_ir_dtype(init.data_type)}",
                    self.loc(),
                )
            self.vals[init.name] = Val(
                TensorType(dt, arr.shape), static=arr, param=mangle(init.name), init=init.name
            )
        if len(g.sparse_initializer):
            raise Unsupported("sparse initializers are not supported", self.loc())
        for inp in g.input:
            if inp.name in init_names:
                continue  # an initializer listed as an input (old IR versions): a weight
            t = self._input_type(inp)
            pname = mangle(inp.name)
            attrs = {} if pname == inp.name else {"onnx_name": inp.name}
            p = Param(pname, t, attrs)
            self.input_params[inp.name] = p
            known = self.known_inputs.get(inp.name)
            if self.narrow_in_f32 and t.dtype in _NARROW:
                # the f16/bf16 input widened once, exactly, where the graph starts
                self.st.types[pname] = t
                self.origin = f"onnx:input {printable(inp.name, 120)} (computed in f32)"
                wide = self.emit("convert", [pname], t.with_dtype(DType.F32))
                self.origin = None
                self.vals[inp.name] = Val(self.st.types[wide], name=wide)
                continue
            self.vals[inp.name] = Val(t, param=pname, known=known)
        for index, node in enumerate(g.node):
            self.node = node
            self.node_label = node.name or f"#{index} ({', '.join(node.output)})"
            self.origin = f"onnx:{printable(self.node_label, 120)} ({printable(node.op_type)})"
            self.import_node(node)
        self.node = self.origin = None
        returns: list[str] = []
        results: list[TensorType] = []
        for out in g.output:
            if out.name not in self.vals:
                raise IRError(f"graph output '{printable(out.name)}' is not computed", self.loc())
            ir = self.dyn(out.name)
            t = self.st.types.get(ir) or self.vals[out.name].type
            code = out.type.tensor_type.elem_type
            if self.narrow_in_f32 and _ONNX_DTYPES.get(code) in _NARROW and t.dtype is DType.F32:
                # computed in f32, rounded once to the declared f16/bf16
                self.origin = f"onnx:output {printable(out.name, 120)} (computed in f32)"
                ir = self.emit("convert", [ir], t.with_dtype(_ONNX_DTYPES[code]))
                self.origin = None
                t = self.st.types[ir]
            if code and _ONNX_DTYPES.get(code) is not t.dtype:
                raise IRError(
                    f"graph output '{printable(out.name)}' is declared {_dtype_name(code)}, "
                    f"but computes {t}",
                    self.loc(),
                )
            returns.append(ir)
            results.append(t)
        params = [
            p
            for name, p in self.input_params.items()
            if name not in self.specialised or self.vals[name].name == p.name
        ]
        for name in self.used_inits:
            pname = mangle(name)
            attrs = {} if pname == name else {"onnx_name": name}
            params.append(Param(pname, self.vals[name].type, attrs))
        for p in params:
            self.st.types[p.name] = p.type
        self._rename_outputs(returns)
        fn = Function("main", params, results, self.st.ops, returns)
        module = Module([fn, *self.functions], filename=self.filename)
        verify(module)
        return module, dict(self.st.weights)

    def _rename_outputs(self, returns: list[str]) -> None:
        """Give ops that define ONNX values those values' (mangled) names: readable IR."""
        taken = {p.name for p in self.input_params.values()} | set(self.st.weights)
        rename: dict[str, str] = {}
        for onnx_name, v in self.vals.items():
            if v.name and v.name.startswith("tmp.v") and v.name not in rename:
                new = mangle(onnx_name)
                if new not in taken:
                    rename[v.name] = new
                    taken.add(new)
        for op in self.st.ops:
            op.result = rename.get(op.result, op.result)
            op.operands = [rename.get(o, o) for o in op.operands]
        returns[:] = [rename.get(r, r) for r in returns]

    def _input_type(self, inp: Any) -> TensorType:
        tt = inp.type.tensor_type
        if not inp.type.HasField("tensor_type"):
            raise Unsupported(
                f"graph input '{printable(inp.name)}' is not a tensor (sequences, maps and "
                "optionals are not supported)",
                self.loc(),
            )
        dt = _ONNX_DTYPES.get(tt.elem_type)
        if dt is None:
            raise Unsupported(
                f"graph input '{printable(inp.name)}' has dtype {_no_ir_dtype(tt.elem_type)}",
                self.loc(),
            )
        if inp.name in self.input_shapes:
            return TensorType(dt, tuple(self.input_shapes[inp.name]))
        dims = []
        for d in tt.shape.dim:
            if not d.HasField("dim_value"):
                raise Unsupported(
                    f"graph input '{printable(inp.name)}' has a symbolic dim "
                    f"'{printable(d.dim_param)}': give static shapes (input_shapes)",
                    self.loc(),
                )
            dims.append(d.dim_value)
        return TensorType(dt, tuple(dims))

    def import_node(self, node: Any) -> None:
        if node.domain == "ai.onnx.ml" and node.op_type in ML_HANDLERS:
            attrs = {a.name: _attr_value(a, self) for a in node.attribute}
            ML_HANDLERS[node.op_type](self, node, list(node.input), attrs)
            return
        if node.domain == "ai.onnx.preview.training" and node.op_type in TRAINING_HANDLERS:
            attrs = {a.name: _attr_value(a, self) for a in node.attribute}
            TRAINING_HANDLERS[node.op_type](self, node, list(node.input), attrs)
            return
        if node.domain == "ai.onnx.preview" and self._expand_function(node, list(node.input)):
            return  # a preview op ONNX defines by a function body (FlexAttention): that body
        if node.domain not in ("", "ai.onnx"):
            raise self.unsupported(f"domain '{printable(node.domain)}' is not supported")
        for attr in node.attribute:
            if attr.type == 5 and node.op_type in _CONTROL_FLOW:
                continue  # a body or branch: imported by the op's handler (unrolled, inlined)
            if attr.type in (5, 10, 11, 12, 13):  # GRAPH, GRAPHS, SPARSE_TENSOR(S), TYPE_PROTO
                raise self.unsupported(f"attribute '{attr.name}' (subgraphs) is not supported")
        ins = list(node.input)
        if self._try_fold(node, ins):
            return
        in_vals = [self.vals.get(i) if i else None for i in ins]
        self._import_node(node, ins)
        for k, name in enumerate(node.output):
            v = self.vals.get(name) if name else None
            if v is not None and v.producer is None and v.static is None and v.param is None:
                if all(v is not w for w in in_vals):
                    v.producer = (node, self.opset, in_vals, k)

    def _import_node(self, node: Any, ins: list[str]) -> None:
        handler = HANDLERS.get(node.op_type)
        if handler is None:
            if node.op_type not in _WHY_NOT and self._expand_function(node, ins):
                return
            raise self.unsupported(_WHY_NOT.get(node.op_type, "no exact IR decomposition"))
        try:
            handler(self, node, ins, {a.name: _attr_value(a, self) for a in node.attribute})
        except KeyError as e:  # a required attribute is missing: a malformed model
            if not _is_attribute_of(node, e.args[0] if e.args else None):
                raise
            raise IRError(
                f"ONNX node {printable(self.node_label, 80)} ({printable(node.op_type)}) lacks "
                f"the attribute {e}",
                self.loc(),
            ) from None
        except IndexError:  # fewer inputs than the op needs
            raise IRError(
                f"ONNX node {printable(self.node_label, 80)} ({printable(node.op_type)}) has "
                f"too few inputs ({len(ins)})",
                self.loc(),
            ) from None

    def _expand_function(self, node: Any, ins: list[str]) -> bool:
        """Import an op that ONNX defines by a function body as that body's nodes (ONNX's own
        definition of its meaning). False when the op has no function body."""
        version = self.opset  # the version of the node's domain (ai.onnx, or a preview one)
        if node.domain not in ("", "ai.onnx"):
            version = next(
                (o.version for o in self.model.opset_import if o.domain == node.domain), 1
            )
        try:
            schema = onnx.defs.get_schema(node.op_type, version, node.domain)
        except Exception:  # unknown op or domain
            return False
        body = None
        if schema.has_context_dependent_function:
            types = []
            for name in ins:
                if not name:
                    types.append(onnx.TypeProto().SerializeToString())
                    continue
                t = self.val(name).type
                proto = onnx.helper.make_tensor_type_proto(_ONNX_OF[t.dtype], list(t.shape))
                types.append(proto.SerializeToString())
            raw = schema.get_context_dependent_function_with_opset_version(
                version, node.SerializeToString(), types
            )
            if raw:
                body = onnx.FunctionProto()
                body.ParseFromString(raw)
        elif schema.has_function:
            raw = schema.get_function_with_opset_version(version)
            if raw:
                body = onnx.FunctionProto()
                body.ParseFromString(raw) if isinstance(raw, bytes) else body.CopyFrom(raw)
        if body is None or not body.node:
            return False
        self.expansions += 1
        prefix = f"{node.op_type}.fn{self.expansions}/"
        rename = {formal: (ins[k] if k < len(ins) else "") for k, formal in enumerate(body.input)}
        for k, formal in enumerate(body.output):
            rename[formal] = node.output[k] if k < len(node.output) else ""
        given = {a.name: a for a in node.attribute}
        defaults = {
            name: a.default_value
            for name, a in schema.attributes.items()
            if a.default_value is not None and a.default_value.name
        }
        defaults.update({a.name: a for a in body.attribute_proto})
        saved = (self.opset, self.node, self.node_label)
        body_opset = next(
            (o.version for o in body.opset_import if o.domain in ("", "ai.onnx")), self.opset
        )
        try:
            self.opset = body_opset
            for inner in body.node:
                n = onnx.NodeProto()
                n.CopyFrom(inner)
                for lst in (n.input, n.output):
                    for k, name in enumerate(lst):
                        if name and name not in rename:
                            rename[name] = prefix + name
                        lst[k] = rename.get(name, name) if name else ""
                attrs = []
                for a in n.attribute:
                    if a.ref_attr_name:
                        src = given.get(a.ref_attr_name) or defaults.get(a.ref_attr_name)
                        if src is None:
                            continue
                        b = onnx.AttributeProto()
                        b.CopyFrom(src)
                        b.name = a.name
                        attrs.append(b)
                    else:
                        if a.type == 5:  # a body reads the function's names: rename them too
                            _rename_free_names(a.g, rename)
                        attrs.append(a)
                del n.attribute[:]
                n.attribute.extend(attrs)
                self.node = n
                self.node_label = f"{saved[2]}/{inner.op_type}"
                self.import_node(n)
        finally:
            self.opset, self.node, self.node_label = saved
        return True

    def _try_fold(self, node: Any, ins: list[str]) -> bool:
        op = node.op_type
        if op not in _INT_FOLDABLE or not ins:
            return False
        present = [i for i in ins if i]
        if not all(i in self.vals and self.vals[i].static is not None for i in present):
            return False
        arrays = [self.vals[i].static for i in present]
        intlike = all(a.dtype.kind in "biu" for a in arrays)
        if not intlike and op not in _DATA_MOVEMENT:
            return False
        if op in ("Cast", "CastLike") and not intlike:
            return False
        outs = _reference_eval(
            node, ins, [self.vals[i].static if i else None for i in ins], self.opset
        )
        if outs is None:
            return False
        if op not in _DATA_MOVEMENT and not all(o.dtype.kind in "biu" for o in outs):
            return False
        for name, arr in zip(node.output, outs, strict=False):
            if name:
                self.set_static(name, np.asarray(arr))
        return True


# --- helpers ----------------------------------------------------------------------------------


def _is_attribute_of(node: Any, key: Any) -> bool:
    """Whether `key` names an attribute of `node`'s op (so a KeyError on it means the model
    left a required attribute out, not a bug here)."""
    try:
        schema = onnx.defs.get_schema(node.op_type, node.domain)
    except Exception:
        return False
    return isinstance(key, str) and key in schema.attributes


def _same_bits(arr: np.ndarray) -> bool:
    """Every element has the first one's bits (so -0.0 and 0.0 differ, as do NaN payloads)."""
    flat = np.ascontiguousarray(arr).reshape(-1)
    raw = flat.view(np.uint8).reshape(flat.size, -1)
    return bool(np.all(raw == raw[:1]))


def _py(x: Any, dtype: DType) -> Any:
    if dtype.is_bool:
        return bool(x)
    if dtype.is_int:
        return int(x)
    return float(x)


def _nested(arr: np.ndarray, dtype: DType) -> Any:
    if arr.ndim == 0:
        return _py(arr[()], dtype)
    if dtype.is_float:
        return np.asarray(arr, dtype=np.float64).tolist()
    if dtype.is_bool:
        return arr.astype(bool).tolist()
    return arr.tolist()  # Python ints, u64 values above 2^63 included


def _tensor_to_numpy(t: Any, imp: Importer) -> np.ndarray:
    if t.data_location == 1:
        raise Unsupported(
            f"tensor '{printable(t.name)}' keeps its data in an external file: load the model "
            "with its external data first",
            imp.loc(),
        )
    if t.data_type not in _ONNX_DTYPES:
        why = f"tensor '{printable(t.name)}' has dtype {_no_ir_dtype(t.data_type)}"
        raise imp.unsupported(why) if imp.node is not None else Unsupported(why, imp.loc())
    arr = numpy_helper.to_array(t)
    if t.data_type == 16:
        arr = np.asarray(arr).astype(DType.BF16.np)
    return np.asarray(arr)


def _attr_value(a: Any, imp: Importer) -> Any:
    kind = a.type
    if kind == 1:
        return a.f
    if kind == 2:
        return a.i
    if kind == 3:
        return a.s.decode("utf-8", "replace")
    if kind == 4:
        return _tensor_to_numpy(a.t, imp)
    if kind == 6:
        return list(a.floats)
    if kind == 7:
        return list(a.ints)
    if kind == 8:
        return [s.decode("utf-8", "replace") for s in a.strings]
    if kind == 9:
        return [_tensor_to_numpy(t, imp) for t in a.tensors]
    if kind == 5:
        return a.g  # a subgraph: read by the control-flow handlers
    return None


def _reference_eval(
    node: Any, ins: list[str], arrays: list[np.ndarray | None], opset: int
) -> list[np.ndarray] | None:
    """Evaluate one node on constant inputs with ONNX's reference evaluator (shape arithmetic,
    nearest-resize positions); None when it cannot."""
    from onnx import helper
    from onnx.reference import ReferenceEvaluator

    inputs = []
    feeds = {}
    renamed = []
    for k, (name, arr) in enumerate(zip(ins, arrays, strict=True)):
        if not name:
            renamed.append("")
            continue
        local = f"in{k}"
        renamed.append(local)
        inputs.append(
            helper.make_tensor_value_info(local, helper.np_dtype_to_tensor_dtype(arr.dtype), None)
        )
        feeds[local] = arr
    outs = [f"out{k}" for k in range(len(node.output))]
    n = helper.make_node(node.op_type, renamed, outs)
    n.attribute.extend(node.attribute)
    graph = helper.make_graph(
        [n], "fold", inputs, [helper.make_tensor_value_info(o, 0, None) for o in outs]
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)])
    try:
        return [np.asarray(x) for x in ReferenceEvaluator(model).run(None, feeds)]
    except Exception:  # not foldable here: fall back to the op's own mapping
        return None


# --- broadcasting -----------------------------------------------------------------------------


def broadcast_shape(imp: Importer, *shapes: Sequence[int]) -> tuple[int, ...]:
    rank = max((len(s) for s in shapes), default=0)
    out = []
    for d in range(rank):
        sizes = {s[d - rank + len(s)] for s in shapes if d - rank + len(s) >= 0}
        sizes.discard(1)
        if len(sizes) > 1:
            raise imp.unsupported(f"shapes {[list(s) for s in shapes]} do not broadcast")
        out.append(sizes.pop() if sizes else 1)
    if any(0 in s for s in shapes):
        for d in range(rank):
            if any(len(s) - rank + d >= 0 and s[len(s) - rank + d] == 0 for s in shapes):
                out[d] = 0
    return tuple(out)


def bcast(imp: Importer, x: str, shape: Sequence[int]) -> str:
    """x broadcast numpy-style to `shape` (an explicit `broadcast`, none when equal)."""
    t = imp.type_of(x)
    if t.shape == tuple(shape):
        return x
    offset = len(shape) - t.rank
    return imp.emit(
        "broadcast", [x], t.with_shape(shape), dims=list(range(offset, offset + t.rank))
    )


def operands_bcast(imp: Importer, names: Sequence[str]) -> list[str]:
    irs = [imp.dyn(n) for n in names]
    shape = broadcast_shape(imp, *[imp.type_of(x).shape for x in irs])
    return [bcast(imp, x, shape) for x in irs]


def reshape(imp: Importer, x: str, shape: Sequence[int]) -> str:
    t = imp.type_of(x)
    if t.shape == tuple(shape):
        return x
    return imp.emit("reshape", [x], t.with_shape(shape))


def convert(imp: Importer, x: str, dtype: DType) -> str:
    t = imp.type_of(x)
    if t.dtype is dtype:
        return x
    return imp.emit("convert", [x], t.with_dtype(dtype))


def arg_extreme(imp: GraphEmitter, x: str, axis: int, largest: bool, last: bool) -> str:
    """The i64 position along `axis` of x's largest (or smallest) element: the first one, or
    the last with `last`. A NaN counts as the extreme (the first, or last, NaN wins) and +0.0
    ties with -0.0, as numpy's argmax/argmin and ONNX's ArgMax/ArgMin say. The axis is dropped.

    Exact by construction, in existing ops: m = reduce_max(x) (reduce_min) is NaN exactly when
    x holds a NaN (IR_SPEC section 3), and otherwise equals some element under IEEE `==` (the
    max of -0.0 and +0.0 is one of them); the hits are `x == m`, or `x != x` when m is NaN; the
    answer is the smallest (largest) iota index among the hits. The caller refuses an empty
    axis: it has no index to give."""
    t = imp.type_of(x)
    if t.dtype.is_bool:  # false < true, as i8 0 < 1
        x = convert(imp, x, DType.I8)
        t = imp.type_of(x)
    n = t.shape[axis]
    kept = [d for d in range(t.rank) if d != axis]
    m = imp.emit("reduce_max" if largest else "reduce_min", [x], axes=[axis])
    mb = imp.emit("broadcast", [m], t, dims=kept)
    hit = imp.emit("cmp", [x, mb], dir="eq")
    if t.dtype.is_float:
        m_nan = imp.emit("cmp", [mb, mb], dir="ne")
        x_nan = imp.emit("cmp", [x, x], dir="ne")
        hit = imp.emit("select", [m_nan, x_nan, hit])
    it = TensorType(DType.I64, t.shape)
    pos = imp.emit("iota", [], it, axis=axis)
    miss = imp.const(-1 if last else n, it)
    cand = imp.emit("select", [hit, pos, miss])
    return imp.emit("reduce_max" if last else "reduce_min", [cand], axes=[axis])


def take_along(imp: GraphEmitter, x: str, idx: str, axis: int) -> str:
    """numpy's take_along_axis: out[p] = x[p with p[axis] replaced by idx[p]], for i64 indices
    already in [0, size) and of x's shape except along `axis`: a take from the flattened x at
    the linear index idx * stride(axis) + sum over the other dims d of iota_d * stride(d)."""
    t = imp.type_of(x)
    it = imp.type_of(idx)
    strides = [math.prod(t.shape[d + 1 :]) for d in range(t.rank)]
    lin = imp.emit("mul", [idx, imp.const(strides[axis], it)])
    for d in range(t.rank):
        if d != axis and it.shape[d] > 1:
            pos = imp.emit("iota", [], it, axis=d)
            lin = imp.emit("add", [lin, imp.emit("mul", [pos, imp.const(strides[d], it)])])
    return imp.emit("take", [reshape(imp, x, [t.num_elements]), lin], axis=0)


def sort_along(imp: GraphEmitter, x: str, axis: int, descending: bool, k: int | None = None):
    """(values, i64 positions) of x's first k (all) elements along `axis` in the IR argsort's
    stable order: NaN above every number, equal values by position."""
    t = imp.type_of(x)
    if t.dtype.is_bool:
        x = convert(imp, x, DType.I8)
    order = imp.emit("argsort", [x], axis=axis, **({"descending": True} if descending else {}))
    n = t.shape[axis]
    if k is not None and k != n:
        ot = imp.type_of(order)
        shape = list(ot.shape)
        shape[axis] = k
        start = [0] * ot.rank
        order = imp.emit(
            "slice", [order], ot.with_shape(shape), start=start, limit=shape,
            stride=[1] * ot.rank,
        )  # fmt: skip
    if imp.type_of(order).num_elements == 0:
        return imp.const(0, t.with_shape(imp.type_of(order).shape)), order
    values = take_along(imp, x, order, axis)
    return (convert(imp, values, t.dtype) if t.dtype.is_bool else values), order


def _norm_axis(imp: Importer, axis: int, rank: int) -> int:
    a = axis + rank if axis < 0 else axis
    if not 0 <= a < max(rank, 1):
        raise imp.unsupported(f"axis {axis} is out of range for rank {rank}")
    return a


# --- handlers ---------------------------------------------------------------------------------

Handler = Callable[[Importer, Any, list[str], dict[str, Any]], None]
HANDLERS: dict[str, Handler] = {}

_WHY_NOT = {
    "NonZero": "its output shape depends on the data",
    "Unique": "its output shape depends on the data",
    "Compress": "its output shape depends on the data",
    "NonMaxSuppression": "its output shape depends on the data",
    "RandomUniform": "random number generation has no IR op",
    "RandomNormal": "random number generation has no IR op",
    "RandomUniformLike": "random number generation has no IR op",
    "RandomNormalLike": "random number generation has no IR op",
    "Bernoulli": "random number generation has no IR op",
}


def handler(*names: str) -> Callable[[Handler], Handler]:
    def deco(fn: Handler) -> Handler:
        for n in names:
            HANDLERS[n] = fn
        return fn

    return deco


def _out(imp: Importer, node: Any, ir: str, k: int = 0) -> None:
    if len(node.output) > k and node.output[k]:
        imp.set(node.output[k], ir)


def _require_float(imp: Importer, x: str, why: str = "") -> TensorType:
    t = imp.type_of(x)
    if not t.dtype.is_float:
        raise imp.unsupported(f"{t.dtype} operands are not supported{why}")
    return t


_UNARY_FLOAT = {
    "Exp": "exp", "Log": "log", "Sqrt": "sqrt", "Tanh": "tanh", "Erf": "erf",
    "Sigmoid": "sigmoid", "Floor": "floor", "Sin": "sin", "Cos": "cos",
    "Tan": "tan", "Asin": "asin", "Acos": "acos", "Atan": "atan", "Sinh": "sinh", "Cosh": "cosh",
    "Asinh": "asinh", "Acosh": "acosh", "Atanh": "atanh",
}  # fmt: skip


@handler(*_UNARY_FLOAT)
def _unary(imp: Importer, node: Any, ins: list[str], attrs: dict[str, Any]) -> None:
    x = imp.dyn(ins[0])
    _require_float(imp, x)
    _out(imp, node, imp.emit(_UNARY_FLOAT[node.op_type], [x]))


@handler("Ceil")
def _ceil(imp: Importer, node: Any, ins: list[str], attrs: dict[str, Any]) -> None:
    # ceil(x) = -floor(-x), exact (signs of zeros and NaN included).
    x = imp.dyn(ins[0])
    _require_float(imp, x)
    _out(imp, node, imp.emit("neg", [imp.emit("floor", [imp.emit("neg", [x])])]))


@handler("Neg")
def _neg(imp: Importer, node: Any, ins: list[str], attrs: dict[str, Any]) -> None:
    x = imp.dyn(ins[0])
    t = imp.type_of(x)
    if t.dtype.is_float:
        _out(imp, node, imp.emit("neg", [x]))
    elif t.dtype.is_int:  # 0 - x wraps like ONNX's two's-complement negation
        _out(imp, node, imp.emit("sub", [imp.const(0, t), x]))
    else:
        raise imp.unsupported(f"{t.dtype} operands are not supported")


@handler("Abs")
def _abs(imp: Importer, node: Any, ins: list[str], attrs: dict[str, Any]) -> None:
    x = imp.dyn(ins[0])
    t = imp.type_of(x)
    if t.dtype.is_float:
        _out(imp, node, imp.emit("abs", [x]))
    elif t.dtype.is_int:
        zero = imp.const(0, t)
        neg = imp.emit("cmp", [x, zero], dir="lt")
        _out(imp, node, imp.emit("select", [neg, imp.emit("sub", [zero, x]), x]))
    else:
        raise imp.unsupported(f"{t.dtype} operands are not supported")


@handler("IsNaN")
def _isnan(imp: Importer, node: Any, ins: list[str], attrs: dict[str, Any]) -> None:
    x = imp.dyn(ins[0])
    _require_float(imp, x)
    _out(imp, node, imp.emit("cmp", [x, x], dir="ne"))  # only NaN differs from itself


@handler("IsInf")
def _isinf(imp: Importer, node: Any, ins: list[str], attrs: dict[str, Any]) -> None:
    x = imp.dyn(ins[0])
    t = _require_float(imp, x)
    pos, neg = attrs.get("detect_positive", 1), attrs.get("detect_negative", 1)
    if pos and neg:
        r = imp.emit("cmp", [imp.emit("abs", [x]), imp.const(math.inf, t)], dir="eq")
    elif pos or neg:
        r = imp.emit("cmp", [x, imp.const(math.inf if pos else -math.inf, t)], dir="eq")
    else:
        r = imp.const(False, t.with_dtype(DType.I1))
    _out(imp, node, r)


@handler("Round")
def _round(imp: Importer, node: Any, ins: list[str], attrs: dict[str, Any]) -> None:
    """Half to even, from exact steps: r = floor(x); d = x - r (exact for |x| < 2^(p-1));
    d > 0.5 -> r + 1; d == 0.5 -> r + (r - 2 * floor(r / 2)) (r's parity); else r. A zero
    result takes x's sign (x * 0.0); |x| >= 2^(p-1), infinities and NaN are x itself."""
    x = imp.dyn(ins[0])
    _require_float(imp, x)
    _out(imp, node, round_half_even(imp, x))


def round_half_even(imp: GraphEmitter, x: str) -> str:
    """x rounded to an integral value, ties to even (numpy's rint), in x's float dtype, exactly:
    the steps of `_round` (ONNX Round)."""
    t = imp.type_of(x)

    def c(v: float) -> str:
        return imp.const(v, t)

    r = imp.emit("floor", [x])
    d = imp.emit("sub", [x, r])
    half = c(0.5)
    parity = imp.emit(
        "sub", [r, imp.emit("mul", [c(2.0), imp.emit("floor", [imp.emit("mul", [r, half])])])]
    )
    up = imp.emit("add", [r, c(1.0)])
    res = imp.emit("select", [imp.emit("cmp", [d, half], dir="gt"), up, r])
    tie = imp.emit("cmp", [d, half], dir="eq")
    res = imp.emit("select", [tie, imp.emit("add", [r, parity]), res])
    is_zero = imp.emit("cmp", [res, c(0.0)], dir="eq")
    res = imp.emit("select", [is_zero, imp.emit("mul", [x, c(0.0)]), res])
    small = imp.emit(
        "cmp", [imp.emit("abs", [x]), c(2.0 ** (t.dtype.significand_bits - 1))], dir="lt"
    )
    return imp.emit("select", [small, res, x])


@handler("Reciprocal")
def _reciprocal(imp: Importer, node: Any, ins: list[str], attrs: dict[str, Any]) -> None:
    x = imp.dyn(ins[0])
    t = _require_float(imp, x)
    _out(imp, node, imp.emit("div", [imp.const(1.0, t), x]))


@handler("Relu")
def _relu(imp: Importer, node: Any, ins: list[str], attrs: dict[str, Any]) -> None:
    x = imp.dyn(ins[0])
    t = imp.type_of(x)
    if t.dtype.is_float:
        _out(imp, node, imp.emit("relu", [x]))
    elif t.dtype.is_int:
        _out(imp, node, imp.emit("max", [x, imp.const(0, t)]))
    else:
        raise imp.unsupported(f"{t.dtype} operands are not supported")


@handler("LeakyRelu")
def _leaky_relu(imp: Importer, node: Any, ins: list[str], attrs: dict[str, Any]) -> None:
    # x < 0 ? alpha * x : x
    x = imp.dyn(ins[0])
    t = _require_float(imp, x)
    alpha = attrs.get("alpha", 0.01)
    neg = imp.emit("cmp", [x, imp.const(0.0, t)], dir="lt")
    ax = imp.emit("mul", [imp.const(alpha, t), x])
    _out(imp, node, imp.emit("select", [neg, ax, x]))


@handler("PRelu")
def _prelu(imp: Importer, node: Any, ins: list[str], attrs: dict[str, Any]) -> None:
    x, slope = operands_bcast(imp, ins[:2])
    t = _require_float(imp, x)
    neg = imp.emit("cmp", [x, imp.const(0.0, t)], dir="lt")
    _out(imp, node, imp.emit("select", [neg, imp.emit("mul", [slope, x]), x]))


@handler("Elu")
def _elu(imp: Importer, node: Any, ins: list[str], attrs: dict[str, Any]) -> None:
    # x < 0 ? alpha * (exp(x) - 1) : x
    x = imp.dyn(ins[0])
    t = _require_float(imp, x)
    alpha = attrs.get("alpha", 1.0)
    neg = imp.emit("cmp", [x, imp.const(0.0, t)], dir="lt")
    em1 = imp.emit("sub", [imp.emit("exp", [x]), imp.const(1.0, t)])
    _out(imp, node, imp.emit("select", [neg, imp.emit("mul", [imp.const(alpha, t), em1]), x]))


@handler("Selu")
def _selu(imp: Importer, node: Any, ins: list[str], attrs: dict[str, Any]) -> None:
    # x <= 0 ? gamma * (alpha * exp(x) - alpha) : gamma * x
    x = imp.dyn(ins[0])
    t = _require_float(imp, x)
    alpha = attrs.get("alpha", 1.67326319217681884765625)
    gamma = attrs.get("gamma", 1.05070102214813232421875)
    a, g = imp.const(alpha, t), imp.const(gamma, t)
    le = imp.emit("cmp", [x, imp.const(0.0, t)], dir="le")
    low = imp.emit("mul", [g, imp.emit("sub", [imp.emit("mul", [a, imp.emit("exp", [x])]), a])])
    _out(imp, node, imp.emit("select", [le, low, imp.emit("mul", [g, x])]))


@handler("HardSigmoid")
def _hard_sigmoid(imp: Importer, node: Any, ins: list[str], attrs: dict[str, Any]) -> None:
    # max(0, min(1, alpha * x + beta))
    x = imp.dyn(ins[0])
    t = _require_float(imp, x)
    alpha, beta = attrs.get("alpha", 0.2), attrs.get("beta", 0.5)
    y = imp.emit("add", [imp.emit("mul", [imp.const(alpha, t), x]), imp.const(beta, t)])
    y = imp.emit("min", [imp.const(1.0, t), y])
    _out(imp, node, imp.emit("max", [imp.const(0.0, t), y]))


@handler("Softsign")
def _softsign(imp: Importer, node: Any, ins: list[str], attrs: dict[str, Any]) -> None:
    x = imp.dyn(ins[0])
    t = _require_float(imp, x)
    den = imp.emit("add", [imp.const(1.0, t), imp.emit("abs", [x])])
    _out(imp, node, imp.emit("div", [x, den]))


@handler("Softplus")
def _softplus(imp: Importer, node: Any, ins: list[str], attrs: dict[str, Any]) -> None:
    # log(exp(x) + 1)
    x = imp.dyn(ins[0])
    t = _require_float(imp, x)
    _out(imp, node, imp.emit("log", [imp.emit("add", [imp.emit("exp", [x]), imp.const(1.0, t)])]))


@handler("ThresholdedRelu")
def _thresholded_relu(imp: Importer, node: Any, ins: list[str], attrs: dict[str, Any]) -> None:
    x = imp.dyn(ins[0])
    t = _require_float(imp, x)
    gt = imp.emit("cmp", [x, imp.const(attrs.get("alpha", 1.0), t)], dir="gt")
    _out(imp, node, imp.emit("select", [gt, x, imp.const(0.0, t)]))


@handler("Sign")
def _sign(imp: Importer, node: Any, ins: list[str], attrs: dict[str, Any]) -> None:
    x = imp.dyn(ins[0])
    t = imp.type_of(x)
    if not (t.dtype.is_float or t.dtype.is_int):
        raise imp.unsupported(f"{t.dtype} operands are not supported")
    zero = imp.const(0, t)
    pos = imp.emit("cmp", [x, zero], dir="gt")
    neg = imp.emit("cmp", [x, zero], dir="lt")
    inner = imp.emit("select", [neg, imp.const(-1, t), x if t.dtype.is_float else zero])
    _out(imp, node, imp.emit("select", [pos, imp.const(1, t), inner]))


_BINARY = {"Add": "add", "Sub": "sub", "Mul": "mul", "Div": "div"}


@handler(*_BINARY)
def _binary(imp: Importer, node: Any, ins: list[str], attrs: dict[str, Any]) -> None:
    if imp.opset < 7 and attrs.get("broadcast", 0) and "axis" in attrs:
        raise imp.unsupported("legacy broadcast with an axis is not supported")
    a, b = operands_bcast(imp, ins[:2])
    t = imp.type_of(a)
    if t.dtype.is_bool:
        raise imp.unsupported("boolean operands are not supported")
    if imp.type_of(b).dtype != t.dtype:
        raise imp.unsupported(f"mixed operand dtypes {t.dtype} and {imp.type_of(b).dtype}")
    if node.op_type == "Div" and not t.dtype.is_float:
        _out(imp, node, _int_quotient(imp, a, b))
        return
    _out(imp, node, imp.emit(_BINARY[node.op_type], [a, b]))


def _int_quotient(imp: Importer, a: str, b: str) -> str:
    """ONNX Div on integers: the IR's integer `div` (truncated toward zero, in the dtype's own
    integers, so exact at 64 bits too), as ONNX's reference computes it (numpy's floor_divide,
    moved up by one where a remainder is left and the signs differ). A zero divisor gives 0,
    as the reference's numpy does (ONNX leaves it undefined); INT_MIN / -1 wraps to INT_MIN,
    as numpy's does."""
    return imp.emit("div", [a, b])


@handler("Mod")
def _mod(imp: Importer, node: Any, ins: list[str], attrs: dict[str, Any]) -> None:
    # fmod = 1: the sign of the dividend (IR rem, integers and floats); fmod = 0: the sign of
    # the divisor (IR mod for integers; for floats numpy's remainder, `_float_mod`).
    a, b = operands_bcast(imp, ins[:2])
    t = imp.type_of(a)
    if imp.type_of(b).dtype != t.dtype:
        raise imp.unsupported(f"mixed operand dtypes {t.dtype} and {imp.type_of(b).dtype}")
    fmod = attrs.get("fmod", 0)
    if t.dtype.is_float and not fmod:
        _out(imp, node, _float_mod(imp, a, b))
        return
    if not (t.dtype.is_int or t.dtype.is_float):
        raise imp.unsupported(f"{t.dtype} operands")
    _out(imp, node, imp.emit("rem" if fmod else "mod", [a, b]))


def _float_mod(imp: Importer, a: str, b: str) -> str:
    """The remainder with the divisor's sign on floats, as numpy's (and ONNX's reference):
    r = fmod(a, b) (exact); a nonzero r whose sign differs from b's becomes r + b (rounded
    once: the only rounding); a zero r becomes a zero with b's sign; NaN stays NaN."""
    t = imp.type_of(a)
    r = imp.emit("rem", [a, b])
    zero = imp.const(0.0, t)
    is_zero = imp.emit("cmp", [r, zero], dir="eq")
    neg_b = imp.emit("cmp", [b, zero], dir="lt")
    differ = imp.emit("cmp", [imp.emit("cmp", [r, zero], dir="lt"), neg_b], dir="ne")
    moved = imp.emit("select", [differ, imp.emit("add", [r, b]), r])
    signed_zero = imp.emit("select", [neg_b, imp.const(-0.0, t), zero])
    return imp.emit("select", [is_zero, signed_zero, moved])


@handler("Pow")
def _pow(imp: Importer, node: Any, ins: list[str], attrs: dict[str, Any]) -> None:
    a, b = operands_bcast(imp, ins[:2])
    t = imp.type_of(a)
    bt = imp.type_of(b)
    if t.dtype.is_bool or bt.dtype.is_bool:
        raise imp.unsupported("a boolean operand")
    if not t.dtype.is_float or (bt.dtype.is_int and not imp.is_static(ins[1])):
        _out(imp, node, _numpy_power(imp, a, b))
        return
    if bt.dtype != t.dtype:
        if bt.dtype.is_int and imp.is_static(ins[1]):
            e = imp.static(ins[1], "the exponent")
            if np.any(np.abs(e.astype(np.float64)) > 2**24):
                raise imp.unsupported("the integer exponent does not convert exactly")
        elif bt.dtype.is_int or bt.dtype.is_float:
            if bt.dtype.is_float and bt.dtype.bits > t.dtype.bits:
                raise imp.unsupported(
                    f"a {bt.dtype} exponent on a {t.dtype} base would round the exponent"
                )
            if bt.dtype.is_int and bt.dtype.bits > 8 and t.dtype.significand_bits < bt.dtype.bits:
                raise imp.unsupported(f"a {bt.dtype} exponent may not convert exactly to {t.dtype}")
        else:
            raise imp.unsupported(f"a {bt.dtype} exponent is not supported")
        b = convert(imp, b, t.dtype)
    power = _small_power(imp, ins[1], t)
    if power is not None:
        _out(imp, node, _power_by_products(imp, a, power))
        return
    _out(imp, node, imp.emit("pow", [a, b]))


def _numpy_power(imp: Importer, a: str, b: str) -> str:
    """np.power(a, b).astype(a's dtype), ONNX's reference: in numpy's common dtype of the two.
    A float one: both operands converted to it (exactly, or for 64-bit integers rounded to
    nearest-even as numpy converts them), IR `pow` there, converted to a's dtype (a float->int
    conversion truncates and saturates). An integer one: the exact power modulo 2^n by
    squaring and multiplying over the exponent's bits (numpy's integer power, which wraps), a
    negative exponent giving the truncated 1 / a^-b: 1 for a = 1, +-1 for a = -1, 0 otherwise
    (numpy raises there; ONNX leaves it undefined)."""
    t, bt = imp.type_of(a), imp.type_of(b)
    try:
        common = from_numpy(np.result_type(t.dtype.np, bt.dtype.np))
    except TypeError:
        common = None
    if common is None:
        raise imp.unsupported(f"a {t.dtype} base with a {bt.dtype} exponent")
    if common.is_float:
        y = imp.emit("pow", [convert(imp, a, common), convert(imp, b, common)])
        return convert(imp, y, t.dtype)
    x, e = convert(imp, a, common), convert(imp, b, common)
    ct = imp.type_of(x)

    def c(v: int) -> str:
        return imp.const(v, ct)

    result, square, one = c(1), x, c(1)
    for k in range(common.bits):
        bit = imp.emit("bitwise_and", [imp.emit("shift_right", [e, c(k)]), one])
        on = imp.emit("cmp", [bit, one], dir="eq")
        result = imp.emit("select", [on, imp.emit("mul", [result, square]), result])
        if k + 1 < common.bits:
            square = imp.emit("mul", [square, square])
    if common.is_signed:
        neg = imp.emit("cmp", [e, c(0)], dir="lt")
        odd = imp.emit("cmp", [imp.emit("bitwise_and", [e, one]), one], dir="eq")
        minus = imp.emit("select", [odd, c(-1), one])
        inv = imp.emit("select", [imp.emit("cmp", [x, c(-1)], dir="eq"), minus, c(0)])
        inv = imp.emit("select", [imp.emit("cmp", [x, one], dir="eq"), one, inv])
        result = imp.emit("select", [neg, inv, result])
    return convert(imp, result, t.dtype)


def _small_power(imp: Importer, exponent: str, base: TensorType) -> int | None:
    """2 or 3 when `exponent` is a constant with every element equal to it and the base is f32
    or f64, else None. onnxruntime's CPU Pow computes those powers as `x * x` and `(x * x) * x`
    (tests/frontends/test_onnx_pow.py checks it bit for bit, special values included), as the
    torch importer maps torch's pow. The products need no libm call: GPT-2's ONNX gelu cubes its
    input with Pow, and its 2-layer elementwise kernels took 4.6 ms with `powf` and 0.4 ms with
    the products (30 ms -> 22 ms in all, one thread)."""
    if base.dtype not in (DType.F32, DType.F64) or not imp.is_static(exponent):
        return None
    e = np.asarray(imp.static(exponent, "the exponent"))
    if e.size == 0 or e.dtype.kind not in "fiu":
        return None
    first = e.flat[0]
    if first not in (2, 3) or not np.all(e == first):
        return None
    return int(first)


def _power_by_products(imp: Importer, x: str, power: int) -> str:
    # x^2 -> x * x;  x^3 -> (x * x) * x, in onnxruntime's order
    y = imp.emit("mul", [x, x])
    return imp.emit("mul", [y, x]) if power == 3 else y


_CMP = {"Equal": "eq", "Less": "lt", "Greater": "gt", "LessOrEqual": "le", "GreaterOrEqual": "ge"}


@handler(*_CMP)
def _cmp(imp: Importer, node: Any, ins: list[str], attrs: dict[str, Any]) -> None:
    a, b = operands_bcast(imp, ins[:2])
    if imp.type_of(a).dtype != imp.type_of(b).dtype:
        raise imp.unsupported("mixed operand dtypes")
    _out(imp, node, imp.emit("cmp", [a, b], dir=_CMP[node.op_type]))


def _bool(imp: Importer, x: str) -> None:
    if imp.type_of(x).dtype is not DType.I1:
        raise imp.unsupported(f"operands must be bool, got {imp.type_of(x)}")


@handler("Not")
def _not(imp: Importer, node: Any, ins: list[str], attrs: dict[str, Any]) -> None:
    x = imp.dyn(ins[0])
    _bool(imp, x)
    t = imp.type_of(x)
    _out(imp, node, imp.emit("select", [x, imp.const(False, t), imp.const(True, t)]))


@handler("And", "Or", "Xor")
def _logic(imp: Importer, node: Any, ins: list[str], attrs: dict[str, Any]) -> None:
    a, b = operands_bcast(imp, ins[:2])
    _bool(imp, a)
    _bool(imp, b)
    t = imp.type_of(a)
    if node.op_type == "And":
        r = imp.emit("select", [a, b, imp.const(False, t)])
    elif node.op_type == "Or":
        r = imp.emit("select", [a, imp.const(True, t), b])
    else:
        r = imp.emit("cmp", [a, b], dir="ne")
    _out(imp, node, r)


_BITWISE = {"BitwiseAnd": "bitwise_and", "BitwiseOr": "bitwise_or", "BitwiseXor": "bitwise_xor"}


def _int_operands(imp: Importer, xs: list[str]) -> TensorType:
    t = imp.type_of(xs[0])
    if not t.dtype.is_int:
        raise imp.unsupported(f"{t.dtype} operands (integers only)")
    for x in xs[1:]:
        if imp.type_of(x).dtype != t.dtype:
            raise imp.unsupported(f"mixed operand dtypes {t.dtype} and {imp.type_of(x).dtype}")
    return t


@handler(*_BITWISE)
def _bitwise(imp: Importer, node: Any, ins: list[str], attrs: dict[str, Any]) -> None:
    a, b = operands_bcast(imp, ins[:2])
    _int_operands(imp, [a, b])
    _out(imp, node, imp.emit(_BITWISE[node.op_type], [a, b]))


@handler("BitwiseNot")
def _bitwise_not(imp: Importer, node: Any, ins: list[str], attrs: dict[str, Any]) -> None:
    x = imp.dyn(ins[0])
    _int_operands(imp, [x])
    _out(imp, node, imp.emit("bitwise_not", [x]))


@handler("BitShift")
def _bitshift(imp: Importer, node: Any, ins: list[str], attrs: dict[str, Any]) -> None:
    # Opset 28's rule is IR_SPEC.md's: arithmetic right shifts on signed types, logical on
    # unsigned ones, left shifts wrap, and an amount that is negative or at least the width
    # gives the sign fill (-1 for a right shift of a negative value, else 0). Earlier opsets
    # define BitShift on unsigned types only, where the rule is the same.
    direction = attrs.get("direction")
    if isinstance(direction, bytes):
        direction = direction.decode()
    if direction not in ("LEFT", "RIGHT"):
        raise imp.unsupported(f'direction {direction!r} (expected "LEFT" or "RIGHT")')
    a, b = operands_bcast(imp, ins[:2])
    t = _int_operands(imp, [a, b])
    if is_signed(t.dtype) and imp.opset < 28:
        raise imp.unsupported(f"{t.dtype} operands (BitShift takes signed integers since opset 28)")
    op = "shift_left" if direction == "LEFT" else "shift_right"
    _out(imp, node, imp.emit(op, [a, b]))


@handler("Where")
def _where(imp: Importer, node: Any, ins: list[str], attrs: dict[str, Any]) -> None:
    c, a, b = operands_bcast(imp, ins[:3])
    _bool(imp, c)
    _out(imp, node, imp.emit("select", [c, a, b]))


@handler("Max", "Min", "Sum", "Mean")
def _variadic(imp: Importer, node: Any, ins: list[str], attrs: dict[str, Any]) -> None:
    xs = operands_bcast(imp, [i for i in ins if i])
    t = imp.type_of(xs[0])
    if t.dtype.is_bool or any(imp.type_of(x).dtype != t.dtype for x in xs):
        raise imp.unsupported(f"operands {[str(imp.type_of(x)) for x in xs]} are not supported")
    ir = {"Max": "max", "Min": "min", "Sum": "add", "Mean": "add"}[node.op_type]
    acc = xs[0]
    for x in xs[1:]:
        acc = imp.emit(ir, [acc, x])
    if node.op_type == "Mean":
        if not t.dtype.is_float:
            raise imp.unsupported("an integer Mean needs integer division")
        if len(xs) > 1:
            acc = imp.emit("div", [acc, imp.const(float(len(xs)), t)])
    _out(imp, node, acc)


@handler("Clip")
def _clip(imp: Importer, node: Any, ins: list[str], attrs: dict[str, Any]) -> None:
    # min(max(x, lo), hi): lo > hi gives hi, as ONNX says; NaN stays NaN.
    x = imp.dyn(ins[0])
    t = imp.type_of(x)
    if t.dtype.is_bool:
        raise imp.unsupported("boolean operands are not supported")
    if imp.opset < 11:
        lo = attrs.get("min")
        hi = attrs.get("max")
        if lo is not None:
            x = imp.emit("max", [x, imp.const(lo, t)])
        if hi is not None:
            x = imp.emit("min", [x, imp.const(hi, t)])
        _out(imp, node, x)
        return
    for k, ir in ((1, "max"), (2, "min")):
        if len(ins) > k and ins[k]:
            bound = imp.dyn(ins[k])
            if imp.type_of(bound).rank != 0 and imp.type_of(bound).num_elements != 1:
                raise imp.unsupported("min and max must be scalars")
            bound = bcast(imp, reshape(imp, bound, []), t.shape)
            x = imp.emit(ir, [x, bound])
    _out(imp, node, x)


@handler("Identity")
def _identity(imp: Importer, node: Any, ins: list[str], attrs: dict[str, Any]) -> None:
    v = imp.val(ins[0])
    imp.vals[node.output[0]] = v


@handler("Dropout")
def _dropout(imp: Importer, node: Any, ins: list[str], attrs: dict[str, Any]) -> None:
    if len(ins) > 2 and ins[2]:
        training = imp.static(ins[2], "training_mode")
        ratio = imp.static(ins[1], "ratio") if ins[1] else np.float32(0.5)
        # Training mode drops each element with probability `ratio` and scales the rest by
        # 1 / (1 - ratio): with a ratio of 0 nothing is dropped and the scale is 1, so the
        # output is the input and the mask all true (ONNX's reference returns them so).
        if bool(np.asarray(training).reshape(-1)[0]) and np.asarray(ratio).reshape(-1)[0] != 0:
            raise imp.unsupported("training mode (random masks) is not supported")
    if imp.opset < 7 and attrs.get("is_test", 0) == 0:
        raise imp.unsupported("training mode (is_test = 0) is not supported")
    v = imp.val(ins[0])
    imp.vals[node.output[0]] = v
    if len(node.output) > 1 and node.output[1]:
        imp.set_static(node.output[1], np.ones(v.type.shape, dtype=bool))


@handler("Cast", "CastLike")
def _cast(imp: Importer, node: Any, ins: list[str], attrs: dict[str, Any]) -> None:
    if node.op_type == "Cast":
        code = attrs["to"]
        target = _ONNX_DTYPES.get(code)
        if target is None:
            raise imp.unsupported(f"casting to {_no_ir_dtype(code)}")
    else:
        target = imp.val(ins[1]).type.dtype
    # A float to integer cast of an out-of-range value or NaN is undefined in ONNX; the IR's
    # convert saturates (NaN -> 0). `saturate` (opset 19) matters only for float8 targets:
    # IR_SPEC.md section 8 is ONNX's reference (clip to +-max, inf included, then round).
    x = imp.dyn(ins[0])
    if target.is_small_int and not imp.type_of(x).dtype.is_small_int:
        if imp.type_of(x).dtype.is_float or imp.type_of(x).dtype.is_float8:
            _out(imp, node, _float_to_small_int(imp, x, target))
            return
    saturate = bool(attrs.get("saturate", 1))
    if target.is_float8 and not saturate and imp.type_of(x).dtype is not target:
        t = imp.type_of(x).with_dtype(target)
        _out(imp, node, imp.emit("convert", [x], t, saturate=False))
        return
    if imp.narrow_in_f32 and target in _NARROW:
        # rounded to the narrow type as the Cast says, then held in f32 like every narrow value
        _out(imp, node, convert(imp, convert(imp, x, target), DType.F32))
        return
    _out(imp, node, convert(imp, x, target))


def _float_to_small_int(imp: Importer, x: str, target: DType) -> str:
    """A float (or float8) cast to a sub-byte integer as ONNX's reference casts it (ml_dtypes):
    truncated toward zero where that is in the target's range, else 0 (NaN and infinities
    too). ONNX leaves out-of-range values undefined; its test data expects 0. Built exactly:
    trunc(x) is in [lo, hi] exactly when lo - 1 < x < hi + 1 (NaN compares false); the IR's
    saturating convert to i8 or u8 is then trunc(x), and the conversion to the target exact."""
    if imp.type_of(x).dtype.is_float8:
        x = convert(imp, x, DType.F32)
    t = imp.type_of(x)
    lo = imp.const(float(target.int_min - 1), t)
    hi = imp.const(float(target.int_max + 1), t)
    above = imp.emit("cmp", [x, lo], dir="gt")
    below = imp.emit("cmp", [x, hi], dir="lt")
    inside = imp.emit("select", [above, below, above])  # above and below
    byte = DType.I8 if target.int_min < 0 else DType.U8
    whole = convert(imp, x, byte)
    zero = imp.const(0, t.with_dtype(byte))
    return convert(imp, imp.emit("select", [inside, whole, zero]), target)


@handler("Constant")
def _constant(imp: Importer, node: Any, ins: list[str], attrs: dict[str, Any]) -> None:
    if "value" in attrs:
        arr = attrs["value"]
    elif "value_float" in attrs:
        arr = np.array(attrs["value_float"], dtype=np.float32)
    elif "value_floats" in attrs:
        arr = np.array(attrs["value_floats"], dtype=np.float32)
    elif "value_int" in attrs:
        arr = np.array(attrs["value_int"], dtype=np.int64)
    elif "value_ints" in attrs:
        arr = np.array(attrs["value_ints"], dtype=np.int64)
    else:
        raise imp.unsupported(f"attributes {sorted(attrs)} (sparse or string constants)")
    imp.set_static(node.output[0], np.asarray(arr))


@handler("ConstantOfShape")
def _constant_of_shape(imp: Importer, node: Any, ins: list[str], attrs: dict[str, Any]) -> None:
    shape = [int(s) for s in imp.static(ins[0], "the shape")]
    value = attrs.get("value", np.zeros(1, dtype=np.float32))
    imp.set_static(node.output[0], np.full(shape, value.reshape(-1)[0], dtype=value.dtype))


@handler("Shape")
def _shape(imp: Importer, node: Any, ins: list[str], attrs: dict[str, Any]) -> None:
    shape = list(imp.val(ins[0]).type.shape)
    rank = len(shape)
    start = attrs.get("start", 0)
    end = attrs.get("end", rank)
    start = min(max(start + rank if start < 0 else start, 0), rank)
    end = min(max(end + rank if end < 0 else end, 0), rank)
    imp.set_static(node.output[0], np.array(shape[start:end], dtype=np.int64))


@handler("Size")
def _size(imp: Importer, node: Any, ins: list[str], attrs: dict[str, Any]) -> None:
    imp.set_static(node.output[0], np.array(imp.val(ins[0]).type.num_elements, dtype=np.int64))


@handler("Range")
def _range(imp: Importer, node: Any, ins: list[str], attrs: dict[str, Any]) -> None:
    # output[i] = start + (i * delta), in the inputs' dtype, as ONNX defines it; the length
    # max(ceil((limit - start) / delta), 0) must be static.
    args = [np.asarray(imp.static(i, "Range's inputs")) for i in ins[:3]]
    if any(a.size != 1 for a in args):  # one-element tensors are read as ONNX's reference does
        raise imp.unsupported(f"inputs of shapes {[list(a.shape) for a in args]}, not scalars")
    start, limit, delta = (a.reshape(-1)[0] for a in args)
    if float(delta) == 0:
        raise imp.unsupported("delta is 0")
    n = max(int(math.ceil((float(limit) - float(start)) / float(delta))), 0)
    dtype = _np_to_ir(np.asarray(start).dtype)
    if dtype is None or dtype.is_bool:
        raise imp.unsupported(f"inputs of numpy dtype {np.asarray(start).dtype}")
    if dtype.is_int:  # integer arithmetic: exact in numpy (wrapping like the IR)
        with np.errstate(over="ignore"):
            out = np.array([start + np.asarray(i, start.dtype) * delta for i in range(n)])
        imp.set_static(node.output[0], out.astype(start.dtype).reshape(n))
        return
    t = TensorType(dtype, (n,))
    i = imp.emit("iota", [], t, axis=0)
    y = imp.emit("add", [imp.const(start, t), imp.emit("mul", [i, imp.const(delta, t)])])
    _out(imp, node, y)


@handler("Reshape")
def _reshape(imp: Importer, node: Any, ins: list[str], attrs: dict[str, Any]) -> None:
    x = imp.dyn(ins[0])
    t = imp.type_of(x)
    target = (
        list(attrs["shape"]) if imp.opset < 5 else [int(s) for s in imp.static(ins[1], "shape")]
    )
    allowzero = attrs.get("allowzero", 0)
    out = []
    for i, s in enumerate(target):
        if s == 0 and not allowzero:
            out.append(t.shape[i])
        else:
            out.append(s)
    if out.count(-1) > 1:
        raise imp.unsupported("more than one -1 in the shape")
    if -1 in out:
        known = math.prod(s for s in out if s != -1)
        if known == 0 or t.num_elements % known:
            raise imp.unsupported(f"cannot infer -1 reshaping {t} to {target}")
        out[out.index(-1)] = t.num_elements // known
    if math.prod(out) != t.num_elements:
        raise imp.unsupported(f"cannot reshape {t} to {target}")
    _out(imp, node, reshape(imp, x, out))


@handler("Flatten")
def _flatten(imp: Importer, node: Any, ins: list[str], attrs: dict[str, Any]) -> None:
    x = imp.dyn(ins[0])
    t = imp.type_of(x)
    axis = attrs.get("axis", 1)
    axis = axis + t.rank if axis < 0 else axis
    if not 0 <= axis <= t.rank:
        raise imp.unsupported(f"axis {attrs.get('axis')} out of range")
    _out(imp, node, reshape(imp, x, [math.prod(t.shape[:axis]), math.prod(t.shape[axis:])]))


def _axes_arg(imp: Importer, ins: list[str], attrs: dict[str, Any], k: int, from_opset: int):
    if imp.opset >= from_opset:
        if len(ins) > k and ins[k]:
            return [int(a) for a in np.asarray(imp.static(ins[k], "axes")).reshape(-1)]
        return None
    return attrs.get("axes")


@handler("Squeeze")
def _squeeze(imp: Importer, node: Any, ins: list[str], attrs: dict[str, Any]) -> None:
    x = imp.dyn(ins[0])
    t = imp.type_of(x)
    axes = _axes_arg(imp, ins, attrs, 1, 13)
    if axes is None:
        axes = [d for d, s in enumerate(t.shape) if s == 1]
    axes = [_norm_axis(imp, a, t.rank) for a in axes]
    if any(t.shape[a] != 1 for a in axes):
        raise imp.unsupported(f"cannot squeeze a dim of size other than 1 in {t}")
    _out(imp, node, reshape(imp, x, [s for d, s in enumerate(t.shape) if d not in axes]))


@handler("Unsqueeze")
def _unsqueeze(imp: Importer, node: Any, ins: list[str], attrs: dict[str, Any]) -> None:
    x = imp.dyn(ins[0])
    t = imp.type_of(x)
    axes = _axes_arg(imp, ins, attrs, 1, 13)
    if axes is None:
        raise imp.unsupported("axes are required")
    rank = t.rank + len(axes)
    axes = sorted(_norm_axis(imp, a, rank) for a in axes)
    shape = list(t.shape)
    for a in axes:
        shape.insert(a, 1)
    _out(imp, node, reshape(imp, x, shape))


@handler("Transpose")
def _transpose(imp: Importer, node: Any, ins: list[str], attrs: dict[str, Any]) -> None:
    x = imp.dyn(ins[0])
    t = imp.type_of(x)
    perm = attrs.get("perm") or list(range(t.rank))[::-1]
    if list(perm) == list(range(t.rank)):
        _out(imp, node, x)
        return
    _out(imp, node, imp.emit("transpose", [x], perm=list(perm)))


@handler("Concat")
def _concat(imp: Importer, node: Any, ins: list[str], attrs: dict[str, Any]) -> None:
    xs = [imp.dyn(i) for i in ins if i]
    t = imp.type_of(xs[0])
    axis = _norm_axis(imp, attrs.get("axis", 1 if imp.opset < 4 else 0), t.rank)
    if len(xs) == 1:
        _out(imp, node, xs[0])
        return
    _out(imp, node, imp.emit("concat", xs, axis=axis))


def _take_indices(imp: Importer, x: str, axis: int, idx: Sequence[int]) -> str:
    """x gathered along `axis` at static, in-range indices (a strided slice when it is one)."""
    t = imp.type_of(x)
    idx = list(idx)
    n = len(idx)
    if n == 0 or (n == 1 and 0 <= idx[0] < t.shape[axis]):
        start = idx[0] if n else 0
        return _slice1(imp, x, axis, start, start + n, 1)
    step = idx[1] - idx[0] if n > 1 else 1
    if step >= 1 and idx == list(range(idx[0], idx[0] + step * n, step)):
        return _slice1(imp, x, axis, idx[0], idx[0] + step * (n - 1) + 1, step)
    i64 = TensorType(DType.I64, (n,))
    return imp.emit("take", [x, imp.const(np.array(idx, dtype=np.int64), i64)], axis=axis)


def _slice1(imp: Importer, x: str, axis: int, start: int, limit: int, stride: int) -> str:
    t = imp.type_of(x)
    if (start, limit, stride) == (0, t.shape[axis], 1):
        return x
    st = [0] * t.rank
    li = list(t.shape)
    sd = [1] * t.rank
    st[axis], li[axis], sd[axis] = start, limit, stride
    return imp.emit("slice", [x], start=st, limit=li, stride=sd)


@handler("Slice")
def _slice(imp: Importer, node: Any, ins: list[str], attrs: dict[str, Any]) -> None:
    x = imp.dyn(ins[0])
    t = imp.type_of(x)
    if imp.opset < 10:
        starts, ends = attrs["starts"], attrs["ends"]
        axes = attrs.get("axes", list(range(len(starts))))
        steps = [1] * len(starts)
    else:

        def arg(k: int, what: str) -> list[int] | None:
            if len(ins) > k and ins[k]:
                return [int(v) for v in np.asarray(imp.static(ins[k], what)).reshape(-1)]
            return None

        starts, ends = arg(1, "starts"), arg(2, "ends")
        axes = arg(3, "axes") or list(range(len(starts)))
        steps = arg(4, "steps") or [1] * len(starts)
    for a, s, e, st in zip(axes, starts, ends, steps, strict=True):
        a = _norm_axis(imp, a, t.rank)
        if st == 0:
            raise imp.unsupported("a step of 0")
        idx = list(range(*slice(s, e, st).indices(t.shape[a])))
        x = _take_indices(imp, x, a, idx)
    _out(imp, node, x)


@handler("Split")
def _split(imp: Importer, node: Any, ins: list[str], attrs: dict[str, Any]) -> None:
    x = imp.dyn(ins[0])
    t = imp.type_of(x)
    axis = _norm_axis(imp, attrs.get("axis", 0), t.rank)
    n_out = len(node.output)
    if imp.opset >= 13 and len(ins) > 1 and ins[1]:
        sizes = [int(v) for v in imp.static(ins[1], "split")]
    elif imp.opset < 13 and "split" in attrs:
        sizes = list(attrs["split"])
    else:
        n = attrs.get("num_outputs", n_out)
        chunk = -(-t.shape[axis] // n)
        sizes = [min(chunk, t.shape[axis] - k * chunk) for k in range(n)]
    if sum(sizes) != t.shape[axis] or len(sizes) != n_out:
        raise imp.unsupported(f"split sizes {sizes} do not fit {t}")
    pos = 0
    for k, s in enumerate(sizes):
        _out(imp, node, _slice1(imp, x, axis, pos, pos + s, 1), k)
        pos += s


@handler("Tile")
def _tile(imp: Importer, node: Any, ins: list[str], attrs: dict[str, Any]) -> None:
    # x[..., d, ...] -> [..., 1, d, ...] broadcast to [..., r, d, ...] -> [..., r * d, ...]
    x = imp.dyn(ins[0])
    t = imp.type_of(x)
    reps = [int(r) for r in imp.static(ins[1], "repeats")]
    inter = []
    final = []
    for s, r in zip(t.shape, reps, strict=True):
        inter += [r, s]
        final.append(r * s)
    y = reshape(imp, x, [d for s in t.shape for d in (1, s)])
    y = imp.emit("broadcast", [y], t.with_shape(inter), dims=list(range(2 * t.rank)))
    _out(imp, node, reshape(imp, y, final))


@handler("Expand")
def _expand(imp: Importer, node: Any, ins: list[str], attrs: dict[str, Any]) -> None:
    x = imp.dyn(ins[0])
    shape = [int(s) for s in imp.static(ins[1], "shape")]
    _out(imp, node, bcast(imp, x, broadcast_shape(imp, imp.type_of(x).shape, shape)))


@handler("Gather")
def _gather(imp: Importer, node: Any, ins: list[str], attrs: dict[str, Any]) -> None:
    x = imp.dyn(ins[0])
    t = imp.type_of(x)
    axis = _norm_axis(imp, attrs.get("axis", 0), t.rank)
    size = t.shape[axis]
    if imp.is_static(ins[1]):
        idx = np.asarray(imp.static(ins[1], "indices")).astype(np.int64)
        if np.any((idx < -size) | (idx >= size)):
            raise imp.unsupported(f"an index is out of range for axis {axis} of {t}")
        idx = np.where(idx < 0, idx + size, idx)
        if idx.ndim == 1:
            _out(imp, node, _take_indices(imp, x, axis, idx.tolist()))
            return
        i = imp.const(idx, TensorType(DType.I64, idx.shape))
    else:
        i = imp.dyn(ins[1])
        it = imp.type_of(i)
        if not it.dtype.is_int:
            raise imp.unsupported(f"indices of type {it}")
        # ONNX counts negative indices from the end; IR take clamps: wrap them first.
        zero = imp.const(0, it)
        neg = imp.emit("cmp", [i, zero], dir="lt")
        i = imp.emit("select", [neg, imp.emit("add", [i, imp.const(size, it)]), i])
    _out(imp, node, imp.emit("take", [x, i], axis=axis))


@handler("GatherElements")
def _gather_elements(imp: Importer, node: Any, ins: list[str], attrs: dict[str, Any]) -> None:
    # out[p] = x[p with p[axis] replaced by idx[p]]: a take from the flattened x at the linear
    # index idx * stride(axis) + (the other coordinates' static part). The index is wrapped
    # (ONNX counts negatives from the end) and kept inside the axis (out-of-range indices are
    # an error in ONNX) before it is combined, so it never reaches a neighbouring row.
    x = imp.dyn(ins[0])
    t = imp.type_of(x)
    axis = _norm_axis(imp, attrs.get("axis", 0), t.rank)
    i = convert(imp, imp.dyn(ins[1]), DType.I64)
    it = imp.type_of(i)
    if not imp.type_of(imp.dyn(ins[1])).dtype.is_int or it.rank != t.rank:
        raise imp.unsupported(f"indices {it} for data {t}")
    if any(a > b for a, b in zip(it.shape, t.shape, strict=True)):
        raise imp.unsupported(f"indices {it} larger than data {t}")
    size = t.shape[axis]
    if size == 0:
        raise imp.unsupported("gathering from an empty axis")
    zero = imp.const(0, it)
    neg = imp.emit("cmp", [i, zero], dir="lt")
    i = imp.emit("select", [neg, imp.emit("add", [i, imp.const(size, it)]), i])
    i = imp.emit("min", [imp.emit("max", [i, zero]), imp.const(size - 1, it)])
    strides = [math.prod(t.shape[d + 1 :]) for d in range(t.rank)]
    grids = np.indices(it.shape, dtype=np.int64) if it.rank else np.zeros((0,), np.int64)
    base = sum(
        (grids[d] * strides[d] for d in range(t.rank) if d != axis),
        np.zeros(it.shape, dtype=np.int64),
    )
    lin = imp.emit("add", [imp.emit("mul", [i, imp.const(strides[axis], it)]), imp.const(base, it)])
    flat = reshape(imp, x, [t.num_elements])
    _out(imp, node, imp.emit("take", [flat, lin], axis=0))


@handler("OneHot")
def _one_hot(imp: Importer, node: Any, ins: list[str], attrs: dict[str, Any]) -> None:
    # out[..., k, ...] = (wrap(idx) == k) ? on : off, k along `axis`; idx wraps like Gather.
    idx = imp.dyn(ins[0])
    it = imp.type_of(idx)
    if it.dtype.is_bool:
        raise imp.unsupported(f"indices of type {it}")
    depth = int(np.asarray(imp.static(ins[1], "depth")).reshape(-1)[0])
    values = imp.dyn(ins[2])
    vt = imp.type_of(values)
    if vt.num_elements != 2 or depth < 1:
        raise imp.unsupported(f"values {vt} and depth {depth}")
    rank = it.rank + 1
    axis = _norm_axis(imp, attrs.get("axis", -1), rank)
    shape = list(it.shape)
    shape.insert(axis, depth)
    i = convert(imp, idx, DType.I64)  # ONNX casts indices to int64 (floats truncate)
    i64 = imp.type_of(i)
    neg = imp.emit("cmp", [i, imp.const(0, i64)], dir="lt")
    i = imp.emit("select", [neg, imp.emit("add", [i, imp.const(depth, i64)]), i])
    ib = imp.emit(
        "broadcast", [i], i64.with_shape(shape), dims=[d for d in range(rank) if d != axis]
    )
    k = imp.emit("iota", [], TensorType(DType.I64, tuple(shape)), axis=axis)
    hit = imp.emit("cmp", [ib, k], dir="eq")
    flat = reshape(imp, values, [2])
    out_t = vt.with_shape(shape)
    off, on = (
        imp.emit("broadcast", [reshape(imp, _slice1(imp, flat, 0, j, j + 1, 1), [])], out_t,
                 dims=[])
        for j in (0, 1)
    )  # fmt: skip
    _out(imp, node, imp.emit("select", [hit, on, off]))


@handler("LpNormalization")
def _lp_normalization(imp: Importer, node: Any, ins: list[str], attrs: dict[str, Any]) -> None:
    # x / sqrt(sum(x * x)) for p = 2, x / sum(|x|) for p = 1, along `axis`; 0 where the norm
    # is 0 (ONNX's reference: np.where(norm == 0, 0, x / norm)).
    x = imp.dyn(ins[0])
    t = _require_float(imp, x)
    axis = _norm_axis(imp, attrs.get("axis", -1), t.rank)
    p = attrs.get("p", 2)
    if p == 2:
        n = imp.emit("sqrt", [imp.emit("reduce_sum", [imp.emit("mul", [x, x])], axes=[axis])])
    elif p == 1:
        n = imp.emit("reduce_sum", [imp.emit("abs", [x])], axes=[axis])
    else:
        raise imp.unsupported(f"p = {p} (1 or 2)")
    kept = [d for d in range(t.rank) if d != axis]
    nb = imp.emit("broadcast", [n], t, dims=kept)
    zero = imp.const(0.0, t)
    is_zero = imp.emit("cmp", [nb, zero], dir="eq")
    _out(imp, node, imp.emit("select", [is_zero, zero, imp.emit("div", [x, nb])]))


@handler("Resize", "Upsample")
def _resize_nearest(imp: Importer, node: Any, ins: list[str], attrs: dict[str, Any]) -> None:
    """Nearest-neighbour resizing: each output element is one input element, so the op is a
    `take` at static positions. The positions are ONNX's own: its reference evaluator resizes
    the element numbers 0..n-1 (exact in f64). Linear and cubic modes: `_resize_interpolated`."""
    if attrs.get("mode", "nearest") != "nearest":
        _resize_interpolated(imp, node, ins, attrs)
        return
    x = imp.dyn(ins[0])
    t = imp.type_of(x)
    if t.num_elements == 0 or t.num_elements > 2**24:
        raise imp.unsupported(f"input {t}")
    arrays: list[np.ndarray | None] = [None] * len(ins)
    for k in range(1, len(ins)):
        if ins[k]:
            arrays[k] = np.asarray(imp.static(ins[k], "roi, scales and sizes"))
    numbers = np.arange(t.num_elements, dtype=np.float64).reshape(t.shape)
    maps = []
    for offset in (0.0, 2.0**30):
        arrays[0] = numbers + offset
        outs = _reference_eval(node, ins, arrays, imp.opset)
        if outs is None:
            raise imp.unsupported("ONNX's reference evaluator cannot resize these inputs")
        maps.append(outs[0])
    idx, shifted = maps
    if idx.shape != shifted.shape or not np.array_equal(shifted - idx, np.full_like(idx, 2**30)):
        raise imp.unsupported("some outputs are not input elements (extrapolation)")
    positions = idx.astype(np.int64)
    it = TensorType(DType.I64, positions.shape)
    flat = reshape(imp, x, [t.num_elements])
    _out(imp, node, imp.emit("take", [flat, imp.const(positions, it)], axis=0))


_GRID_SAMPLE_DTYPES = (DType.F32, DType.F64, DType.F16)
_CUBIC_ALPHA = -0.75


def _gs_reflect(imp: GraphEmitter, v: str, lo: float, hi: float) -> str:
    """ONNX's reference `_gs_reflect` on f64 values: a value below `lo` (above `hi`) is folded
    back by the near border until inside: dx its distance past the border, n = trunc(dx / range)
    (dx >= 0, so floor), r = dx - n * range, and the border reached after n folds (even n: the
    near one) moved r inwards; values inside stay."""
    t = imp.type_of(v)

    def c(z: float) -> str:
        return imp.const(z, t)

    below = imp.emit("cmp", [v, c(lo)], dir="lt")
    above = imp.emit("cmp", [v, c(hi)], dir="gt")
    dx = imp.emit("select", [below, imp.emit("sub", [c(lo), v]), imp.emit("sub", [v, c(hi)])])
    span = hi - lo
    n = imp.emit("floor", [imp.emit("div", [dx, c(span)])])
    r = imp.emit("sub", [dx, imp.emit("mul", [n, c(span)])])
    half = imp.emit("mul", [n, c(0.5)])
    even = imp.emit("cmp", [half, imp.emit("floor", [half])], dir="eq")
    from_lo = imp.emit("add", [c(lo), r])
    from_hi = imp.emit("sub", [c(hi), r])
    fx_below = imp.emit("select", [even, from_lo, from_hi])
    fx_above = imp.emit("select", [even, from_hi, from_lo])
    return imp.emit("select", [below, fx_below, imp.emit("select", [above, fx_above, v])])


def _gs_coefficients(imp: GraphEmitter, t: str, cubic: bool) -> list[str]:
    """The reference's interpolation weights of the f32 fraction t = x - floor(x), in f32 and
    in its order of operations (`_gs_get_linear_coeffs`, `_gs_get_cubic_coeffs`, alpha -0.75)."""
    tt = imp.type_of(t)

    def c(z: float) -> str:
        return imp.const(z, tt)

    def op(name: str, a: str, b: str) -> str:
        return imp.emit(name, [a, b])

    one = c(1.0)
    if not cubic:
        return [op("sub", one, t), t]
    a = _CUBIC_ALPHA

    def outer(s: str) -> str:  # ((a * s - 5a) * s + 8a) * s - 4a
        inner = op("sub", op("mul", c(a), s), c(5 * a))
        return op("sub", op("mul", op("add", op("mul", inner, s), c(8 * a)), s), c(4 * a))

    def near(s: str) -> str:  # ((a + 2) * s - (a + 3)) * s * s + 1
        inner = op("sub", op("mul", c(a + 2), s), c(a + 3))
        return op("add", op("mul", op("mul", inner, s), s), one)

    return [
        outer(op("add", t, one)),
        near(t),
        near(op("sub", one, t)),
        outer(op("sub", c(2.0), t)),
    ]


def _gs_dot_last(imp: GraphEmitter, v: str, w: str) -> str:
    """`w @ v` along the last axis as ONNX's reference gets it from numpy: f32 products summed
    in f64 from 0.0 and rounded once (OpenBLAS's sdot); f16 converted to f32, multiplied and
    summed there (numpy's half dot); f64 products summed in f64 (OpenBLAS's ddot fuses each
    multiply-add, which the IR has no op for: within an ulp of the sum, not bit for bit)."""
    vt = imp.type_of(v)
    last = vt.rank - 1
    if vt.dtype is DType.F32:
        p = convert(imp, imp.emit("mul", [v, w]), DType.F64)
    elif vt.dtype is DType.F16:
        p = imp.emit("mul", [convert(imp, v, DType.F32), convert(imp, w, DType.F32)])
    else:
        p = imp.emit("mul", [v, w])
    s = imp.emit("reduce_sum", [p], axes=[last])
    s = imp.emit("add", [s, imp.const(0.0, imp.type_of(s))])  # the fold starts from +0.0
    return convert(imp, s, vt.dtype)


@handler("GridSample")
def _grid_sample(imp: Importer, node: Any, ins: list[str], attrs: dict[str, Any]) -> None:
    """GridSample as ONNX's reference computes it (`op_grid_sample.py`), for any spatial rank
    (4-D and 5-D inputs). Per spatial axis, the grid coordinate (in the grid's dtype) is
    unnormalised per `align_corners` and stored in f32, rounded half to even for `nearest`, and
    when outside the borders clamped (`border`) or reflected in f64 (`reflection`). The taps
    (1, 2 or 4 per axis) are i64 positions from floor(x); each is read with a `take` from the
    flattened input, out-of-range taps giving 0 (`zeros`, a select), clamped (`border`) or
    reflected (`reflection`). Interpolation folds the last spatial axis first, then the others
    outwards, each a dot of the weights with the taps as numpy computes it (`_gs_dot_last`)."""
    x = imp.dyn(ins[0])
    grid = imp.dyn(ins[1])
    xt, gt = imp.type_of(x), imp.type_of(grid)
    mode = {"bilinear": "linear", "bicubic": "cubic"}.get(
        attrs.get("mode", "linear"), attrs.get("mode", "linear")
    )
    padding = attrs.get("padding_mode", "zeros")
    align = bool(attrs.get("align_corners", 0))
    if mode not in ("nearest", "linear", "cubic"):
        raise imp.unsupported(f"mode '{printable(str(mode))}' is not a GridSample mode")
    if padding not in ("zeros", "border", "reflection"):
        raise imp.unsupported(f"padding_mode '{printable(str(padding))}' is not a GridSample one")
    for what, t in (("X", xt), ("grid", gt)):
        if t.dtype not in _GRID_SAMPLE_DTYPES:
            raise imp.unsupported(
                f"{t.dtype} {what} is not supported (f32, f64 and f16 are: ONNX's reference "
                "computes other dtypes' weights and dots in ways the IR does not reproduce)"
            )
    r = xt.rank - 2
    if r < 1 or gt.rank != r + 2 or gt.shape[-1] != r or gt.shape[0] != xt.shape[0]:
        raise imp.unsupported(
            f"X {xt} and grid {gt} do not fit (X is N, C, D1..Dr; grid N, H1..Hr', r)"
        )
    n_batch, n_chan, sizes, out = xt.shape[0], xt.shape[1], xt.shape[2:], gt.shape[1:-1]
    if n_batch * n_chan * math.prod(out) == 0 or math.prod(sizes) == 0:
        raise imp.unsupported("an empty input or output")
    if padding == "reflection" and align and 1 in sizes:
        raise imp.unsupported(
            "reflection padding with align_corners = 1 over a spatial size of 1 (ONNX's "
            "reference divides by its zero range)"
        )
    taps = {"nearest": [0], "linear": [0, 1], "cubic": [-1, 0, 1, 2]}[mode]
    n_taps = len(taps)
    full = (n_batch, n_chan, *out, *([n_taps] * r))
    if math.prod(full) > 2**24:
        raise imp.unsupported(f"{math.prod(full)} taps (at most 2^24)")
    pos = (n_batch, *out)
    pos_t = TensorType(gt.dtype, pos)
    f32 = TensorType(DType.F32, pos)
    tap_t = TensorType(DType.I64, (*pos, n_taps))
    kept = [0, *range(2, 2 + len(out))]
    full_i = TensorType(DType.I64, full)
    strides = [math.prod(sizes[a + 1 :]) for a in range(r)]
    lin = imp.emit(
        "mul", [imp.emit("iota", [], full_i, axis=0), imp.const(n_chan * math.prod(sizes), full_i)]
    )
    lin = imp.emit("add", [lin, imp.emit("mul", [
        imp.emit("iota", [], full_i, axis=1), imp.const(math.prod(sizes), full_i)])])  # fmt: skip
    valid: str | None = None
    weights: list[str] = []
    for a, size in enumerate(sizes):
        k = r - 1 - a  # the grid holds the coordinates innermost axis first
        start = [0] * gt.rank
        start[-1] = k
        comp = imp.emit("slice", [grid], start=start, limit=[*gt.shape[:-1], k + 1],
                        stride=[1] * gt.rank)  # fmt: skip
        g = reshape(imp, comp, pos)

        def gc(z: float) -> str:
            return imp.const(z, pos_t)

        g1 = imp.emit("add", [g, gc(1.0)])
        if align:
            v = imp.emit("mul", [imp.emit("div", [g1, gc(2.0)]), gc(size - 1)])
        else:
            v = imp.emit("div", [imp.emit("sub", [imp.emit("mul", [g1, gc(size)]), gc(1.0)]),
                                 gc(2.0)])  # fmt: skip
        v = convert(imp, v, DType.F32)
        if mode == "nearest":
            v = round_half_even(imp, v)
        lo, hi = (0.0, size - 1.0) if align else (-0.5, size - 0.5)
        if padding == "border":
            below = imp.emit("cmp", [v, imp.const(lo, f32)], dir="lt")
            above = imp.emit("cmp", [v, imp.const(hi, f32)], dir="gt")
            v = imp.emit("select", [above, imp.const(size - 1, f32), v])
            v = imp.emit("select", [below, imp.const(0.0, f32), v])
        elif padding == "reflection":
            v = convert(imp, _gs_reflect(imp, convert(imp, v, DType.F64), lo, hi), DType.F32)
        if mode == "nearest":
            base = convert(imp, v, DType.I64)
        else:
            f = imp.emit("floor", [v])
            frac = imp.emit("sub", [v, f])
            base = convert(imp, f, DType.I64)
            ws = [reshape(imp, w, (*pos, 1)) for w in _gs_coefficients(imp, frac, mode == "cubic")]
            w = imp.emit("concat", ws, axis=len(pos))
            weights.append(convert(imp, w, xt.dtype))
        base = imp.emit("broadcast", [base], tap_t, dims=list(range(len(pos))))
        i = imp.emit("add", [base, imp.emit("iota", [], tap_t, axis=len(pos))])
        if taps[0]:
            i = imp.emit("add", [i, imp.const(taps[0], tap_t)])
        lo_i, hi_i = imp.const(0, tap_t), imp.const(size - 1, tap_t)
        if padding == "reflection":
            i = convert(imp, _gs_reflect(imp, convert(imp, i, DType.F64), lo, hi), DType.I64)
        else:
            if padding == "zeros":
                ok = imp.emit("bitwise_and", [imp.emit("cmp", [i, lo_i], dir="ge"),
                                              imp.emit("cmp", [i, hi_i], dir="le")])  # fmt: skip
                ok = imp.emit("broadcast", [ok], full_i.with_dtype(DType.I1),
                              dims=[*kept, 2 + len(out) + a])  # fmt: skip
                valid = ok if valid is None else imp.emit("bitwise_and", [valid, ok])
            i = imp.emit("min", [imp.emit("max", [i, lo_i]), hi_i])
        i = imp.emit("broadcast", [i], full_i, dims=[*kept, 2 + len(out) + a])
        lin = imp.emit("add", [lin, imp.emit("mul", [i, imp.const(strides[a], full_i)])])
    vals = imp.emit("take", [reshape(imp, x, [xt.num_elements]), lin], axis=0)
    if valid is not None:
        vals = imp.emit("select", [valid, vals, imp.const(0.0, xt.with_shape(full))])
    if mode == "nearest":
        _out(imp, node, reshape(imp, vals, (n_batch, n_chan, *out)))
        return
    for a in reversed(range(r)):
        vt = imp.type_of(vals)
        w = imp.emit("broadcast", [weights[a]], vt, dims=[*kept, 2 + len(out) + a])
        vals = _gs_dot_last(imp, vals, w)
    _out(imp, node, vals)


def _quant_param(imp: Importer, name: str, t: TensorType, raw_axis: int, block: int) -> str:
    """A scale or zero point spread to x's shape `t` as ONNX's reference spreads it: one value
    (a scalar or one element) everywhere; a vector along `axis`; with `block`, each value over
    `block` consecutive positions of `axis` (the last block may be short)."""
    v = imp.dyn(name)
    vt = imp.type_of(v)
    full = vt.with_shape(t.shape)
    if vt.num_elements == 1:
        return imp.emit("broadcast", [reshape(imp, v, [])], full, dims=[])
    axis = _norm_axis(imp, raw_axis, t.rank)  # only a per-axis or blocked parameter has one
    if not block:
        if vt.rank != 1 or vt.shape[0] != t.shape[axis]:
            raise imp.unsupported(f"a per-axis parameter {vt} for input {t} on axis {axis}")
        return imp.emit("broadcast", [v], full, dims=[axis])
    want = list(t.shape)
    want[axis] = -(-t.shape[axis] // block)
    if list(vt.shape) != want:
        raise imp.unsupported(f"a blocked parameter {vt} for input {t}, block {block}")
    idx = np.arange(t.shape[axis], dtype=np.int64) // block
    return imp.emit("take", [v, imp.const(idx, TensorType(DType.I64, idx.shape))], full, axis=axis)


def _dequant_scale(imp: Importer, ins: list[str], attrs: dict[str, Any], t: TensorType):
    """DequantizeLinear's (axis, block_size, scale spread to x's shape `t`, result dtype: the
    scale's, or `output_dtype`)."""
    axis = attrs.get("axis", 1)
    block = int(attrs.get("block_size", 0))
    scale = _quant_param(imp, ins[1], t, axis, block)
    st = imp.type_of(scale)
    if not st.dtype.is_float:
        raise imp.unsupported(f"a {st.dtype} scale")
    out_dtype = st.dtype
    if attrs.get("output_dtype"):
        code = attrs["output_dtype"]
        if _ONNX_DTYPES.get(code) is None:
            raise imp.unsupported(f"output_dtype {_no_ir_dtype(code)}")
        out_dtype = _ONNX_DTYPES[code]
    return axis, block, scale, out_dtype


@handler("DequantizeLinear")
def _dequantize_linear(imp: Importer, node: Any, ins: list[str], attrs: dict[str, Any]) -> None:
    """y = (x - zero_point) * scale, in ONNX's reference's arithmetic: x (and the zero point)
    converted to f32, subtracted and multiplied in f32 for 8- and 16-bit integers; for i32 the
    difference and product in f64 (numpy promotes f32 - i32 to f64), rounded to f32 once. The
    result has the scale's dtype (`output_dtype` when given); f16/bf16 scales multiply in f32
    and round once. A float8 x is `_dequantize_float8`."""
    x = imp.dyn(ins[0])
    t = imp.type_of(x)
    if t.dtype.is_float8:
        _dequantize_float8(imp, node, ins, attrs, x)
        return
    if not (t.dtype.is_int or t.dtype.is_small_int) or t.dtype.bits > 32:
        raise imp.unsupported(f"input {t} (integers of up to 32 bits)")
    axis, block, scale, out_dtype = _dequant_scale(imp, ins, attrs, t)
    wide = DType.F64 if t.dtype.bits > 16 else DType.F32
    dx = convert(imp, x, DType.F32)
    if len(ins) > 2 and ins[2]:
        zp = _quant_param(imp, ins[2], t, axis, block)
        if imp.type_of(zp).dtype != t.dtype:
            raise imp.unsupported(f"a zero point of {imp.type_of(zp).dtype} for input {t}")
        dx = imp.emit("sub", [convert(imp, dx, wide), convert(imp, zp, wide)])
    else:
        wide = DType.F32
    y = imp.emit("mul", [convert(imp, dx, wide), convert(imp, scale, wide)])
    _out(imp, node, convert(imp, y, out_dtype))


def _dequantize_float8(
    imp: Importer, node: Any, ins: list[str], attrs: dict[str, Any], x: str
) -> None:
    """DequantizeLinear of a float8 x, as ONNX's reference computes it: y = f32(x) * scale (x's
    value exactly, IR_SPEC.md section 8), in f32 (f64 for an f64 scale), then the result dtype.
    ONNX requires a float8 zero point to be 0 (its bits all clear); any other is refused."""
    t = imp.type_of(x)
    if len(ins) > 2 and ins[2]:
        zp = np.asarray(imp.static(ins[2], "a float8 zero point"))
        if np.any(np.ascontiguousarray(zp).view(np.uint8) != 0):
            raise imp.unsupported("a float8 zero point other than 0 (ONNX requires 0)")
    _, _, scale, out_dtype = _dequant_scale(imp, ins, attrs, t)
    wide = DType.F64 if imp.type_of(scale).dtype is DType.F64 else DType.F32
    y = imp.emit("mul", [convert(imp, x, wide), convert(imp, scale, wide)])
    if out_dtype.is_float8:  # the reference's astype: no saturation
        t_out = imp.type_of(y).with_dtype(out_dtype)
        _out(imp, node, imp.emit("convert", [y], t_out, saturate=False))
        return
    _out(imp, node, convert(imp, y, out_dtype))


_QUANT_RANGE = {DType.U8: (0, 255), DType.I8: (-128, 127), DType.U16: (0, 65535)}
_QUANT_RANGE[DType.I16] = (-32768, 32767)
_QUANT_RANGE.update({DType.U4: (0, 15), DType.I4: (-8, 7), DType.U2: (0, 3), DType.I2: (-2, 1)})
"""The integer outputs of QuantizeLinear (the float8 and 4-bit ones have no IR dtype)."""


def _float_promote(imp: Importer, a: DType, b: DType) -> DType:
    """numpy's result dtype of an operation on arrays of float dtypes a and b."""
    if a is b:
        return a
    wide = max(a, b, key=lambda d: d.bits)
    if wide.bits < 32:
        raise imp.unsupported(f"operands of {a} and {b}")
    return wide


def _saturate_int(imp: Importer, r: str, zp: str | None, out: DType) -> str:
    """clip(i32(r) + zero point, out's range) as out, for r integral (a float): as ONNX's
    reference computes it where its int32 cast is defined (|r| < 2^31); beyond, and for +-inf,
    the saturation ONNX's spec states (the clamp to +-2^20 first keeps the i32 sum exact and
    changes no clipped result: |zero point| < 2^16); NaN counts as 0 (the reference's cast of
    NaN is undefined)."""
    t = imp.type_of(r)
    if t.dtype.bits < 32:
        r = convert(imp, r, DType.F32)  # exact
        t = imp.type_of(r)
    lim = float(2**20)
    r = imp.emit("max", [imp.emit("min", [r, imp.const(lim, t)]), imp.const(-lim, t)])
    v = convert(imp, r, DType.I32)
    it = imp.type_of(v)
    if zp is not None:
        v = imp.emit("add", [v, convert(imp, zp, DType.I32)])
    lo, hi = _QUANT_RANGE[out]
    v = imp.emit("max", [imp.emit("min", [v, imp.const(hi, it)]), imp.const(lo, it)])
    return convert(imp, v, out)


@handler("QuantizeLinear")
def _quantize_linear(imp: Importer, node: Any, ins: list[str], attrs: dict[str, Any]) -> None:
    """y = saturate(rint(x / scale) + zero_point), in ONNX's reference's arithmetic: x / scale
    in numpy's dtype of the two (or `precision`'s), correctly rounded; rint (half to even)
    there; to i32, the zero point added in i32, clipped to the output's range (the zero point's
    dtype, else `output_dtype`, else u8): `_saturate_int`. Per tensor, per axis and blocked
    as `_quant_param` spreads the parameters. Outputs u8, i8, u16, i16."""
    x = imp.dyn(ins[0])
    t = imp.type_of(x)
    if not t.dtype.is_float:
        raise imp.unsupported(f"input {t} (floats)")
    axis = attrs.get("axis", 1)
    block = int(attrs.get("block_size", 0))
    scale = _quant_param(imp, ins[1], t, axis, block)
    sd = imp.type_of(scale).dtype
    if not sd.is_float:
        raise imp.unsupported(f"a {sd} scale")
    out = None
    if attrs.get("output_dtype"):
        code = attrs["output_dtype"]
        if _ONNX_DTYPES.get(code) is None:
            raise imp.unsupported(f"output_dtype {_no_ir_dtype(code)}")
        out = _ONNX_DTYPES[code]
    zp = None
    if len(ins) > 2 and ins[2]:
        zp = _quant_param(imp, ins[2], t, axis, block)
        zd = imp.type_of(zp).dtype
        if out is not None and zd is not out:
            raise imp.unsupported(f"a {zd} zero point with output_dtype {out}")
        out = zd
    out = out or DType.U8
    if out not in _QUANT_RANGE and not out.is_float8:
        raise imp.unsupported(f"output {out} (u8, i8, u16, i16, u4, i4, u2, i2, float8, float4)")
    if attrs.get("precision"):
        wide = _ONNX_DTYPES.get(attrs["precision"])
        if wide is None or not wide.is_float:
            raise imp.unsupported(f"precision {_dtype_name(attrs['precision'])}")
    else:
        wide = _float_promote(imp, t.dtype, sd)
    q = imp.emit("div", [convert(imp, x, wide), convert(imp, scale, wide)])
    if out.is_float8:
        # ONNX's reference: x / scale rounded once to the format (IR_SPEC section 8), with
        # `saturate` for the float8 formats; the zero point is not read (ONNX requires it to
        # be 0) except for float4, where the reference adds it first (in x / scale's dtype)
        if out is DType.F4E2M1FN and zp is not None:
            q = imp.emit("add", [q, convert(imp, zp, wide)])
        if out is not DType.F4E2M1FN and not bool(attrs.get("saturate", 1)):
            _out(
                imp, node, imp.emit("convert", [q], imp.type_of(q).with_dtype(out), saturate=False)
            )
            return
        _out(imp, node, convert(imp, q, out))
        return
    _out(imp, node, _saturate_int(imp, round_half_even(imp, q), zp, out))


@handler("DynamicQuantizeLinear")
def _dynamic_quantize_linear(
    imp: Importer, node: Any, ins: list[str], attrs: dict[str, Any]
) -> None:
    """ONNX's reference, step by step in f32: hi = max(0, max(x)), lo = min(0, min(x));
    scale = (hi - lo, or 1 where hi == lo) / 255; zp = rint(clip(0 - lo / scale, 0, 255)) (a
    NaN there gives 255, as the reference's Python min(255, nan) does); y = clip(rint(x /
    scale) + zp, 0, 255) as u8 (the reference's special case for hi == lo, which ONNX's
    function body lacks, is why this is not expanded)."""
    x = imp.dyn(ins[0])
    t = imp.type_of(x)
    if t.dtype is not DType.F32:
        raise imp.unsupported(f"input {t} (f32)")
    s = TensorType(DType.F32, ())

    def c(v: float, tt: TensorType = s) -> str:
        return imp.const(v, tt)

    axes = list(range(t.rank))
    hi = imp.emit("max", [imp.emit("reduce_max", [x], s, axes=axes), c(0.0)])
    lo = imp.emit("min", [imp.emit("reduce_min", [x], s, axes=axes), c(0.0)])
    same = imp.emit("cmp", [hi, lo], dir="eq")
    width = imp.emit("select", [same, c(1.0), imp.emit("sub", [hi, lo])])
    scale = imp.emit("div", [width, c(255.0)])
    izp = imp.emit("sub", [c(0.0), imp.emit("div", [lo, scale])])
    zp = imp.emit("max", [imp.emit("min", [izp, c(255.0)]), c(0.0)])
    zp = imp.emit("select", [imp.emit("cmp", [izp, izp], dir="ne"), c(255.0), zp])
    zp = round_half_even(imp, zp)
    q = round_half_even(imp, imp.emit("div", [x, imp.emit("broadcast", [scale], t, dims=[])]))
    q = imp.emit("add", [q, imp.emit("broadcast", [zp], t, dims=[])])
    q = imp.emit("max", [imp.emit("min", [q, c(255.0, t)]), c(0.0, t)])
    _out(imp, node, convert(imp, q, DType.U8))
    _out(imp, node, scale, 1)
    _out(imp, node, convert(imp, zp, DType.U8), 2)


def _int32_operand(imp: Importer, x: str, zp_name: str | None) -> str:
    """x as i32 less its zero point (one value; i32 arithmetic), as ONNX's reference's
    `X.astype(np.int32) - zero_point`."""
    t = imp.type_of(x)
    if not t.dtype.is_int or t.dtype.bits > 16:
        raise imp.unsupported(f"operand {t} (8- and 16-bit integers)")
    v = convert(imp, x, DType.I32)
    if zp_name:
        zp = imp.dyn(zp_name)
        zt = imp.type_of(zp)
        if zt.num_elements != 1:
            raise imp.unsupported(f"a zero point {zt} (only one value per tensor)")
        if zt.dtype is not t.dtype:
            raise imp.unsupported(f"a zero point of {zt.dtype} for operand {t}")
        z = imp.emit("broadcast", [reshape(imp, convert(imp, zp, DType.I32), [])],
                     imp.type_of(v), dims=[])  # fmt: skip
        v = imp.emit("sub", [v, z])
    return v


@handler("MatMulInteger")
def _matmul_integer(imp: Importer, node: Any, ins: list[str], attrs: dict[str, Any]) -> None:
    """(A - a_zero_point) @ (B - b_zero_point) in i32 (wrapping, as numpy's int32 matmul)."""
    a = _int32_operand(imp, imp.dyn(ins[0]), ins[2] if len(ins) > 2 else None)
    b = _int32_operand(imp, imp.dyn(ins[1]), ins[3] if len(ins) > 3 else None)
    _out(imp, node, _matmul(imp, a, b))


def _scalar_of(imp: Importer, name: str, what: str) -> str:
    v = imp.dyn(name)
    if imp.type_of(v).num_elements != 1:
        raise imp.unsupported(f"a {what} {imp.type_of(v)} (only one value per tensor)")
    return reshape(imp, v, [])


@handler("QLinearMatMul")
def _qlinear_matmul(imp: Importer, node: Any, ins: list[str], attrs: dict[str, Any]) -> None:
    """ONNX's reference: C = (a - a_zp) @ (b - b_zp) in i32; D = C * (a_scale * b_scale /
    y_scale), the factor in the scales' dtype, the product in f64 (numpy promotes i32 times a
    float to f64); D + y_zp in f64; rint; clipped to the output's range (y_zp's dtype) and
    converted. One scale and zero point per tensor."""
    a = _int32_operand(imp, imp.dyn(ins[0]), ins[2])
    b = _int32_operand(imp, imp.dyn(ins[3]), ins[5])
    c = _matmul(imp, a, b)
    scales = [_scalar_of(imp, ins[k], "scale") for k in (1, 4, 6)]
    sd = imp.type_of(scales[0]).dtype
    if not sd.is_float or any(imp.type_of(s).dtype is not sd for s in scales):
        raise imp.unsupported("scales of differing or integer dtypes")
    f = imp.emit("div", [imp.emit("mul", scales[:2]), scales[2]])
    ct = imp.type_of(c).with_dtype(DType.F64)
    f = imp.emit("broadcast", [convert(imp, f, DType.F64)], ct, dims=[])
    d = imp.emit("mul", [convert(imp, c, DType.F64), f])
    out = imp.type_of(imp.dyn(ins[0])).dtype
    if len(ins) > 7 and ins[7]:
        yz = _scalar_of(imp, ins[7], "zero point")
        out = imp.type_of(yz).dtype
        yzb = imp.emit("broadcast", [convert(imp, yz, DType.F64)], ct, dims=[])
        d = imp.emit("add", [d, yzb])
    if out not in _QUANT_RANGE:
        raise imp.unsupported(f"output {out} (u8, i8, u16, i16)")
    r = round_half_even(imp, d)
    lo, hi = _QUANT_RANGE[out]
    r = imp.emit("max", [imp.emit("min", [r, imp.const(hi, ct)]), imp.const(lo, ct)])
    _out(imp, node, convert(imp, r, out))


RESIZE_MAX_AXIS = 4096
"""The longest axis `_resize_interpolated` resizes (ONNX's reference evaluator runs once per
input position of each resized axis to read off the weights)."""


def _resize_axis_weights(
    node: Any, attrs: dict[str, Any], opset: int, n: int, how: tuple[str, float, list[float]]
) -> tuple[np.ndarray, np.ndarray] | None:
    """(M, c): ONNX's 1-D resize of a length-`n` axis is y = M @ x + c, M [out, n], c [out]
    (c: the extrapolation value at positions outside tf_crop_and_resize's roi). Read off ONNX's
    reference evaluator (f64), which is linear in x: y(0) = c, y(e_k) - c = column k. `how`:
    ("scales", scale, roi) or ("sizes", size, roi). None when the evaluator cannot run it."""
    from onnx import TensorProto, helper
    from onnx.reference import ReferenceEvaluator

    kind, value, roi = how
    keep = [a for a in node.attribute if a.name not in ("axes", "keep_aspect_ratio_policy")]
    inits = []
    if node.op_type == "Resize" and opset >= 11:
        names = ["x", "roi" if roi else "", "scales" if kind == "scales" else "", ""]
        if kind == "sizes":
            names[3] = "sizes"
            inits.append(helper.make_tensor("sizes", TensorProto.INT64, [1], [int(value)]))
        else:
            inits.append(helper.make_tensor("scales", TensorProto.FLOAT, [1], [float(value)]))
        if roi:
            inits.append(helper.make_tensor("roi", TensorProto.FLOAT, [2], [float(v) for v in roi]))
    elif kind == "scales":
        names = ["x", "scales"]
        inits.append(helper.make_tensor("scales", TensorProto.FLOAT, [1], [float(value)]))
    else:
        return None
    while names and not names[-1]:
        names.pop()
    one = helper.make_node(node.op_type, names, ["y"])
    one.attribute.extend(keep)
    graph = helper.make_graph(
        [one], "resize1d",
        [helper.make_tensor_value_info("x", TensorProto.DOUBLE, [n])],
        [helper.make_tensor_value_info("y", TensorProto.DOUBLE, None)],
        inits,
    )  # fmt: skip
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)])
    try:
        ev = ReferenceEvaluator(model)
        c = np.asarray(ev.run(None, {"x": np.zeros(n)})[0], dtype=np.float64)
        cols = []
        for k in range(n):
            e = np.zeros(n)
            e[k] = 1.0
            cols.append(np.asarray(ev.run(None, {"x": e})[0], dtype=np.float64) - c)
    except Exception:  # noqa: BLE001 -- refused by the caller, naming the op
        return None
    if c.ndim != 1 or any(col.shape != c.shape for col in cols):
        return None
    return np.stack(cols, axis=1) if cols else np.zeros((c.shape[0], 0)), c


def _resize_interpolated(imp: Importer, node: Any, ins: list[str], attrs: dict[str, Any]) -> None:
    """Linear and cubic resizing, every coordinate mode, `antialias` and `exclude_outside`
    included: separable, so one axis at a time, and along an axis each output is a weighted sum
    of a few input elements at static positions, sum_t w[o, t] * x[i[o, t]], folded over the
    taps t in increasing input position (IR `take`, `mul`, `add`); an output outside
    tf_crop_and_resize's roi is the extrapolation value. The positions and weights are ONNX's
    own (`_resize_axis_weights`: its reference evaluator, in f64), rounded to f32; f16 and bf16
    inputs are resized in f32 and rounded once, as ONNX's reference computes them."""
    x = imp.dyn(ins[0])
    t = _require_float(imp, x)
    mode = printable(attrs["mode"])
    if mode not in ("linear", "cubic"):
        raise imp.unsupported(f"mode '{mode}'")
    policy = printable(attrs.get("keep_aspect_ratio_policy", "stretch"))
    if policy != "stretch":
        raise imp.unsupported(f"keep_aspect_ratio_policy '{policy}' with mode '{mode}'")
    if t.num_elements == 0 or t.num_elements > 2**24:
        raise imp.unsupported(f"input {t}")
    rank = t.rank
    arrays: list[np.ndarray | None] = [None] * 4
    if node.op_type == "Resize" and imp.opset >= 11:
        for k in (1, 2, 3):
            if k < len(ins) and ins[k]:
                arr = np.asarray(imp.static(ins[k], "roi, scales and sizes")).reshape(-1)
                arrays[k] = arr if arr.size else None
        roi, scales, sizes = arrays[1], arrays[2], arrays[3]
    else:
        roi, sizes = None, None
        k = 1 if len(ins) > 1 and ins[1] else None
        scales = (
            np.asarray(imp.static(ins[k], "scales")).reshape(-1)
            if k is not None
            else np.asarray(attrs.get("scales", []), dtype=np.float64)
        )
    axes = [a % rank for a in attrs.get("axes", list(range(rank)))]
    tf_crop = printable(attrs.get("coordinate_transformation_mode", "half_pixel")) == (
        "tf_crop_and_resize"
    )
    given = sizes if sizes is not None else scales
    if given is None or len(given) != len(axes):
        raise imp.unsupported(f"scales or sizes for {len(axes)} axes")
    if not tf_crop:
        roi = None  # only tf_crop_and_resize reads the roi
    elif roi is None or len(roi) != 2 * len(axes):
        raise imp.unsupported(f"tf_crop_and_resize needs a roi of {2 * len(axes)} values")
    compute = DType.F32 if t.dtype in (DType.F16, DType.BF16) else t.dtype
    y = convert(imp, x, compute)
    for j, d in enumerate(axes):
        n = t.shape[d]
        kind = "sizes" if sizes is not None else "scales"
        value = float(given[j])
        box = [float(roi[j]), float(roi[len(axes) + j])] if roi is not None else []
        if not tf_crop and (
            (kind == "sizes" and int(value) == n) or (kind == "scales" and value == 1.0)
        ):
            continue  # the identity along this axis
        if n > RESIZE_MAX_AXIS:
            raise imp.unsupported(f"axis {d} of {n} positions (at most {RESIZE_MAX_AXIS})")
        found = _resize_axis_weights(node, attrs, imp.opset, n, (kind, value, box))
        if found is None:
            raise imp.unsupported("ONNX's reference evaluator cannot resize these inputs")
        m, c = found
        y = _apply_axis_weights(imp, y, d, m, c)
    _out(imp, node, convert(imp, y, t.dtype))


def _apply_axis_weights(imp: Importer, y: str, d: int, m: np.ndarray, c: np.ndarray) -> str:
    """y resized along dim d by (M, c) of `_resize_axis_weights`: out[.., o, ..] = the fold
    over the nonzero weights of row o, in increasing input position, of w * y[.., i, ..];
    rows without one take c[o]."""
    yt = imp.type_of(y)
    out_n = m.shape[0]
    rows = [np.flatnonzero(m[o]) for o in range(out_n)]
    taps = max((len(r) for r in rows), default=0)
    shape = list(yt.shape)
    shape[d] = out_n
    ot = yt.with_shape(shape)
    acc = None
    if taps:
        for tap in range(taps):
            # a row with fewer taps repeats its last one with weight 0 (0 * x: +-0.0, or NaN
            # where that element is an infinity)
            idx = np.array([r[min(tap, len(r) - 1)] if len(r) else 0 for r in rows], dtype=np.int64)
            w = np.array(
                [m[o, r[tap]] if tap < len(r) else 0.0 for o, r in enumerate(rows)],
                dtype=yt.dtype.np,
            )
            picked = imp.emit(
                "take", [y, imp.const(idx, TensorType(DType.I64, (out_n,)))], ot, axis=d
            )
            wt = imp.emit("broadcast", [imp.const(w, TensorType(yt.dtype, (out_n,)))], ot, dims=[d])
            term = imp.emit("mul", [picked, wt])
            acc = term if acc is None else imp.emit("add", [acc, term])
    outside = np.array([len(r) == 0 for r in rows])
    if (
        acc is None
        or (outside.any() and np.any(c[outside] != 0))
        or (acc is not None and outside.all())
    ):
        fill = imp.emit(
            "broadcast", [imp.const(c.astype(yt.dtype.np), TensorType(yt.dtype, (out_n,)))], ot,
            dims=[d],
        )  # fmt: skip
        if acc is None:
            return fill
        bits = imp.const(outside, TensorType(DType.I1, (out_n,)))
        mask = imp.emit("broadcast", [bits], ot.with_dtype(DType.I1), dims=[d])
        acc = imp.emit("select", [mask, fill, acc])
    return acc


@handler("GatherND")
def _gather_nd(imp: Importer, node: Any, ins: list[str], attrs: dict[str, Any]) -> None:
    # out[b..., i...] = x[b..., idx[b..., i..., :], ...]: a take from x reshaped to
    # [B, prod(indexed dims), rest] at the linear index sum_j wrap(idx_j) * stride_j, per batch
    # (batch offsets static). Indices are wrapped and kept inside their dims, like Gather.
    x = imp.dyn(ins[0])
    t = imp.type_of(x)
    idx = imp.dyn(ins[1])
    it = imp.type_of(idx)
    b = attrs.get("batch_dims", 0)
    if not it.dtype.is_int or it.rank < 1 or it.shape[:b] != t.shape[:b]:
        raise imp.unsupported(f"indices {it} for data {t} with batch_dims {b}")
    r = it.shape[-1]
    if b + r > t.rank:
        raise imp.unsupported(f"index depth {r} is too deep for {t}")
    dims = t.shape[b : b + r]
    if any(d == 0 for d in dims):
        raise imp.unsupported("gathering from an empty dim")
    nb = math.prod(t.shape[:b])
    rest = list(t.shape[b + r :])
    lead = list(it.shape[b:-1])
    i = convert(imp, idx, DType.I64)
    i = reshape(imp, i, [nb, math.prod(lead), r])
    i64 = imp.type_of(i)
    sizes = imp.const(np.broadcast_to(np.array(dims, np.int64), i64.shape).copy(), i64)
    zero = imp.const(0, i64)
    neg = imp.emit("cmp", [i, zero], dir="lt")
    i = imp.emit("select", [neg, imp.emit("add", [i, sizes]), i])
    top = imp.emit("sub", [sizes, imp.const(1, i64)])
    i = imp.emit("min", [imp.emit("max", [i, zero]), top])
    strides = [math.prod(dims[j + 1 :]) for j in range(r)]
    sw = imp.const(np.broadcast_to(np.array(strides, np.int64), i64.shape).copy(), i64)
    lin = imp.emit("reduce_sum", [imp.emit("mul", [i, sw])], axes=[2])  # [nb, L]
    lt = imp.type_of(lin)
    batch = np.arange(nb, dtype=np.int64)[:, None] * math.prod(dims)
    lin = imp.emit("add", [lin, imp.const(np.broadcast_to(batch, lt.shape).copy(), lt)])
    flat = reshape(imp, x, [nb * math.prod(dims), *rest])
    y = imp.emit("take", [flat, lin], axis=0)  # [nb, L, rest...]
    _out(imp, node, reshape(imp, y, [*t.shape[:b], *lead, *rest]))


def _scatter_by_map(imp: Importer, data: str, updates: str, targets: np.ndarray) -> str:
    """data with updates written at the static flat positions `targets` (one per element of
    `updates`, row-major): a take from concat(data, updates) flattened, whose index map sends
    each written position to its update (the last one, where several write) and every other
    position to itself."""
    t, ut = imp.type_of(data), imp.type_of(updates)
    n = t.num_elements
    mapping = np.arange(n, dtype=np.int64)
    mapping[targets.reshape(-1)] = n + np.arange(ut.num_elements, dtype=np.int64)
    both = imp.emit(
        "concat", [reshape(imp, data, [n]), reshape(imp, updates, [ut.num_elements])], axis=0
    )
    idx = imp.const(mapping.reshape(t.shape), TensorType(DType.I64, t.shape))
    return imp.emit("take", [both, idx], axis=0)


def _scatter_reduce(
    imp: Importer, data: str, updates: str, targets: np.ndarray, how: str, python: bool
) -> str:
    """data with each update folded into its static flat target position (`targets`, one per
    element of `updates`, row-major), in update order, as ONNX's reference loops over them:
    acc = data[p]; acc = f(acc, u) for each update u of p in turn (duplicates included). Round
    j applies every position's j-th update at once: take the update, `select` where there is
    one. f: `add`, `mul`; `max`/`min` as the reference computes them, numpy's np.maximum /
    np.minimum for ScatterND (a NaN on either side wins; equal values give the update, the
    accumulator for f16, as numpy does with -0.0 and +0.0) and Python's max / min for
    ScatterElements (`python`: the update only where it compares greater (less), so a NaN
    accumulator stays and a NaN update is skipped)."""
    t, ut = imp.type_of(data), imp.type_of(updates)
    n, m = t.num_elements, ut.num_elements
    flat = targets.reshape(-1)
    acc = reshape(imp, data, [n])
    if m == 0:
        return data
    ft = TensorType(t.dtype, (n,))
    us = reshape(imp, updates, [m])
    seen = np.zeros(n, dtype=np.int64)
    rounds: list[tuple[np.ndarray, np.ndarray]] = []
    for k, p in enumerate(flat):
        j = seen[p]
        seen[p] += 1
        if j == len(rounds):
            rounds.append((np.zeros(n, dtype=np.int64), np.zeros(n, dtype=bool)))
        rounds[j][0][p] = k
        rounds[j][1][p] = True
    for which, has in rounds:
        u = imp.emit("take", [us, imp.const(which, TensorType(DType.I64, (n,)))], ft, axis=0)
        if how in ("add", "mul"):
            new = imp.emit(how, [acc, u])
        elif python:
            new = imp.emit(
                "select", [imp.emit("cmp", [u, acc], dir="gt" if how == "max" else "lt"), u, acc]
            )
        elif not t.dtype.is_float:
            new = imp.emit(how, [acc, u])
        else:
            strict = (
                {"max": "gt", "min": "lt"}
                if t.dtype is not DType.F16
                else {"max": "ge", "min": "le"}
            )
            keep = imp.emit("cmp", [acc, u], dir=strict[how])
            keep = imp.emit("bitwise_or", [keep, imp.emit("cmp", [acc, acc], dir="ne")])
            new = imp.emit("select", [keep, acc, u])
        acc = imp.emit("select", [imp.const(has, TensorType(DType.I1, (n,))), new, acc])
    return reshape(imp, acc, list(t.shape))


def _scatter_reduction(imp: Importer, attrs: dict[str, Any]) -> str:
    how = attrs.get("reduction", "none")
    if how not in ("none", "add", "mul", "max", "min"):
        raise imp.unsupported(f"reduction '{printable(how)}'")
    return how


def _static_indices(imp: Importer, name: str, sizes: Sequence[int]) -> np.ndarray:
    """Static indices, wrapped, each within its size (refused otherwise)."""
    idx = np.asarray(imp.static(name, "indices")).astype(np.int64)
    size = np.asarray(sizes, dtype=np.int64)
    if np.any((idx < -size) | (idx >= size)):
        raise imp.unsupported("an index is out of range")
    return np.where(idx < 0, idx + size, idx)


@handler("ScatterElements", "Scatter")
def _scatter_elements(imp: Importer, node: Any, ins: list[str], attrs: dict[str, Any]) -> None:
    how = _scatter_reduction(imp, attrs)
    data, updates = imp.dyn(ins[0]), imp.dyn(ins[2])
    t, ut = imp.type_of(data), imp.type_of(updates)
    axis = _norm_axis(imp, attrs.get("axis", 0), t.rank)
    if ut.dtype != t.dtype or ut.rank != t.rank:
        raise imp.unsupported(f"updates {ut} for data {t}")
    idx = _static_indices(imp, ins[1], [t.shape[axis]])
    if idx.shape != ut.shape:
        raise imp.unsupported(f"indices {list(idx.shape)} and updates {ut} differ in shape")
    coords = list(np.indices(idx.shape, dtype=np.int64))
    coords[axis] = idx
    targets = np.ravel_multi_index(tuple(coords), t.shape) if idx.size else idx
    if how != "none":
        _out(imp, node, _scatter_reduce(imp, data, updates, np.asarray(targets), how, True))
        return
    _out(imp, node, _scatter_by_map(imp, data, updates, np.asarray(targets)))


@handler("ScatterND")
def _scatter_nd(imp: Importer, node: Any, ins: list[str], attrs: dict[str, Any]) -> None:
    how = _scatter_reduction(imp, attrs)
    data, updates = imp.dyn(ins[0]), imp.dyn(ins[2])
    t, ut = imp.type_of(data), imp.type_of(updates)
    raw = np.asarray(imp.static(ins[1], "indices"))
    r = raw.shape[-1] if raw.ndim else 0
    if raw.ndim < 1 or r > t.rank or ut.dtype != t.dtype:
        raise imp.unsupported(f"indices {list(raw.shape)} for data {t}")
    idx = _static_indices(imp, ins[1], t.shape[:r])
    rest = t.shape[r:]
    if tuple(ut.shape) != (*idx.shape[:-1], *rest):
        raise imp.unsupported(f"updates {ut} do not fit indices {list(idx.shape)}")
    block = math.prod(rest)
    starts = np.ravel_multi_index(tuple(np.moveaxis(idx, -1, 0)), t.shape[:r]) * block
    targets = starts.reshape(-1, 1) + np.arange(block, dtype=np.int64)[None, :]
    if how != "none":
        _out(imp, node, _scatter_reduce(imp, data, updates, targets, how, False))
        return
    _out(imp, node, _scatter_by_map(imp, data, updates, targets))


@handler("MaxUnpool")
def _max_unpool(imp: Importer, node: Any, ins: list[str], attrs: dict[str, Any]) -> None:
    # ONNX's reference: Y = zeros(N * C * prod(inferred spatial dims)); Y[I[e]] = X[e] for each
    # element e in order (a later write to a position wins); Y reshaped to the inferred shape
    # ((in - 1) * stride - pads + kernel per spatial dim) and placed at the start of a zero
    # tensor of `output_shape` where that input is given. The indices must be static.
    x = imp.dyn(ins[0])
    t = imp.type_of(x)
    kernel = list(attrs["kernel_shape"])
    nd = len(kernel)
    if t.rank != nd + 2 or t.dtype.is_bool:
        raise imp.unsupported(f"input {t} for a {nd}-D kernel")
    strides = list(attrs.get("strides", [1] * nd))
    pads = list(attrs.get("pads", [0] * (2 * nd)))
    inferred = [*t.shape[:2]] + [
        (t.shape[2 + d] - 1) * strides[d] - (pads[d] + pads[nd + d]) + kernel[d] for d in range(nd)
    ]
    total = math.prod(inferred)
    idx = _static_indices(imp, ins[1], [total])
    if idx.shape != t.shape:
        raise imp.unsupported(f"indices {list(idx.shape)} for input {t}")
    zeros = imp.const(0, TensorType(t.dtype, (total,)))
    y = reshape(imp, _scatter_by_map(imp, zeros, x, idx.reshape(-1)), inferred)
    if len(ins) > 2 and ins[2]:
        shape = [int(v) for v in np.asarray(imp.static(ins[2], "output_shape")).reshape(-1)]
        if len(shape) != t.rank or any(o < i for o, i in zip(shape, inferred, strict=True)):
            raise imp.unsupported(f"output_shape {shape} is smaller than {inferred}")
        if shape != inferred:
            high = [o - i for o, i in zip(shape, inferred, strict=True)]
            y = imp.emit("pad", [y], low=[0] * t.rank, high=high, value=0.0)
    _out(imp, node, y)


@handler("Col2Im")
def _col2im(imp: Importer, node: Any, ins: list[str], attrs: dict[str, Any]) -> None:
    # ONNX's reference (col2im_naive_implementation): per batch and channel, an image of
    # zeros, and for each kernel position, then each block (both row-major), the block's
    # value added at image position block * stride - pad_begin + offset * dilation when that
    # lies inside the image. Written as a static scatter-add in that order. image_shape and
    # block_shape must be static.
    x = imp.dyn(ins[0])
    t = imp.type_of(x)
    image = [int(v) for v in np.asarray(imp.static(ins[1], "image_shape")).reshape(-1)]
    block = [int(v) for v in np.asarray(imp.static(ins[2], "block_shape")).reshape(-1)]
    nd = len(image)
    dil = list(attrs.get("dilations", [1] * nd))
    pads = list(attrs.get("pads", [0] * (2 * nd)))
    strides = list(attrs.get("strides", [1] * nd))
    if t.dtype.is_bool or t.rank != 3 or len(block) != nd or min(block + image, default=0) < 1:
        raise imp.unsupported(f"input {t} with image_shape {image} and block_shape {block}")
    k = math.prod(block)
    cols = [
        (image[i] + pads[i] + pads[nd + i] - (dil[i] * (block[i] - 1) + 1)) // strides[i] + 1
        for i in range(nd)
    ]
    if t.shape[1] % k or t.shape[2] != math.prod(cols) or min(cols) < 1:
        raise imp.unsupported(f"input {t} does not hold blocks {cols} of {block}")
    n, c = t.shape[0], t.shape[1] // k
    offsets = np.array(list(np.ndindex(*block)), dtype=np.int64).reshape(k, 1, nd)
    starts = np.array(list(np.ndindex(*cols)), dtype=np.int64).reshape(1, -1, nd)
    pos = starts * np.array(strides) - np.array(pads[:nd]) + offsets * np.array(dil)  # (k, L, nd)
    inside = np.all((pos >= 0) & (pos < np.array(image)), axis=-1)  # (k, L)
    pixel = np.ravel_multi_index(
        tuple(np.moveaxis(np.where(inside[..., None], pos, 0), -1, 0)), image
    )
    plane = math.prod(image)
    # updates in (n, c, kernel position, block) order; targets in the (n, c, image) output
    nc = np.arange(n * c, dtype=np.int64).reshape(-1, 1, 1)
    targets = (nc * plane + pixel[None]).reshape(-1)
    keep = np.flatnonzero(np.broadcast_to(inside[None], (n * c, *inside.shape)).reshape(-1))
    flat = reshape(imp, x, [t.num_elements])
    updates = _take_indices(imp, flat, 0, [int(i) for i in keep])
    out = imp.const(0, TensorType(t.dtype, (n, c, *image)))
    _out(imp, node, _scatter_reduce(imp, out, updates, targets[keep], "add", False))


@handler("Compress")
def _compress(imp: Importer, node: Any, ins: list[str], attrs: dict[str, Any]) -> None:
    # np.compress (ONNX's reference): the slices along `axis` (of the flattened input when
    # there is none) whose condition is true, in order; a condition shorter than the axis
    # leaves the rest out. The condition must be static: it fixes the output's shape.
    x = imp.dyn(ins[0])
    t = imp.type_of(x)
    cond = np.asarray(imp.static(ins[1], "condition")).astype(bool)
    if cond.ndim != 1:
        raise imp.unsupported(f"condition of shape {list(cond.shape)} (1-D only)")
    if "axis" in attrs:
        axis = _norm_axis(imp, attrs["axis"], t.rank)
    else:
        x, axis = reshape(imp, x, [t.num_elements]), 0
    size = imp.type_of(x).shape[axis]
    if cond.size > size:
        raise imp.unsupported(f"condition of length {cond.size} for an axis of {size}")
    _out(imp, node, _take_indices(imp, x, axis, [int(i) for i in np.flatnonzero(cond)]))


@handler("OptionalHasElement")
def _optional_has_element(imp: Importer, node: Any, ins: list[str], attrs: dict[str, Any]) -> None:
    # No input (or an empty name) is an empty optional: false. A tensor input has its
    # element: true (graph inputs of optional or sequence type are refused where declared, and
    # no op gdv imports makes an optional value).
    present = bool(ins) and bool(ins[0])
    if present:
        imp.val(ins[0])
    imp.set_static(node.output[0], np.array(present))


@handler("OptionalGetElement")
def _optional_get_element(imp: Importer, node: Any, ins: list[str], attrs: dict[str, Any]) -> None:
    # A tensor input is its own element (see OptionalHasElement); an absent one is an error.
    if not ins or not ins[0]:
        raise imp.unsupported("an empty optional has no element")
    imp.vals[node.output[0]] = imp.val(ins[0])


@handler("EyeLike")
def _eye_like(imp: Importer, node: Any, ins: list[str], attrs: dict[str, Any]) -> None:
    t = imp.val(ins[0]).type
    if t.rank != 2:
        raise imp.unsupported(f"input {t} (2-D only)")
    code = attrs.get("dtype")
    dtype = t.dtype if code is None else _ONNX_DTYPES.get(code)
    if dtype is None:
        raise imp.unsupported(f"dtype {_no_ir_dtype(code)}")
    eye = np.eye(t.shape[0], t.shape[1], k=attrs.get("k", 0), dtype=dtype.np)
    imp.set_static(node.output[0], eye)


@handler("InstanceNormalization")
def _instance_norm(imp: Importer, node: Any, ins: list[str], attrs: dict[str, Any]) -> None:
    # Per instance and channel over the spatial dims: m = sum(x) / n; d = x - m;
    # v = sum(d * d) / n; d / sqrt(v + eps) * scale + B (ONNX's reference formula).
    x = imp.dyn(ins[0])
    t = _require_float(imp, x)
    axes = list(range(2, t.rank))
    if not axes:
        raise imp.unsupported(f"input {t} has no spatial dims")
    n = math.prod(t.shape[2:])
    s = imp.emit("reduce_sum", [x], axes=axes)
    rt = imp.type_of(s)
    nn = imp.const(float(n), rt)
    mean = imp.emit("div", [s, nn])
    d = imp.emit("sub", [x, imp.emit("broadcast", [mean], t, dims=[0, 1])])
    var = imp.emit("div", [imp.emit("reduce_sum", [imp.emit("mul", [d, d])], axes=axes), nn])
    eps = imp.const(np.float32(attrs.get("epsilon", 1e-5)).astype(t.dtype.np), rt)
    std = imp.emit("sqrt", [imp.emit("add", [var, eps])])
    y = imp.emit("div", [d, imp.emit("broadcast", [std], t, dims=[0, 1])])
    y = imp.emit("mul", [y, imp.emit("broadcast", [imp.dyn(ins[1])], t, dims=[1])])
    _out(imp, node, imp.emit("add", [y, imp.emit("broadcast", [imp.dyn(ins[2])], t, dims=[1])]))


@handler("ReverseSequence")
def _reverse_sequence(imp: Importer, node: Any, ins: list[str], attrs: dict[str, Any]) -> None:
    """y[.., b, .., t, ..] = x[.., b, .., L_b - 1 - t, ..] for t < L_b, else x itself, with
    L_b = sequence_lens[b] clamped to [0, T] (ONNX asks 1 <= L_b <= T; a longer one reverses
    the whole axis, as the reference's numpy slices do): a take along the time axis at
    positions computed in i64."""
    x, lens = imp.dyn(ins[0]), imp.dyn(ins[1])
    t = imp.type_of(x)
    if t.rank < 2:
        raise imp.unsupported(f"input {t} (rank 2 at least)")
    b_axis = _norm_axis(imp, attrs.get("batch_axis", 1), t.rank)
    t_axis = _norm_axis(imp, attrs.get("time_axis", 0), t.rank)
    lt = imp.type_of(lens)
    if not lt.dtype.is_int or lt.shape != (t.shape[b_axis],) or b_axis == t_axis:
        raise imp.unsupported(f"sequence_lens {lt} for input {t}")
    it = t.with_dtype(DType.I64)
    n = t.shape[t_axis]
    lens = convert(imp, lens, DType.I64)
    lt64 = imp.type_of(lens)
    lens = imp.emit("max", [imp.emit("min", [lens, imp.const(n, lt64)]), imp.const(0, lt64)])
    big_l = imp.emit("broadcast", [lens], it, dims=[b_axis])
    pos = imp.emit("iota", [], it, axis=t_axis)
    back = imp.emit("sub", [imp.emit("sub", [big_l, imp.const(1, it)]), pos])
    inside = imp.emit("cmp", [pos, big_l], dir="lt")
    idx = imp.emit("select", [inside, back, pos])
    _out(imp, node, take_along(imp, x, idx, t_axis))


def _binarizer(imp: Importer, node: Any, ins: list[str], attrs: dict[str, Any]) -> None:
    """ai.onnx.ml Binarizer: (x > threshold) as x's dtype, as ONNX's reference (numpy)
    compares: a float x against the threshold rounded to x's dtype, an integer x in f64."""
    x = imp.dyn(ins[0])
    t = imp.type_of(x)
    if t.dtype.is_bool:
        raise imp.unsupported(f"{t.dtype} operands are not supported")
    threshold = float(attrs.get("threshold", 0.0))
    xc = x if t.dtype.is_float else convert(imp, x, DType.F64)
    hit = imp.emit("cmp", [xc, imp.const(threshold, imp.type_of(xc))], dir="gt")
    _out(imp, node, convert(imp, hit, t.dtype))


def _array_feature_extractor(
    imp: Importer, node: Any, ins: list[str], attrs: dict[str, Any]
) -> None:
    """ai.onnx.ml ArrayFeatureExtractor: data[..., indices] with the indices flattened, a
    negative index counting from the end (numpy's), shaped as ONNX's reference shapes it (a 1-D
    data gives one row). An index outside [-n, n) clamps (the IR's take; the reference
    raises)."""
    x, idx = imp.dyn(ins[0]), imp.dyn(ins[1])
    t, it = imp.type_of(x), imp.type_of(idx)
    if not it.dtype.is_int or t.rank == 0 or t.shape[-1] == 0:
        raise imp.unsupported(f"indices {it} for data {t}")
    k = it.num_elements
    flat = convert(imp, reshape(imp, idx, [k]), DType.I64)
    ft = imp.type_of(flat)
    wrapped = imp.emit("add", [flat, imp.const(t.shape[-1], ft)])
    neg = imp.emit("cmp", [flat, imp.const(0, ft)], dir="lt")
    flat = imp.emit("select", [neg, wrapped, flat])
    y = imp.emit("take", [x, flat], axis=t.rank - 1)
    _out(imp, node, reshape(imp, y, [1, k] if t.rank == 1 else [*t.shape[:-1], k]))


ML_HANDLERS: dict[str, Handler] = {
    "Binarizer": _binarizer,
    "ArrayFeatureExtractor": _array_feature_extractor,
}
"""The ai.onnx.ml ops gdv imports (every other op of that domain is refused by domain)."""


# --- ai.onnx.preview.training: Momentum, Adagrad, Adam -------------------------------------------
# Each update written as ONNX's reference (and its node tests' generator) computes it in numpy:
# a FLOAT attribute is an f32 value (an np.float32 in the reference evaluator, so 1 - alpha is
# an f32 subtraction), used in X's dtype; the learning rate R and the step count T are 0-d
# arrays, so they promote: R * X is in the wider of their dtypes, and T * decay_factor, beta ** T
# are f64. Each X output is then rounded to X's dtype, as ONNX declares it. T must be static
# where it picks a branch (t > 0).


def _one_minus(value: float) -> float:
    """1 - a FLOAT attribute, in f32 as ONNX's reference computes it (exact in f64 too, so
    the same for an f32 X; an f64 X sees the f32-rounded value)."""
    return float(np.float32(1.0) - np.float32(value))


def _train_const(imp: Importer, value: float, t: TensorType) -> str:
    """A Python float against an array of `t`: numpy rounds it to t's dtype once."""
    return imp.const(float(np.asarray(value, np.float64).astype(t.dtype.np)), t)


def _train_groups(imp: Importer, ins: list[str], k: int) -> list[list[str]]:
    """The per-tensor names [X, G, V, ...] of R, T, X1..Xn, G1..Gn, ... (k lists of n)."""
    n = (len(ins) - 2) // k
    if n < 1 or len(ins) != 2 + k * n or not all(ins):
        raise imp.unsupported(f"{len(ins)} inputs (R, T and {k} tensors per updated tensor)")
    return [[ins[2 + j * n + i] for j in range(k)] for i in range(n)]


def _train_tensors(imp: Importer, names: list[str]) -> tuple[list[str], TensorType]:
    vals = [imp.dyn(n) for n in names]
    t = imp.type_of(vals[0])
    if t.dtype not in (DType.F32, DType.F64) or any(imp.type_of(v) != t for v in vals):
        raise imp.unsupported(
            f"tensors {[str(imp.type_of(v)) for v in vals]} (f32 or f64, one type)"
        )
    return vals, t


def _train_rate(imp: Importer, name: str) -> str:
    r = imp.dyn(name)
    if imp.type_of(r).dtype not in (DType.F32, DType.F64) or imp.type_of(r).rank != 0:
        raise imp.unsupported(f"learning rate {imp.type_of(r)} (an f32 or f64 scalar)")
    return r


def _train_step(imp: Importer, name: str) -> int:
    return int(np.asarray(imp.static(name, "the step count T")).reshape(-1)[0])


def _rate_times(imp: Importer, r: str, u: str) -> str:
    """r * u with r a 0-d array: in the wider of the two dtypes (numpy's promotion)."""
    rt, ut = imp.type_of(r), imp.type_of(u)
    wide = DType.F64 if DType.F64 in (rt.dtype, ut.dtype) else DType.F32
    rb = imp.emit("broadcast", [convert(imp, r, wide)], ut.with_dtype(wide), dims=[])
    return imp.emit("mul", [rb, convert(imp, u, wide)])


def _minus(imp: Importer, x: str, d: str) -> str:
    """x - d in d's dtype (numpy's promotion: d is x's dtype or wider)."""
    return imp.emit("sub", [convert(imp, x, imp.type_of(d).dtype), d])


def _momentum(imp: Importer, node: Any, ins: list[str], attrs: dict[str, Any]) -> None:
    # g' = norm * x + g; v' = alpha * v + beta' * g' (beta' = beta if t > 0 else 1);
    # standard: x' = x - r * v'; nesterov: x' = x - r * (g' + alpha * v').
    groups = _train_groups(imp, ins, 3)
    r, step = _train_rate(imp, ins[0]), _train_step(imp, ins[1])
    mode = attrs.get("mode", "standard")
    if mode not in ("standard", "nesterov"):
        raise imp.unsupported(f"mode '{printable(str(mode))}'")
    alpha, beta, norm = attrs["alpha"], attrs["beta"], attrs["norm_coefficient"]
    n = len(groups)
    for i, names in enumerate(groups):
        (x, g, v), t = _train_tensors(imp, names)
        g2 = imp.emit("add", [imp.emit("mul", [_train_const(imp, norm, t), x]), g])
        beta_t = _train_const(imp, beta if step > 0 else 1.0, t)
        v2 = imp.emit(
            "add",
            [imp.emit("mul", [_train_const(imp, alpha, t), v]), imp.emit("mul", [beta_t, g2])],
        )
        u = v2
        if mode == "nesterov":
            u = imp.emit("add", [g2, imp.emit("mul", [_train_const(imp, alpha, t), v2])])
        _out(imp, node, convert(imp, _minus(imp, x, _rate_times(imp, r, u)), t.dtype), i)
        _out(imp, node, v2, n + i)


def _adagrad(imp: Importer, node: Any, ins: list[str], attrs: dict[str, Any]) -> None:
    # r' = r / (1 + t * decay) in f64; g' = norm * x + g; h' = h + g' * g';
    # x' = x - r' * g' / (sqrt(h') + eps), in f64, rounded to x's dtype.
    groups = _train_groups(imp, ins, 3)
    r = _train_rate(imp, ins[0])
    step = imp.dyn(ins[1])
    st = imp.type_of(step)
    if st.dtype is not DType.I64 or st.rank != 0:
        raise imp.unsupported(f"step count {st} (an i64 scalar)")
    f64 = TensorType(DType.F64, ())
    decay = _train_const(imp, attrs.get("decay_factor", 0.0), f64)
    den = imp.emit(
        "add",
        [_train_const(imp, 1.0, f64), imp.emit("mul", [convert(imp, step, DType.F64), decay])],
    )
    rate = imp.emit("div", [convert(imp, r, DType.F64), den])
    norm, eps = attrs.get("norm_coefficient", 0.0), attrs.get("epsilon", 0.0)
    n = len(groups)
    for i, names in enumerate(groups):
        (x, g, h), t = _train_tensors(imp, names)
        g2 = imp.emit("add", [imp.emit("mul", [_train_const(imp, norm, t), x]), g])
        h2 = imp.emit("add", [h, imp.emit("mul", [g2, g2])])
        hs = imp.emit("add", [imp.emit("sqrt", [h2]), _train_const(imp, eps, t)])
        d = imp.emit("div", [_rate_times(imp, rate, g2), convert(imp, hs, DType.F64)])
        _out(imp, node, convert(imp, _minus(imp, x, d), t.dtype), i)
        _out(imp, node, h2, n + i)


def _adam(imp: Importer, node: Any, ins: list[str], attrs: dict[str, Any]) -> None:
    # g' = norm * x + g; v' = alpha * v + (1 - alpha) * g'; h' = beta * h + (1 - beta) * g'^2;
    # r' = r * sqrt(1 - beta^t) / (1 - alpha^t) in f64 if t > 0, else r;
    # x' = (1 - norm_post) * (x - r' * (v' / (sqrt(h') + eps))), rounded to x's dtype.
    groups = _train_groups(imp, ins, 4)
    r, step = _train_rate(imp, ins[0]), _train_step(imp, ins[1])
    alpha, beta = attrs.get("alpha", 0.9), attrs.get("beta", 0.999)
    norm, post = attrs.get("norm_coefficient", 0.0), attrs.get("norm_coefficient_post", 0.0)
    eps = attrs.get("epsilon", 0.0)
    if step > 0:
        f64 = TensorType(DType.F64, ())
        tf = convert(imp, imp.dyn(ins[1]), DType.F64)
        one = _train_const(imp, 1.0, f64)

        def decayed(c: float) -> str:  # 1 - c ** t
            return imp.emit("sub", [one, imp.emit("pow", [_train_const(imp, c, f64), tf])])

        r = imp.emit("mul", [convert(imp, r, DType.F64), imp.emit("sqrt", [decayed(beta)])])
        r = imp.emit("div", [r, decayed(alpha)])
    n = len(groups)
    for i, names in enumerate(groups):
        (x, g, v, h), t = _train_tensors(imp, names)
        c = lambda value, t=t: _train_const(imp, value, t)  # noqa: E731
        g2 = imp.emit("add", [imp.emit("mul", [c(norm), x]), g])
        v2 = imp.emit(
            "add", [imp.emit("mul", [c(alpha), v]), imp.emit("mul", [c(_one_minus(alpha)), g2])]
        )
        sq = imp.emit("mul", [g2, g2])
        h2 = imp.emit(
            "add", [imp.emit("mul", [c(beta), h]), imp.emit("mul", [c(_one_minus(beta)), sq])]
        )
        hs = imp.emit("add", [imp.emit("sqrt", [h2]), c(eps)])
        x2 = _minus(imp, x, _rate_times(imp, r, imp.emit("div", [v2, hs])))
        x2 = imp.emit("mul", [_train_const(imp, _one_minus(post), imp.type_of(x2)), x2])
        _out(imp, node, convert(imp, x2, t.dtype), i)
        _out(imp, node, v2, n + i)
        _out(imp, node, h2, 2 * n + i)


TRAINING_HANDLERS: dict[str, Handler] = {
    "Momentum": _momentum,
    "Adagrad": _adagrad,
    "Adam": _adam,
}
"""The ai.onnx.preview.training ops gdv imports (every other op of that domain is refused)."""


@handler("TensorScatter")
def _tensor_scatter(imp: Importer, node: Any, ins: list[str], attrs: dict[str, Any]) -> None:
    """present[.., s, ..] = update[.., s - w_b, ..] where 0 <= s - w_b < L, else past (mode
    linear), or with j = (s - w_b) mod M (circular): each cache position along `axis` (M of
    them) reads the update position written there, as ONNX's reference writes them (L update
    positions from write_indices[b], b the batch index (dim 0); absent: 0). Linear writes
    outside [0, M) are dropped (ONNX requires them inside)."""
    past, upd = imp.dyn(ins[0]), imp.dyn(ins[1])
    t, ut = imp.type_of(past), imp.type_of(upd)
    mode = attrs.get("mode", "linear")
    if mode not in ("linear", "circular"):
        raise imp.unsupported(f"mode '{printable(mode)}'")
    axis = _norm_axis(imp, attrs.get("axis", -2), t.rank)
    if axis == 0 or ut.dtype != t.dtype or ut.rank != t.rank:
        raise imp.unsupported(f"update {ut} for cache {t} on axis {axis}")
    m, n = t.shape[axis], ut.shape[axis]
    if any(a != b for d, (a, b) in enumerate(zip(t.shape, ut.shape, strict=True)) if d != axis):
        raise imp.unsupported(f"update {ut} for cache {t} on axis {axis}")
    if n > m or n == 0:
        raise imp.unsupported(f"update {ut} longer than cache {t} (or empty) on axis {axis}")
    it = t.with_dtype(DType.I64)
    if len(ins) > 2 and ins[2]:
        w = convert(imp, imp.dyn(ins[2]), DType.I64)
        if imp.type_of(w).shape != (t.shape[0],):
            raise imp.unsupported(f"write_indices {imp.type_of(w)} for cache {t}")
        w = imp.emit("broadcast", [w], it, dims=[0])
    else:
        w = imp.const(0, it)
    j = imp.emit("sub", [imp.emit("iota", [], it, axis=axis), w])
    if mode == "circular":
        j = imp.emit("mod", [j, imp.const(m, it)])
    inside = imp.emit(
        "bitwise_and",
        [imp.emit("cmp", [j, imp.const(0, it)], dir="ge"),
         imp.emit("cmp", [j, imp.const(n, it)], dir="lt")],
    )  # fmt: skip
    j = imp.emit("select", [inside, j, imp.const(0, it)])
    _out(imp, node, imp.emit("select", [inside, take_along(imp, upd, j, axis), past]))


@handler("LRN")
def _lrn(imp: Importer, node: Any, ins: list[str], attrs: dict[str, Any]) -> None:
    """x / (bias + alpha / size * S) ^ beta, S the sum of x^2 over the channels [c - (size-1)
    // 2, c + ceil((size-1) / 2)] inside [0, C), in increasing channel order (a left fold,
    numpy's along that axis), as ONNX's reference computes it: the squares and S in x's
    dtype; alpha, beta and bias are f32 (numpy scalars there), alpha / size an f32 division,
    so the rest runs in f32 (f64 for an f64 x) and the result is rounded once to x's dtype.
    The squares are padded with +0.0 on the channel axis, which changes no sum (x^2 is never
    -0.0); the window is `size` shifted slices added in order."""
    x = imp.dyn(ins[0])
    t = _require_float(imp, x)
    if t.rank < 3:
        raise imp.unsupported(f"input {t} (N, C and at least one spatial dim)")
    size = int(attrs["size"])
    if size < 1:
        raise imp.unsupported(f"size {size}")
    alpha, beta = np.float32(attrs.get("alpha", 1e-4)), np.float32(attrs.get("beta", 0.75))
    bias = np.float32(attrs.get("bias", 1.0))
    scale = float(alpha / np.float32(size))  # numpy's float32 scalar divided by an int: f32
    lo, hi = (size - 1) // 2, math.ceil((size - 1) / 2)
    sq = imp.emit("mul", [x, x])
    zeros = [0] * t.rank
    low, high = list(zeros), list(zeros)
    low[1], high[1] = lo, hi
    padded = imp.emit("pad", [sq], low=low, high=high, value=0.0) if size > 1 else sq
    acc = None
    for k in range(size):
        start = list(zeros)
        start[1] = k
        limit = list(t.shape)
        limit[1] = k + t.shape[1]
        win = imp.emit("slice", [padded], t, start=start, limit=limit, stride=[1] * t.rank)
        acc = win if acc is None else imp.emit("add", [acc, win])
    wide = DType.F64 if t.dtype is DType.F64 else DType.F32
    wt = t.with_dtype(wide)
    prod = imp.emit("mul", [imp.const(scale, wt), convert(imp, acc, wide)])
    den = imp.emit("add", [imp.const(float(bias), wt), prod])
    y = imp.emit("div", [convert(imp, x, wide), imp.emit("pow", [den, imp.const(float(beta), wt)])])
    _out(imp, node, convert(imp, y, t.dtype))


@handler("Shrink")
def _shrink(imp: Importer, node: Any, ins: list[str], attrs: dict[str, Any]) -> None:
    """x < -lambd: x + bias; x > lambd: x - bias; else 0, as ONNX's reference (numpy): lambd
    and bias are f32 attributes (numpy f32 scalars there), so f32 and f64 x compare and add in
    their own dtype with those exact values, and f16/bf16 x is widened to f32 (exactly), compared
    and added there and rounded once back (numpy promotes an f16 array with an f32 scalar to
    f32); a NaN compares false (0)."""
    x = imp.dyn(ins[0])
    t = _require_float(imp, x, " (integer Shrink computes in f64 and casts back, unchecked)")
    lambd, bias = float(attrs.get("lambd", 0.5)), float(attrs.get("bias", 0.0))
    narrow = t.dtype in (DType.F16, DType.BF16)
    w = TensorType(DType.F32, t.shape) if narrow else t
    xw = imp.emit("convert", [x], type_=w) if narrow else x
    lo = imp.emit("cmp", [xw, imp.const(-lambd, w)], dir="lt")
    hi = imp.emit("cmp", [xw, imp.const(lambd, w)], dir="gt")
    b = imp.const(bias, w)
    inner = imp.emit("select", [hi, imp.emit("sub", [xw, b]), imp.const(0.0, w)])
    y = imp.emit("select", [lo, imp.emit("add", [xw, b]), inner])
    _out(imp, node, imp.emit("convert", [y], type_=t) if narrow else y)


@handler("Trilu")
def _trilu(imp: Importer, node: Any, ins: list[str], attrs: dict[str, Any]) -> None:
    x = imp.dyn(ins[0])
    t = imp.type_of(x)
    if t.num_elements == 0:  # nothing to mask (an empty mask has no IR constant)
        _out(imp, node, x)
        return
    k = int(imp.static(ins[1], "k")) if len(ins) > 1 and ins[1] else 0
    n, m = t.shape[-2], t.shape[-1]
    i, j = np.arange(n)[:, None], np.arange(m)[None, :]
    keep = (j - i >= k) if attrs.get("upper", 1) else (j - i <= k)
    mask = imp.const(np.broadcast_to(keep, t.shape).copy(), t.with_dtype(DType.I1))
    _out(imp, node, imp.emit("select", [mask, x, imp.const(0, t)]))


# --- reductions -------------------------------------------------------------------------------


def _reduce_axes(imp: Importer, node: Any, ins: list[str], attrs: dict[str, Any], rank: int):
    from_opset = 13 if node.op_type == "ReduceSum" else 18
    axes = _axes_arg(imp, ins, attrs, 1, from_opset)
    if axes is None or (len(axes) == 0 and imp.opset >= from_opset):
        if attrs.get("noop_with_empty_axes", 0):
            return None
        return list(range(rank))
    return sorted({_norm_axis(imp, a, rank) for a in axes})


def _keep(imp: Importer, x: str, r: str, axes: list[int], attrs: dict[str, Any]) -> str:
    if not attrs.get("keepdims", 1):
        return r
    t = imp.type_of(x)
    return reshape(imp, r, [1 if d in axes else s for d, s in enumerate(t.shape)])


_REDUCE = {
    "ReduceSum": "reduce_sum", "ReduceMax": "reduce_max", "ReduceMin": "reduce_min",
    "ReduceMean": "reduce_sum", "ReduceL1": "reduce_sum", "ReduceL2": "reduce_sum",
    "ReduceSumSquare": "reduce_sum", "ReduceLogSum": "reduce_sum",
    "ReduceLogSumExp": "reduce_sum", "ReduceProd": "",
}  # fmt: skip


@handler(*_REDUCE)
def _reduce(imp: Importer, node: Any, ins: list[str], attrs: dict[str, Any]) -> None:
    op = node.op_type
    x = imp.dyn(ins[0])
    t = imp.type_of(x)
    if t.dtype.is_bool and op not in ("ReduceMax", "ReduceMin"):
        raise imp.unsupported("boolean operands are not supported")
    axes = _reduce_axes(imp, node, ins, attrs, t.rank)
    if axes is None:  # noop_with_empty_axes: the input unchanged (the L1, L2... maps still apply)
        axes = []
    if t.dtype.is_bool:
        # any (all) is the max (min) of 0/1 in u8, whose empty folds, 0 and 255, convert back
        # to ONNX's identities false and true
        u = convert(imp, x, DType.U8)
        r = imp.emit(_REDUCE[op], [u], axes=axes) if axes else u
        _out(imp, node, convert(imp, _keep(imp, x, r, axes, attrs), DType.I1))
        return
    if op == "ReduceProd":
        _out(imp, node, _keep(imp, x, _reduce_prod(imp, x, axes), axes, attrs))
        return
    if op not in ("ReduceSum", "ReduceMax", "ReduceMin", "ReduceSumSquare", "ReduceL1"):
        _require_float(imp, x, f" by {op}")
    if op == "ReduceL1":
        body = imp.emit("abs", [x]) if t.dtype.is_float else None
        if body is None:
            raise imp.unsupported(f"{t.dtype} operands are not supported")
    elif op in ("ReduceL2", "ReduceSumSquare"):
        body = imp.emit("mul", [x, x])
    elif op == "ReduceLogSumExp":
        body = imp.emit("exp", [x])
    else:
        body = x
    if axes:
        r = imp.emit(_REDUCE[op], [body], axes=axes)
    else:
        r = body
    rt = imp.type_of(r)
    if op == "ReduceMean" and axes:
        n = math.prod(t.shape[a] for a in axes)
        r = imp.emit("div", [r, imp.const(float(n), rt)])  # sum / n, n in the dtype
    elif op == "ReduceL2":
        r = imp.emit("sqrt", [r])
    elif op in ("ReduceLogSum", "ReduceLogSumExp"):
        r = imp.emit("log", [r])
    _out(imp, node, _keep(imp, x, r, axes, attrs))


def _arg_axis(imp: Importer, t: TensorType, axis: int) -> None:
    if t.shape[axis] == 0 and math.prod(s for d, s in enumerate(t.shape) if d != axis):
        raise imp.unsupported(f"axis {axis} of {t} is empty: there is no index to give")


@handler("ArgMax", "ArgMin")
def _arg_max_min(imp: Importer, node: Any, ins: list[str], attrs: dict[str, Any]) -> None:
    x = imp.dyn(ins[0])
    t = imp.type_of(x)
    axis = _norm_axis(imp, attrs.get("axis", 0), t.rank)
    if t.rank == 0:
        raise imp.unsupported("a scalar operand has no axis")
    _arg_axis(imp, t, axis)
    last = bool(attrs.get("select_last_index", 0))
    r = arg_extreme(imp, x, axis, node.op_type == "ArgMax", last)
    _out(imp, node, _keep(imp, x, r, [axis], attrs))


@handler("Hardmax")
def _hardmax(imp: Importer, node: Any, ins: list[str], attrs: dict[str, Any]) -> None:
    # 1 at the first maximum along `axis` (argmax's, NaN rule included), 0 elsewhere; before
    # opset 13 along axis 1 of the input coerced to 2-D [prod(dims < axis), prod(dims >= axis)].
    x = imp.dyn(ins[0])
    t = _require_float(imp, x)
    if t.rank == 0:
        raise imp.unsupported("a scalar operand has no axis")
    if imp.opset >= 13:
        axis = _norm_axis(imp, attrs.get("axis", -1), t.rank)
        y = x
    else:
        a = attrs.get("axis", 1)
        a = a + t.rank if a < 0 else a
        if not 0 <= a <= t.rank:
            raise imp.unsupported(f"axis {attrs.get('axis')} is out of range for rank {t.rank}")
        y = reshape(imp, x, [math.prod(t.shape[:a]), math.prod(t.shape[a:])])
        axis = 1
    yt = imp.type_of(y)
    _arg_axis(imp, yt, axis)
    r = arg_extreme(imp, y, axis, True, False)
    it = TensorType(DType.I64, yt.shape)
    rb = imp.emit("broadcast", [r], it, dims=[d for d in range(yt.rank) if d != axis])
    hit = imp.emit("cmp", [imp.emit("iota", [], it, axis=axis), rb], dir="eq")
    one = imp.emit("select", [hit, imp.const(1.0, yt), imp.const(0.0, yt)])
    _out(imp, node, reshape(imp, one, t.shape))


@handler("CumSum", "CumProd")
def _cumulative(imp: Importer, node: Any, ins: list[str], attrs: dict[str, Any]) -> None:
    # IR cumsum/cumprod: ONNX's exclusive output is the inclusive one shifted by one position
    # with 0 (1) first, which is the IR's exclusive scan; reverse scans from the end.
    x = imp.dyn(ins[0])
    t = imp.type_of(x)
    if t.dtype.is_bool or t.rank == 0:
        raise imp.unsupported(f"an operand of type {t}")
    axis_arr = np.asarray(imp.static(ins[1], "axis")).reshape(-1)
    if axis_arr.size != 1:
        raise imp.unsupported(f"axis has {axis_arr.size} values, expected one")
    axis = _norm_axis(imp, int(axis_arr[0]), t.rank)
    flags = {k: True for k in ("exclusive", "reverse") if attrs.get(k, 0)}
    ir = "cumsum" if node.op_type == "CumSum" else "cumprod"
    _out(imp, node, imp.emit(ir, [x], axis=axis, **flags))


@handler("TopK")
def _topk(imp: Importer, node: Any, ins: list[str], attrs: dict[str, Any]) -> None:
    # The first k of the IR argsort's order (descending when `largest`): ties keep the lower
    # index first and a NaN is above every number, as ONNX's reference (a lexsort) has it;
    # `sorted = 0` allows any order, and this one is sorted.
    x = imp.dyn(ins[0])
    t = imp.type_of(x)
    if t.dtype.is_bool or t.rank == 0:
        raise imp.unsupported(f"an operand of type {t}")
    if imp.opset >= 10:
        karr = np.asarray(imp.static(ins[1], "k")).reshape(-1)
        if karr.size != 1:
            raise imp.unsupported(f"k has {karr.size} values, expected one")
        k = int(karr[0])
    else:
        k = int(attrs.get("k", 0))
    axis = _norm_axis(imp, attrs.get("axis", -1), t.rank)
    if not 0 <= k <= t.shape[axis]:
        raise imp.unsupported(f"k = {k} is outside [0, {t.shape[axis]}] for axis {axis} of {t}")
    values, indices = sort_along(imp, x, axis, bool(attrs.get("largest", 1)), k)
    _out(imp, node, values, 0)
    _out(imp, node, indices, 1)


MAX_UNROLLED = 256
"""The most products ReduceProd unrolls into (the IR has no product reduction)."""


def _reduce_prod(imp: Importer, x: str, axes: list[int]) -> str:
    """A left fold of mul over the reduced positions in row-major order, unrolled: the reduced
    dims moved last and flattened, then one slice per position."""
    t = imp.type_of(x)
    kept = [d for d in range(t.rank) if d not in axes]
    n = math.prod(t.shape[a] for a in axes)
    out_shape = [t.shape[d] for d in kept]
    if n > MAX_UNROLLED:
        raise imp.unsupported(f"a product over {n} elements (unrolled up to {MAX_UNROLLED})")
    if n == 0:
        return imp.const(1, t.with_shape(out_shape))
    if kept + axes != list(range(t.rank)):
        x = imp.emit("transpose", [x], perm=kept + axes)
    flat = reshape(imp, x, [*out_shape, n])
    acc = None
    for k in range(n):
        part = reshape(imp, _slice1(imp, flat, len(out_shape), k, k + 1, 1), out_shape)
        acc = part if acc is None else imp.emit("mul", [acc, part])
    assert acc is not None
    return acc


@handler("GlobalAveragePool", "GlobalMaxPool")
def _global_pool(imp: Importer, node: Any, ins: list[str], attrs: dict[str, Any]) -> None:
    x = imp.dyn(ins[0])
    t = _require_float(imp, x)
    axes = list(range(2, t.rank))
    if node.op_type == "GlobalMaxPool":
        r = imp.emit("reduce_max", [x], axes=axes)
    else:
        r = imp.emit("reduce_sum", [x], axes=axes)
        n = math.prod(t.shape[2:])
        r = imp.emit("div", [r, imp.const(float(n), imp.type_of(r))])
    _out(imp, node, reshape(imp, r, list(t.shape[:2]) + [1] * (t.rank - 2)))


def numpy_f16_row_sum(imp: Importer, x: str) -> str:
    """numpy's sum of an f16 array along its last axis, that axis dropped: numpy's f16 add
    reduction over a contiguous run widens each element to f32, sums them in f32 in numpy's
    pairwise order (`pairwise_sum` in numpy's loops: fewer than 8 elements in order; up to 128
    in 8 interleaved partial sums `r[j] = a[j] + a[8 + j] + ...` combined as
    `((r0 + r1) + (r2 + r3)) + ((r4 + r5) + (r6 + r7))`, then the remainder in order; longer
    runs split at `n // 2` rounded down to a multiple of 8 and the halves added), from +0.0,
    and rounds once to f16. Written in IR ops: `convert`, `slice`, `reshape`, f32
    `reduce_sum` (each fold left from its first element is one of numpy's in-order runs) and
    `add`. Only the last axis: numpy reduces a non-contiguous axis of f16 elementwise, rounding
    each step to f16, as the IR's own f16 `reduce_sum` does."""
    t = imp.type_of(x)
    n = t.shape[-1]
    rows = reshape(imp, convert(imp, x, DType.F32), [math.prod(t.shape[:-1]), n])

    def col(v: str, j: int) -> str:
        r = imp.type_of(v).shape[0]
        return reshape(imp, _slice1(imp, v, 1, j, j + 1, 1), [r])

    def add(a: str, b: str) -> str:
        return imp.emit("add", [a, b])

    def pairwise(v: str) -> str:
        m = imp.type_of(v).shape[1]
        if m < 8:
            return imp.emit("reduce_sum", [v], axes=[1])
        if m <= 128:
            whole = m - m % 8
            r = imp.type_of(v).shape[0]
            blocks = reshape(imp, _slice1(imp, v, 1, 0, whole, 1), [r, whole // 8, 8])
            part = imp.emit("reduce_sum", [blocks], axes=[1])  # r[j], each in order
            c = [col(part, j) for j in range(8)]
            s = add(add(add(c[0], c[1]), add(c[2], c[3])), add(add(c[4], c[5]), add(c[6], c[7])))
            for j in range(whole, m):
                s = add(s, col(v, j))
            return s
        half = m // 2 - (m // 2) % 8
        return add(
            pairwise(_slice1(imp, v, 1, 0, half, 1)), pairwise(_slice1(imp, v, 1, half, m, 1))
        )

    s = pairwise(rows)
    s = add(s, imp.const(0.0, imp.type_of(s)))  # numpy's sum starts from +0.0: -0.0 gives +0.0
    return convert(imp, reshape(imp, s, t.shape[:-1]), DType.F16)


@handler("Softmax", "LogSoftmax")
def _softmax(imp: Importer, node: Any, ins: list[str], attrs: dict[str, Any]) -> None:
    x = imp.dyn(ins[0])
    t = _require_float(imp, x)
    ir = "softmax" if node.op_type == "Softmax" else "log_softmax"
    if imp.opset >= 13:
        axis = _norm_axis(imp, attrs.get("axis", -1), t.rank)
        if (
            getattr(imp, "accumulate_in_f32", False)
            and ir == "softmax"
            and t.dtype is DType.F16
            and t.shape[axis] > 0
            and math.prod(t.shape[axis + 1 :]) == 1
        ):
            _out(imp, node, reshape(imp, _numpy_f16_softmax(imp, x, axis), t.shape))
            return
        _out(imp, node, imp.emit(ir, [x], axis=axis))
        return
    # Before opset 13: the input is coerced to 2-D [prod(dims < axis), prod(dims >= axis)].
    axis = attrs.get("axis", 1)
    axis = axis + t.rank if axis < 0 else axis
    flat = reshape(imp, x, [math.prod(t.shape[:axis]), math.prod(t.shape[axis:])])
    _out(imp, node, reshape(imp, imp.emit(ir, [flat], axis=1), t.shape))


def _numpy_f16_softmax(imp: Importer, x: str, axis: int) -> str:
    """ONNX's reference Softmax (opset 13) on f16, under `accumulate_in_f32`: `t = x -
    x.max(axis)`, `e = np.exp(t)`, `e / e.sum(axis)`, every op in f16 and rounded there as the
    IR's softmax is, except the sum: numpy sums a contiguous run of f16 in f32 and rounds once
    (`numpy_f16_row_sum`). For an `axis` with only 1s after it (the run is contiguous), with
    those dims dropped in the result."""
    t = imp.type_of(x)
    rows = reshape(imp, x, t.shape[: axis + 1])
    rt = imp.type_of(rows)
    kept = list(range(rt.rank - 1))
    m = imp.emit("reduce_max", [rows], axes=[rt.rank - 1])
    e = imp.emit("exp", [imp.emit("sub", [rows, imp.emit("broadcast", [m], rt, dims=kept)])])
    s = imp.emit("broadcast", [numpy_f16_row_sum(imp, e)], rt, dims=kept)
    return imp.emit("div", [e, s])


@handler("LayerNormalization")
def _layer_norm(imp: Importer, node: Any, ins: list[str], attrs: dict[str, Any]) -> None:
    # ONNX's function body: Mean = ReduceMean(X); Var = ReduceMean(X*X) - Mean*Mean;
    # StdDev = Sqrt(Var + eps); Y = ((X - Mean) / StdDev) * Scale + B; InvStdDev = 1 / StdDev,
    # computed in stash_type (f32 by default).
    x = imp.dyn(ins[0])
    t = _require_float(imp, x)
    axis = _norm_axis(imp, attrs.get("axis", -1), t.rank)
    stash = _ONNX_DTYPES.get(attrs.get("stash_type", 1))
    if stash is None or not stash.is_float:
        raise imp.unsupported(f"stash_type {attrs.get('stash_type')}")
    eps = attrs.get("epsilon", 1e-5)
    axes = list(range(axis, t.rank))
    n = math.prod(t.shape[axis:])
    xu = convert(imp, x, stash)
    tu = imp.type_of(xu)
    red = imp.emit("reduce_sum", [xu], axes=axes)
    rt = imp.type_of(red)
    nn = imp.const(float(n), rt)
    mean = imp.emit("div", [red, nn])
    mean_sq = imp.emit("div", [imp.emit("reduce_sum", [imp.emit("mul", [xu, xu])], axes=axes), nn])
    var = imp.emit("sub", [mean_sq, imp.emit("mul", [mean, mean])])
    eps_c = imp.const(np.float32(eps).astype(stash.np), rt)
    std = imp.emit("sqrt", [imp.emit("add", [var, eps_c])])
    kept = list(range(axis))
    dev = imp.emit("sub", [xu, imp.emit("broadcast", [mean], tu, dims=kept)])
    normed = imp.emit("div", [dev, imp.emit("broadcast", [std], tu, dims=kept)])
    normed = convert(imp, normed, t.dtype)
    scale = bcast(imp, imp.dyn(ins[1]), t.shape)
    y = imp.emit("mul", [normed, scale])
    if len(ins) > 2 and ins[2]:
        y = imp.emit("add", [y, bcast(imp, imp.dyn(ins[2]), t.shape)])
    _out(imp, node, y)
    keep_shape = [s if d < axis else 1 for d, s in enumerate(t.shape)]
    if len(node.output) > 1 and node.output[1]:
        _out(imp, node, reshape(imp, mean, keep_shape), 1)
    if len(node.output) > 2 and node.output[2]:
        inv = imp.emit("div", [imp.const(1.0, rt), std])
        _out(imp, node, reshape(imp, inv, keep_shape), 2)


@handler("Gelu")
def _gelu(imp: Importer, node: Any, ins: list[str], attrs: dict[str, Any]) -> None:
    # ONNX's function body (opset 20), in its order.
    x = imp.dyn(ins[0])
    t = _require_float(imp, x)
    half_x = imp.emit("mul", [imp.const(0.5, t), x])
    if attrs.get("approximate", "none") == "none":
        sqrt2 = imp.emit("sqrt", [imp.const(2.0, t)])
        phi = imp.emit("add", [imp.const(1.0, t), imp.emit("erf", [imp.emit("div", [x, sqrt2])])])
    elif attrs["approximate"] == "tanh":
        two_over_pi = np.float32(0.63661975)
        k = imp.emit("sqrt", [imp.const(two_over_pi.astype(t.dtype.np), t)])
        cube = imp.emit("pow", [x, imp.const(3.0, t)])
        c0 = imp.const(np.float32(0.044715).astype(t.dtype.np), t)
        inner = imp.emit("add", [x, imp.emit("mul", [c0, cube])])
        phi = imp.emit("add", [imp.const(1.0, t), imp.emit("tanh", [imp.emit("mul", [k, inner])])])
    else:
        raise imp.unsupported(f"approximate = '{printable(attrs['approximate'])}'")
    _out(imp, node, imp.emit("mul", [half_x, phi]))


@handler("BatchNormalization")
def _batch_norm(imp: Importer, node: Any, ins: list[str], attrs: dict[str, Any]) -> None:
    # Inference: (x - mean) / sqrt(var + eps) * scale + B, per channel (dim 1).
    training = attrs.get("training_mode", 0) and imp.opset >= 14
    if (attrs.get("training_mode", 0) and not training) or (
        imp.opset < 7 and not attrs.get("is_test", 0)
    ):
        raise imp.unsupported("training mode is not supported")
    if len([o for o in node.output if o]) > 1 and not training:
        raise imp.unsupported("the running statistics outputs (training mode)")
    x = imp.dyn(ins[0])
    t = _require_float(imp, x)
    eps = attrs.get("epsilon", 1e-5)

    def chan(name: str) -> str:
        v = imp.dyn(name)
        if imp.type_of(v).dtype != t.dtype or imp.type_of(v).shape != (t.shape[1],):
            raise imp.unsupported(f"{imp.type_of(v)} per channel of {t} (mixed dtypes)")
        return v

    scale, bias, mean, var = (chan(n) for n in ins[1:5])
    if training:
        # Training mode (opset 14 on), as ONNX's spec and reference say: the batch's own mean
        # and (population) variance over every dim but the channel normalize x, and the
        # running statistics are input_mean * momentum + current_mean * (1 - momentum) (the
        # same for the variance). m = sum(x) / n; d = x - m; v = sum(d * d) / n, n the
        # elements per channel, as InstanceNormalization computes them.
        axes = [0, *range(2, t.rank)]
        n = t.num_elements // t.shape[1]
        ct = imp.type_of(mean)
        cur_mean = imp.emit(
            "div", [imp.emit("reduce_sum", [x], axes=axes), imp.const(float(n), ct)]
        )
        d = imp.emit("sub", [x, imp.emit("broadcast", [cur_mean], t, dims=[1])])
        sq = imp.emit("reduce_sum", [imp.emit("mul", [d, d])], axes=axes)
        cur_var = imp.emit("div", [sq, imp.const(float(n), ct)])
        momentum = attrs.get("momentum", 0.9)

        def running(old: str, cur: str) -> str:
            kept = imp.emit("mul", [old, imp.const(momentum, ct)])
            return imp.emit("add", [kept, imp.emit("mul", [cur, imp.const(1 - momentum, ct)])])

        _out(imp, node, running(mean, cur_mean), 1)
        _out(imp, node, running(var, cur_var), 2)
        mean, var = cur_mean, cur_var
    scale, bias, mean, var = (
        imp.emit("broadcast", [v], t, dims=[1]) for v in (scale, bias, mean, var)
    )
    std = imp.emit("sqrt", [imp.emit("add", [var, imp.const(np.float32(eps), t)])])
    y = imp.emit("div", [imp.emit("sub", [x, mean]), std])
    _out(imp, node, imp.emit("add", [imp.emit("mul", [y, scale]), bias]))


# --- contractions ------------------------------------------------------------------------------


def _matmul(imp: Importer, a: str, b: str) -> str:
    ta, tb = imp.type_of(a), imp.type_of(b)
    if ta.dtype != tb.dtype or ta.dtype.is_bool:
        raise imp.unsupported(f"operands {ta} and {tb}")
    if getattr(imp, "accumulate_in_f32", False) and ta.dtype in _NARROW:
        # numpy's (and so ONNX's reference's) f16/bf16 matmul: products exact in f32 (11 + 11
        # and 8 + 8 significand bits fit its 24), summed in f32 in order from +0.0 (the IR's
        # fold starts from the first product: the + 0.0 after it makes a -0.0 sum +0.0, the
        # only difference), rounded once
        wide = _matmul(imp, convert(imp, a, DType.F32), convert(imp, b, DType.F32))
        wide = imp.emit("add", [wide, imp.const(0.0, imp.type_of(wide))])
        return convert(imp, wide, ta.dtype)
    a1, b1 = ta.rank == 1, tb.rank == 1
    if a1:
        a = reshape(imp, a, [1, ta.shape[0]])
    if b1:
        b = reshape(imp, b, [tb.shape[0], 1])
    ta, tb = imp.type_of(a), imp.type_of(b)
    if tb.rank == 2 and ta.rank > 2:
        # A batch of rows times one matrix: the rows stacked into one product (each output is
        # the same fold over K), instead of the matrix broadcast over the batch.
        if ta.shape[-1] != tb.shape[0]:
            raise imp.unsupported(f"inner dims of {ta} and {tb} differ")
        rows = reshape(imp, a, [math.prod(ta.shape[:-1]), ta.shape[-1]])
        flat = imp.emit("matmul", [rows, b])
        shape = [*ta.shape[:-1], tb.shape[1]]
        if b1:
            shape.pop(-1)
        return reshape(imp, flat, shape)
    batch = broadcast_shape(imp, ta.shape[:-2], tb.shape[:-2])
    a = bcast(imp, a, (*batch, *ta.shape[-2:]))
    b = bcast(imp, b, (*batch, *tb.shape[-2:]))
    if ta.shape[-1] != tb.shape[-2]:
        raise imp.unsupported(f"inner dims of {ta} and {tb} differ")
    r = imp.emit("matmul", [a, b])
    shape = list(imp.type_of(r).shape)
    if a1:
        shape.pop(-2)
    if b1:
        shape.pop(-1)
    return reshape(imp, r, shape)


@handler("MatMul")
def _matmul_node(imp: Importer, node: Any, ins: list[str], attrs: dict[str, Any]) -> None:
    _out(imp, node, _matmul(imp, imp.dyn(ins[0]), imp.dyn(ins[1])))


@handler("Gemm")
def _gemm(imp: Importer, node: Any, ins: list[str], attrs: dict[str, Any]) -> None:
    # alpha * (A' B') + beta * C
    a, b = imp.dyn(ins[0]), imp.dyn(ins[1])
    if attrs.get("transA", 0):
        a = imp.emit("transpose", [a], perm=[1, 0])
    if attrs.get("transB", 0):
        b = imp.emit("transpose", [b], perm=[1, 0])
    y = _matmul(imp, a, b)
    t = imp.type_of(y)
    alpha, beta = attrs.get("alpha", 1.0), attrs.get("beta", 1.0)
    if alpha != 1.0:
        y = imp.emit("mul", [imp.const(alpha, t), y])
    if len(ins) > 2 and ins[2] and beta != 0.0:  # ONNX drops C when beta is 0 (no 0 * inf)
        c = bcast(imp, imp.dyn(ins[2]), t.shape)
        if beta != 1.0:
            c = imp.emit("mul", [imp.const(beta, t), c])
        y = imp.emit("add", [y, c])
    _out(imp, node, y)


def _einsum_without_ellipsis(imp: Importer, eq: str, ranks: list[int]) -> str:
    """`eq` with each `...` spelled as letters the equation does not use (numpy's rule: an
    operand's ellipsis dims are the last ones of the longest; the output's, where it has none
    written, come first in the implicit output)."""
    if "..." not in eq:
        return eq
    lhs, arrow, out = eq.partition("->")
    terms = lhs.split(",")
    if len(terms) != len(ranks):
        raise imp.unsupported("only one or two operands")
    counts = [r - (len(t) - 3) if "..." in t else 0 for t, r in zip(terms, ranks, strict=True)]
    if min(counts) < 0:
        raise imp.unsupported(f"equation '{printable(eq)}' for operands of ranks {ranks}")
    free = [c for c in "ABCDEFGHIJKLMNOPQRSTUVWXYZ" if c not in eq]
    ell = "".join(free[: max(counts)])
    terms = [t.replace("...", ell[len(ell) - n :]) for t, n in zip(terms, counts, strict=True)]
    if arrow:
        out = out.replace("...", ell)
    else:
        letters = "".join(terms)
        out = ell + "".join(
            sorted(c for c in set(letters) if letters.count(c) == 1 and c not in ell)
        )
    return ",".join(terms) + "->" + out


def _einsum_diagonals(imp: Importer, x: str, term: str) -> tuple[str, str]:
    """x's diagonal along each index that `term` repeats (data movement: a take from the two
    axes flattened at positions i * (n + 1)), the index kept once, last."""
    while len(set(term)) != len(term):
        c = next(c for c in term if term.count(c) > 1)
        i, j = term.index(c), term.index(c, term.index(c) + 1)
        t = imp.type_of(x)
        rest = [d for d in range(t.rank) if d not in (i, j)]
        x = imp.emit("transpose", [x], perm=[*rest, i, j])
        n = t.shape[i]
        x = reshape(imp, x, [*(t.shape[d] for d in rest), n * n])
        pos = np.arange(n, dtype=np.int64) * (n + 1)
        x = imp.emit("take", [x, imp.const(pos, TensorType(DType.I64, (n,)))], axis=len(rest))
        term = "".join(term[d] for d in rest) + c
    return x, term


@handler("Einsum")
def _einsum(imp: Importer, node: Any, ins: list[str], attrs: dict[str, Any]) -> None:
    eq = attrs["equation"].replace(" ", "")
    xs = [imp.dyn(i) for i in ins]
    eq = _einsum_without_ellipsis(imp, eq, [imp.type_of(x).rank for x in xs])
    if "->" not in eq:  # implicit output: the letters used once, in alphabetical order
        letters = eq.replace(",", "")
        eq = eq + "->" + "".join(sorted(c for c in set(letters) if letters.count(c) == 1))
    lhs, out = eq.split("->")
    terms = lhs.split(",")
    if len(terms) != len(xs) or len(xs) not in (1, 2):
        raise imp.unsupported("only one or two operands")
    sizes: dict[str, int] = {}
    for k, term in enumerate(terms):
        if len(term) != imp.type_of(xs[k]).rank:
            raise imp.unsupported(f"term '{printable(term)}' for operand {imp.type_of(xs[k])}")
        for c, n in zip(term, imp.type_of(xs[k]).shape, strict=True):
            if sizes.setdefault(c, n) != n:
                raise imp.unsupported(f"index '{printable(c)}' has sizes {sizes[c]} and {n}")
        xs[k], terms[k] = _einsum_diagonals(imp, xs[k], term)
    # Sum away indices that appear in one operand only and not in the output.
    for k, term in enumerate(terms):
        others = "".join(terms[:k] + terms[k + 1 :]) + out
        lone = [d for d, c in enumerate(term) if c not in others]
        if lone:
            xs[k] = imp.emit("reduce_sum", [xs[k]], axes=lone)
            terms[k] = "".join(c for c in term if c in others)
    if len(xs) == 1:
        r, have = xs[0], terms[0]
    else:
        (a, b), (ta, tb) = xs, terms
        batch = [c for c in ta if c in tb and c in out]
        contract = [c for c in ta if c in tb and c not in out]
        r = imp.emit(
            "dot",
            [a, b],
            imp.type_of(a),
            lhs_batch=[ta.index(c) for c in batch],
            rhs_batch=[tb.index(c) for c in batch],
            lhs_contract=[ta.index(c) for c in contract],
            rhs_contract=[tb.index(c) for c in contract],
        )
        have = (
            "".join(batch)
            + "".join(c for c in ta if c not in tb)
            + "".join(c for c in tb if c not in ta)
        )
    if sorted(have) != sorted(out):
        raise imp.unsupported(f"equation '{printable(eq)}'")
    perm = [have.index(c) for c in out]
    if perm != list(range(len(perm))):
        r = imp.emit("transpose", [r], perm=perm)
    _out(imp, node, r)


# --- convolution and pooling ------------------------------------------------------------------


def _conv_pads(
    imp: Importer, attrs: dict[str, Any], spatial: Sequence[int], kernel: Sequence[int],
    strides: Sequence[int], dilations: Sequence[int], ceil_mode: bool = False,
) -> list[list[int]]:  # fmt: skip
    n = len(spatial)
    auto = attrs.get("auto_pad", "NOTSET")
    if auto in ("NOTSET", ""):
        pads = attrs.get("pads", [0] * (2 * n))
        return [[pads[i], pads[i + n]] for i in range(n)]
    if auto == "VALID":
        return [[0, 0] for _ in range(n)]
    if auto in ("SAME_UPPER", "SAME_LOWER"):
        out = []
        for s, k, st, d in zip(spatial, kernel, strides, dilations, strict=True):
            o = -(-s // st)
            total = max((o - 1) * st + (k - 1) * d + 1 - s, 0)
            small, big = total // 2, total - total // 2
            out.append([small, big] if auto == "SAME_UPPER" else [big, small])
        return out
    raise imp.unsupported(f"auto_pad '{printable(auto)}'")


@handler("Conv")
def _conv(imp: Importer, node: Any, ins: list[str], attrs: dict[str, Any]) -> None:
    x, w = imp.dyn(ins[0]), imp.dyn(ins[1])
    _require_float(imp, x)
    bias = imp.dyn(ins[2]) if len(ins) > 2 and ins[2] else None
    _out(imp, node, _convolve(imp, x, w, bias, attrs))


def _convolve(imp: Importer, x: str, w: str, bias: str | None, attrs: dict[str, Any]) -> str:
    """ONNX Conv of x by w (plus a bias per output channel), 1-D or 2-D, as IR conv2d."""
    tx, tw = imp.type_of(x), imp.type_of(w)
    nsp = tx.rank - 2
    if nsp not in (1, 2):
        raise imp.unsupported(f"{nsp}-D convolution (only 1-D and 2-D)")
    kernel = list(tw.shape[2:])
    if "kernel_shape" in attrs and list(attrs["kernel_shape"]) != kernel:
        raise imp.unsupported("kernel_shape differs from the weight's shape")
    strides = attrs.get("strides", [1] * nsp)
    dilations = attrs.get("dilations", [1] * nsp)
    pads = _conv_pads(imp, attrs, tx.shape[2:], kernel, strides, dilations)
    if nsp == 1:  # as 2-D with a height of 1
        x = reshape(imp, x, [tx.shape[0], tx.shape[1], 1, tx.shape[2]])
        w = reshape(imp, w, [tw.shape[0], tw.shape[1], 1, tw.shape[2]])
        strides, dilations, pads = [1, *strides], [1, *dilations], [[0, 0], *pads]
    y = imp.emit(
        "conv2d", [x, w], stride=list(strides), padding=pads, dilation=list(dilations),
        groups=attrs.get("group", 1),
    )  # fmt: skip
    ty = imp.type_of(y)
    if bias is not None:
        y = imp.emit("add", [y, imp.emit("broadcast", [bias], ty, dims=[1])])
    if nsp == 1:
        y = reshape(imp, y, [ty.shape[0], ty.shape[1], ty.shape[3]])
    return y


def _int32_weight(imp: Importer, w: str, zp_name: str | None) -> str:
    """w as i32 less its zero point: one value, or one per output channel (dim 0), as ONNX's
    reference's `W.astype(np.int32) - w_zero_point` (expanded along the other dims)."""
    if zp_name and imp.type_of(imp.dyn(zp_name)).num_elements > 1:
        t = imp.type_of(w)
        zp = imp.dyn(zp_name)
        zt = imp.type_of(zp)
        if zt.rank != 1 or zt.shape[0] != t.shape[0] or zt.dtype is not t.dtype:
            raise imp.unsupported(f"a weight zero point {zt} for weights {t}")
        v = _int32_operand(imp, w, None)
        z = imp.emit("broadcast", [convert(imp, zp, DType.I32)], imp.type_of(v), dims=[0])
        return imp.emit("sub", [v, z])
    return _int32_operand(imp, w, zp_name)


@handler("ConvInteger")
def _conv_integer(imp: Importer, node: Any, ins: list[str], attrs: dict[str, Any]) -> None:
    """(x - x_zero_point) convolved with (w - w_zero_point) in i32 (wrapping, as numpy's int32
    arithmetic; padding adds zeros to the shifted x, as the reference pads it)."""
    x = _int32_operand(imp, imp.dyn(ins[0]), ins[2] if len(ins) > 2 else None)
    w = _int32_weight(imp, imp.dyn(ins[1]), ins[3] if len(ins) > 3 else None)
    _out(imp, node, _convolve(imp, x, w, None, attrs))


@handler("QLinearConv")
def _qlinear_conv(imp: Importer, node: Any, ins: list[str], attrs: dict[str, Any]) -> None:
    """ONNX's reference: R = conv(x - x_zp, w - w_zp) + B in i32; R * (x_scale * w_scale /
    y_scale) (the factor in f32 per tensor or per output channel; the product in f64, as numpy
    promotes i32 times f32); + y_zp in f64; clipped to [-128, 127] for an i8 output, else
    [0, 255]; rounded half to even; converted to y_zp's dtype (x's without one)."""
    x = _int32_operand(imp, imp.dyn(ins[0]), ins[2])
    w = _int32_weight(imp, imp.dyn(ins[3]), ins[5])
    bias = None
    if len(ins) > 8 and ins[8]:
        bias = imp.dyn(ins[8])
        if imp.type_of(bias).dtype is not DType.I32:
            raise imp.unsupported(f"a bias of {imp.type_of(bias).dtype} (i32)")
    r = _convolve(imp, x, w, bias, attrs)
    rt = imp.type_of(r).with_dtype(DType.F64)
    xs, ys = _scalar_of(imp, ins[1], "scale"), _scalar_of(imp, ins[6], "scale")
    ws = imp.dyn(ins[4])
    wt = imp.type_of(ws)
    sd = imp.type_of(xs).dtype
    if not sd.is_float or {imp.type_of(ys).dtype, wt.dtype} != {sd}:
        raise imp.unsupported("scales of differing or integer dtypes")
    if wt.num_elements == 1:
        f = imp.emit("div", [imp.emit("mul", [xs, reshape(imp, ws, [])]), ys])
        f = imp.emit("broadcast", [convert(imp, f, DType.F64)], rt, dims=[])
    else:
        if wt.rank != 1 or wt.shape[0] != rt.shape[1]:
            raise imp.unsupported(f"a weight scale {wt} for output {rt}")
        per = wt.with_dtype(sd)
        f = imp.emit("div", [
            imp.emit("mul", [imp.emit("broadcast", [xs], per, dims=[]), ws]),
            imp.emit("broadcast", [ys], per, dims=[]),
        ])  # fmt: skip
        f = imp.emit("broadcast", [convert(imp, f, DType.F64)], rt, dims=[1])
    d = imp.emit("mul", [convert(imp, r, DType.F64), f])
    out = imp.type_of(imp.dyn(ins[0])).dtype
    if len(ins) > 7 and ins[7]:
        yz = _scalar_of(imp, ins[7], "zero point")
        out = imp.type_of(yz).dtype
        d = imp.emit("add", [d, imp.emit("broadcast", [convert(imp, yz, DType.F64)], rt, dims=[])])
    if out not in (DType.I8, DType.U8):
        raise imp.unsupported(f"output {out} (u8, i8)")
    lo, hi = (-128, 127) if out is DType.I8 else (0, 255)
    d = imp.emit("max", [imp.emit("min", [d, imp.const(hi, rt)]), imp.const(lo, rt)])
    _out(imp, node, convert(imp, round_half_even(imp, d), out))


@handler("ConvTranspose")
def _conv_transpose(imp: Importer, node: Any, ins: list[str], attrs: dict[str, Any]) -> None:
    """The gradient of a convolution, as a convolution: x with stride-1 zeros inserted between
    its elements (reshape, pad, reshape), padded by d*(k-1) - pad (cropped where negative),
    convolved with the kernel flipped in space and its in/out channels swapped per group."""
    x, w = imp.dyn(ins[0]), imp.dyn(ins[1])
    tx, tw = imp.type_of(x), imp.type_of(w)
    _require_float(imp, x)
    nsp = tx.rank - 2
    if nsp not in (1, 2):
        raise imp.unsupported(f"{nsp}-D transposed convolution (only 1-D and 2-D)")
    g = attrs.get("group", 1)
    kernel = list(tw.shape[2:])
    if "kernel_shape" in attrs and list(attrs["kernel_shape"]) != kernel:
        raise imp.unsupported("kernel_shape differs from the weight's shape")
    strides = list(attrs.get("strides", [1] * nsp))
    dil = list(attrs.get("dilations", [1] * nsp))
    out_pad = list(attrs.get("output_padding", [0] * nsp))
    spatial = list(tx.shape[2:])
    full = [
        (i - 1) * st + op + (k - 1) * d + 1
        for i, st, op, k, d in zip(spatial, strides, out_pad, kernel, dil, strict=True)
    ]
    auto = attrs.get("auto_pad", "NOTSET")
    if "output_shape" in attrs or auto in ("SAME_UPPER", "SAME_LOWER"):
        want = list(
            attrs.get("output_shape", [i * st for i, st in zip(spatial, strides, strict=True)])
        )
        want = want[-nsp:]
        pads = []
        for f, o in zip(full, want, strict=True):
            total = f - o  # negative: a larger output, padded further
            half = int(total / 2)  # the spec's total_padding / 2, truncating
            if auto == "SAME_LOWER":
                pads.append([total - half, half])
            else:
                pads.append([half, total - half])
    elif auto in ("NOTSET", "", "VALID"):
        p = attrs.get("pads", [0] * (2 * nsp)) if auto != "VALID" else [0] * (2 * nsp)
        pads = [[p[i], p[i + nsp]] for i in range(nsp)]
    else:
        raise imp.unsupported(f"auto_pad '{printable(auto)}'")
    if nsp == 1:
        x = reshape(imp, x, [tx.shape[0], tx.shape[1], 1, tx.shape[2]])
        w = reshape(imp, w, [tw.shape[0], tw.shape[1], 1, tw.shape[2]])
        strides, dil, kernel, pads = [1, *strides], [1, *dil], [1, *kernel], [[0, 0], *pads]
        spatial = [1, *spatial]
        out_pad = [0, *out_pad]
    n, c = tx.shape[0], tx.shape[1]
    if c % g or tw.shape[0] != c:
        raise imp.unsupported(f"weight {tw} for input {tx} with group {g}")
    cout_g = tw.shape[1]
    # Zeros between elements: [N,C,H,W] -> [N,C,H,1,W,1] -> pad to [N,C,H,s,W,s] -> [N,C,Hs,Ws].
    (sh, sw), (h, wd) = strides, spatial
    if sh > 1 or sw > 1:
        y = reshape(imp, x, [n, c, h, 1, wd, 1])
        y = imp.emit("pad", [y], low=[0] * 6, high=[0, 0, 0, sh - 1, 0, sw - 1], value=0.0)
        y = reshape(imp, y, [n, c, h * sh, wd * sw])
        x = imp.emit(
            "slice", [y], start=[0] * 4, limit=[n, c, (h - 1) * sh + 1, (wd - 1) * sw + 1],
            stride=[1] * 4,
        )  # fmt: skip
    # Weights [C, O/g, kh, kw] -> [g, C/g, O/g, kh, kw] -> [g, O/g, C/g, kh, kw] -> [O, C/g, ...],
    # flipped in space.
    kh, kw = kernel
    wt = reshape(imp, w, [g, c // g, cout_g, kh, kw])
    wt = imp.emit("transpose", [wt], perm=[0, 2, 1, 3, 4])
    wt = reshape(imp, wt, [g * cout_g, c // g, kh, kw])
    wt = _take_indices(imp, wt, 2, list(range(kh - 1, -1, -1)))
    wt = _take_indices(imp, wt, 3, list(range(kw - 1, -1, -1)))
    conv_pad = []
    for d, k, (lo, hi), op in zip(dil, kernel, pads, out_pad, strict=True):
        conv_pad.append([d * (k - 1) - lo, d * (k - 1) - hi + op])
    crop = [[max(-lo, 0), max(-hi, 0)] for lo, hi in conv_pad]
    conv_pad = [[max(lo, 0), max(hi, 0)] for lo, hi in conv_pad]
    for a, (lo, hi) in enumerate(crop):
        if lo or hi:
            size = imp.type_of(x).shape[2 + a]
            x = _slice1(imp, x, 2 + a, lo, size - hi, 1)
    y = imp.emit("conv2d", [x, wt], stride=[1, 1], padding=conv_pad, dilation=list(dil), groups=g)
    ty = imp.type_of(y)
    if len(ins) > 2 and ins[2]:
        y = imp.emit("add", [y, imp.emit("broadcast", [imp.dyn(ins[2])], ty, dims=[1])])
    if nsp == 1:
        y = reshape(imp, y, [ty.shape[0], ty.shape[1], ty.shape[3]])
    _out(imp, node, y)


def _pool_indices(
    imp: Importer, t: TensorType, wins: list[tuple[tuple[int, ...], str]], outs: list[int],
    strides: Sequence[int], dilations: Sequence[int], pads: list[list[int]],
    attrs: dict[str, Any],
) -> str:  # fmt: skip
    """MaxPool's Indices as ONNX's reference finds them: over a window's positions inside the
    input, in row-major order, the first one, replaced by each later one strictly greater
    than the value kept so far (so the first of equal maxima; a NaN never replaces a value and
    a leading NaN is kept); the flat index into x (row-major, or column-major over (h, w) with
    storage_order = 1), -1 for a window with no position inside the input."""
    spatial = t.shape[2:]
    nc = t.shape[0] * t.shape[1]
    step = math.prod(spatial)
    out_shape = (t.shape[0], t.shape[1], *outs)
    it = TensorType(DType.I64, out_shape)
    bt = TensorType(DType.I1, out_shape)
    chan = (np.arange(nc, dtype=np.int64) * step).reshape(t.shape[0], t.shape[1])
    grids = np.meshgrid(*[np.arange(o) for o in outs], indexing="ij")
    seen = np.zeros(tuple(outs), dtype=bool)
    cur_idx = imp.const(-1, it)
    cur_val = None
    for offs, win in wins:
        pos = [g * st - lo + kk * d for g, st, (lo, _), kk, d in
               zip(grids, strides, pads, offs, dilations, strict=True)]  # fmt: skip
        valid = np.ones(tuple(outs), dtype=bool)
        for p, s in zip(pos, spatial, strict=True):
            valid &= (p >= 0) & (p < s)
        if attrs.get("storage_order", 0):
            flat = pos[0] + pos[1] * spatial[0]
        else:
            flat = np.ravel_multi_index(
                tuple(np.clip(p, 0, s - 1) for p, s in zip(pos, spatial, strict=True)), spatial
            )
        idx = chan.reshape(*chan.shape, *([1] * len(outs))) + flat[None, None]
        first = valid & ~seen
        seen |= valid
        if not valid.any():
            continue
        first_c = imp.const(np.broadcast_to(first, out_shape).copy(), bt)
        if cur_val is None:
            take = first_c
        else:
            gt = imp.emit("cmp", [win, cur_val], dir="gt")
            valid_c = imp.const(np.broadcast_to(valid, out_shape).copy(), bt)
            take = imp.emit("bitwise_or", [first_c, imp.emit("bitwise_and", [valid_c, gt])])
        cur_val = win if cur_val is None else imp.emit("select", [take, win, cur_val])
        cur_idx = imp.emit("select", [take, imp.const(idx, it), cur_idx])
    return cur_idx


def window_slices(
    imp: Importer, xp: str, kernel: list[int], strides: list[int], dilations: list[int],
    outs: list[int],
) -> list[str]:  # fmt: skip
    """The pooling windows of the padded input xp (N, C, spatial...) as strided slices, one a
    window position, in window order (row-major over `kernel`)."""
    n, c = imp.type_of(xp).shape[:2]
    wins = []
    for offs in np.ndindex(*kernel):
        start = [0, 0] + [kk * d for kk, d in zip(offs, dilations, strict=True)]
        ends = zip(offs, dilations, outs, strides, strict=True)
        limit = [n, c] + [kk * d + (o - 1) * st + 1 for kk, d, o, st in ends]
        wins.append(imp.emit("slice", [xp], start=start, limit=limit, stride=[1, 1, *strides]))
    return wins


def window_max(
    imp: Importer, xp: str, kernel: list[int], strides: list[int], dilations: list[int],
    outs: list[int],
) -> str:  # fmt: skip
    """The max over each pooling window of the padded input xp (N, C, spatial...). With two
    or more window axes longer than 1, one spatial axis at a time: the window's rows are
    maxed first (strided slices along that axis only), then the columns of those maxima, and
    so on; `max` is exact in any order (IR_SPEC: NaN wins, max(-0.0, +0.0) = +0.0), so this is
    the max over the whole window, in k_h + k_w - 2 maxes per output instead of k_h * k_w - 1.
    Otherwise the window's slices in window order (`window_slices`), maxed left to right."""
    if sum(k > 1 for k in kernel) < 2:
        wins = window_slices(imp, xp, kernel, strides, dilations, outs)
        acc = wins[0]
        for win in wins[1:]:
            acc = imp.emit("max", [acc, win])
        return acc
    cur = xp
    for axis, (k, st, d, o) in enumerate(zip(kernel, strides, dilations, outs, strict=True)):
        shape = list(imp.type_of(cur).shape)
        acc = None
        for kk in range(k):
            start = [0] * len(shape)
            limit = list(shape)
            stride = [1] * len(shape)
            start[2 + axis] = kk * d
            limit[2 + axis] = kk * d + (o - 1) * st + 1
            stride[2 + axis] = st
            win = imp.emit("slice", [cur], start=start, limit=limit, stride=stride)
            acc = win if acc is None else imp.emit("max", [acc, win])
        assert acc is not None
        cur = acc
    return cur


@handler("MaxPool", "AveragePool", "LpPool")
def _pool(imp: Importer, node: Any, ins: list[str], attrs: dict[str, Any]) -> None:
    """Windows as strided slices of the padded input, combined elementwise: max (exact in any
    order), or a sum in window order divided by the window's element count (AveragePool), or
    of |x|^p then raised to 1/p (LpPool; x * x and sqrt for p = 2)."""
    x = imp.dyn(ins[0])
    t = imp.type_of(x)
    is_max = node.op_type == "MaxPool"
    want_indices = len(node.output) > 1 and bool(node.output[1])
    if want_indices and (t.rank > 4 or (attrs.get("storage_order", 0) and t.rank != 4)):
        raise imp.unsupported("the Indices output of a 3-D pool, or column-major for 1-D")
    if not t.dtype.is_float and not (is_max and t.dtype.is_int):
        raise imp.unsupported(f"{t.dtype} operands are not supported")
    lp = attrs.get("p", 2) if node.op_type == "LpPool" else None
    if lp is not None:
        if lp < 1:
            raise imp.unsupported(f"p = {lp}")
        if lp == 2:
            x = imp.emit("mul", [x, x])
        elif lp == 1:
            x = imp.emit("abs", [x])
        else:
            x = imp.emit("pow", [imp.emit("abs", [x]), imp.const(float(lp), t)])
    nsp = t.rank - 2
    kernel = list(attrs["kernel_shape"])
    strides = attrs.get("strides", [1] * nsp)
    dilations = attrs.get("dilations", [1] * nsp)
    ceil_mode = bool(attrs.get("ceil_mode", 0))
    spatial = t.shape[2:]
    pads = _conv_pads(imp, attrs, spatial, kernel, strides, dilations)
    outs = []
    for s, k, st, d, (lo, hi) in zip(spatial, kernel, strides, dilations, pads, strict=True):
        span = s + lo + hi - d * (k - 1) - 1
        o = (-(-span // st) if ceil_mode else span // st) + 1
        if ceil_mode and (o - 1) * st >= s + lo:
            o -= 1  # the last window must start inside the input or the low padding
        outs.append(o)
    # Grow the high padding so every window position exists; those cells never count.
    extra = [
        max((o - 1) * st + (k - 1) * d + 1 - (s + lo + hi), 0)
        for o, s, k, st, d, (lo, hi) in zip(outs, spatial, kernel, strides, dilations, pads,
                                            strict=True)
    ]  # fmt: skip
    if is_max:
        fill: Any = float("-inf") if t.dtype.is_float else t.dtype.int_min
    else:
        fill = 0.0
    lows = [0, 0] + [lo for lo, _ in pads]
    highs = [0, 0] + [hi + e for (_, hi), e in zip(pads, extra, strict=True)]
    xp = x if not any(lows + highs) else imp.emit("pad", [x], low=lows, high=highs, value=fill)
    if is_max and not want_indices:
        _out(imp, node, window_max(imp, xp, kernel, strides, dilations, outs))
        return
    slices = window_slices(imp, xp, kernel, strides, dilations, outs)
    wins = list(zip(np.ndindex(*kernel), slices, strict=True))
    acc = slices[0]
    for win in slices[1:]:
        acc = imp.emit("max" if is_max else "add", [acc, win])
    if want_indices:
        _out(imp, node, _pool_indices(imp, t, wins, outs, strides, dilations, pads, attrs), 1)
    if lp is not None:
        if lp == 2:
            acc = imp.emit("sqrt", [acc])
        elif lp != 1:
            acc = imp.emit("pow", [acc, imp.const(1.0 / lp, imp.type_of(acc))])
    elif not is_max:
        include_pad = bool(attrs.get("count_include_pad", 0))
        counts = np.ones(outs, dtype=np.float64)
        for dim, (s, k, st, d, (lo, hi), o) in enumerate(
            zip(spatial, kernel, strides, dilations, pads, outs, strict=True)
        ):
            lim_lo, lim_hi = (-lo, s + hi) if include_pad else (0, s)
            c = np.array(
                [
                    sum(1 for kk in range(k) if lim_lo <= i * st - lo + kk * d < lim_hi)
                    for i in range(o)
                ],
                dtype=np.float64,
            )
            shape = [1] * nsp
            shape[dim] = o
            counts = counts * c.reshape(shape)
        at = imp.type_of(acc)
        div = imp.const(np.broadcast_to(counts, at.shape).copy(), at)
        acc = imp.emit("div", [acc, div])
    _out(imp, node, acc)


@handler("Pad")
def _pad(imp: Importer, node: Any, ins: list[str], attrs: dict[str, Any]) -> None:
    x = imp.dyn(ins[0])
    t = imp.type_of(x)
    mode = attrs.get("mode", "constant")
    if imp.opset < 11:
        pads = list(attrs["pads"])
        value: Any = attrs.get("value", 0.0)
        axes = list(range(t.rank))
    else:
        pads = [int(p) for p in imp.static(ins[1], "pads")]
        value = 0
        dynamic_value = None
        if len(ins) > 2 and ins[2]:
            if imp.is_static(ins[2]) or imp.val(ins[2]).known is not None:
                value = np.asarray(imp.static(ins[2], "constant_value")).reshape(-1)[0]
            else:
                dynamic_value = imp.dyn(ins[2])
        axes = list(range(t.rank))
        if len(ins) > 3 and ins[3]:
            axes = [_norm_axis(imp, int(a), t.rank) for a in imp.static(ins[3], "axes")]
    n = len(axes)
    low = [0] * t.rank
    high = [0] * t.rank
    for k, a in enumerate(axes):
        low[a], high[a] = pads[k], pads[k + n]
    if imp.opset < 11:
        dynamic_value = None
    if mode == "constant":
        py = _py(np.asarray(value).astype(t.dtype.np)[()], t.dtype)
        y = x
        if any(v > 0 for v in low + high):
            lo, hi = [max(v, 0) for v in low], [max(v, 0) for v in high]
            y = imp.emit("pad", [x], low=lo, high=hi, value=py)
            if dynamic_value is not None:
                # The value known only at run time: select it outside the original region.
                yt = imp.type_of(y)
                inside = np.zeros(yt.shape, dtype=bool)
                inside[tuple(slice(a, a + s) for a, s in zip(lo, t.shape, strict=True))] = True
                cv = bcast(imp, reshape(imp, dynamic_value, []), yt.shape)
                mask = imp.const(inside, yt.with_dtype(DType.I1))
                y = imp.emit("select", [mask, y, cv])
        for a in range(t.rank):  # negative pads crop
            if low[a] < 0 or high[a] < 0:
                size = imp.type_of(y).shape[a]
                y = _slice1(imp, y, a, -min(low[a], 0), size + min(high[a], 0), 1)
        _out(imp, node, y)
        return
    if mode not in ("edge", "reflect", "wrap"):
        raise imp.unsupported(f"mode '{printable(mode)}'")
    y = x
    for a in range(t.rank):
        s = t.shape[a]
        if low[a] == 0 and high[a] == 0:
            continue
        idx = []
        for i in range(-low[a], s + high[a]):
            if mode == "edge":
                j = min(max(i, 0), s - 1)
            elif mode == "wrap":
                j = i % s
            else:
                if s == 1:
                    j = 0
                else:
                    period = 2 * (s - 1)
                    j = i % period
                    j = period - j if j >= s else j
            idx.append(j)
        y = _take_indices(imp, y, a, idx)
    _out(imp, node, y)


# --- control flow -----------------------------------------------------------------------------
#
# If, Loop and Scan where the control flow is static at import: an If whose
# condition is a constant has its taken branch inlined; a Scan (its length is a static shape)
# and a Loop whose trip count and condition are constants at every iteration are unrolled, one
# copy of the body per iteration, each in a scope of its own (body-local names never collide
# across copies; names of the enclosing graphs are read through the scope chain): straight-line
# graph-stage IR. A data-dependent If or Loop is an IR `if` or `while` instead (below).

MAX_UNROLLED = 4096
"""The most body instances the unrolled Loop and Scan nodes of one model may import, nested
bodies included: beyond it the model is refused with the count (a huge trip count never makes
the importer run long)."""

_CONTROL_FLOW = ("If", "Loop", "Scan")
"""Ops whose GRAPH attributes (bodies, branches) the importer reads."""

_MAX_EVALUATED = 512
"""The most nodes evaluated at import to find one control value (`_control_array`)."""


def _bound_names(g: Any) -> set[str]:
    """The names a graph defines itself: its inputs, initializers and node outputs."""
    names = {i.name for i in g.input} | {i.name for i in g.initializer}
    names |= {i.values.name for i in g.sparse_initializer}
    names |= {o for n in g.node for o in n.output if o}
    return names


def _rename_free_names(g: Any, rename: Mapping[str, str], bound: frozenset[str] = frozenset()):
    """Rename, in place, the names `g` (and the graphs nested in it) reads from its enclosing
    scope, by `rename`: a function body's Scan or If inside an expanded function reads the
    function's names, which the expansion renamed."""
    bound = bound | _bound_names(g)
    for n in g.node:
        for k, name in enumerate(n.input):
            if name and name not in bound and name in rename:
                n.input[k] = rename[name]
        for a in n.attribute:
            if a.type == 5:
                _rename_free_names(a.g, rename, bound)
            elif a.type == 10:
                for sub in a.graphs:
                    _rename_free_names(sub, rename, bound)
    for o in g.output:
        if o.name not in bound and o.name in rename:
            o.name = rename[o.name]


def _import_subgraph(imp: Importer, g: Any, bindings: Sequence[Val], tag: str) -> list[Val]:
    """Import graph `g` inline with its inputs bound to `bindings`, in a scope of its own whose
    parent is the current one; its output values. Each node's label (refusals, `Op.origin`)
    is the enclosing node's, then `tag` (the branch or the iteration), then its own."""
    if len(bindings) != len(g.input):
        raise IRError(
            f"ONNX node {printable(imp.node_label, 80)} ({printable(imp.node.op_type)}): its "
            f"subgraph '{printable(g.name)}' has {len(g.input)} inputs, the op gives "
            f"{len(bindings)}",
            imp.loc(),
        )
    if len(g.sparse_initializer):
        raise imp.unsupported(f"subgraph '{printable(g.name)}' has sparse initializers")
    saved = (imp.vals, imp.node, imp.node_label, imp.origin)
    outer = imp.node_label
    scope = imp.vals.new_child() if isinstance(imp.vals, ChainMap) else ChainMap({}, imp.vals)
    for init in g.initializer:  # a body's own constants
        arr = _tensor_to_numpy(init, imp)
        dt = _np_to_ir(arr.dtype)
        if dt is None:
            raise imp.unsupported(
                f"initializer '{printable(init.name)}' of numpy dtype {arr.dtype}"
            )
        scope[init.name] = Val(TensorType(dt, arr.shape), static=arr)
    for inp, v in zip(g.input, bindings, strict=True):
        scope[inp.name] = v
    try:
        imp.vals = scope
        for index, node in enumerate(g.node):
            own = node.name or f"#{index} ({', '.join(node.output)})"
            label = f"{outer}/{tag}/{own}"
            imp.node, imp.node_label = node, label
            imp.origin = f"onnx:{printable(label, 200)} ({printable(node.op_type)})"
            imp.import_node(node)
        imp.node, imp.node_label = saved[1], saved[2]
        return [imp.val(o.name) for o in g.output]
    finally:
        imp.vals, imp.node, imp.node_label, imp.origin = saved


def _input_name(imp: Importer, v: Val) -> str | None:
    return next((n for n in imp.input_params if imp.vals.get(n) is v), None)


def _evaluate(imp: Importer, v: Val) -> np.ndarray | None:
    """The value of `v` at import, or None: a constant, a graph input whose value is given
    (`known_inputs`, which fixes that input), or computed from those by the nodes that produced
    it, evaluated with ONNX's reference evaluator (as `_try_fold` does). Nothing is folded:
    the IR still computes `v` wherever it is used as data."""
    memo: dict[int, list[np.ndarray] | None] = {}
    budget = [_MAX_EVALUATED]
    fixed: set[str] = set()

    def ev(w: Val) -> np.ndarray | None:
        if w.static is not None:
            return w.static
        if w.known is not None:
            name = _input_name(imp, w)
            if name is None:
                return None
            fixed.add(name)
            return w.known
        if w.producer is None:
            return None
        node, opset, ins, k = w.producer
        if any(a.type in (5, 10) for a in node.attribute):
            return None  # a value computed by control flow: not evaluated twice
        # One ONNX node of a body has a copy per unrolled iteration, each with its own inputs:
        # a copy is its list of input values (one list per import of a node), not the node.
        key = id(ins)
        if key not in memo:
            budget[0] -= 1
            if budget[0] < 0:
                return None
            arrays = []
            for u in ins:
                a = None if u is None else ev(u)
                if u is not None and a is None:
                    memo[key] = None
                    return None
                arrays.append(a)
            memo[key] = _reference_eval(node, list(node.input), arrays, opset)
        outs = memo[key]
        return None if outs is None or k >= len(outs) else outs[k]

    arr = ev(v)
    if arr is None:
        return None
    imp.specialised |= fixed
    return np.asarray(arr)


def _control_array(imp: Importer, v: Val, what: str) -> np.ndarray:
    """The value of `v`, a trip count or condition, at import (`_evaluate`); refused naming
    `what` when it depends on the data."""
    arr = _evaluate(imp, v)
    if arr is None:
        e = imp.unsupported(
            f"{what} is not a constant at import (it depends on the data), and the node cannot "
            "be imported as an IR control flow op"
        )
        raise DataDependent(e.message, e.loc)
    return arr


def _control_bool(imp: Importer, v: Val, what: str) -> bool:
    arr = _control_array(imp, v, what)
    if arr.size != 1:
        raise imp.unsupported(f"{what} has {arr.size} elements, expected 1")
    return bool(arr.reshape(-1)[0])


def _index_along(imp: Importer, v: Val, axis: int, i: int) -> Val:
    """Element `i` of `v` along `axis`, the axis dropped (a static value stays static)."""
    if v.static is not None:
        arr = np.take(v.static, i, axis=axis)
        return Val(v.type.with_shape(arr.shape), static=arr)
    y = _slice1(imp, imp.dyn_val(v), axis, i, i + 1, 1)
    y = reshape(imp, y, v.type.shape[:axis] + v.type.shape[axis + 1 :])
    return Val(imp.type_of(y), name=y)


def _stack(imp: Importer, vals: Sequence[Val], axis: int, what: str) -> Val:
    """The values stacked along a new `axis` (numpy's `stack`)."""
    t0 = vals[0].type
    for k, v in enumerate(vals):
        if v.type != t0:
            raise imp.unsupported(
                f"{what} is {t0} at iteration 0 but {v.type} at iteration {k}: the stacked "
                "values must have one type"
            )
    if all(v.static is not None for v in vals):
        arr = np.stack([v.static for v in vals], axis=axis)
        return Val(t0.with_shape(arr.shape), static=arr)
    shape = t0.shape[:axis] + (1,) + t0.shape[axis:]
    pieces = [reshape(imp, imp.dyn_val(v), shape) for v in vals]
    y = pieces[0] if len(pieces) == 1 else imp.emit("concat", pieces, axis=axis)
    return Val(imp.type_of(y), name=y)


def _claim_unrolled(imp: Importer, n: int, what: str) -> None:
    """Count `n` more body instances, refusing beyond `MAX_UNROLLED`."""
    if imp.unrolled + n > MAX_UNROLLED:
        before = f" ({imp.unrolled} already unrolled)" if imp.unrolled else ""
        raise imp.unsupported(
            f"unrolling {what} needs {n} body instances{before}, over the limit of "
            f"{MAX_UNROLLED} (MAX_UNROLLED)"
        )
    imp.unrolled += n


def _set_outputs(imp: Importer, node: Any, vals: Sequence[Val]) -> None:
    if len(node.output) > len(vals):
        raise IRError(
            f"ONNX node {printable(imp.node_label, 80)} ({printable(node.op_type)}) has "
            f"{len(node.output)} outputs, its body computes {len(vals)}",
            imp.loc(),
        )
    for name, v in zip(node.output, vals, strict=False):
        if name:
            imp.vals[name] = v


@handler("If")
def _if(imp: Importer, node: Any, ins: list[str], attrs: dict[str, Any]) -> None:
    # An If whose condition is known at import: its taken branch is imported inline. Otherwise
    # an IR `if` per output, its branches imported as functions of the module.
    try:
        taken = _control_bool(imp, imp.val(ins[0]), "the condition")
    except DataDependent:
        _set_outputs(imp, node, _if_as_op(imp, node, attrs))
        return
    branch = attrs["then_branch" if taken else "else_branch"]
    _set_outputs(imp, node, _import_subgraph(imp, branch, [], "then" if taken else "else"))


# Data-dependent control flow becomes the IR's `if` and `while` (IR_SPEC.md section 9): each
# branch or body is imported as a function of the module whose parameters are the values it
# reads (its own inputs, and the enclosing graphs' values it names: those computed at run time
# are passed in, those known at import are copied in as constants).


def _free_names(g: Any) -> list[str]:
    """The names `g` (and the graphs nested in it) reads from its enclosing scopes, in order
    of first use."""
    bound = _bound_names(g)
    out: list[str] = []

    def read(name: str) -> None:
        if name and name not in bound and name not in out:
            out.append(name)

    for n in g.node:
        for name in n.input:
            read(name)
        for a in n.attribute:
            for sub in [a.g] if a.type == 5 else list(a.graphs) if a.type == 10 else []:
                for name in _free_names(sub):
                    read(name)
    for o in g.output:
        read(o.name)
    return out


def _captures(imp: Importer, graphs: Sequence[Any]) -> tuple[dict[str, Val], list[str]]:
    """For the outer names `graphs` read: the values known at import (copied into a body as
    constants), and the names of those computed at run time (passed in as parameters)."""
    static: dict[str, Val] = {}
    dynamic: list[str] = []
    for g in graphs:
        for name in _free_names(g):
            if name in static or name in dynamic:
                continue
            v = imp.val(name)
            if v.static is not None and v.init is None:
                static[name] = Val(v.type, static=v.static)
            else:
                dynamic.append(name)
    return static, dynamic


def _copies(static: Mapping[str, Val]) -> dict[str, Val]:
    """Fresh values for the constants a body reads: a value's IR name is per function."""
    return {k: Val(v.type, static=v.static) for k, v in static.items()}


def _scalar(imp: Importer, v: Val, dtype: DType, what: str) -> str:
    """`v` (one element) as a rank-0 IR value of `dtype`, refused otherwise."""
    if v.type.num_elements != 1 or v.type.dtype is not dtype:
        raise imp.unsupported(f"{what} is {v.type}, expected one {dtype} element")
    return reshape(imp, imp.dyn_val(v), ())


def _body_function(
    imp: Importer, name: str, types: Sequence[TensorType], build: Callable[[list[Val]], list[str]]
) -> Function:
    """A function of the module, `name(types...)`, whose ops `build` emits given its parameters
    (as values) and whose results are the IR values `build` returns."""
    saved_st, saved_vals = imp.st, imp.vals
    st = _State(counter=saved_st.counter)
    params = [Param(f"a{k}", t) for k, t in enumerate(types)]
    for prm in params:
        st.types[prm.name] = prm.type
    imp.st = st
    try:
        returns = build([Val(prm.type, name=prm.name) for prm in params])
    finally:
        saved_st.counter = st.counter
        imp.st, imp.vals = saved_st, saved_vals
    fn = Function(
        name, params, [st.types[r] for r in returns], st.ops, returns, results_parenthesized=True
    )
    imp.functions.append(fn)
    return fn


def _fresh_function(imp: Importer, kind: str) -> str:
    imp.named_functions += 1
    return f"onnx.{kind}{imp.named_functions - 1}"


def _if_as_op(imp: Importer, node: Any, attrs: dict[str, Any]) -> list[Val]:
    """An If whose condition depends on the data: one IR `if` per output."""
    c = _scalar(imp, imp.val(node.input[0]), DType.I1, "the condition")
    branches = (attrs["then_branch"], attrs["else_branch"])
    static, dynamic = _captures(imp, branches)
    operands = [imp.dyn(n) for n in dynamic]
    types = [imp.type_of(o) for o in operands]

    def branch(g: Any, tag: str) -> Callable[[list[Val]], list[str]]:
        def build(params: list[Val]) -> list[str]:
            imp.vals = ChainMap({}, {**_copies(static), **dict(zip(dynamic, params, strict=True))})
            return [imp.dyn_val(v) for v in _import_subgraph(imp, g, [], tag)]

        return build

    made = [
        _body_function(imp, _fresh_function(imp, tag), types, branch(g, tag))
        for g, tag in zip(branches, ("then", "else"), strict=True)
    ]
    if made[0].results != made[1].results:
        raise imp.unsupported(
            f"the branches give ({', '.join(map(str, made[0].results))}) and "
            f"({', '.join(map(str, made[1].results))}): an IR if needs one tuple of types"
        )
    outs = []
    for k, t in enumerate(made[0].results):
        fn_attrs = {"then": made[0].name, "else": made[1].name, "result": k}
        r = imp.emit("if", [c, *operands], t, **fn_attrs)
        outs.append(Val(t, name=r))
    return outs


def _loop_as_op(imp: Importer, node: Any, ins: list[str], body: Any) -> list[Val]:
    """A Loop whose trip count or condition depends on the data: one IR `while` per
    loop-carried output. Carried: (iteration i64, condition, the loop-carried values, M when
    it is not known at import, the outer values the body reads); the IR loop's max_trips is M
    when known, else 2^31 - 1, and its cond is `c` (and `i < M` for an M known only at run
    time)."""
    from gdv.ir.ops.control import MAX_TRIPS

    states = [imp.val(i) for i in ins[2:]]
    n_scan = len(body.output) - 1 - len(states)
    if n_scan:
        raise imp.unsupported(
            f"a loop whose trip count depends on the data has {n_scan} scan output(s), whose "
            "length depends on the data too"
        )
    m_static: int | None = None
    m_dyn: str | None = None
    if ins and ins[0]:
        arr = _evaluate(imp, imp.val(ins[0]))
        if arr is not None and arr.size == 1:
            m_static = max(int(arr.reshape(-1)[0]), 0)
            if m_static > MAX_TRIPS:
                raise imp.unsupported(f"the trip count M = {m_static} is over 2^31 - 1")
        else:
            m_dyn = _scalar(imp, imp.val(ins[0]), DType.I64, "the trip count M")
    if len(ins) > 1 and ins[1]:
        c0 = _scalar(imp, imp.val(ins[1]), DType.I1, "the loop condition")
    else:
        c0 = imp.const(np.array(True), TensorType(DType.I1, ()))
    static, dynamic = _captures(imp, [body])
    i0 = imp.const(np.array(0, np.int64), TensorType(DType.I64, ()))
    carried = [i0, c0, *(imp.dyn_val(v) for v in states)]
    carried += [m_dyn] if m_dyn is not None else []
    carried += [imp.dyn(n) for n in dynamic]
    types = [imp.type_of(o) for o in carried]
    n_states = len(states)
    at_m = 2 + n_states  # where M sits among the carried values (when it does)
    at_free = at_m + (m_dyn is not None)

    def cond(params: list[Val]) -> list[str]:
        c = imp.dyn_val(params[1])
        if m_dyn is None:
            return [c]
        below = imp.emit("cmp", [imp.dyn_val(params[0]), imp.dyn_val(params[at_m])], dir="lt")
        return [imp.emit("bitwise_and", [c, below])]

    def step(params: list[Val]) -> list[str]:
        bound = dict(zip(dynamic, params[at_free:], strict=True))
        imp.vals = ChainMap({}, {**_copies(static), **bound})
        outs = _import_subgraph(imp, body, params[: 2 + n_states], "body")
        c = _scalar(imp, outs[0], DType.I1, "the body's condition output")
        new = [imp.dyn_val(v) for v in outs[1 : 1 + n_states]]
        for k, (v, t) in enumerate(zip(new, types[2:at_m], strict=True)):
            if imp.type_of(v) != t:
                raise imp.unsupported(
                    f"loop-carried value {k} is {t} before an iteration and {imp.type_of(v)} "
                    "after it: an IR while carries values of one type"
                )
        one = imp.const(np.array(1, np.int64), TensorType(DType.I64, ()))
        i1 = imp.emit("add", [imp.dyn_val(params[0]), one])
        return [i1, c, *new, *(imp.dyn_val(p) for p in params[at_m:])]

    if len(body.input) != 2 + n_states:
        raise IRError(
            f"ONNX node {printable(imp.node_label, 80)} (Loop): its body has {len(body.input)} "
            f"inputs for {n_states} loop-carried values",
            imp.loc(),
        )
    fc = _body_function(imp, _fresh_function(imp, "cond"), types, cond)
    fb = _body_function(imp, _fresh_function(imp, "body"), types, step)
    trips = MAX_TRIPS if m_static is None else m_static
    outs = []
    for k in range(n_states):
        t = types[2 + k]
        fn_attrs = {"cond": fc.name, "body": fb.name, "max_trips": trips, "result": 2 + k}
        outs.append(Val(t, name=imp.emit("while", carried, t, **fn_attrs)))
    return outs


@handler("Loop")
def _loop(imp: Importer, node: Any, ins: list[str], attrs: dict[str, Any]) -> None:
    # Unrolled where every control value is known at import; otherwise (found at the start or
    # after some iterations) the unrolled copies are dropped and the loop is an IR while.
    mark = _Checkpoint(imp)
    try:
        _loop_unrolled(imp, node, ins, attrs)
    except DataDependent:
        mark.restore()
        if any(not i for i in ins[2:]):
            raise imp.unsupported("an empty loop-carried input") from None
        _set_outputs(imp, node, _loop_as_op(imp, node, ins, attrs["body"]))


class _Checkpoint:
    """The importer's state before an attempt to unroll a loop, to restore when it fails: the
    ops emitted, the names given to outer values, weights, counters."""

    def __init__(self, imp: Importer) -> None:
        self.imp = imp
        self.ops = len(imp.st.ops)
        self.counter = imp.st.counter
        self.unrolled = imp.unrolled
        self.functions = len(imp.functions)
        self.weights = set(imp.st.weights)
        self.inits = len(imp.used_inits)
        self.specialised = set(imp.specialised)
        maps = imp.vals.maps if isinstance(imp.vals, ChainMap) else [imp.vals]
        self.names = [(v, v.name) for m in maps for v in list(m.values())]

    def restore(self) -> None:
        imp = self.imp
        del imp.st.ops[self.ops :]
        imp.st.counter = self.counter
        imp.unrolled = self.unrolled
        del imp.functions[self.functions :]
        for k in set(imp.st.weights) - self.weights:
            del imp.st.weights[k]
        del imp.used_inits[self.inits :]
        imp.specialised = self.specialised
        for v, name in self.names:
            v.name = name


def _loop_unrolled(imp: Importer, node: Any, ins: list[str], attrs: dict[str, Any]) -> None:
    # for (i = 0; i < M && cond; ++i) { cond, v... = body(i, cond, v...); scan[k].append(...) }
    # unrolled; M and the condition of every iteration must be constants at import. An empty
    # condition input means a plain for loop (the body's condition is then ignored).
    body = attrs["body"]
    m = None
    if ins and ins[0]:
        arr = _control_array(imp, imp.val(ins[0]), "the trip count M")
        if arr.size != 1:
            raise imp.unsupported(f"the trip count M has {arr.size} elements, expected 1")
        m = int(arr.reshape(-1)[0])
    cond = None
    if len(ins) > 1 and ins[1]:
        cond = _control_bool(imp, imp.val(ins[1]), "the loop condition")
    if m is None and cond is None:
        raise imp.unsupported("neither a trip count nor a condition: the loop never ends")
    if any(not i for i in ins[2:]):
        raise imp.unsupported("an empty loop-carried input")
    states = [imp.val(i) for i in ins[2:]]
    n_scan = len(body.output) - 1 - len(states)
    if len(body.input) != 2 + len(states) or n_scan < 0:
        raise IRError(
            f"ONNX node {printable(imp.node_label, 80)} (Loop): its body has {len(body.input)} "
            f"inputs and {len(body.output)} outputs for {len(states)} loop-carried values",
            imp.loc(),
        )
    if cond is None and m is not None:
        _claim_unrolled(imp, max(m, 0), f"the loop (M = {m})")
    it_type = imp.val(ins[0]).type if m is not None else TensorType(DType.I64, ())
    scans: list[list[Val]] = [[] for _ in range(n_scan)]
    it = 0
    while (cond is None or cond) and (m is None or it < m):
        if cond is not None:  # the loop may end early: counted as it goes
            _claim_unrolled(imp, 1, f"the loop (M = {m}) beyond iteration {it - 1}")
        it_val = Val(it_type.with_shape(()), static=np.array(it, dtype=it_type.dtype.np))
        c_val = Val(TensorType(DType.I1, ()), static=np.array(True if cond is None else cond))
        outs = _import_subgraph(imp, body, [it_val, c_val, *states], f"iter{it}")
        if cond is not None:
            cond = _control_bool(imp, outs[0], f"the loop condition after iteration {it}")
        states = outs[1 : 1 + len(states)]
        for k in range(n_scan):
            scans[k].append(outs[1 + len(states) + k])
        it += 1
    if n_scan and it == 0:
        raise imp.unsupported(
            "the loop runs 0 times and has scan outputs: their shapes are unknown (the body "
            "never runs), as in ONNX's reference evaluator"
        )
    stacked = [_stack(imp, s, 0, f"scan output {k}") for k, s in enumerate(scans)]
    _set_outputs(imp, node, [*states, *stacked])


def _scan_unrolled(
    imp: Importer, body: Any, states: list[Val], xs: list[Val], attrs: dict[str, Any], tag: str
) -> list[Val]:
    """Scan (opset 9 and later) unrolled: the final states, then the scan outputs."""
    n_in, n_out = len(xs), len(body.output) - len(states)
    if n_out < 0 or len(body.input) != len(states) + n_in:
        raise IRError(
            f"ONNX node {printable(imp.node_label, 80)} (Scan): its body has {len(body.input)} "
            f"inputs and {len(body.output)} outputs for {len(states)} states and {n_in} scan "
            "inputs",
            imp.loc(),
        )

    def listed(key: str, n: int) -> list[int]:
        got = list(attrs.get(key) or [0] * n)
        if len(got) != n:
            raise imp.unsupported(f"{key} has {len(got)} entries for {n} values")
        return got

    in_axes = [_norm_axis(imp, a, x.type.rank) for a, x in zip(listed("scan_input_axes", n_in), xs,
                                                              strict=True)]  # fmt: skip
    in_dirs, out_dirs = (
        listed("scan_input_directions", n_in),
        listed("scan_output_directions", n_out),
    )
    out_axes = listed("scan_output_axes", n_out)
    if any(d not in (0, 1) for d in in_dirs + out_dirs):
        raise imp.unsupported(f"directions {in_dirs + out_dirs}: each must be 0 or 1")
    lengths = {x.type.shape[a] for x, a in zip(xs, in_axes, strict=True)}
    if len(lengths) != 1:
        raise imp.unsupported(f"the scan inputs have lengths {sorted(lengths)} along their axes")
    n = lengths.pop()
    if n == 0 and n_out:
        raise imp.unsupported(
            "a scan of length 0 with scan outputs: their shapes are unknown (the body never "
            "runs), as in ONNX's reference evaluator"
        )
    _claim_unrolled(imp, n, f"the scan (length {n})")
    pieces: list[list[Val]] = [[] for _ in range(n_out)]
    for t in range(n):
        sl = [
            _index_along(imp, x, a, n - 1 - t if d else t)
            for x, a, d in zip(xs, in_axes, in_dirs, strict=True)
        ]
        outs = _import_subgraph(imp, body, [*states, *sl], f"{tag}iter{t}")
        states = outs[: len(states)]
        for k in range(n_out):
            pieces[k].append(outs[len(states) + k])
    results = list(states)
    for k, (ps, a, d) in enumerate(zip(pieces, out_axes, out_dirs, strict=True)):
        rank = ps[0].type.rank
        axis = a + rank + 1 if a < 0 else a
        if not 0 <= axis <= rank:
            raise imp.unsupported(f"scan output axis {a} is out of range for rank {rank + 1}")
        results.append(_stack(imp, ps[::-1] if d else ps, axis, f"scan output {k}"))
    return results


def _scan_as_op_fits(imp: Importer, body: Any, xs: list[Val], attrs: dict[str, Any]) -> bool:
    """Is this Scan (opset 9 and later) one to import as an IR `scan` rather than unrolled? When
    unrolling it would pass `MAX_UNROLLED`, and its axes and directions are the defaults (the IR
    op scans axis 0 forwards and stacks on a new axis 0)."""
    if not xs or any(x.type.rank == 0 for x in xs):
        return False
    n = xs[0].type.shape[0]
    if imp.unrolled + n <= MAX_UNROLLED or any(x.type.shape[0] != n for x in xs):
        return False
    keys = ("scan_input_axes", "scan_input_directions", "scan_output_axes",
            "scan_output_directions")  # fmt: skip
    return all(not any(attrs.get(k) or []) for k in keys)


def _scan_as_op(imp: Importer, body: Any, states: list[Val], xs: list[Val]) -> list[Val]:
    """A Scan too long to unroll as one IR `scan` per output: the states, then the enclosing
    graphs' run-time values the body reads (carried through unchanged), are the IR op's states;
    the scan inputs its scanned operands."""
    n_states, n_out = len(states), len(body.output) - len(states)
    if n_out < 0 or len(body.input) != n_states + len(xs):
        raise IRError(
            f"ONNX node {printable(imp.node_label, 80)} (Scan): its body has {len(body.input)} "
            f"inputs and {len(body.output)} outputs for {n_states} states and {len(xs)} scan "
            "inputs",
            imp.loc(),
        )
    static, dynamic = _captures(imp, [body])
    carried = [imp.dyn_val(v) for v in states] + [imp.dyn(n) for n in dynamic]
    scanned = [imp.dyn_val(x) for x in xs]
    ns = len(carried)
    types = [imp.type_of(c) for c in carried]
    types += [imp.type_of(x).with_shape(imp.type_of(x).shape[1:]) for x in scanned]

    def step(params: list[Val]) -> list[str]:
        bound = dict(zip(dynamic, params[n_states:ns], strict=True))
        imp.vals = ChainMap({}, {**_copies(static), **bound})
        outs = _import_subgraph(imp, body, params[:n_states] + params[ns:], "body")
        new = [imp.dyn_val(v) for v in outs[:n_states]]
        for k, (v, t) in enumerate(zip(new, types[:n_states], strict=True)):
            if imp.type_of(v) != t:
                raise imp.unsupported(
                    f"state {k} is {t} before an iteration and {imp.type_of(v)} after it: an "
                    "IR scan carries values of one type"
                )
        ys = [imp.dyn_val(v) for v in outs[n_states:]]
        return [*new, *(imp.dyn_val(p) for p in params[n_states:ns]), *ys]

    fn = _body_function(imp, _fresh_function(imp, "scan"), types, step)
    length = imp.type_of(scanned[0]).shape[0]
    results = []
    for k in [*range(n_states), *range(ns, ns + n_out)]:
        t = fn.results[k]
        t = t if k < ns else t.with_shape((length, *t.shape))
        attrs = {"body": fn.name, "num_scan_inputs": len(scanned), "result": k}
        results.append(Val(t, name=imp.emit("scan", [*carried, *scanned], t, **attrs)))
    return results


@handler("Scan")
def _scan(imp: Importer, node: Any, ins: list[str], attrs: dict[str, Any]) -> None:
    # Unrolled over the static length of the scan axes: states threaded through the copies of
    # the body, scan inputs sliced per iteration (from the end for direction 1), scan outputs
    # stacked along their axes (in reverse iteration order for direction 1).
    body, n_in = attrs["body"], attrs["num_scan_inputs"]
    if imp.opset >= 9:
        n_state = len(ins) - n_in
        if n_state < 0 or any(not i for i in ins):
            raise imp.unsupported(f"{len(ins)} inputs for num_scan_inputs = {n_in}")
        vals = [imp.val(i) for i in ins]
        if _scan_as_op_fits(imp, body, vals[n_state:], attrs):
            _set_outputs(imp, node, _scan_as_op(imp, body, vals[:n_state], vals[n_state:]))
            return
        _set_outputs(imp, node, _scan_unrolled(imp, body, vals[:n_state], vals[n_state:], attrs,
                                               ""))  # fmt: skip
        return
    # opset 8: a leading batch axis on every input and output; the scan axis is axis 1
    if ins and ins[0]:
        raise imp.unsupported("sequence_lens (opset 8) is not supported")
    n_state = len(ins) - 1 - n_in
    if n_state < 0 or any(not i for i in ins[1:]):
        raise imp.unsupported(f"{len(ins)} inputs for num_scan_inputs = {n_in}")
    vals = [imp.val(i) for i in ins[1:]]
    batches = {v.type.shape[0] if v.type.rank else -1 for v in vals}
    if len(batches) != 1 or -1 in batches:
        raise imp.unsupported(f"the inputs' batch sizes {sorted(batches)} differ")
    per_batch = []
    inner = {"scan_input_directions": attrs.get("directions")}
    for b in range(batches.pop()):
        vs = [_index_along(imp, v, 0, b) for v in vals]
        per_batch.append(_scan_unrolled(imp, body, vs[:n_state], vs[n_state:], inner, f"b{b}/"))
    if not per_batch:
        raise imp.unsupported("a batch of 0: the outputs' shapes are unknown")
    _set_outputs(
        imp,
        node,
        [
            _stack(imp, [r[k] for r in per_batch], 0, f"output {k}")
            for k in range(len(per_batch[0]))
        ],
    )


# --- recurrent layers -------------------------------------------------------------------------
#
# RNN, GRU and LSTM with static shapes: the sequence length is known at import, so each is
# imported as its time steps unrolled (as Scan is), one direction after the other, with the
# operations of ONNX's operator spec in the order ONNX's reference evaluator computes them
# (onnx/reference/ops/op_rnn.py, op_gru.py, op_lstm.py): an absent B, initial_h, initial_c or P
# is a zero constant that is still added and multiplied as there (x + 0.0 turns -0.0 into +0.0).
# Gate products are `matmul`s of X_t with W^T and H_{t-1} with R^T (each output one left fold
# over K, where numpy's BLAS may sum in another order); activations are the IR's own ops.

_RNN_GATES = {"RNN": 1, "GRU": 3, "LSTM": 4}
_RNN_DEFAULT_ACTIVATIONS = {
    "RNN": ["Tanh"],
    "GRU": ["Sigmoid", "Tanh"],
    "LSTM": ["Sigmoid", "Tanh", "Tanh"],
}
_RNN_ACTIVATIONS = {"sigmoid": "sigmoid", "tanh": "tanh", "relu": "relu"}
"""The activations a recurrent layer may name (ONNX's names, any case) and their IR ops; the
others ONNX lists (Affine, LeakyRelu, ThresholdedRelu, ScaledTanh, HardSigmoid, Elu, Softsign,
Softplus) are refused by name."""


def _rnn_activations(imp: Importer, op: str, attrs: dict[str, Any], dirs: int) -> list[list[str]]:
    """The IR activation ops of each direction (f for RNN; f, g for GRU; f, g, h for LSTM)."""
    default = _RNN_DEFAULT_ACTIVATIONS[op]
    names = attrs.get("activations")
    if not names:
        names = default * dirs
    if len(names) != len(default) * dirs:
        raise imp.unsupported(
            f"activations lists {len(names)} functions, expected {len(default) * dirs} "
            f"({len(default)} per direction)"
        )
    for name in names:
        if name.lower() not in _RNN_ACTIVATIONS:
            raise imp.unsupported(
                f"activation '{printable(name)}' is not supported (only Sigmoid, Tanh and Relu "
                "are IR ops)"
            )
    # activation_alpha/beta parametrise only the activations refused above: unused here
    ops = [_RNN_ACTIVATIONS[n.lower()] for n in names]
    return [ops[d * len(default) : (d + 1) * len(default)] for d in range(dirs)]


def _rnn_input(imp: Importer, ins: list[str], k: int, what: str, shape: Sequence[int],
               dtype: DType) -> str:  # fmt: skip
    """Optional input k (`what`) of `shape`, or a zero constant of that shape where absent."""
    t = TensorType(dtype, tuple(shape))
    if len(ins) <= k or not ins[k]:
        return imp.const(0, t)
    x = imp.dyn(ins[k])
    if imp.type_of(x) != t:
        raise imp.unsupported(f"{what} is {imp.type_of(x)}, expected {t}")
    return x


def _rnn_sequence_lens(imp: Importer, ins: list[str], n: int, batch: int) -> None:
    """sequence_lens is accepted only when it is known at import and every length is `n`: a
    shorter sequence (padded) would make the steps depend on the data."""
    if len(ins) <= 4 or not ins[4]:
        return
    v = imp.val(ins[4])
    arr = v.static if v.static is not None else v.known
    if arr is None:
        arr = _evaluate(imp, v)
    if arr is None:
        raise imp.unsupported(
            "sequence_lens is not a constant at import (it depends on the data): lengths that "
            "vary with the data have no IR op"
        )
    if v.static is None and v.known is not None:
        imp.specialised.add(ins[4])
    lens = np.asarray(arr).reshape(-1)
    if lens.shape != (batch,) or (lens != n).any():
        raise imp.unsupported(
            f"sequence_lens {printable(str(lens.tolist()), 60)} is not the sequence length {n} "
            f"for each of the {batch} sequences: shorter (padded) sequences are data-dependent "
            "and not supported"
        )


@handler("RNN", "GRU", "LSTM")
def _recurrent(imp: Importer, node: Any, ins: list[str], attrs: dict[str, Any]) -> None:
    op = node.op_type
    gates = _RNN_GATES[op]
    direction = attrs.get("direction", "forward")
    if direction not in ("forward", "reverse", "bidirectional"):
        raise imp.unsupported(f"direction '{printable(direction)}' is not one of forward, "
                              "reverse, bidirectional")  # fmt: skip
    dirs = 2 if direction == "bidirectional" else 1
    layout = attrs.get("layout", 0)
    if layout not in (0, 1):
        raise imp.unsupported(f"layout {layout} is not 0 or 1")
    x = imp.dyn(ins[0])
    tx = _require_float(imp, x)
    if tx.rank != 3:
        raise imp.unsupported(f"X is {tx}, expected rank 3")
    if layout:
        x = imp.emit("transpose", [x], perm=[1, 0, 2])
    n_steps, batch, n_in = imp.type_of(x).shape
    dt = tx.dtype
    w, r = imp.dyn(ins[1]), imp.dyn(ins[2])
    hidden = imp.type_of(r).shape[-1] if imp.type_of(r).rank == 3 else -1
    if attrs.get("hidden_size", hidden) != hidden:
        raise imp.unsupported(f"hidden_size {attrs['hidden_size']} differs from R's {hidden}")
    for name, v, shape in (("W", w, (dirs, gates * hidden, n_in)),
                           ("R", r, (dirs, gates * hidden, hidden))):  # fmt: skip
        if imp.type_of(v) != TensorType(dt, shape):
            raise imp.unsupported(f"{name} is {imp.type_of(v)}, expected {TensorType(dt, shape)}")
    if n_steps == 0:
        raise imp.unsupported("a sequence of length 0: Y_h has no last step")
    _rnn_sequence_lens(imp, ins, n_steps, batch)
    acts = _rnn_activations(imp, op, attrs, dirs)
    clip = attrs.get("clip")
    linear = bool(attrs.get("linear_before_reset", 0))
    input_forget = bool(attrs.get("input_forget", 0))
    b = _rnn_input(imp, ins, 3, "B", (dirs, 2 * gates * hidden), dt)
    state_shape = (batch, dirs, hidden) if layout else (dirs, batch, hidden)
    h0 = _rnn_input(imp, ins, 5, "initial_h", state_shape, dt)
    c0 = _rnn_input(imp, ins, 6, "initial_c", state_shape, dt) if op == "LSTM" else None
    p = _rnn_input(imp, ins, 7, "P", (dirs, 3 * hidden), dt) if op == "LSTM" else None
    if layout:
        h0 = imp.emit("transpose", [h0], perm=[1, 0, 2])
        if c0 is not None:
            c0 = imp.emit("transpose", [c0], perm=[1, 0, 2])
    _claim_unrolled(imp, dirs * n_steps, f"the {op} ({dirs} x {n_steps} steps)")
    rows = TensorType(dt, (batch, hidden))

    def take(v: str, d: int) -> str:  # direction d of a [dirs, ...] value, the axis dropped
        t = imp.type_of(v)
        return reshape(imp, _slice1(imp, v, 0, d, d + 1, 1), t.shape[1:])

    def cols(v: str, k: int, n: int = 1) -> str:  # gates k .. k+n-1 of [..., gates * hidden]
        t = imp.type_of(v)
        return _slice1(imp, v, t.rank - 1, k * hidden, (k + n) * hidden, 1)

    def row(v: str) -> str:  # a [g * hidden] bias broadcast over the batch
        t = imp.type_of(v)
        return bcast(imp, v, (batch, t.shape[0]))

    def act(kind: str, v: str) -> str:
        if clip is not None:  # ONNX: clip bounds the input of every activation
            v = imp.emit("max", [v, imp.const(-clip, rows)])
            v = imp.emit("min", [v, imp.const(clip, rows)])
        return imp.emit(kind, [v])

    def add(a: str, c: str) -> str:
        return imp.emit("add", [a, c])

    def mul(a: str, c: str) -> str:
        return imp.emit("mul", [a, c])

    one = imp.const(1, rows)
    saved_origin = imp.origin
    ys: list[list[str]] = []  # per direction, H of each step in time order
    finals_h: list[str] = []
    finals_c: list[str] = []
    for d in range(dirs):
        names = ("forward", "reverse") if dirs == 2 else (direction,)
        imp.origin = f"onnx:{printable(imp.node_label, 200)}/{names[d]} ({op})"
        wt = imp.emit("transpose", [take(w, d)], perm=[1, 0])  # [in, gates * hidden]
        rt = imp.emit("transpose", [take(r, d)], perm=[1, 0])  # [hidden, gates * hidden]
        bd = take(b, d)
        wb, rb = _slice1(imp, bd, 0, 0, gates * hidden, 1), cols(bd, gates, gates)
        h, c = take(h0, d), (take(c0, d) if c0 is not None else None)
        f, g, hh = (acts[d] + [None, None])[:3]
        if op in ("RNN", "LSTM"):
            bsum = row(add(wb, rb))
        elif op == "GRU":
            bsum = row(add(cols(wb, 0, 2), cols(rb, 0, 2)))
            rt_zr, rt_h = cols(rt, 0, 2), cols(rt, 2)
            wb_h, rb_h = row(cols(wb, 2)), row(cols(rb, 2))
        if op == "LSTM":
            pd = take(p, d)
            p_i, p_o, p_f = (row(_slice1(imp, pd, 0, k * hidden, (k + 1) * hidden, 1))
                             for k in range(3))  # fmt: skip
        out: list[str] = [""] * n_steps
        for s in range(n_steps):
            t = n_steps - 1 - s if names[d] == "reverse" else s
            imp.origin = f"onnx:{printable(imp.node_label, 200)}/{names[d]}/step{s} ({op})"
            xt = reshape(imp, _slice1(imp, x, 0, t, t + 1, 1), (batch, n_in))
            xw = imp.emit("matmul", [xt, wt])
            if op == "RNN":  # H = f(X W^T + H R^T + (Wb + Rb))
                h = act(f, add(add(xw, imp.emit("matmul", [h, rt])), bsum))
            elif op == "GRU":
                zr = add(add(cols(xw, 0, 2), imp.emit("matmul", [h, rt_zr])), bsum)
                z, rr = act(f, cols(zr, 0)), act(f, cols(zr, 1))
                if linear:  # g(X Wh^T + r (.) (H Rh^T + Rbh) + Wbh)
                    hr = add(imp.emit("matmul", [h, rt_h]), rb_h)
                    cand = act(g, add(add(cols(xw, 2), mul(rr, hr)), wb_h))
                else:  # g(X Wh^T + (r (.) H) Rh^T + Wbh + Rbh)
                    rh = imp.emit("matmul", [mul(rr, h), rt_h])
                    cand = act(g, add(add(add(cols(xw, 2), rh), wb_h), rb_h))
                h = add(mul(imp.emit("sub", [one, z]), cand), mul(z, h))  # (1 - z) h~ + z H
            else:  # LSTM, gates in the order i, o, f, c; peepholes i, o, f
                iofc = add(add(xw, imp.emit("matmul", [h, rt])), bsum)
                i = act(f, add(cols(iofc, 0), mul(p_i, c)))
                if input_forget:  # the forget gate coupled to the input gate
                    fg = imp.emit("sub", [one, i])
                else:
                    fg = act(f, add(cols(iofc, 2), mul(p_f, c)))
                cc = act(g, cols(iofc, 3))
                c = add(mul(fg, c), mul(i, cc))
                o = act(f, add(cols(iofc, 1), mul(p_o, c)))
                h = mul(o, act(hh, c))
            out[t] = h
        ys.append(out)
        finals_h.append(h)
        if c is not None:
            finals_c.append(c)
    imp.origin = saved_origin

    def stacked(vals: list[str], shape: Sequence[int]) -> str:
        parts = [reshape(imp, v, shape) for v in vals]
        return parts[0] if len(parts) == 1 else imp.emit("concat", parts, axis=0)

    if len(node.output) > 0 and node.output[0]:
        steps = [stacked([ys[d][t] for d in range(dirs)], (1, batch, hidden))
                 for t in range(n_steps)]  # fmt: skip
        y = stacked(steps, (1, dirs, batch, hidden))  # [steps, dirs, batch, hidden]
        if layout:
            y = imp.emit("transpose", [y], perm=[2, 0, 1, 3])
        imp.set(node.output[0], y)
    for k, finals in ((1, finals_h), (2, finals_c)):
        if len(node.output) > k and node.output[k]:
            if not finals:
                raise imp.unsupported(f"{op} has no output {k}")
            y = stacked(finals, (1, batch, hidden))  # [dirs, batch, hidden]
            if layout:
                y = imp.emit("transpose", [y], perm=[1, 0, 2])
            imp.set(node.output[k], y)


# --- public API -------------------------------------------------------------------------------


def _load(model_or_path: Any) -> tuple[Any, str]:
    if onnx is None:
        raise IRError("importing ONNX needs the onnx package: pip install 'gdv[onnx]'")
    if isinstance(model_or_path, onnx.ModelProto):
        return model_or_path, "<onnx>"
    path = str(model_or_path)
    try:
        return onnx.load(path), path
    except FileNotFoundError:
        raise IRError(f"no such file {printable(path, 200)}", Loc(path, 1, 1)) from None
    except Exception as e:  # protobuf decode errors and the like
        raise IRError(
            f"not a valid ONNX model ({printable(str(e), 160)})", Loc(path, 1, 1)
        ) from None


def import_model(
    model_or_path: Any,
    *,
    input_shapes: Mapping[str, Sequence[int]] | None = None,
    known_inputs: Mapping[str, np.ndarray] | None = None,
    narrow_in_f32: bool = False,
    accumulate_in_f32: bool = False,
) -> tuple[Module, dict[str, np.ndarray]]:
    """An ONNX model (a `ModelProto` or a path) as a verified graph-stage Module and its weights
    (initializer values keyed by parameter name).

    `narrow_in_f32` computes f16 and bf16 values in f32, as ONNX's reference implementation
    and its expected test data do for most ops: f16/bf16 graph inputs are widened exactly
    where the graph starts, initializers and constants are held in f32 (exactly), a Cast to
    f16/bf16 rounds there and widens again, and each f16/bf16 graph output is rounded once at
    the end. The module says so in its ops: it is a different program from the default import
    (every op rounding to its ONNX type), which IR_SPEC defines and gdv proves as written; the
    choice is the user's, recorded in the ops' origins.

    `accumulate_in_f32` keeps every op in its ONNX type but accumulates f16 and bf16 matrix
    products (MatMul, Gemm, and the products of the ops that decompose to them) in f32, rounding
    each result once, as numpy's f16/bf16 matmul does and so ONNX's reference (the products
    are exact in f32; the sum runs in order): the operands are widened exactly, multiplied as
    an f32 matmul and the result narrowed. It also sums an f16 Softmax's row in f32 in numpy's
    pairwise order and rounds it once, as numpy's `np.sum` of a contiguous f16 run does
    (`numpy_f16_row_sum`); the rest of the Softmax stays in f16.

    `input_shapes` fixes graph inputs' shapes (by ONNX name) where the model has symbolic dims.
    `known_inputs` gives graph inputs' values (by ONNX name) that may be used where an op needs
    a constant (a Reshape target, pads, axes); such an input is then fixed and, when nothing
    else reads it, no longer a parameter. Raises `IRError` (an `Unsupported` for ops gdv cannot
    express) on any input it refuses."""
    model, filename = _load(model_or_path)
    imp = Importer(
        model,
        input_shapes=input_shapes,
        known_inputs=known_inputs,
        filename=filename,
        narrow_in_f32=narrow_in_f32,
        accumulate_in_f32=accumulate_in_f32,
    )
    return imp.run()


def to_onnx_dtype(arr: np.ndarray, expected: int) -> np.ndarray:
    """An output array in the numpy dtype ONNX's tools expect for element type `expected`."""
    if expected == 9:
        return arr.astype(bool)
    return arr


class BackendRep(_OnnxBackendRep):
    """A prepared model: imported for each new set of input shapes and constant inputs, then
    executed on gdv's reference backend."""

    def __init__(
        self, model: Any, narrow_in_f32: bool = False, accumulate_in_f32: bool = False
    ) -> None:
        self.model = model
        self.narrow_in_f32 = narrow_in_f32
        self.accumulate_in_f32 = accumulate_in_f32
        self._cache: dict[Any, tuple[Module, dict[str, np.ndarray]]] = {}

    def run(self, inputs: Any, **kwargs: Any) -> tuple[np.ndarray, ...]:
        from gdv.backends import reference

        graph = self.model.graph
        init_names = {i.name for i in graph.initializer}
        names = [i.name for i in graph.input if i.name not in init_names]
        if isinstance(inputs, Mapping):
            given = dict(inputs)
        else:
            given = dict(zip(names, list(inputs), strict=False))
        arrays = {k: np.asarray(v) for k, v in given.items()}
        shapes = {k: a.shape for k, a in arrays.items()}
        # Small inputs may be fixed where an op needs a constant (a shape, axes, a depth):
        # `import_model` uses them there only, never to fold arithmetic.
        known = {k: a for k, a in arrays.items() if a.size <= 64}
        key = tuple(sorted((k, shapes[k], str(arrays[k].dtype)) for k in arrays)) + tuple(
            sorted((k, a.tobytes()) for k, a in known.items())
        )
        if key not in self._cache:
            module, weights = import_model(
                self.model,
                input_shapes=shapes,
                known_inputs=known,
                narrow_in_f32=self.narrow_in_f32,
                accumulate_in_f32=self.accumulate_in_f32,
            )
            self._cache[key] = (module, weights)
        module, weights = self._cache[key]
        fn = module.entry
        feeds = dict(weights)
        for p in fn.params:
            if p.name in feeds:
                continue
            onnx_name = p.attrs.get("onnx_name", p.name)
            if onnx_name not in arrays:
                raise IRError(f"missing input '{printable(onnx_name)}'")
            arr = arrays[onnx_name]
            if arr.dtype != p.type.dtype.np:
                if _np_to_ir(arr.dtype) is None:
                    raise Unsupported(f"input dtype {arr.dtype} has no IR dtype")
                arr = arr.astype(p.type.dtype.np)
            feeds[p.name] = arr
        outs = reference.run(module, feeds)
        return tuple(
            to_onnx_dtype(o, g.type.tensor_type.elem_type)
            for o, g in zip(outs, graph.output, strict=True)
        )


class Backend(_OnnxBackend):
    """gdv as an ONNX backend (`onnx.backend.base.Backend`): models run on the reference
    backend, bit-exact to gdv's IR semantics."""

    @classmethod
    def is_compatible(cls, model: Any, device: str = "CPU", **kwargs: Any) -> bool:
        return cls.supports_device(device)

    @classmethod
    def prepare(cls, model: Any, device: str = "CPU", **kwargs: Any) -> BackendRep:
        if not cls.supports_device(device):
            raise IRError(f"device '{printable(device)}' is not supported (CPU only)")
        return BackendRep(
            model,
            narrow_in_f32=bool(kwargs.get("narrow_in_f32", False)),
            accumulate_in_f32=bool(kwargs.get("accumulate_in_f32", False)),
        )

    @classmethod
    def run_model(
        cls, model: Any, inputs: Any, device: str = "CPU", **kwargs: Any
    ) -> tuple[np.ndarray, ...]:
        return cls.prepare(model, device, **kwargs).run(inputs)

    @classmethod
    def run_node(
        cls, node: Any, inputs: Any, device: str = "CPU", outputs_info: Any = None, **kwargs: Any
    ) -> tuple[np.ndarray, ...]:
        from onnx import helper

        arrays = [np.asarray(a) for a in inputs]
        names = [n for n in node.input if n]
        vis = [
            helper.make_tensor_value_info(
                n, helper.np_dtype_to_tensor_dtype(a.dtype), list(a.shape)
            )
            for n, a in zip(names, arrays, strict=False)
        ]
        outs = [helper.make_tensor_value_info(o, 0, None) for o in node.output if o]
        graph = helper.make_graph([node], "node", vis, outs)
        opset = kwargs.get("opset_version", onnx.defs.onnx_opset_version())
        model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)])
        return cls.prepare(model, device).run(dict(zip(names, arrays, strict=False)))

    @classmethod
    def supports_device(cls, device: str) -> bool:
        return str(device).upper().startswith("CPU")
