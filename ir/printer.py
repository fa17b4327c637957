"""IR -> canonical text. `parse(print(m)) == m` and `print(parse(print(m))) == print(m)`.

Canonical form: two-space indented ops, one per line; op attributes in the order the op's spec
declares them; parameter and function attributes in the order written; floats in their shortest
round-trip form (or, for a literal that is not an f64, its exact decimal expansion).
"""

from __future__ import annotations

import json
import math
from fractions import Fraction
from typing import Any

from gdv.ir import ops as op_registry
from gdv.ir.core import Function, Module, Op, Param
from gdv.ir.dtypes import DType
from gdv.ir.numerics import is_narrow_midpoint
from gdv.ir.types import TensorType


def print_module(module: Module) -> str:
    meshes = "".join(print_mesh(m) for m in module.meshes)
    if meshes:
        meshes += "\n"
    return meshes + "\n".join(print_function(f) for f in module.functions)


def print_mesh(mesh: Any) -> str:
    axes = ", ".join(f"{a} = {n}" for a, n in mesh.axes)
    return f"mesh @{mesh.name} = {{{axes}}}\n"


def print_function(fn: Function) -> str:
    params = ", ".join(_param(p) for p in fn.params)
    if len(fn.results) == 1 and not fn.results_parenthesized:
        results = str(fn.results[0])
    else:
        results = "(" + ", ".join(str(t) for t in fn.results) + ")"
    attrs = f" {format_attrs(fn.attrs)}" if fn.attrs else ""
    lines = [f"func @{fn.name}({params}) -> {results}{attrs} {{"]
    lines += [f"  {print_op(op)}" for op in fn.ops]
    returns = ", ".join(f"%{r}" for r in fn.returns)
    lines.append(f"  return {returns}".rstrip())
    lines.append("}")
    return "\n".join(lines) + "\n"


def print_op(op: Op) -> str:
    operands = ", ".join(f"%{o}" for o in op.operands)
    attrs = f" {format_attrs(_ordered(op))}" if op.attrs else ""
    return f"%{op.result} = {op.name}({operands}){attrs} : {op.type}"


def print_type(t: TensorType) -> str:
    return str(t)


def _ordered(op: Op) -> dict[str, Any]:
    spec = op_registry.get(op.name)
    if spec is None:
        return op.attrs
    order = {n: i for i, n in enumerate(spec.attr_names)}
    return dict(sorted(op.attrs.items(), key=lambda kv: order.get(kv[0], len(order))))


def _param(p: Param) -> str:
    attrs = f" {format_attrs(p.attrs)}" if p.attrs else ""
    return f"%{p.name}: {p.type}{attrs}"


def format_attrs(attrs: dict[str, Any]) -> str:
    return "{" + ", ".join(f"{k} = {format_value(v)}" for k, v in attrs.items()) + "}"


def format_value(v: Any) -> str:
    """One attribute value in canonical text."""
    if isinstance(v, bool):
        return "true" if v else "false"
    if isinstance(v, int):
        return str(v)
    if isinstance(v, float):
        return format_float(v)
    if isinstance(v, Fraction):
        return _exact_decimal(v)
    if isinstance(v, str):
        return json.dumps(v, ensure_ascii=True)
    if isinstance(v, DType):
        return v.value
    if isinstance(v, list | tuple):
        return "[" + ", ".join(format_value(x) for x in v) + "]"
    raise TypeError(f"not an attribute value: {v!r}")


def format_float(f: float) -> str:
    if math.isnan(f):
        return "nan"
    if is_narrow_midpoint(f):
        # The parser keeps the exact value of such a literal (so that it rounds once in every
        # dtype); only the exact expansion reads back as this f64.
        return _exact_decimal(Fraction(f))
    return repr(f)  # shortest round-trip: 1.0, -0.0, 0.1, 1e-05, inf, -inf


def _exact_decimal(q: Fraction) -> str:
    """The exact decimal expansion of a Fraction whose denominator is 2^a 5^b."""
    sign = "-" if q < 0 else ""
    num, den = abs(q.numerator), q.denominator
    scale = 0
    while den % 10 == 0 or den % 2 == 0 or den % 5 == 0:
        if den % 10 == 0:
            den //= 10
        elif den % 2 == 0:
            den //= 2
            num *= 5
        else:
            den //= 5
            num *= 2
        scale += 1
    assert den == 1, "a decimal literal has a denominator of the form 2^a 5^b"
    digits = str(num).rjust(scale + 1, "0")
    whole, frac = digits[: len(digits) - scale], digits[len(digits) - scale :]
    return f"{sign}{whole}.{frac or '0'}"
