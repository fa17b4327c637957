"""C for the control flow ops (IR_SPEC.md section 9).

Each function a control flow op names is lowered once, by the same rules as the entry function
(its kernels, buffer plan and row groups: `backends/c/function.py`), into a C function
`gdv_fK(buf, args)`: `args` holds its parameters' pointers, then its results' (see
`Program.called_source`); its own values live in slots of the entry's `buf` (allocated with the
executable, like every other buffer), so a call allocates nothing. Functions are never recursive
(constraint C6), so one set of buffers per function is enough.

The ops of a group (same operands, same functions and attributes but `result`) denote one
evaluation: the first member evaluates it, into one buffer per result of the tuple, and every
member copies its own result from there. Per op:

- `if`: the chosen branch is called; the other is not evaluated.
- `while`: the state is copied into the result buffers, then for at most `max_trips` trips the
  condition is called on it and, when it holds, the body writes the next state into a second
  set of buffers and the two sets swap; the final state ends in the result buffers.
- `scan`: the states as for `while`; step t passes slice t of each scanned operand (a pointer
  into it: axis 0 is the outermost, so a slice is contiguous) and writes each output's slice t
  straight into its stacked result.

A call returns the callee's status (a kernel's packing buffers may fail to allocate); any
nonzero status is returned at once. An op of a called function the target cannot lower is a
compile-time error at that op; with `--allow-fallback` the whole control flow op then runs on
the reference backend (`gdv.backends.c.lower_module`).
"""

from __future__ import annotations

from gdv.backends.c.emit import CTYPE, Program, comment
from gdv.backends.c.function import lower_ops
from gdv.backends.c.registry import lowering
from gdv.ir.core import Function, Op, attr_key
from gdv.ir.ops.control import IF, SCAN, WHILE, result_types
from gdv.ir.types import TensorType


def _bytes(t: TensorType) -> int:
    return t.num_elements * t.dtype.itemsize


def _copy(dst: str, src: str, t: TensorType, indent: str = "  ") -> str:
    return f"{indent}memcpy({dst}, {src}, (size_t)INT64_C({_bytes(t)}));"


def _function(prog: Program, op: Op, attr: str) -> Function:
    fn = prog.module.function(op.attrs[attr])
    if fn is None:  # the verifier checks this (C1); a module built by hand may not be verified
        raise prog.error(op, f"{attr} names @{comment(str(op.attrs[attr]))}, not a function")
    return fn


def called(prog: Program, fn: Function) -> str:
    """The C name of `fn` as a called function, lowered now if it is not yet."""
    name = prog.called.get(fn.name)
    if name is not None:
        return name
    sub = prog.sub(fn)
    lower_ops(sub)
    name = f"gdv_f{len(prog.called)}"
    prog.functions.append(sub.called_source(name))
    prog.called[fn.name] = name
    return name


def _group_key(op: Op) -> tuple:
    attrs = tuple((k, attr_key(v)) for k, v in sorted(op.attrs.items()) if k != "result")
    return (op.name, tuple(op.operands), attrs)


def _call(name: str, args: list[str], indent: str) -> list[str]:
    return [
        f"{indent}{{",
        f"{indent}  void *const gdv_a[] = {{{', '.join(args)}}};",
        f"{indent}  const int gdv_st = {name}(buf, gdv_a);",
        f"{indent}  if (gdv_st != 0) return gdv_st;",
        f"{indent}}}",
    ]


def _state(
    prog: Program, operands: list[str], types: list[TensorType], out: list[int]
) -> tuple[list[str], list[str]]:
    """C declaring the state pointers `gdv_s` (in the result slots `out`) and `gdv_n` (a second
    set of slots), the state's initial value copied into `gdv_s`; and the lines that leave the
    final state in `out`."""
    scratch = []
    for t in types:
        scratch.append(len(prog.slot_types))
        prog.slot_types.append(t)
    lines = [
        f"    void *gdv_s[] = {{{', '.join(f'buf[{k}]' for k in out)}}};",
        f"    void *gdv_n[] = {{{', '.join(f'buf[{k}]' for k in scratch)}}};",
    ]
    for i, (v, t) in enumerate(zip(operands, types, strict=True)):
        lines.append(_copy(f"gdv_s[{i}]", prog.var(v), t, "    "))
    end = [f"    if (gdv_s[0] != buf[{out[0]}]) {{  /* an odd number of steps ran */"]
    end += [
        _copy(f"buf[{k}]", f"gdv_s[{i}]", t, "      ")
        for i, (k, t) in enumerate(zip(out, types, strict=True))
    ]
    end.append("    }")
    return lines, end


def _swap(n: int) -> list[str]:
    return [
        f"      for (int gdv_i = 0; gdv_i < {n}; gdv_i++) {{",
        "        void *const gdv_x = gdv_s[gdv_i];",
        "        gdv_s[gdv_i] = gdv_n[gdv_i];",
        "        gdv_n[gdv_i] = gdv_x;",
        "      }",
    ]


@lowering(IF, WHILE, SCAN)
def _control(prog: Program, op: Op) -> None:
    fn = prog.entry
    types = fn.types()
    operand_types = [types[v] for v in op.operands]
    key = _group_key(op)
    out = prog.groups.get(key)
    prog.new_slot(op.result, op.type)
    k = op.attrs["result"]
    if out is None:
        fns = {f.name: f for f in prog.module.functions}
        results = result_types(op, operand_types, fns)
        for t in results:
            if t.dtype not in CTYPE:
                raise prog.error(op, f"a result of dtype {t.dtype} has no C type")
        out = []
        for t in results:
            out.append(len(prog.slot_types))
            prog.slot_types.append(t)
        prog.body.append(f"  /* %{comment(op.result)} = {op.name}: every result of its group */")
        prog.body += _evaluate(prog, op, operand_types, results, out)
        prog.groups[key] = out
    prog.body.append(
        _copy(prog.var(op.result), f"buf[{out[k]}]", op.type)
        + f"  /* %{comment(op.result)}: result {k} */"
    )


def _evaluate(
    prog: Program, op: Op, operand_types: list[TensorType], results: list[TensorType], out: list
) -> list[str]:
    """C computing every result of `op`'s group into the slots `out`."""
    v = [prog.var(x) for x in op.operands]
    outs = [f"buf[{k}]" for k in out]
    if op.name == "if":
        then, other = (
            called(prog, _function(prog, op, "then")),
            called(prog, _function(prog, op, "else")),
        )
        return _call(
            f"({v[0]}[0] ? {then} : {other})", [*(f"(void *){x}" for x in v[1:]), *outs], "  "
        )
    if op.name == "while":
        cond = called(prog, _function(prog, op, "cond"))
        body = called(prog, _function(prog, op, "body"))
        n = len(op.operands)
        start, end = _state(prog, op.operands, operand_types, out)
        state = [f"gdv_s[{i}]" for i in range(n)]
        nxt = [f"gdv_n[{i}]" for i in range(n)]
        trips = int(op.attrs["max_trips"])
        return [
            f"  {{  /* at most {trips} trips */",
            *start,
            f"    for (int64_t gdv_trip = 0; gdv_trip < INT64_C({trips}); gdv_trip++) {{",
            "      uint8_t gdv_c = 0;",
            *_call(cond, [*state, "&gdv_c"], "      "),
            "      if (!gdv_c) break;",
            *_call(body, [*state, *nxt], "      "),
            *_swap(n),
            "    }",
            *end,
            "  }",
        ]
    # scan
    body = called(prog, _function(prog, op, "body"))
    m = int(op.attrs["num_scan_inputs"])
    p = len(op.operands) - m
    length = operand_types[p].shape[0]
    start, end = ([], []) if p == 0 else _state(prog, op.operands[:p], operand_types[:p], out[:p])
    state = [f"gdv_s[{i}]" for i in range(p)]
    nxt = [f"gdv_n[{i}]" for i in range(p)]
    xs = [
        f"(void *)({x} + gdv_t * INT64_C({t.num_elements // max(1, length)}))"
        for x, t in zip(v[p:], operand_types[p:], strict=True)
    ]
    ys = []
    for slot, t in zip(out[p:], results[p:], strict=True):
        c = CTYPE[t.dtype]
        step = t.num_elements // max(1, length)
        ys.append(f"(void *)(({c} *)buf[{slot}] + gdv_t * INT64_C({step}))")
    return [
        f"  {{  /* {length} steps */",
        *start,
        f"    for (int64_t gdv_t = 0; gdv_t < INT64_C({length}); gdv_t++) {{",
        *_call(body, [*state, *xs, *nxt, *ys], "      "),
        *(_swap(p) if p else []),
        "    }",
        *end,
        "  }",
    ]
