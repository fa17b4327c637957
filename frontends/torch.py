"""PyTorch programs (`torch.export`) to graph-stage IR.

`import_program(ep)` turns an `ExportedProgram` into a verified IR `Module` and a weights dict.
The program is first brought to core ATen by `run_decompositions`, except for the ops that map
to an IR composite or a short IR sequence more directly (`linear`, `layer_norm`, `gelu`,
`softmax`, `scaled_dot_product_attention`, `embedding`, `matmul`, `dropout`), which are kept.

- Parameters, buffers and lifted constants become parameters of `@main` (after the user
  inputs) named by their graph placeholder, with the state-dict name in `torch_name`; their
  values go to the weights, and each carries `range = [min, max]` of its (finite) values.
  User inputs keep their names, mangled like ONNX names (`gdv.frontends.onnx.mangle`) where
  needed (the original then in `torch_name`).
- Shapes are static: a program exported with dynamic dims is refused.
- Integer and boolean computations on values known at import time (`arange`, masks built from
  it, slices of integer buffers, ...) are evaluated by torch itself at import time.
- Elementwise arithmetic on f16 and bf16 runs in f32 and rounds back, as torch's CPU kernels
  do (for one add, mul, div or sqrt this equals computing in the narrow dtype: f32 has more
  than twice the bits); reductions, norms and contractions on them accumulate in f32 likewise.
- `as_strided` (what `adaptive_avg_pool2d` decomposes to) is read as a slice, reshape and
  transpose of its input's elements, where torch recorded the input contiguous from storage
  offset 0 and the view is nested and inside those elements (`as_strided_view`); overlapping
  and other views are refused with the reason.
- Every op or argument combination that cannot be expressed is refused with
  `unsupported PyTorch op aten.X at node NAME: reason`; a malformed file is an input error.
  Where an op's result type differs from what torch recorded for the node, the import is
  refused too (never a silently different program).
"""

from __future__ import annotations

import logging
import math
import operator
import os
import warnings
import zipfile
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from gdv.frontends.onnx import (
    GraphEmitter,
    _matmul,
    _py,
    _slice1,
    arg_extreme,
    bcast,
    broadcast_shape,
    convert,
    mangle,
    reshape,
    sort_along,
    window_max,
    window_slices,
)
from gdv.ir.core import Function, Module, Op, Param
from gdv.ir.diagnostics import IRError, Loc, printable
from gdv.ir.dtypes import DType
from gdv.ir.dtypes import from_numpy as from_np_dtype
from gdv.ir.types import TensorType
from gdv.ir.verifier import verify

try:  # torch is an optional dependency (the `torch` extra)
    import torch
except ModuleNotFoundError:  # pragma: no cover - exercised only without the extra
    torch = None  # type: ignore[assignment]


class Unsupported(IRError):
    """A PyTorch op or argument combination gdv cannot express exactly."""


# --- dtypes -----------------------------------------------------------------------------------


def _dtype_table() -> dict[Any, DType]:
    if torch is None:
        return {}
    return {
        torch.float32: DType.F32,
        torch.float64: DType.F64,
        torch.float16: DType.F16,
        torch.bfloat16: DType.BF16,
        torch.int64: DType.I64,
        torch.int32: DType.I32,
        torch.int16: DType.I16,
        torch.int8: DType.I8,
        # torch 2.3+ has the wider unsigned dtypes as "shell" dtypes (few kernels: add is not
        # implemented for them on CPU), but where a program holds them they mean what u16,
        # u32 and u64 mean.
        torch.uint64: DType.U64,
        torch.uint32: DType.U32,
        torch.uint16: DType.U16,
        torch.uint8: DType.U8,
        torch.bool: DType.I1,
        # float8 (IR_SPEC.md section 8), storage only: `.to()` converts, arithmetic is refused
        torch.float8_e4m3fn: DType.F8E4M3FN,
        torch.float8_e4m3fnuz: DType.F8E4M3FNUZ,
        torch.float8_e5m2: DType.F8E5M2,
        torch.float8_e5m2fnuz: DType.F8E5M2FNUZ,
    }


_DTYPES = _dtype_table()
_TORCH_OF = {v: k for k, v in _DTYPES.items()}
_NARROW = (DType.F16, DType.BF16)


def _opmath(dtype: DType) -> DType:
    """The dtype torch's CPU kernels compute in for `dtype` (f16 and bf16 go through f32)."""
    return DType.F32 if dtype in _NARROW else dtype


def to_numpy(t: Any) -> np.ndarray:
    """A torch tensor's values as a numpy array of the IR dtype's numpy type (bf16 via
    ml_dtypes, bit for bit)."""
    t = t.detach().cpu().contiguous()
    if t.dtype == torch.bfloat16:
        return t.view(torch.int16).numpy().view(DType.BF16.np).copy()
    d = _DTYPES.get(t.dtype)
    if d is not None and d.is_float8:  # numpy has no float8: the bytes, as ml_dtypes reads them
        return t.view(torch.uint8).numpy().view(d.np).copy()
    return t.numpy().copy()


def from_numpy(a: np.ndarray) -> Any:
    """The inverse of `to_numpy`."""
    a = np.asarray(a, order="C")  # keeps rank 0 (np.ascontiguousarray does not)
    if a.dtype == DType.BF16.np:
        return torch.from_numpy(a.view(np.int16).copy()).view(torch.bfloat16)
    d = from_np_dtype(a.dtype)
    if d is not None and d.is_float8:
        return torch.from_numpy(a.view(np.uint8).copy()).view(_TORCH_OF[d])
    return torch.from_numpy(a.copy())


def _origin(node: Any) -> str:
    """`torch:MODULE.PATH (node)`: the innermost module the node came from (torch.export's
    `nn_module_stack`), else the node's name alone (`Op.origin`)."""
    stack = node.meta.get("nn_module_stack") or {}
    path = ""
    if stack:
        entry = list(stack.values())[-1]
        path = str(entry[0]) if isinstance(entry, tuple | list) and entry else ""
    where = path.removeprefix("L['self'].").removeprefix("L__self___") or "(top)"
    return f"torch:{printable(where, 120)} ({printable(node.name, 60)})"


# --- values -----------------------------------------------------------------------------------


@dataclass
class Val:
    """A torch value during import: its IR type, the IR value holding it (once emitted), its
    contents where known at import time (a torch tensor), and for parameters, buffers and
    constants the IR parameter that supplies it."""

    type: TensorType
    name: str | None = None
    static: Any = None
    param: str | None = None


@dataclass
class _State:
    weights: dict[str, np.ndarray] = field(default_factory=dict)
    ops: list[Op] = field(default_factory=list)
    types: dict[str, TensorType] = field(default_factory=dict)
    counter: int = 0


class Importer(GraphEmitter):
    """Imports one (decomposed) ExportedProgram. Use `import_program`."""

    def __init__(
        self,
        ep: Any,
        *,
        filename: str = "<torch>",
        input_ranges: Mapping[str, Sequence[float]] | None = None,
    ) -> None:
        self.ep = ep
        self.filename = filename
        self.input_ranges = dict(input_ranges or {})
        self.vals: dict[str, Val] = {}
        self.tuples: dict[str, list[Val | None]] = {}
        self.st = _State()
        self.node: Any = None
        self.user_params: list[Param] = []
        self.state_params: dict[str, Param] = {}
        self.used_state: list[str] = []

    # --- errors -------------------------------------------------------------------------------

    def loc(self) -> Loc:
        return Loc(self.filename, 1, 1)

    def unsupported(self, reason: str) -> Unsupported:
        op = _op_name(self.node.target) if self.node is not None else "?"
        label = self.node.name if self.node is not None else "?"
        return Unsupported(
            f"unsupported PyTorch op {printable(op, 80)} at node {printable(label, 80)}: {reason}",
            self.loc(),
        )

    # --- values -------------------------------------------------------------------------------

    def val(self, arg: Any) -> Val:
        if not isinstance(arg, torch.fx.Node):
            raise self.unsupported(f"expected a tensor, got {printable(repr(arg), 60)}")
        if arg.name not in self.vals:
            raise IRError(f"graph value '{printable(arg.name)}' is used before it is defined")
        return self.vals[arg.name]

    def dyn(self, arg: Any) -> str:
        """The IR value holding torch value `arg`, emitting a constant or parameter if needed."""
        v = self.val(arg)
        if v.name is not None:
            return v.name
        if v.param is not None:
            v.name = v.param
            self.st.types[v.param] = v.type
            if v.param not in self.st.weights:
                self.st.weights[v.param] = to_numpy(v.static)
                self.used_state.append(v.param)
            return v.name
        assert v.static is not None
        v.name = self.const(to_numpy(v.static), v.type)
        return v.name

    def static(self, arg: Any) -> Any:
        """The torch tensor `arg` holds when it is known at import time, else None."""
        if isinstance(arg, torch.fx.Node):
            return self.vals[arg.name].static if arg.name in self.vals else None
        return None

    def set(self, node: Any, ir: str) -> None:
        self.vals[node.name] = Val(self.st.types[ir], name=ir)

    def set_static(self, node: Any, value: Any) -> None:
        self.vals[node.name] = Val(_tensor_type(self, value), static=value)

    # --- driving ------------------------------------------------------------------------------

    def run(self) -> tuple[Module, dict[str, np.ndarray]]:
        from torch.export.graph_signature import InputKind, OutputKind, TensorArgument

        sig = self.ep.graph_signature
        state = self.ep.state_dict
        constants = getattr(self.ep, "constants", {}) or {}
        kinds: dict[str, Any] = {}
        for spec in sig.input_specs:
            if not isinstance(spec.arg, TensorArgument):
                raise Unsupported(
                    f"input '{printable(getattr(spec.arg, 'name', '?'))}' is not a tensor "
                    f"({type(spec.arg).__name__}): export with tensor inputs only",
                    self.loc(),
                )
            kinds[spec.arg.name] = spec
        for node in self.ep.graph.nodes:
            self.node = None
            if node.op == "placeholder":
                spec = kinds.get(node.name)
                if spec is None:
                    raise IRError(f"placeholder '{printable(node.name)}' has no input spec")
                if spec.kind == InputKind.USER_INPUT:
                    t = _meta_type(self, node)
                    pname = mangle(node.name)
                    attrs: dict[str, Any] = {} if pname == node.name else {"torch_name": node.name}
                    if node.name in self.input_ranges:
                        lo, hi = self.input_ranges[node.name]
                        attrs["range"] = [lo, hi]
                    self.user_params.append(Param(pname, t, attrs))
                    self.st.types[pname] = t
                    self.vals[node.name] = Val(t, name=pname)
                elif spec.kind in (
                    InputKind.PARAMETER,
                    InputKind.BUFFER,
                    InputKind.CONSTANT_TENSOR,
                ):
                    source = state if spec.target in state else constants
                    if spec.target not in source:
                        raise IRError(
                            f"the value of '{printable(spec.target)}' is missing from the program"
                        )
                    value = source[spec.target].detach()
                    t = _tensor_type(self, value, what=f"'{printable(spec.target)}'")
                    pname = mangle(node.name)
                    self.state_params[pname] = Param(pname, t, _state_attrs(spec.target, value))
                    self.vals[node.name] = Val(t, static=value, param=pname)
                else:
                    raise Unsupported(
                        f"input '{printable(node.name)}' of kind {spec.kind.name} is not supported",
                        self.loc(),
                    )
            elif node.op == "call_function":
                self.node = node
                self.origin = _origin(node)
                self.import_node(node)
                self.origin = None
            elif node.op == "output":
                self.node = None
                outs = node.args[0]
                for spec in sig.output_specs:
                    if spec.kind != OutputKind.USER_OUTPUT:
                        raise Unsupported(
                            f"the program has a {spec.kind.name} output (it mutates state); "
                            "export an inference program that does not",
                            self.loc(),
                        )
                returns = []
                for arg in outs:
                    if not isinstance(arg, torch.fx.Node):
                        raise Unsupported(
                            f"an output is not a tensor ({printable(repr(arg), 60)})", self.loc()
                        )
                    returns.append(self.dyn(arg))
                self.returns = returns
            else:
                self.node = node
                raise self.unsupported(f"graph node kind '{node.op}' is not supported")
        self.node = None
        params = list(self.user_params) + [self.state_params[p] for p in self.used_state]
        results = [self.st.types[r] for r in self.returns]
        self._rename(params)
        fn = Function("main", params, results, self.st.ops, self.returns)
        module = Module([fn], filename=self.filename)
        verify(module)
        return module, dict(self.st.weights)

    def _rename(self, params: list[Param]) -> None:
        """Give ops that define torch values those values' names: readable IR."""
        taken = {p.name for p in params}
        rename: dict[str, str] = {}
        for fx_name, v in self.vals.items():
            if v.name and v.name.startswith("tmp.v") and v.name not in rename:
                new = mangle(fx_name)
                if new not in taken:
                    rename[v.name] = new
                    taken.add(new)
        for op in self.st.ops:
            op.result = rename.get(op.result, op.result)
            op.operands = [rename.get(o, o) for o in op.operands]
        self.returns = [rename.get(r, r) for r in self.returns]

    def import_node(self, node: Any) -> None:
        target = node.target
        if target is operator.getitem:
            source, k = node.args
            parts = self.tuples.get(source.name)
            if parts is None or not isinstance(k, int) or not -len(parts) <= k < len(parts):
                raise self.unsupported("getitem on a value that is not a tuple of tensors")
            if parts[k] is None:
                self.node = source
                raise self.unsupported(
                    f"its output {k} (an index-valued result) has no IR op; only output 0 "
                    "may be used"
                )
            self.vals[node.name] = parts[k]
            return
        name = _op_name(target)
        if name in _IGNORED:
            return
        if self._try_fold(node):
            return
        fn = HANDLERS.get(name)
        if fn is None:
            raise self.unsupported(_WHY_NOT.get(name, "no IR mapping"))
        args = _bind(self, target, node.args, node.kwargs)
        try:
            fn(self, node, args)
        except IRError:
            raise
        except (KeyError, TypeError, ValueError, IndexError, AttributeError) as e:
            # An argument combination the mapping does not read (a None where it expects a
            # value, a list where it expects a number): a refusal, never a traceback.
            raise self.unsupported(
                f"arguments {printable(_describe(args), 120)} are not supported "
                f"({type(e).__name__}: {printable(str(e), 60)})"
            ) from None
        self._check(node)

    def _check(self, node: Any) -> None:
        """The IR type of each result equals what torch recorded for the node."""
        meta = node.meta.get("val")
        if isinstance(meta, (tuple, list)):
            parts = self.tuples.get(node.name, [])
            pairs = [(m, p) for m, p in zip(meta, parts, strict=False) if p is not None]
        else:
            pairs = [(meta, self.vals.get(node.name))]
        for m, v in pairs:
            if m is None or v is None or not hasattr(m, "shape"):
                continue
            want = _tensor_type(self, m)
            if v.type != want:
                raise self.unsupported(f"gdv's mapping gives {v.type}, torch gives {want}")

    def _try_fold(self, node: Any) -> bool:
        """Evaluate an op with torch when every tensor operand is known and every result is an
        integer or boolean tensor (index and mask arithmetic: exact)."""
        meta = node.meta.get("val")
        metas = meta if isinstance(meta, (tuple, list)) else [meta]
        if not metas or not all(
            hasattr(m, "dtype") and (m.dtype == torch.bool or not m.dtype.is_floating_point)
            for m in metas
        ):
            return False
        if any(m.dtype not in _DTYPES for m in metas):
            return False
        ok = [True]

        def sub(a: Any) -> Any:
            if isinstance(a, torch.fx.Node):
                s = self.static(a)
                if s is None:
                    ok[0] = False
                return s
            if isinstance(a, (list, tuple)):
                return type(a)(sub(x) for x in a)
            return a

        args = sub(list(node.args))
        kwargs = {k: sub(v) for k, v in node.kwargs.items()}
        if not ok[0]:
            return False
        if _op_name(node.target) in _NO_FOLD:
            return False
        try:
            out = node.target(*args, **kwargs)
        except Exception:  # not evaluable here: fall back to the op's own mapping
            return False
        if isinstance(meta, (tuple, list)):
            self.tuples[node.name] = [Val(_tensor_type(self, o), static=o) for o in out]
        else:
            self.set_static(node, out)
        return True


# --- helpers ----------------------------------------------------------------------------------


def _op_name(target: Any) -> str:
    if target is operator.getitem:
        return "getitem"
    name = getattr(target, "__name__", None)
    if hasattr(target, "_schema") and hasattr(target, "namespace"):
        return str(target)
    return str(name or target)


def _describe(args: Mapping[str, Any]) -> str:
    def one(v: Any) -> str:
        if isinstance(v, torch.fx.Node):
            return v.name
        if isinstance(v, (list, tuple)):
            return "[" + ", ".join(one(x) for x in v) + "]"
        return repr(v)

    return ", ".join(f"{k}={one(v)}" for k, v in args.items())


def _bind(imp: Importer, target: Any, args: Sequence[Any], kwargs: Mapping[str, Any]) -> dict:
    """The op's arguments by schema name, defaults filled in."""
    schema = target._schema
    out: dict[str, Any] = {}
    positional = [a for a in schema.arguments if not a.kwarg_only]
    if len(args) > len(positional):
        raise imp.unsupported(f"{len(args)} positional arguments")
    for a, v in zip(positional, args, strict=False):
        out[a.name] = v
    for a in schema.arguments:
        if a.name in out:
            continue
        if a.name in kwargs:
            out[a.name] = kwargs[a.name]
        elif a.has_default_value():
            out[a.name] = a.default_value
        else:
            out[a.name] = None
    return out


def _tensor_type(imp: Importer, t: Any, what: str | None = None) -> TensorType:
    dt = _DTYPES.get(t.dtype)
    label = what or (f"node {printable(imp.node.name, 80)}" if imp.node is not None else "a value")
    if dt is None:
        why = f"dtype {t.dtype} of {label} has no IR dtype"
        raise imp.unsupported(why) if imp.node is not None else Unsupported(why, imp.loc())
    dims = []
    for d in t.shape:
        if not isinstance(d, int):
            why = f"{label} has a symbolic dim '{printable(str(d))}': export with static shapes"
            raise imp.unsupported(why) if imp.node is not None else Unsupported(why, imp.loc())
        dims.append(int(d))
    return TensorType(dt, tuple(dims))


def _meta_type(imp: Importer, node: Any) -> TensorType:
    meta = node.meta.get("val")
    if meta is None or not hasattr(meta, "shape"):
        raise Unsupported(f"input '{printable(node.name)}' is not a tensor", imp.loc())
    return _tensor_type(imp, meta, what=f"input '{printable(node.name)}'")


def _state_attrs(target: str, value: Any) -> dict[str, Any]:
    attrs: dict[str, Any] = {"torch_name": target}
    arr = to_numpy(value)
    if arr.size and arr.dtype != np.bool_:
        if arr.dtype.kind in "iu":
            attrs["range"] = [int(arr.min()), int(arr.max())]
        else:
            wide = np.asarray(arr, dtype=np.float64)
            if np.all(np.isfinite(wide)):
                attrs["range"] = [float(wide.min()), float(wide.max())]
    return attrs


def _out_type(imp: Importer, node: Any) -> TensorType:
    meta = node.meta.get("val")
    if meta is None or not hasattr(meta, "dtype"):
        raise imp.unsupported("the node has no recorded tensor result")
    return _tensor_type(imp, meta)


def _arg_dtype(imp: Importer, a: Any) -> Any:
    """A stand-in for `a` in torch's type promotion (the category matters: dimensioned tensor,
    zero-dim tensor, Python number)."""
    if isinstance(a, torch.fx.Node):
        t = imp.val(a).type
        return torch.empty((0,) * t.rank if t.rank else (), dtype=_TORCH_OF[t.dtype])
    return a


def _promoted(imp: Importer, *args: Any) -> DType:
    try:
        dt = torch.result_type(*[_arg_dtype(imp, a) for a in args])
    except Exception as e:
        raise imp.unsupported(f"no promoted dtype ({printable(str(e), 80)})") from None
    if dt not in _DTYPES:
        raise imp.unsupported(f"dtype {dt} has no IR dtype")
    return _DTYPES[dt]


def _operand(imp: Importer, a: Any, dtype: DType, shape: Sequence[int]) -> str:
    """`a` (a graph value or a Python number) in `dtype`, broadcast to `shape`."""
    if isinstance(a, torch.fx.Node):
        return bcast(imp, convert(imp, imp.dyn(a), dtype), shape)
    if isinstance(a, bool) or isinstance(a, (int, float)):
        if dtype.is_int and isinstance(a, float) and not float(a).is_integer():
            raise imp.unsupported(f"a non-integer scalar {a} on {dtype}")
        if dtype.is_int and not dtype.int_min <= int(a) <= dtype.int_max:
            raise imp.unsupported(f"scalar {a} does not fit {dtype}")
        return imp.const(a, TensorType(dtype, tuple(shape)))
    raise imp.unsupported(f"operand {printable(repr(a), 60)} is not a tensor or a number")


def _shape_of(imp: Importer, *args: Any) -> tuple[int, ...]:
    shapes = [imp.val(a).type.shape for a in args if isinstance(a, torch.fx.Node)]
    return broadcast_shape(imp, *shapes) if shapes else ()


def _norm_dim(imp: Importer, d: int, rank: int) -> int:
    r = max(rank, 1)
    a = d + r if d < 0 else d
    if not 0 <= a < r:
        raise imp.unsupported(f"dim {d} is out of range for rank {rank}")
    return a


def _narrow_in(imp: Importer, x: str) -> tuple[str, DType]:
    """x in its opmath dtype, and the dtype to round the result back to."""
    t = imp.type_of(x)
    return convert(imp, x, _opmath(t.dtype)), t.dtype


def _require_float(imp: Importer, x: str) -> TensorType:
    t = imp.type_of(x)
    if not t.dtype.is_float:
        raise imp.unsupported(f"{t.dtype} operands are not supported")
    return t


# --- handlers ---------------------------------------------------------------------------------

Handler = Callable[[Importer, Any, dict[str, Any]], None]
HANDLERS: dict[str, Handler] = {}

_IGNORED = {
    "aten._assert_tensor_metadata.default",
    "aten._assert_scalar.default",
    "aten.sym_constrain_range_for_size.default",
    "aten.sym_constrain_range.default",
    "aten._assert_async.msg",
}
"""Checks with no result: nothing to import."""

_NO_FOLD = {
    "aten.empty.memory_format",
    "aten.empty_like.default",
    "aten.empty_strided.default",
    "aten.rand.default",
    "aten.randn.default",
    "aten.randint.low",
    "aten.bernoulli.p",
}
"""Ops whose result is not a function of their arguments (uninitialised or random)."""

_WHY_NOT = {
    "aten.empty.memory_format": "uninitialised memory has no IR meaning",
    "aten.empty_like.default": "uninitialised memory has no IR meaning",
    "aten.empty_strided.default": "uninitialised memory has no IR meaning",
    "aten.rand.default": "random number generation has no IR op",
    "aten.randn.default": "random number generation has no IR op",
    "aten.native_dropout.default": "training-mode dropout (random masks) has no IR op",
    "aten.nonzero.default": "its output shape depends on the data",
    "aten.log1p.default": "no exact IR decomposition (log(1 + x) rounds 1 + x)",
    "aten.expm1.default": "no exact IR decomposition (exp(x) - 1 cancels)",
}


def handler(*names: str) -> Callable[[Handler], Handler]:
    def deco(fn: Handler) -> Handler:
        for n in names:
            HANDLERS[n] = fn
        return fn

    return deco


# --- elementwise ------------------------------------------------------------------------------

_UNARY = {
    "aten.exp.default": "exp", "aten.log.default": "log", "aten.sqrt.default": "sqrt",
    "aten.rsqrt.default": "rsqrt", "aten.tanh.default": "tanh", "aten.sigmoid.default": "sigmoid",
    "aten.erf.default": "erf", "aten.sin.default": "sin", "aten.cos.default": "cos",
    "aten.tan.default": "tan", "aten.asin.default": "asin", "aten.acos.default": "acos",
    "aten.atan.default": "atan", "aten.sinh.default": "sinh", "aten.cosh.default": "cosh",
    "aten.asinh.default": "asinh", "aten.acosh.default": "acosh", "aten.atanh.default": "atanh",
}  # fmt: skip


@handler(*_UNARY)
def _unary(imp: Importer, node: Any, a: dict[str, Any]) -> None:
    out = _out_type(imp, node)
    x = imp.dyn(a["self"])
    if not out.dtype.is_float:
        raise imp.unsupported(f"{out.dtype} results are not supported")
    x = convert(imp, x, _opmath(out.dtype))  # integer inputs promote to the float result
    y = imp.emit(_UNARY[_op_name(node.target)], [x])
    imp.set(node, convert(imp, y, out.dtype))


_EXACT_UNARY = {"aten.neg.default": "neg", "aten.abs.default": "abs", "aten.floor.default": "floor"}


@handler(*_EXACT_UNARY, "aten.ceil.default", "aten.relu.default")
def _exact_unary(imp: Importer, node: Any, a: dict[str, Any]) -> None:
    # These are exact in any dtype: no detour through f32.
    x = imp.dyn(a["self"])
    t = imp.type_of(x)
    name = _op_name(node.target)
    if t.dtype.is_bool:
        raise imp.unsupported("boolean operands are not supported")
    if t.dtype.is_int:
        zero = imp.const(0, t)
        if name == "aten.neg.default":  # wraps like torch's two's-complement negation
            y = imp.emit("sub", [zero, x])
        elif name == "aten.abs.default":
            y = imp.emit(
                "select", [imp.emit("cmp", [x, zero], dir="lt"), imp.emit("sub", [zero, x]), x]
            )
        elif name == "aten.relu.default":
            y = imp.emit("max", [x, zero])
        else:  # floor and ceil of an integer are the integer
            y = x
    elif name == "aten.ceil.default":  # ceil(x) = -floor(-x), exact (signs of zero and NaN too)
        y = imp.emit("neg", [imp.emit("floor", [imp.emit("neg", [x])])])
    elif name == "aten.relu.default":
        y = imp.emit("relu", [x])
    else:
        y = imp.emit(_EXACT_UNARY[name], [x])
    imp.set(node, y)


@handler("aten.reciprocal.default")
def _reciprocal(imp: Importer, node: Any, a: dict[str, Any]) -> None:
    out = _out_type(imp, node)
    x = convert(imp, imp.dyn(a["self"]), _opmath(out.dtype))
    y = imp.emit("div", [imp.const(1.0, imp.type_of(x)), x])
    imp.set(node, convert(imp, y, out.dtype))


_BINARY = {
    "aten.add.Tensor": "add", "aten.add.Scalar": "add", "aten.sub.Tensor": "sub",
    "aten.sub.Scalar": "sub", "aten.mul.Tensor": "mul", "aten.mul.Scalar": "mul",
    "aten.div.Tensor": "div", "aten.div.Scalar": "div", "aten.rsub.Scalar": "sub",
    "aten.rsub.Tensor": "sub", "aten.maximum.default": "max", "aten.minimum.default": "min",
}  # fmt: skip


@handler(*_BINARY)
def _binary(imp: Importer, node: Any, a: dict[str, Any]) -> None:
    name = _op_name(node.target)
    ir = _BINARY[name]
    x, y = a["self"], a["other"]
    if name.startswith("aten.rsub"):
        x, y = y, x
    out = _out_type(imp, node)
    if out.dtype.is_bool:
        raise imp.unsupported("boolean operands are not supported")
    if ir == "div" and not out.dtype.is_float:
        raise imp.unsupported(f"{out.dtype} division")
    compute = _opmath(out.dtype)
    shape = out.shape
    lhs = _operand(imp, x, compute, shape)
    alpha = a.get("alpha", 1)
    if alpha is not None and alpha != 1:  # x + alpha * y, as torch's kernels compute it
        y = imp.emit(
            "mul", [_operand(imp, alpha, compute, shape), _operand(imp, y, compute, shape)]
        )
        rhs = y
    else:
        rhs = _operand(imp, y, compute, shape)
    imp.set(node, convert(imp, imp.emit(ir, [lhs, rhs]), out.dtype))


@handler(
    "aten.fmod.Tensor", "aten.fmod.Scalar", "aten.remainder.Tensor", "aten.remainder.Scalar"
)  # fmt: skip
def _remainder(imp: Importer, node: Any, a: dict[str, Any]) -> None:
    # fmod: the sign of the dividend (IR rem); remainder: the divisor's (IR mod, integers: a
    # float one rounds, r + b, which IR rem does not). An integer zero divisor is an error in
    # torch; the IR gives the dividend there.
    name = _op_name(node.target)
    out = _out_type(imp, node)
    floor = name.startswith("aten.remainder")
    if out.dtype.is_bool:
        raise imp.unsupported("boolean operands are not supported")
    if floor and not out.dtype.is_int:
        raise imp.unsupported(
            f"remainder on {out.dtype} (with the divisor's sign a float remainder rounds; "
            "fmod is exact)"
        )
    compute = _opmath(out.dtype)  # f16/bf16 in f32: a remainder is exact either way
    x = _operand(imp, a["self"], compute, out.shape)
    y = _operand(imp, a["other"], compute, out.shape)
    imp.set(node, convert(imp, imp.emit("mod" if floor else "rem", [x, y]), out.dtype))


@handler("aten.pow.Tensor_Scalar", "aten.pow.Tensor_Tensor", "aten.pow.Scalar")
def _pow(imp: Importer, node: Any, a: dict[str, Any]) -> None:
    out = _out_type(imp, node)
    if not out.dtype.is_float:
        raise imp.unsupported(f"{out.dtype} powers (IR pow takes floats)")
    compute = _opmath(out.dtype)
    base = a.get("self")
    e = a.get("exponent")
    x = _operand(imp, base, compute, out.shape)
    if isinstance(e, (int, float)) and not isinstance(e, bool):
        # torch's CPU kernel special-cases these exponents; so does this mapping, bit for bit.
        if e == 1:
            y = x
        elif e == 2:
            y = imp.emit("mul", [x, x])
        elif e == 3:
            y = imp.emit("mul", [imp.emit("mul", [x, x]), x])
        elif e == 0.5:
            y = imp.emit("sqrt", [x])
        elif e == -0.5:
            y = imp.emit("rsqrt", [x])
        elif e == -1:
            y = imp.emit("div", [imp.const(1.0, imp.type_of(x)), x])
        elif e == -2:
            y = imp.emit("div", [imp.const(1.0, imp.type_of(x)), imp.emit("mul", [x, x])])
        else:
            y = imp.emit("pow", [x, _operand(imp, e, compute, out.shape)])
    else:
        y = imp.emit("pow", [x, _operand(imp, e, compute, out.shape)])
    imp.set(node, convert(imp, y, out.dtype))


_CMP = {"eq": "eq", "ne": "ne", "lt": "lt", "le": "le", "gt": "gt", "ge": "ge"}


@handler(*[f"aten.{c}.{k}" for c in _CMP for k in ("Tensor", "Scalar")])
def _cmp(imp: Importer, node: Any, a: dict[str, Any]) -> None:
    op = _op_name(node.target).split(".")[1]
    out = _out_type(imp, node)
    dtype = _promoted(imp, a["self"], a["other"])
    x = _operand(imp, a["self"], dtype, out.shape)
    y = _operand(imp, a["other"], dtype, out.shape)
    imp.set(node, imp.emit("cmp", [x, y], dir=_CMP[op]))


def _as_bool(imp: Importer, arg: Any, shape: Sequence[int]) -> str:
    x = imp.dyn(arg)
    t = imp.type_of(x)
    if not t.dtype.is_bool:  # logical_* read any dtype as "non-zero"
        x = imp.emit("cmp", [x, imp.const(0, t)], dir="ne")
    return bcast(imp, x, shape)


@handler(
    "aten.logical_and.default", "aten.logical_or.default", "aten.logical_xor.default",
    "aten.bitwise_and.Tensor", "aten.bitwise_or.Tensor", "aten.bitwise_xor.Tensor",
)  # fmt: skip
def _logic(imp: Importer, node: Any, a: dict[str, Any]) -> None:
    name = _op_name(node.target)
    out = _out_type(imp, node)
    if name.startswith("aten.bitwise") and not out.dtype.is_bool:
        if not out.dtype.is_int:
            raise imp.unsupported(f"bitwise ops on {out.dtype} (integers and bool only)")
        x = _operand(imp, a["self"], out.dtype, out.shape)
        y = _operand(imp, a["other"], out.dtype, out.shape)
        imp.set(node, imp.emit(name.split(".")[1], [x, y]))  # bitwise_and, _or, _xor
        return
    for known, other in ((a["self"], a["other"]), (a["other"], a["self"])):
        # A known all-true or all-false side decides or passes the other through (no dead
        # constants left for the passes to clean up).
        s = imp.static(known)
        if s is None or "xor" in name or imp.val(other).type.dtype != DType.I1:
            continue
        bits = to_numpy(s).astype(bool)
        if bits.size and (bits.all() or not bits.any()):
            passes = bool(bits.all()) == ("and" in name)
            if passes:
                imp.set(node, bcast(imp, imp.dyn(other), out.shape))
            else:
                imp.set(node, imp.const(bool(bits.all()), out))
            return
    x = _as_bool(imp, a["self"], out.shape)
    y = _as_bool(imp, a["other"], out.shape)
    t = imp.type_of(x)
    if "and" in name:
        r = imp.emit("select", [x, y, imp.const(False, t)])
    elif "xor" in name:
        r = imp.emit("cmp", [x, y], dir="ne")
    else:
        r = imp.emit("select", [x, imp.const(True, t), y])
    imp.set(node, r)


@handler("aten.bitwise_and.Scalar", "aten.bitwise_or.Scalar", "aten.bitwise_xor.Scalar")
def _bitwise_scalar(imp: Importer, node: Any, a: dict[str, Any]) -> None:
    out = _out_type(imp, node)
    if not out.dtype.is_int:
        raise imp.unsupported(f"bitwise ops with a scalar on {out.dtype} (integers only)")
    x = _operand(imp, a["self"], out.dtype, out.shape)
    y = _operand(imp, a["other"], out.dtype, out.shape)  # the scalar must fit the dtype
    imp.set(node, imp.emit(_op_name(node.target).split(".")[1], [x, y]))


_SHIFTS = {
    "aten.__lshift__.Tensor": "shift_left", "aten.__lshift__.Scalar": "shift_left",
    "aten.bitwise_left_shift.Tensor": "shift_left",
    "aten.bitwise_left_shift.Tensor_Scalar": "shift_left",
    "aten.__rshift__.Tensor": "shift_right", "aten.__rshift__.Scalar": "shift_right",
    "aten.bitwise_right_shift.Tensor": "shift_right",
    "aten.bitwise_right_shift.Tensor_Scalar": "shift_right",
}  # fmt: skip


@handler(*_SHIFTS)
def _shift(imp: Importer, node: Any, a: dict[str, Any]) -> None:
    # torch's CPU rule is IR_SPEC.md's: an amount that is negative or at least the width gives
    # 0 (left) or the sign fill (right); right shifts of signed values are arithmetic.
    out = _out_type(imp, node)
    if not out.dtype.is_int:
        raise imp.unsupported(f"shifts on {out.dtype} (integers only)")
    x = _operand(imp, a["self"], out.dtype, out.shape)
    y = _operand(imp, a["other"], out.dtype, out.shape)
    imp.set(node, imp.emit(_SHIFTS[_op_name(node.target)], [x, y]))


@handler("aten.logical_not.default", "aten.bitwise_not.default")
def _not(imp: Importer, node: Any, a: dict[str, Any]) -> None:
    out = _out_type(imp, node)
    if _op_name(node.target) == "aten.bitwise_not.default" and not out.dtype.is_bool:
        if not out.dtype.is_int:
            raise imp.unsupported(f"bitwise ops on {out.dtype} (integers and bool only)")
        imp.set(node, imp.emit("bitwise_not", [_operand(imp, a["self"], out.dtype, out.shape)]))
        return
    x = _as_bool(imp, a["self"], out.shape)
    t = imp.type_of(x)
    imp.set(node, imp.emit("select", [x, imp.const(False, t), imp.const(True, t)]))


@handler("aten.where.self", "aten.where.ScalarOther", "aten.where.ScalarSelf", "aten.where.Scalar")
def _where(imp: Importer, node: Any, a: dict[str, Any]) -> None:
    out = _out_type(imp, node)
    c = imp.dyn(a["condition"])
    if not imp.type_of(c).dtype.is_bool:
        raise imp.unsupported("the condition must be boolean")
    c = bcast(imp, c, out.shape)
    x = _operand(imp, a["self"], out.dtype, out.shape)
    y = _operand(imp, a["other"], out.dtype, out.shape)
    imp.set(node, imp.emit("select", [c, x, y]))


@handler(
    "aten.clamp.default", "aten.clamp.Tensor", "aten.clamp_min.default", "aten.clamp_max.default",
    "aten.hardtanh.default",
)  # fmt: skip
def _clamp(imp: Importer, node: Any, a: dict[str, Any]) -> None:
    # torch: min(max(x, lo), hi); NaN stays NaN (so does IR max/min).
    name = _op_name(node.target)
    out = _out_type(imp, node)
    if out.dtype.is_bool:
        raise imp.unsupported("boolean operands are not supported")
    if name == "aten.hardtanh.default":
        lo, hi = a["min_val"], a["max_val"]
    elif name == "aten.clamp_min.default":
        lo, hi = a["min"], None
    elif name == "aten.clamp_max.default":
        lo, hi = None, a["max"]
    else:
        lo, hi = a["min"], a["max"]
    x = _operand(imp, a["self"], out.dtype, out.shape)
    if lo is not None:
        x = imp.emit("max", [x, _operand(imp, lo, out.dtype, out.shape)])
    if hi is not None:
        x = imp.emit("min", [x, _operand(imp, hi, out.dtype, out.shape)])
    imp.set(node, x)


@handler("aten.leaky_relu.default")
def _leaky_relu(imp: Importer, node: Any, a: dict[str, Any]) -> None:
    # x > 0 ? x : x * slope, as torch's kernel.
    x = imp.dyn(a["self"])
    t = _require_float(imp, x)
    xc, back = _narrow_in(imp, x)
    tc = imp.type_of(xc)
    pos = imp.emit("cmp", [xc, imp.const(0.0, tc)], dir="gt")
    neg = imp.emit("mul", [xc, imp.const(a["negative_slope"], tc)])
    imp.set(node, convert(imp, imp.emit("select", [pos, xc, neg]), t.dtype))


@handler("aten.gelu.default")
def _gelu(imp: Importer, node: Any, a: dict[str, Any]) -> None:
    x = imp.dyn(a["self"])
    _require_float(imp, x)
    approximate = a.get("approximate") or "none"
    if approximate not in ("none", "tanh"):
        raise imp.unsupported(f"approximate = '{printable(approximate)}'")
    xc, back = _narrow_in(imp, x)
    imp.set(node, convert(imp, imp.emit("gelu", [xc], approximate=approximate), back))


@handler("aten.silu.default")
def _silu(imp: Importer, node: Any, a: dict[str, Any]) -> None:
    # x / (1 + exp(-x)) is torch's formula; IR sigmoid is 1 / (1 + exp(-x)) as one op, so
    # x * sigmoid(x) differs in the last bit: within tolerance, not bit-exact.
    x = imp.dyn(a["self"])
    _require_float(imp, x)
    xc, back = _narrow_in(imp, x)
    imp.set(node, convert(imp, imp.emit("mul", [xc, imp.emit("sigmoid", [xc])]), back))


# --- conversions, copies, creation -------------------------------------------------------------


@handler(
    "aten.clone.default", "aten.alias.default", "aten.detach.default",
    "aten.lift_fresh_copy.default", "aten.contiguous.default",
)  # fmt: skip
def _identity(imp: Importer, node: Any, a: dict[str, Any]) -> None:
    imp.vals[node.name] = imp.val(a["self"])


@handler("aten.dropout.default")
def _dropout(imp: Importer, node: Any, a: dict[str, Any]) -> None:
    if a.get("train") and a.get("p"):
        raise imp.unsupported("training-mode dropout (random masks) has no IR op")
    imp.vals[node.name] = imp.val(a["input"])


@handler("aten._to_copy.default", "aten.to.dtype", "aten.to.dtype_layout", "aten.to.device")
def _to_copy(imp: Importer, node: Any, a: dict[str, Any]) -> None:
    # float -> int truncates toward zero (out of range is undefined in torch; IR saturates).
    out = _out_type(imp, node)
    src = a.get("self")
    x = imp.dyn(src)
    if out.dtype.is_float8 and imp.type_of(x).dtype is not out.dtype:
        # torch rounds to nearest-even; it saturates into float8_e4m3fn (inf too) and
        # overflows into the others (to inf in e5m2, NaN in the fnuz formats)
        sat = out.dtype is DType.F8E4M3FN
        t = imp.type_of(x).with_dtype(out.dtype)
        imp.set(node, imp.emit("convert", [x], t, **({} if sat else {"saturate": False})))
        return
    imp.set(node, convert(imp, x, out.dtype))


@handler("aten.full.default", "aten.scalar_tensor.default", "aten.full_like.default")
def _full(imp: Importer, node: Any, a: dict[str, Any]) -> None:
    out = _out_type(imp, node)
    value = a.get("fill_value", a.get("s"))
    if not isinstance(value, (int, float, bool)):
        raise imp.unsupported(f"fill value {printable(repr(value), 60)}")
    imp.set(node, imp.const(value, out))


@handler("aten.arange.start_step", "aten.arange.default", "aten.arange.start")
def _arange(imp: Importer, node: Any, a: dict[str, Any]) -> None:
    # Integer aranges fold at import time. A float one is start + step * i computed in f64 and
    # rounded once to the dtype, as torch's kernel does (its accumulation type is double).
    out = _out_type(imp, node)
    start = a.get("start", 0) or 0
    step = a.get("step", 1) or 1
    wide = out.with_dtype(DType.F64)
    i = imp.emit("iota", [], wide, axis=0)
    y = imp.emit("add", [imp.const(start, wide), imp.emit("mul", [imp.const(step, wide), i])])
    imp.set(node, convert(imp, y, out.dtype))


# --- layout -----------------------------------------------------------------------------------


@handler("aten.view.default", "aten._unsafe_view.default", "aten.reshape.default")
def _view(imp: Importer, node: Any, a: dict[str, Any]) -> None:
    out = _out_type(imp, node)
    imp.set(node, reshape(imp, imp.dyn(a["self"]), out.shape))


@handler(
    "aten.unsqueeze.default", "aten.squeeze.dim", "aten.squeeze.dims", "aten.squeeze.default",
    "aten.flatten.using_ints",
)  # fmt: skip
def _squeeze(imp: Importer, node: Any, a: dict[str, Any]) -> None:
    out = _out_type(imp, node)  # these only insert or drop size-1 dims, or merge dims
    imp.set(node, reshape(imp, imp.dyn(a["self"]), out.shape))


@handler("aten.permute.default", "aten.transpose.int", "aten.t.default", "aten.numpy_T.default")
def _permute(imp: Importer, node: Any, a: dict[str, Any]) -> None:
    x = imp.dyn(a["self"])
    rank = imp.type_of(x).rank
    name = _op_name(node.target)
    if name == "aten.permute.default":
        perm = [_norm_dim(imp, d, rank) for d in a["dims"]]
    elif name == "aten.transpose.int":
        perm = list(range(rank))
        d0, d1 = _norm_dim(imp, a["dim0"], rank), _norm_dim(imp, a["dim1"], rank)
        perm[d0], perm[d1] = perm[d1], perm[d0]
    else:
        perm = list(range(rank))[::-1]
    if perm == list(range(rank)):
        imp.set(node, x)
        return
    imp.set(node, imp.emit("transpose", [x], perm=perm))


@handler("aten.expand.default", "aten.expand_as.default")
def _expand(imp: Importer, node: Any, a: dict[str, Any]) -> None:
    out = _out_type(imp, node)
    imp.set(node, bcast(imp, imp.dyn(a["self"]), out.shape))


@handler("aten.slice.Tensor")
def _slice(imp: Importer, node: Any, a: dict[str, Any]) -> None:
    x = imp.dyn(a["input"] if "input" in a else a["self"])
    t = imp.type_of(x)
    d = _norm_dim(imp, a.get("dim", 0) or 0, t.rank)
    step = a.get("step", 1) or 1
    if step < 1:
        raise imp.unsupported(f"step {step}")
    start, end = a.get("start"), a.get("end")
    start, end, _ = slice(start, end, step).indices(t.shape[d])
    end = max(end, start)
    n = len(range(start, end, step))
    limit = start + step * (n - 1) + 1 if n else start
    imp.set(node, _slice1(imp, x, d, start, limit, step))


@handler("aten.as_strided.default")
def _as_strided(imp: Importer, node: Any, a: dict[str, Any]) -> None:
    """`out[i] = storage[offset + sum_d i_d * stride_d]`, read as a slice, reshape and
    transpose of the input's elements in row-major order (`as_strided_view`). That reading is
    exact only when the input's storage *is* its elements in that order: torch recorded it as
    contiguous from storage offset 0, and the view reads none of the storage past them."""
    x = imp.dyn(a["self"])
    t = imp.type_of(x)
    meta = a["self"].meta.get("val") if isinstance(a["self"], torch.fx.Node) else None
    if meta is None or not hasattr(meta, "is_contiguous"):
        raise imp.unsupported("its input has no recorded layout")
    if not meta.is_contiguous() or int(meta.storage_offset()) != 0:
        raise imp.unsupported(
            f"its input is itself a strided view (strides {list(meta.stride())}, storage "
            f"offset {int(meta.storage_offset())}): its storage is not its elements in order"
        )
    sizes = [int(s) for s in a["size"]]
    strides = [int(s) for s in a["stride"]]
    offset = int(a.get("storage_offset") or 0)
    plan = as_strided_view(t.num_elements, sizes, strides, offset)
    if isinstance(plan, str):
        raise imp.unsupported(plan)
    y = reshape(imp, x, [t.num_elements])
    if plan.pad:
        zero = _py(np.zeros((), t.dtype.np)[()], t.dtype)
        y = imp.emit("pad", [y], low=[0], high=[plan.pad], value=zero)
    y = _slice1(imp, y, 0, plan.start, plan.start + math.prod(plan.block), 1)
    y = reshape(imp, y, plan.block)
    if plan.limit != plan.block or any(k != 1 for k in plan.step):
        y = imp.emit("slice", [y], start=[0] * len(plan.block), limit=plan.limit, stride=plan.step)
    if plan.perm != list(range(len(plan.perm))):
        y = imp.emit("transpose", [y], perm=plan.perm)
    imp.set(node, reshape(imp, y, sizes))


@dataclass(frozen=True)
class StridedView:
    """How `as_strided` reads a row-major sequence of elements: pad the sequence with `pad`
    zeros at the end (elements never read), take the product of `block` elements from
    `start`, reshape them to `block`, slice each dim from 0 to `limit` by `step`, then
    transpose by `perm`."""

    pad: int
    start: int
    block: list[int]
    limit: list[int]
    step: list[int]
    perm: list[int]


def as_strided_view(
    numel: int, sizes: Sequence[int], strides: Sequence[int], offset: int
) -> StridedView | str:
    """The slice-reshape-transpose reading of `as_strided(sizes, strides, offset)` over
    `numel` elements in row-major order, or why there is none.

    Dims of size 1 read position 0 only, so their strides do not matter; the others, by
    decreasing stride s_1 > ... > s_k with sizes n_1..n_k, read `offset + sum i_j s_j`. When
    each stride but the last is a multiple of the next, s_j >= n_{j+1} s_{j+1} (j < k-1) and
    (n_k - 1) s_k < s_{k-1}, that is element (i_1, ..., i_{k-1}, i_k s_k) of the `n_1 s_1`
    elements from `offset` reshaped to [n_1, s_1/s_2, ..., s_{k-2}/s_{k-1}, s_{k-1}]: each
    index fits its dim, so a slice (step s_k in the last dim) takes exactly those elements.
    Overlapping views (a stride 0, or two indices reading one element) and views outside that
    form are refused, as are views that read past the elements."""
    if len(sizes) != len(strides):
        return f"{len(sizes)} sizes but {len(strides)} strides"
    if any(n < 0 for n in sizes) or offset < 0:
        return f"negative sizes or storage offset (sizes {list(sizes)}, offset {offset})"
    live = [d for d, n in enumerate(sizes) if n > 1]
    if 0 in sizes:
        return StridedView(0, 0, [0], [0], [1], [0])
    if any(strides[d] < 0 for d in live):
        return f"negative strides {list(strides)}"
    last = offset + sum((sizes[d] - 1) * strides[d] for d in live)
    if last >= numel:
        return (
            f"the view reads element {last} of an input of {numel} element(s) (storage past "
            "the input's own elements)"
        )
    if not live:
        return StridedView(0, offset, [1], [1], [1], [0])
    order = sorted(live, key=lambda d: -strides[d])
    s = [strides[d] for d in order]
    n = [sizes[d] for d in order]
    k = len(order)
    if s[-1] == 0:
        return f"stride 0 on dim {order[-1]} of size {n[-1]}: overlapping (a broadcast)"
    overlap = (
        f"overlapping strides: sizes {list(sizes)} with strides {list(strides)} read some "
        "elements twice"
    )
    for j in range(k - 1):
        within = s[j] >= n[j + 1] * s[j + 1] if j < k - 2 else s[j] > (n[j + 1] - 1) * s[j + 1]
        if s[j] % s[j + 1] and (j < k - 2 or not within):
            return (
                f"strides {list(strides)} (sizes {list(sizes)}) do not nest (a stride that is "
                "not a multiple of the next smaller one, past the last): not expressible as "
                "slice, reshape and transpose"
            )
        if not within:  # a multiple: i_j = 1 reads what i_{j+1} = s_j / s_{j+1} reads
            return overlap
    if k == 1:
        block, limit, step = [n[0] * s[0]], [(n[0] - 1) * s[0] + 1], [s[0]]
    else:
        block = [n[0]] + [s[j] // s[j + 1] for j in range(k - 2)] + [s[-2]]
        limit = [*n[:-1], (n[-1] - 1) * s[-1] + 1]
        step = [1] * (k - 1) + [s[-1]]
    pad = max(0, offset + math.prod(block) - numel)
    perm = [order.index(d) for d in live]
    return StridedView(pad, offset, block, limit, step, perm)


@handler("aten.select.int")
def _select(imp: Importer, node: Any, a: dict[str, Any]) -> None:
    x = imp.dyn(a["self"])
    t = imp.type_of(x)
    d = _norm_dim(imp, a["dim"], t.rank)
    i = a["index"]
    if not -t.shape[d] <= i < t.shape[d]:
        raise imp.unsupported(f"index {i} is out of range for dim {d} of {t}")
    i = i + t.shape[d] if i < 0 else i
    y = _slice1(imp, x, d, i, i + 1, 1)
    imp.set(node, reshape(imp, y, [s for k, s in enumerate(t.shape) if k != d]))


@handler("aten.cat.default")
def _cat(imp: Importer, node: Any, a: dict[str, Any]) -> None:
    out = _out_type(imp, node)
    xs = [imp.dyn(v) for v in a["tensors"]]
    xs = [convert(imp, x, out.dtype) for x in xs if imp.type_of(x).num_elements or len(xs) == 1]
    if not xs:  # every input empty
        imp.set(node, imp.const(0, out))
        return
    d = _norm_dim(imp, a.get("dim", 0) or 0, out.rank)
    imp.set(node, xs[0] if len(xs) == 1 else imp.emit("concat", xs, axis=d))


@handler("aten.split_with_sizes.default", "aten.split.Tensor")
def _split(imp: Importer, node: Any, a: dict[str, Any]) -> None:
    x = imp.dyn(a["self"])
    t = imp.type_of(x)
    d = _norm_dim(imp, a.get("dim", 0) or 0, t.rank)
    if "split_sizes" in a:
        sizes = list(a["split_sizes"])
    else:
        chunk = a["split_size"]
        sizes = [min(chunk, t.shape[d] - k) for k in range(0, t.shape[d], chunk)] or [0]
    parts: list[Val | None] = []
    pos = 0
    for s in sizes:
        y = _slice1(imp, x, d, pos, pos + s, 1)
        parts.append(Val(imp.type_of(y), name=y))
        pos += s
    imp.tuples[node.name] = parts


@handler("aten.constant_pad_nd.default")
def _pad(imp: Importer, node: Any, a: dict[str, Any]) -> None:
    x = imp.dyn(a["self"])
    t = imp.type_of(x)
    pad = list(a["pad"])
    if len(pad) % 2 or len(pad) // 2 > t.rank:
        raise imp.unsupported(f"pad {pad}")
    low, high = [0] * t.rank, [0] * t.rank
    for k in range(len(pad) // 2):  # pairs run from the last dim backwards
        low[t.rank - 1 - k], high[t.rank - 1 - k] = pad[2 * k], pad[2 * k + 1]
    if any(p < 0 for p in low + high):
        raise imp.unsupported("negative padding (cropping)")
    value = a.get("value", 0) or 0
    if t.dtype.is_int and not float(value).is_integer():
        raise imp.unsupported(f"pad value {value} on {t.dtype}")
    value = _py(np.asarray(value).astype(t.dtype.np)[()], t.dtype)
    imp.set(node, imp.emit("pad", [x], low=low, high=high, value=value))


def _wrap(imp: Importer, i: str, size: int) -> str:
    """Negative indices count from the end, as torch's; take then clamps (torch raises on an
    out-of-range index, so valid programs never see the clamp)."""
    t = imp.type_of(i)
    if not t.dtype.is_int:
        raise imp.unsupported(f"indices of type {t}")
    neg = imp.emit("cmp", [i, imp.const(0, t)], dir="lt")
    return imp.emit("select", [neg, imp.emit("add", [i, imp.const(size, t)]), i])


@handler("aten.embedding.default")
def _embedding(imp: Importer, node: Any, a: dict[str, Any]) -> None:
    w = imp.dyn(a["weight"])
    if imp.type_of(w).rank != 2:
        raise imp.unsupported(f"a weight of type {imp.type_of(w)} (rank 2 expected)")
    i = imp.dyn(a["indices"])
    if not imp.type_of(i).dtype.is_int:
        raise imp.unsupported(f"indices of type {imp.type_of(i)}")
    imp.set(node, imp.emit("take", [w, i], axis=0))


@handler("aten.index.Tensor")
def _index(imp: Importer, node: Any, a: dict[str, Any]) -> None:
    # x[i0, i1, ...] with index tensors on consecutive dims `first ..`: one take at the linear
    # index sum(i_k * stride_k) along those dims flattened.
    x = imp.dyn(a["self"])
    t = imp.type_of(x)
    idx = list(a["indices"])
    if any(v is not None and imp.val(v).type.dtype.is_bool for v in idx):
        raise imp.unsupported("a boolean mask index (its output shape depends on the data)")
    out = _out_type(imp, node)
    present = [k for k, v in enumerate(idx) if v is not None]
    if not present:
        imp.set(node, x)
        return
    first, last = present[0], present[-1]
    if present != list(range(first, last + 1)):
        raise imp.unsupported("index tensors on non-adjacent dims")
    dims = [t.shape[k] for k in present]
    flat = reshape(imp, x, [*t.shape[:first], math.prod(dims), *t.shape[last + 1 :]])
    statics = [imp.static(idx[k]) for k in present]
    if all(s is not None for s in statics):  # known indices: the linear index at import time
        arrays = np.broadcast_arrays(*[to_numpy(s).astype(np.int64) for s in statics])
        lin_static = np.zeros(arrays[0].shape, dtype=np.int64)
        for k, (i, size) in enumerate(zip(arrays, dims, strict=True)):
            if np.any((i < -size) | (i >= size)):
                raise imp.unsupported(f"an index is out of range for a dim of size {size}")
            lin_static += np.where(i < 0, i + size, i) * math.prod(dims[k + 1 :])
        c = imp.const(lin_static, TensorType(DType.I64, lin_static.shape))
        imp.set(node, reshape(imp, imp.emit("take", [flat, c], axis=first), out.shape))
        return
    irs = [imp.dyn(idx[k]) for k in present]
    bshape = broadcast_shape(imp, *[imp.type_of(i).shape for i in irs])
    lin = None
    for k, (i, size) in enumerate(zip(irs, dims, strict=True)):
        i = bcast(imp, _wrap(imp, convert(imp, i, DType.I64), size), bshape)
        stride = math.prod(dims[k + 1 :])
        if stride != 1:
            i = imp.emit("mul", [i, imp.const(stride, imp.type_of(i))])
        lin = i if lin is None else imp.emit("add", [lin, i])
    assert lin is not None
    y = imp.emit("take", [flat, lin], axis=first)
    imp.set(node, reshape(imp, y, out.shape))


# --- reductions -------------------------------------------------------------------------------


def _dims(imp: Importer, dims: Any, rank: int) -> list[int]:
    if dims is None or (isinstance(dims, (list, tuple)) and len(dims) == 0):
        return list(range(rank))
    if isinstance(dims, int):
        dims = [dims]
    return sorted({_norm_dim(imp, d, rank) for d in dims})


def _keepdim(imp: Importer, r: str, t: TensorType, axes: list[int], keep: bool) -> str:
    if not keep:
        return r
    return reshape(imp, r, [1 if d in axes else s for d, s in enumerate(t.shape)])


@handler(
    "aten.sum.dim_IntList", "aten.sum.default", "aten.mean.dim", "aten.mean.default",
    "aten.amax.default", "aten.amin.default", "aten.any.dim", "aten.any.dims",
    "aten.any.default", "aten.all.dim", "aten.all.default",
)  # fmt: skip
def _reduce(imp: Importer, node: Any, a: dict[str, Any]) -> None:
    name = _op_name(node.target)
    out = _out_type(imp, node)
    x = imp.dyn(a["self"])
    t = imp.type_of(x)
    axes = _dims(imp, a.get("dim"), t.rank)
    keep = bool(a.get("keepdim", False))
    if name.startswith(("aten.any", "aten.all")):
        # over booleans: any = max, all = min, computed on u8 0/1, whose empty folds (0 and
        # 255) are torch's any and all of nothing, false and true (i8's -128 was true)
        b = _as_bool(imp, a["self"], t.shape)
        n = convert(imp, b, DType.U8)
        r = imp.emit("reduce_max" if "any" in name else "reduce_min", [n], axes=axes)
        r = imp.emit("cmp", [r, imp.const(0, imp.type_of(r))], dir="ne")
        imp.set(node, _keepdim(imp, r, t, axes, keep))
        return
    if name.startswith(("aten.amax", "aten.amin")):
        if t.dtype.is_bool:
            raise imp.unsupported("boolean operands are not supported")
        r = imp.emit("reduce_max" if "amax" in name else "reduce_min", [x], axes=axes)
        imp.set(node, _keepdim(imp, r, t, axes, keep))
        return
    if t.dtype.is_bool:
        x = convert(imp, x, out.dtype)
    # sum and mean accumulate in the opmath dtype of the result (f32 for f16 and bf16)
    acc = _opmath(out.dtype)
    x = convert(imp, x, acc)
    r = imp.emit("reduce_sum", [x], axes=axes) if axes else x
    if name.startswith("aten.mean"):
        if not out.dtype.is_float:
            raise imp.unsupported(f"an integer mean ({out.dtype})")
        n = math.prod(t.shape[d] for d in axes)
        r = imp.emit("div", [r, imp.const(float(n), imp.type_of(r))])
    imp.set(node, _keepdim(imp, convert(imp, r, out.dtype), t, axes, keep))


@handler("aten.max.dim", "aten.min.dim")
def _max_dim(imp: Importer, node: Any, a: dict[str, Any]) -> None:
    # (values, indices): a reduce_max/min and the first position of the extreme (argmax's
    # rule: a NaN is the extreme).
    x = imp.dyn(a["self"])
    t = imp.type_of(x)
    if t.dtype.is_bool:
        raise imp.unsupported("boolean operands are not supported")
    axes = _dims(imp, a["dim"], t.rank)
    largest = _op_name(node.target) == "aten.max.dim"
    keep = bool(a.get("keepdim"))
    r = _keepdim(imp, imp.emit("reduce_max" if largest else "reduce_min", [x], axes=axes), t,
                 axes, keep)  # fmt: skip
    if t.rank == 0:
        i = imp.const(0, TensorType(DType.I64, ()))
    else:
        if t.shape[axes[0]] == 0:
            raise imp.unsupported(f"dim {axes[0]} of {t} is empty: there is no index to give")
        i = _keepdim(imp, arg_extreme(imp, x, axes[0], largest, False), t, axes, keep)
    imp.tuples[node.name] = [_v(imp, r), _v(imp, i)]


@handler("aten.argmax.default", "aten.argmin.default")
def _argmax(imp: Importer, node: Any, a: dict[str, Any]) -> None:
    # dim None: the index into the flattened tensor (keepdim keeps every dim as 1).
    x = imp.dyn(a["self"])
    t = imp.type_of(x)
    dim = a.get("dim")
    if dim is None:
        y, axis = reshape(imp, x, [t.num_elements]), 0
    else:
        y, axis = x, _norm_dim(imp, dim, t.rank)
        if t.rank == 0:
            y = reshape(imp, x, [1])
    yt = imp.type_of(y)
    if yt.shape[axis] == 0 and math.prod(s for d, s in enumerate(yt.shape) if d != axis):
        raise imp.unsupported(f"dim {axis} of {yt} is empty: there is no index to give")
    largest = _op_name(node.target) == "aten.argmax.default"
    r = arg_extreme(imp, y, axis, largest, False)
    if dim is None or t.rank == 0:
        shape = [1] * t.rank if a.get("keepdim") else []
    else:
        shape = (
            [1 if d == axis else s for d, s in enumerate(t.shape)]
            if a.get("keepdim")
            else [s for d, s in enumerate(t.shape) if d != axis]
        )
    imp.set(node, reshape(imp, r, shape))


@handler("aten.cumsum.default", "aten.cumprod.default")
def _cumulative(imp: Importer, node: Any, a: dict[str, Any]) -> None:
    # In the result dtype (integers and booleans promote to i64), accumulated in its opmath
    # dtype (f32 for f16 and bf16) and rounded back per output, as torch's CPU kernel does.
    # torch's float sum starts from +0.0 (0 + x0 + x1 ...), which differs from the IR's fold
    # only by turning -0.0 into +0.0; adding +0.0 to every element first is exactly that
    # (x + 0.0 = x except -0.0, and no running sum after 0 + x0 is -0.0).
    out = _out_type(imp, node)
    x = imp.dyn(a["self"])
    t = imp.type_of(x)
    if t.rank == 0:
        imp.set(node, convert(imp, x, out.dtype))
        return
    dim = _norm_dim(imp, a["dim"], t.rank)
    x = convert(imp, convert(imp, x, out.dtype), _opmath(out.dtype))
    ir = "cumsum" if _op_name(node.target) == "aten.cumsum.default" else "cumprod"
    xt = imp.type_of(x)
    if ir == "cumsum" and xt.dtype.is_float:
        x = imp.emit("add", [x, imp.const(0.0, xt)])
    imp.set(node, convert(imp, imp.emit(ir, [x], axis=dim), out.dtype))


@handler(
    "aten.sort.default", "aten.sort.stable", "aten.argsort.default", "aten.argsort.stable",
    "aten.topk.default",
)  # fmt: skip
def _sort(imp: Importer, node: Any, a: dict[str, Any]) -> None:
    # The IR argsort's stable order (NaN above every number, equal values by index); torch
    # promises stability only with stable=True, so this is one of the orders it may give.
    name = _op_name(node.target)
    x = imp.dyn(a["self"])
    t = imp.type_of(x)
    if t.rank == 0:
        raise imp.unsupported("sorting a scalar")
    axis = _norm_dim(imp, a.get("dim", -1), t.rank)
    if name == "aten.topk.default":
        k = int(a["k"])
        if not 0 <= k <= t.shape[axis]:
            raise imp.unsupported(f"k = {k} is outside [0, {t.shape[axis]}]")
        values, indices = sort_along(imp, x, axis, bool(a.get("largest", True)), k)
    else:
        values, indices = sort_along(imp, x, axis, bool(a.get("descending", False)))
    if name.startswith("aten.argsort"):
        imp.set(node, indices)
    else:
        imp.tuples[node.name] = [_v(imp, values), _v(imp, indices)]


@handler("aten.linalg_vector_norm.default")
def _vector_norm(imp: Importer, node: Any, a: dict[str, Any]) -> None:
    out = _out_type(imp, node)
    x = imp.dyn(a["self"])
    t = _require_float(imp, x)
    ord_ = a.get("ord", 2)
    if a.get("dtype") is not None:
        raise imp.unsupported("an explicit dtype")
    axes = _dims(imp, a.get("dim"), t.rank)
    xc, back = _narrow_in(imp, x)
    if ord_ == 2:
        r = imp.emit("sqrt", [imp.emit("reduce_sum", [imp.emit("mul", [xc, xc])], axes=axes)])
    elif ord_ == 1:
        r = imp.emit("reduce_sum", [imp.emit("abs", [xc])], axes=axes)
    elif ord_ == math.inf:
        r = imp.emit("reduce_max", [imp.emit("abs", [xc])], axes=axes)
    else:
        raise imp.unsupported(f"ord = {ord_} (1, 2 and inf are supported)")
    imp.set(node, _keepdim(imp, convert(imp, r, out.dtype), t, axes, bool(a.get("keepdim"))))


# --- composites ---------------------------------------------------------------------------------


@handler(
    "aten._softmax.default", "aten.softmax.int", "aten._log_softmax.default", "aten.log_softmax.int"
)
def _softmax(imp: Importer, node: Any, a: dict[str, Any]) -> None:
    out = _out_type(imp, node)
    x = imp.dyn(a["self"])
    t = imp.type_of(x)
    if not out.dtype.is_float:
        raise imp.unsupported(f"{out.dtype} results are not supported")
    d = _norm_dim(imp, a["dim"], t.rank)
    ir = "log_softmax" if "log_softmax" in _op_name(node.target) else "softmax"
    xc = convert(imp, x, _opmath(out.dtype) if t.dtype.is_float else out.dtype)
    xc = convert(imp, xc, _opmath(out.dtype))
    if t.rank == 0:
        xc = reshape(imp, xc, [1])
    y = imp.emit(ir, [xc], axis=d)
    imp.set(node, convert(imp, reshape(imp, y, out.shape), out.dtype))


@handler("aten.layer_norm.default", "aten.native_layer_norm.default")
def _layer_norm(imp: Importer, node: Any, a: dict[str, Any]) -> None:
    x = imp.dyn(a["input"])
    t = _require_float(imp, x)
    shape = list(a["normalized_shape"])
    k = len(shape)
    if k == 0 or list(t.shape[t.rank - k :]) != shape:
        raise imp.unsupported(f"normalized_shape {shape} does not end {t}")
    axes = list(range(t.rank - k, t.rank))
    xc, back = _narrow_in(imp, x)
    tc = imp.type_of(xc)
    inner = tc.with_shape(shape)
    gamma = a.get("weight")
    beta = a.get("bias")
    g = convert(imp, imp.dyn(gamma), tc.dtype) if gamma is not None else imp.const(1.0, inner)
    b = convert(imp, imp.dyn(beta), tc.dtype) if beta is not None else imp.const(0.0, inner)
    eps = float(a.get("eps", 1e-5))
    y = convert(imp, imp.emit("layer_norm", [xc, g, b], axes=axes, eps=eps), back)
    if _op_name(node.target) == "aten.layer_norm.default":
        imp.set(node, y)
        return
    # native_layer_norm also returns the mean and 1/sqrt(var + eps), with reduced dims kept.
    kept = [s if d < t.rank - k else 1 for d, s in enumerate(t.shape)]
    n = imp.const(float(math.prod(shape)), tc.with_shape(t.shape[: t.rank - k]))
    mean = imp.emit("div", [imp.emit("reduce_sum", [xc], axes=axes), n])
    dev = imp.emit("sub", [xc, imp.emit("broadcast", [mean], tc, dims=list(range(t.rank - k)))])
    var = imp.emit("div", [imp.emit("reduce_sum", [imp.emit("mul", [dev, dev])], axes=axes), n])
    rstd = imp.emit("rsqrt", [imp.emit("add", [var, imp.const(eps, imp.type_of(var))])])
    imp.tuples[node.name] = [
        Val(imp.type_of(y), name=y),
        _v(imp, convert(imp, reshape(imp, mean, kept), _opmath(back))),
        _v(imp, convert(imp, reshape(imp, rstd, kept), _opmath(back))),
    ]


def _v(imp: Importer, ir: str) -> Val:
    return Val(imp.type_of(ir), name=ir)


@handler("aten.linear.default")
def _linear(imp: Importer, node: Any, a: dict[str, Any]) -> None:
    # x @ w^T + b: x flattened to 2-D, one matmul with the transposed weight, the bias added.
    out = _out_type(imp, node)
    x = imp.dyn(a["input"])
    w = imp.dyn(a["weight"])
    tx, tw = imp.type_of(x), imp.type_of(w)
    if tx.dtype != tw.dtype or not tx.dtype.is_float:
        raise imp.unsupported(f"operands {tx} and {tw}")
    acc = _opmath(tx.dtype)
    x, w = convert(imp, x, acc), convert(imp, w, acc)
    if tw.rank == 1:
        w = reshape(imp, w, [1, tw.shape[0]])
    k = tx.shape[-1] if tx.rank else 1
    x2 = reshape(imp, x, [math.prod(tx.shape[:-1]), k])
    wt = imp.emit("transpose", [w], perm=[1, 0])
    y = imp.emit("matmul", [x2, wt])
    y = reshape(imp, y, out.shape)
    if a.get("bias") is not None:
        b = convert(imp, imp.dyn(a["bias"]), acc)
        y = imp.emit("add", [y, bcast(imp, b, out.shape)])
    imp.set(node, convert(imp, y, out.dtype))


@handler("aten.mm.default", "aten.bmm.default", "aten.matmul.default")
def _mm(imp: Importer, node: Any, a: dict[str, Any]) -> None:
    out = _out_type(imp, node)
    x, y = imp.dyn(a["self"]), imp.dyn(a["other" if "other" in a else "mat2"])
    if not out.dtype.is_float and out.dtype not in (DType.I32, DType.I64):
        raise imp.unsupported(f"{out.dtype} products")
    acc = _opmath(out.dtype)
    r = _matmul(imp, convert(imp, x, acc), convert(imp, y, acc))
    imp.set(node, convert(imp, r, out.dtype))


@handler("aten.addmm.default", "aten.baddbmm.default")
def _addmm(imp: Importer, node: Any, a: dict[str, Any]) -> None:
    # beta * input + alpha * (m1 @ m2); torch drops input when beta is 0.
    out = _out_type(imp, node)
    names = ("mat1", "mat2") if "mat1" in a else ("batch1", "batch2")
    acc = _opmath(out.dtype)
    m1, m2 = (convert(imp, imp.dyn(a[n]), acc) for n in names)
    r = _matmul(imp, m1, m2)
    t = imp.type_of(r)
    alpha, beta = a.get("alpha", 1), a.get("beta", 1)
    if alpha != 1:
        r = imp.emit("mul", [r, imp.const(alpha, t)])
    if beta != 0:
        c = bcast(imp, convert(imp, imp.dyn(a["self"]), acc), t.shape)
        if beta != 1:
            c = imp.emit("mul", [c, imp.const(beta, t)])
        r = imp.emit("add", [c, r])
    imp.set(node, convert(imp, r, out.dtype))


@handler("aten.convolution.default")
def _convolution(imp: Importer, node: Any, a: dict[str, Any]) -> None:
    # 1-D and 2-D cross-correlation (a 1-D one as 2-D with a height of 1), bias per channel.
    if a.get("transposed"):
        raise imp.unsupported("transposed convolution")
    out = _out_type(imp, node)
    x, w = imp.dyn(a["input"]), imp.dyn(a["weight"])
    tx, tw = imp.type_of(x), imp.type_of(w)
    if not tx.dtype.is_float or tx.dtype != tw.dtype:
        raise imp.unsupported(f"operands {tx} and {tw}")
    nsp = tx.rank - 2
    if nsp not in (1, 2):
        raise imp.unsupported(f"{nsp}-D convolution (1-D and 2-D are supported)")
    stride, padding, dilation = (list(a[k]) for k in ("stride", "padding", "dilation"))
    if len(padding) == 1 and nsp == 2:
        padding = padding * 2
    if nsp == 1:
        x = reshape(imp, x, [tx.shape[0], tx.shape[1], 1, tx.shape[2]])
        w = reshape(imp, w, [tw.shape[0], tw.shape[1], 1, tw.shape[2]])
        stride, padding, dilation = [1, *stride], [0, *padding], [1, *dilation]
    acc = _opmath(tx.dtype)
    x, w = convert(imp, x, acc), convert(imp, w, acc)
    y = imp.emit(
        "conv2d", [x, w], stride=stride, padding=[[p, p] for p in padding],
        dilation=dilation, groups=int(a.get("groups", 1)),
    )  # fmt: skip
    if a.get("bias") is not None:
        b = convert(imp, imp.dyn(a["bias"]), acc)
        y = imp.emit("add", [y, imp.emit("broadcast", [b], imp.type_of(y), dims=[1])])
    imp.set(node, convert(imp, reshape(imp, y, out.shape), out.dtype))


@handler("aten._native_batch_norm_legit_no_training.default")
def _batch_norm(imp: Importer, node: Any, a: dict[str, Any]) -> None:
    # Inference in the form torch's CPU kernel computes (batch_norm_cpu_collect_linear_and_
    # constant_terms): per channel (dim 1) invstd = 1 / sqrt(var + eps), alpha = invstd *
    # weight and beta = bias - mean * alpha, then x * alpha + beta, one multiply and one add
    # per element (torch's build fuses that multiply and add, and the one in beta, into
    # fused multiply-adds; here each is rounded). The saved mean/invstd outputs are empty.
    x = imp.dyn(a["input"])
    t = _require_float(imp, x)
    xc, back = _narrow_in(imp, x)
    tc = imp.type_of(xc)
    c = t.shape[1] if t.rank > 1 else 1
    ct = tc.with_shape((c,))

    def chan(name: str) -> str | None:
        v = a.get(name)
        return None if v is None else convert(imp, imp.dyn(v), tc.dtype)

    var, mean, weight, bias = (chan(k) for k in ("running_var", "running_mean", "weight", "bias"))
    if var is None:
        raise imp.unsupported("batch norm without running statistics")
    std = imp.emit("sqrt", [imp.emit("add", [var, imp.const(float(a["eps"]), ct)])])
    alpha = imp.emit("div", [imp.const(1.0, ct), std])
    if weight is not None:
        alpha = imp.emit("mul", [alpha, weight])
    beta = imp.const(0.0, ct) if bias is None else bias
    if mean is not None:
        beta = imp.emit("sub", [beta, imp.emit("mul", [mean, alpha])])
    y = imp.emit("mul", [xc, imp.emit("broadcast", [alpha], tc, dims=[1])])
    y = imp.emit("add", [y, imp.emit("broadcast", [beta], tc, dims=[1])])
    imp.tuples[node.name] = [_v(imp, convert(imp, y, back)), None, None]


def _windows(
    imp: Importer, x: str, kernel: list[int], stride: list[int], padding: list[int],
    dilation: list[int], ceil_mode: bool, fill: float,
) -> tuple[list[str], list[int]]:  # fmt: skip
    """The pooling windows of x (N, C, H, W) as strided slices of the padded input, in window
    order (kh, then kw), and the output's spatial sizes (torch's formula, ceil_mode too)."""
    xp, outs = _padded(imp, x, kernel, stride, padding, dilation, ceil_mode, fill)
    return window_slices(imp, xp, kernel, stride, dilation, outs), outs


def _padded(
    imp: Importer, x: str, kernel: list[int], stride: list[int], padding: list[int],
    dilation: list[int], ceil_mode: bool, fill: float,
) -> tuple[str, list[int]]:  # fmt: skip
    """x (N, C, H, W) padded with `fill` for pooling windows, and the output's spatial sizes
    (torch's formula, ceil_mode too): the high side grows so every window position exists."""
    t = imp.type_of(x)
    spatial = list(t.shape[2:])
    outs = []
    for s, k, st, d, p in zip(spatial, kernel, stride, dilation, padding, strict=True):
        span = s + 2 * p - d * (k - 1) - 1
        o = (-(-span // st) if ceil_mode else span // st) + 1
        if ceil_mode and (o - 1) * st >= s + p:
            o -= 1  # the last window must start inside the input or the low padding
        if o < 1:
            raise imp.unsupported(f"the window does not fit {t}")
        outs.append(o)
    extra = [
        max((o - 1) * st + (k - 1) * d + 1 - (s + 2 * p), 0)
        for o, s, k, st, d, p in zip(outs, spatial, kernel, stride, dilation, padding, strict=True)
    ]  # fmt: skip
    lows = [0, 0, *padding]
    highs = [0, 0, *[p + e for p, e in zip(padding, extra, strict=True)]]
    xp = x if not any(lows + highs) else imp.emit("pad", [x], low=lows, high=highs, value=fill)
    return xp, outs


def _pool_args(imp: Importer, a: dict[str, Any], rank: int) -> tuple[list[int], ...]:
    def two(v: Any, default: int) -> list[int]:
        v = list(v) if v else [default]
        return v * 2 if len(v) == 1 else v

    if rank != 4:
        raise imp.unsupported(f"rank {rank} input (N, C, H, W expected)")
    kernel = two(a["kernel_size"], 1)
    stride = two(a.get("stride"), 0) if a.get("stride") else kernel
    return kernel, stride, two(a.get("padding"), 0), two(a.get("dilation"), 1)


@handler("aten.max_pool2d_with_indices.default", "aten.max_pool2d.default")
def _max_pool(imp: Importer, node: Any, a: dict[str, Any]) -> None:
    # max over the window (exact in any order); the indices output has no IR op.
    x = imp.dyn(a["self"])
    t = imp.type_of(x)
    if t.dtype.is_bool:
        raise imp.unsupported("boolean operands are not supported")
    kernel, stride, padding, dilation = _pool_args(imp, a, t.rank)
    fill = -math.inf if t.dtype.is_float else t.dtype.int_min
    ceil = bool(a.get("ceil_mode"))
    xp, outs = _padded(imp, x, kernel, stride, padding, dilation, ceil, fill)
    acc = window_max(imp, xp, kernel, stride, dilation, outs)
    if _op_name(node.target) == "aten.max_pool2d.default":
        imp.set(node, acc)
    else:
        imp.tuples[node.name] = [_v(imp, acc), None]


@handler("aten.avg_pool2d.default")
def _avg_pool(imp: Importer, node: Any, a: dict[str, Any]) -> None:
    # The window's sum in window order, divided by torch's count (padding cells counted with
    # count_include_pad, but never those past the padded border) or divisor_override.
    x = imp.dyn(a["self"])
    t = _require_float(imp, x)
    kernel, stride, padding, dilation = _pool_args(imp, a, t.rank)
    xc, back = _narrow_in(imp, x)
    wins, outs = _windows(imp, xc, kernel, stride, padding, [1, 1], bool(a.get("ceil_mode")), 0.0)
    acc = wins[0]
    for w in wins[1:]:
        acc = imp.emit("add", [acc, w])
    at = imp.type_of(acc)
    if a.get("divisor_override"):
        div = imp.const(float(a["divisor_override"]), at)
    else:
        include = a.get("count_include_pad", True)
        counts = np.ones(outs, dtype=np.float64)
        for dim, (s, k, st, p, o) in enumerate(
            zip(t.shape[2:], kernel, stride, padding, outs, strict=True)
        ):
            starts = np.arange(o) * st - p
            ends = np.minimum(starts + k, s + p)
            if not include:
                starts, ends = np.maximum(starts, 0), np.minimum(ends, s)
            shape = [1, 1]
            shape[dim] = o
            counts = counts * (ends - starts).astype(np.float64).reshape(shape)
        div = imp.const(np.broadcast_to(counts, at.shape).copy(), at)
    imp.set(node, convert(imp, imp.emit("div", [acc, div]), back))


@handler("aten._adaptive_avg_pool2d.default", "aten.adaptive_avg_pool2d.default")
def _adaptive_avg_pool(imp: Importer, node: Any, a: dict[str, Any]) -> None:
    # Where the output size divides the input's, the windows are a plain average pool.
    x = imp.dyn(a["self"])
    t = _require_float(imp, x)
    size = list(a["output_size"])
    if t.rank != 4 or any(o == 0 or s % o for s, o in zip(t.shape[2:], size, strict=True)):
        raise imp.unsupported(f"output size {size} does not divide {t}'s spatial dims")
    kernel = [s // o for s, o in zip(t.shape[2:], size, strict=True)]
    xc, back = _narrow_in(imp, x)
    wins, _ = _windows(imp, xc, kernel, kernel, [0, 0], [1, 1], False, 0.0)
    acc = wins[0]
    for w in wins[1:]:
        acc = imp.emit("add", [acc, w])
    div = imp.const(float(math.prod(kernel)), imp.type_of(acc))
    imp.set(node, convert(imp, imp.emit("div", [acc, div]), back))


@handler("aten.scaled_dot_product_attention.default")
def _sdpa(imp: Importer, node: Any, a: dict[str, Any]) -> None:
    # softmax(q @ k^T * scale + mask) @ v, the mask boolean (False: -inf) or additive.
    out = _out_type(imp, node)
    if a.get("dropout_p"):
        raise imp.unsupported("dropout_p != 0 (random masks) has no IR op")
    if a.get("enable_gqa"):
        raise imp.unsupported("enable_gqa (grouped-query attention)")
    q, k, v = (imp.dyn(a[n]) for n in ("query", "key", "value"))
    tq, tk, tv = (imp.type_of(n) for n in (q, k, v))
    if not tq.dtype.is_float or tq.rank < 2 or not (tq.dtype == tk.dtype == tv.dtype):
        raise imp.unsupported(f"operands {tq}, {tk}, {tv}")
    if tq.shape[:-2] != tk.shape[:-2] or tk.shape[:-2] != tv.shape[:-2]:
        raise imp.unsupported(f"batch dims of {tq}, {tk}, {tv} differ")
    acc = _opmath(tq.dtype)
    q, k, v = (convert(imp, n, acc) for n in (q, k, v))
    scale = a.get("scale")
    if scale is None:
        scale = 1.0 / math.sqrt(tq.shape[-1])
    rank = tq.rank
    kt = imp.emit("transpose", [k], perm=[*range(rank - 2), rank - 1, rank - 2])
    s = imp.emit("matmul", [q, kt])
    st = imp.type_of(s)
    s = imp.emit("mul", [s, imp.const(scale, st)])
    mask = a.get("attn_mask")
    if a.get("is_causal"):
        if mask is not None:
            raise imp.unsupported("is_causal with an attn_mask")
        lq, lk = tq.shape[-2], tk.shape[-2]
        tri = np.tril(np.ones((lq, lk), dtype=bool))
        c = imp.const(tri, TensorType(DType.I1, (lq, lk)))
        s = imp.emit("select", [bcast(imp, c, st.shape), s, imp.const(-math.inf, st)])
    elif mask is not None:
        m = imp.dyn(mask)
        mt = imp.type_of(m)
        m = bcast(imp, m, broadcast_shape(imp, mt.shape, st.shape))
        if mt.dtype.is_bool:
            s = imp.emit("select", [m, s, imp.const(-math.inf, st)])
        else:
            s = imp.emit("add", [s, convert(imp, m, acc)])
    p = imp.emit("softmax", [s], axis=rank - 1)
    y = imp.emit("matmul", [p, v])
    imp.set(node, convert(imp, y, out.dtype))


# --- public API -------------------------------------------------------------------------------

KEPT_OPS = (
    "linear", "layer_norm", "gelu", "softmax.int", "log_softmax.int",
    "scaled_dot_product_attention", "embedding", "matmul", "dropout",
)  # fmt: skip
"""ATen ops kept whole when the program is decomposed: each maps to an IR composite or a short
IR sequence more directly than its decomposition does."""


def _require_torch() -> None:
    if torch is None:
        raise IRError("importing PyTorch programs needs torch: pip install 'gdv[torch]'")


def decompose(ep: Any) -> Any:
    """`ep` in core ATen, except for `KEPT_OPS`."""
    _require_torch()
    table = torch.export.default_decompositions()
    for name in KEPT_OPS:
        packet, _, overload = name.partition(".")
        op = getattr(torch.ops.aten, packet)
        for o in [overload] if overload else op.overloads():
            table.pop(getattr(op, o), None)
    return ep.run_decompositions(table)


def load(path: str) -> Any:
    """The ExportedProgram saved in `path` (by `torch.export.save`); an IRError if it is not one."""
    _require_torch()
    loc = Loc(path, 1, 1)
    if not os.path.exists(path):
        raise IRError(f"no such file {printable(path, 200)}", loc)
    if os.path.isdir(path):
        raise IRError(f"{printable(path, 200)} is a directory", loc)
    if not zipfile.is_zipfile(path):
        raise IRError("not a torch.export program (.pt2): not a zip archive", loc)
    quiet = logging.getLogger("torch.export")
    level = quiet.level
    quiet.setLevel(logging.CRITICAL)  # torch logs a traceback before it raises
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            return torch.export.load(path)
    except Exception as e:  # zip, pickle and schema errors alike
        raise IRError(
            f"not a valid torch.export program (.pt2): {printable(str(e), 160)}", loc
        ) from None
    finally:
        quiet.setLevel(level)


def import_program(
    program: Any,
    *,
    input_ranges: Mapping[str, Sequence[float]] | None = None,
    filename: str | None = None,
) -> tuple[Module, dict[str, np.ndarray]]:
    """A `torch.export.ExportedProgram` (or a path to a saved one) as a verified graph-stage
    Module and its weights (parameter, buffer and constant values keyed by IR parameter name).

    `input_ranges` declares `range = [lo, hi]` on user inputs (by torch name). Raises `IRError`
    (an `Unsupported` for ops gdv cannot express) on anything it refuses."""
    _require_torch()
    if isinstance(program, (str, bytes)) or hasattr(program, "__fspath__"):
        path = str(program if not isinstance(program, bytes) else program.decode())
        program, filename = load(path), filename or path
    if not isinstance(program, torch.export.ExportedProgram):
        raise IRError(
            f"expected a torch.export.ExportedProgram, got {type(program).__name__}",
            Loc(filename or "<torch>", 1, 1),
        )
    ep = decompose(program)
    imp = Importer(ep, filename=filename or "<torch>", input_ranges=input_ranges)
    return imp.run()
