"""Structured control flow: `if`, `while` and `scan` (IR_SPEC.md section 9; since gdv 0.7,
issue 19, a compatible addition).

A region body is a function of the module, named by a string attribute (as a kernel names its
body). Each op has one result, so a loop or branch with several results is written as one op per
result, `result = k` picking the k-th result of the body's tuple; ops with the same operands and
the same function attributes denote one evaluation (they are pure, so sharing it is only an
efficiency matter).

    %r = if(%c, %a0, ...) {then = "f", else = "g", result = k} : T
        %c : i1[]; @f and @g take (a0, ...) and return the same tuple; r = (c ? f : g)(a...)[k]
    %r = while(%v0, ...) {cond = "c", body = "b", max_trips = N, result = k} : T
        i = 0; while i < N and c(v): v = b(v); i += 1. r = v[k]. N is part of the meaning.
    %r = scan(%s0, ..., %x0, ...) {body = "f", num_scan_inputs = m, result = k} : T
        the last m operands are scanned on axis 0 (one length L); s = states;
        for t < L: (s, y_t) = f(s, x_t); results: the final states, then each y stacked on a
        new axis 0 (L = 0: the states unchanged, the y's empty).

The type rule here checks what the op alone shows; `check_control_bodies` (run by the verifier
on the whole module) checks the named functions, the written result type against the body's,
and that no function reaches itself through these ops.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from gdv.ir.core import Function, Module, Op
from gdv.ir.diagnostics import IRError, Loc
from gdv.ir.dtypes import DType
from gdv.ir.ops import (
    AttrSpec,
    OpSpec,
    OpTypeError,
    describe,
    kind_int,
    names_where,
    register,
)
from gdv.ir.types import TensorType

MAX_TRIPS = 2**31 - 1
"""The largest `max_trips` a `while` may declare (ONNX Loop's trip count is an i64, but no
program we run needs more; the bound keeps every evaluation finite and countable)."""

FUNCTION_ATTRS = {"if": ("then", "else"), "while": ("cond", "body"), "scan": ("body",)}
"""The attributes of each control op that name functions of the module."""

CONTROL = names_where(lambda s: s.family == "control", "The control flow ops.")


def kind_function(v: Any) -> str:
    if not isinstance(v, str) or not v:
        raise ValueError(f"expected a function name (a string), got {describe(v)}")
    return v


def kind_count(v: Any) -> int:
    v = kind_int(v)
    if v < 0:
        raise ValueError(f"expected an integer >= 0, got {v}")
    return v


def _infer_if(types: list[TensorType], attrs: dict[str, Any], written: TensorType) -> TensorType:
    c = types[0]
    if c != TensorType(DType.I1, ()):
        raise OpTypeError(f"the condition (operand 1) is {c}, expected i1[]", 0)
    return written


def _infer_while(types: list[TensorType], attrs: dict[str, Any], written: TensorType) -> TensorType:
    if attrs["max_trips"] > MAX_TRIPS:
        raise OpTypeError(
            f"max_trips {attrs['max_trips']} is more than the limit of {MAX_TRIPS}",
            attr="max_trips",
        )
    k = attrs["result"]
    if k >= len(types):
        raise OpTypeError(
            f"result {k} is out of range: the loop carries {len(types)} value(s)", attr="result"
        )
    return types[k]


def scan_length(types: list[TensorType], m: int) -> int:
    """L, the length of axis 0 of the scanned operands (the last m)."""
    return types[len(types) - m].shape[0]


def _infer_scan(types: list[TensorType], attrs: dict[str, Any], written: TensorType) -> TensorType:
    m = attrs["num_scan_inputs"]
    if not 1 <= m <= len(types):
        raise OpTypeError(
            f"num_scan_inputs {m} must be between 1 and the number of operands ({len(types)})",
            attr="num_scan_inputs",
        )
    first = len(types) - m
    for i in range(first, len(types)):
        t = types[i]
        if t.rank == 0:
            raise OpTypeError(f"scanned operand {i + 1} is {t}, it needs an axis 0 to scan", i)
        if t.shape[0] != types[first].shape[0]:
            raise OpTypeError(
                f"scanned operand {i + 1} is {t}, expected length {types[first].shape[0]} on "
                f"axis 0 like operand {first + 1} ({types[first]})",
                i,
            )
    return written


IF = register(
    OpSpec(
        "if",
        "control",
        1,
        None,
        (
            AttrSpec("then", kind_function),
            AttrSpec("else", kind_function),
            AttrSpec("result", kind_count),
        ),
        _infer_if,
        "r = then(a...)[result] if c else else(a...)[result]: only the chosen branch is "
        "evaluated; both take the operands after c and return the same tuple of types.",
        int_legal=True,
        storage_legal=True,
    )
)

WHILE = register(
    OpSpec(
        "while",
        "control",
        1,
        None,
        (
            AttrSpec("cond", kind_function),
            AttrSpec("body", kind_function),
            AttrSpec("max_trips", kind_count),
            AttrSpec("result", kind_count),
        ),
        _infer_while,
        "i = 0; v = operands; while i < max_trips and cond(v): v = body(v); i = i + 1. "
        "r = v[result]. max_trips is part of the meaning (a loop stops after that many trips).",
        int_legal=True,
        storage_legal=True,
    )
)

SCAN = register(
    OpSpec(
        "scan",
        "control",
        1,
        None,
        (
            AttrSpec("body", kind_function),
            AttrSpec("num_scan_inputs", kind_count),
            AttrSpec("result", kind_count),
        ),
        _infer_scan,
        "s = the first n - m operands; for t < L: (s, y_t) = body(s, x_t) with x_t the t-th "
        "slice on axis 0 of each of the last m operands; results: the final s, then each y "
        "stacked on a new axis 0 (length L).",
        int_legal=True,
        storage_legal=True,
    )
)


# --- the functions a control op names --------------------------------------------------------


def functions_named(op: Op) -> list[str]:
    """The functions control op `op` calls (none for another op)."""
    return [
        op.attrs[a] for a in FUNCTION_ATTRS.get(op.name, ()) if isinstance(op.attrs.get(a), str)
    ]


def called_functions(ops: Iterable[Op], module: Module) -> list[Function]:
    """The functions of `module` that `ops` name (a control flow op's branches, condition and
    body; a kernel's body and epilogue), and those they name in turn, sorted by name: what a
    claim about `ops`, or a target running them, needs besides them."""
    from gdv.ir.ops.kernel import bodies_used

    found: dict[str, Function] = {}
    todo = [Function("<ops>", [], [], list(ops), [])]
    while todo:
        fn = todo.pop()
        names = {n for o in fn.ops for n in functions_named(o)} | bodies_used([fn])
        for name in sorted(names - found.keys()):
            callee = module.function(name)
            if callee is not None:
                found[name] = callee
                todo.append(callee)
    return [found[n] for n in sorted(found)]


def bodies_called(functions: Iterable[Function]) -> set[str]:
    """Names of the functions the control ops of `functions` call."""
    return {name for f in functions for op in f.ops for name in functions_named(op)}


def slice_type(t: TensorType) -> TensorType:
    """The type of one slice of a scanned operand (axis 0 dropped)."""
    return TensorType(t.dtype, t.shape[1:])


def result_types(op: Op, operand_types: list[TensorType], fns: dict[str, Function]) -> list:
    """The tuple of types control op `op` gives (one per `result` value), from its body."""
    if op.name == "if":
        return list(fns[op.attrs["then"]].results)
    if op.name == "while":
        return list(operand_types)
    m = op.attrs["num_scan_inputs"]
    ns = len(operand_types) - m
    length = scan_length(operand_types, m)
    body = fns[op.attrs["body"]]
    ys = [TensorType(t.dtype, (length, *t.shape)) for t in body.results[ns:]]
    return list(operand_types[:ns]) + ys


def _signature(types: Iterable[TensorType]) -> str:
    return "(" + ", ".join(map(str, types)) + ")"


def _expect(
    fn: Function, params: list[TensorType], results: list[TensorType] | None, role: str, at: Loc
) -> None:
    got = [p.type for p in fn.params]
    if got != params:
        raise IRError(
            f"{role} @{fn.name} takes {_signature(got)}, expected {_signature(params)}", at
        )
    if results is not None and list(fn.results) != results:
        raise IRError(
            f"{role} @{fn.name} returns {_signature(fn.results)}, expected {_signature(results)}",
            at,
        )


def check_control_bodies(module: Module) -> None:
    """Every control op names functions of the module whose types fit it (IR_SPEC.md section 9,
    constraints C1-C6), its written result type is the one its body gives, and no function
    reaches itself through control ops."""
    fns = {f.name: f for f in module.functions}
    calls: dict[str, list[tuple[str, Op, str]]] = {}
    for fn in module.functions:
        types = fn.types()
        for op in fn.ops:
            if op.name not in FUNCTION_ATTRS:
                continue
            at = {
                a: op.attr_locs.get(a, op.loc) or Loc(module.filename, 1, 1)
                for a in (*FUNCTION_ATTRS[op.name], "result")
            }
            for a in FUNCTION_ATTRS[op.name]:
                if op.attrs[a] not in fns:
                    raise IRError(
                        f"{op.name}: {a} @{op.attrs[a]} is not a function of the module", at[a]
                    )
                calls.setdefault(fn.name, []).append((op.attrs[a], op, a))
            operand_types = [types[o] for o in op.operands]
            _check_signatures(op, operand_types, fns, at)
            results = result_types(op, operand_types, fns)
            k = op.attrs["result"]
            if k >= len(results):
                raise IRError(
                    f"{op.name}: result {k} is out of range: it gives {len(results)} value(s) "
                    f"{_signature(results)}",
                    at["result"],
                )
            if results[k] != op.type:
                raise IRError(
                    f"result type is written {op.type}, but result {k} of {op.name} is "
                    f"{results[k]}",
                    op.type_loc or op.loc or at["result"],
                )
    _check_no_cycle(calls, module.filename)


def _check_signatures(
    op: Op, types: list[TensorType], fns: dict[str, Function], at: dict[str, Loc]
) -> None:
    if op.name == "if":
        then, other = fns[op.attrs["then"]], fns[op.attrs["else"]]
        _expect(then, types[1:], None, "then branch", at["then"])
        _expect(other, types[1:], list(then.results), "else branch", at["else"])
    elif op.name == "while":
        _expect(fns[op.attrs["cond"]], types, [TensorType(DType.I1, ())], "cond", at["cond"])
        _expect(fns[op.attrs["body"]], types, types, "loop body", at["body"])
    else:
        m = op.attrs["num_scan_inputs"]
        ns = len(types) - m
        body = fns[op.attrs["body"]]
        _expect(
            body, types[:ns] + [slice_type(t) for t in types[ns:]], None, "scan body", at["body"]
        )
        if list(body.results[:ns]) != types[:ns]:
            raise IRError(
                f"scan body @{body.name} returns {_signature(body.results)}, expected the "
                f"{ns} state(s) {_signature(types[:ns])} first",
                at["body"],
            )


def _check_no_cycle(calls: dict[str, list[tuple[str, Op, str]]], filename: str) -> None:
    """No function calls itself, directly or through others (bodies are not recursive)."""
    state: dict[str, int] = {}  # 1: on the current path, 2: done
    for root in calls:
        if state.get(root):
            continue
        path: list[str] = [root]
        stack = [(root, iter(calls.get(root, [])))]
        state[root] = 1
        while stack:
            name, edges = stack[-1]
            nxt = next(edges, None)
            if nxt is None:
                state[name] = 2
                stack.pop()
                path.pop()
                continue
            callee, op, attr = nxt
            if state.get(callee) == 1:
                cycle = path[path.index(callee) :] + [callee]
                shown = " -> ".join(f"@{n}" for n in cycle)
                where = op.attr_locs.get(attr, op.loc) or Loc(filename, 1, 1)
                raise IRError(
                    f"{op.name}: {attr} @{callee} calls itself ({shown}); bodies are not recursive",
                    where,
                )
            if not state.get(callee):
                state[callee] = 1
                path.append(callee)
                stack.append((callee, iter(calls.get(callee, []))))


# --- functions in scope while running or encoding ---------------------------------------------


def function_of(op: Op, attr: str) -> Function:
    """The function control op `op` names in `attr`, from the functions put in scope with
    `gdv.ir.ops.kernel.kernel_bodies` (whoever runs or encodes a module puts all of its
    functions there); an IRError when no scope provides it."""
    from gdv.ir.ops import kernel

    name = op.attrs[attr]
    fn = (kernel._SCOPE.get() or {}).get(name)
    if fn is None:
        raise IRError(
            f"{op.name} {attr} @{name} is not in scope (run or encode the whole module)", op.loc
        )
    return fn
