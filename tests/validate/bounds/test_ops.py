"""Every op's rule is sound: for a small program around the op, on hypothesis-drawn ranges, float
dtypes and input families (random, range ends, aligned, near-constant, near-underflow), the
measured error |exact mode - ideal (f64) mode| never exceeds the rigorous bound plus the f64
reference's own bound, and the ideal values stay in the bound's exact interval. f64 programs,
whose ideal mode is themselves, are checked against 200-bit mpmath evaluation instead."""

from __future__ import annotations

import functools
from fractions import Fraction

import mpmath
import numpy as np
import pytest
from hypothesis import assume, given, settings
from hypothesis import strategies as st

from gdv.api import parse
from gdv.backends import reference
from gdv.ir.core import Op
from gdv.ir.dtypes import DType
from gdv.ir.ops import REGISTRY
from gdv.validate.bounds import RULES, analyze
from gdv.validate.bounds.measure import KINDS, make_inputs, output_errors

ANY = ["[-1.0, 1.0]", "[-100.0, 100.0]", "[0.001, 2.0]", "[-3.0, -0.01]", "[-1e-30, 1e-30]"]
POSITIVE = ["[0.001, 2.0]", "[0.5, 100.0]", "[1e-20, 1e-10]", "[3.0, 3.5]"]
SMALL = ["[-1.0, 1.0]", "[-5.0, 5.0]", "[-10.0, 0.0]", "[0.5, 3.0]"]
FLOATS = ["f32", "f16", "bf16"]

X1 = "%x: {dt}[4,6] {{range = {r1}}}"
X2 = "%x: {dt}[4,6] {{range = {r1}}}, %w: {dt}[4,6] {{range = {r2}}}"


def _case(params: str, body: str, result: str, r1=ANY, r2=ANY, dtypes=FLOATS) -> tuple:
    return (params, body, result, r1, r2, dtypes)


def _unary(op: str, r1=ANY) -> tuple:
    return _case(X1, f"%y = {op}(%x) : {{dt}}[4,6]", "{dt}[4,6]", r1)


def _binary(op: str, r1=ANY, r2=ANY) -> tuple:
    return _case(X2, f"%y = {op}(%x, %w) : {{dt}}[4,6]", "{dt}[4,6]", r1, r2)


BITWISE = ("bitwise_and", "bitwise_or", "bitwise_xor", "bitwise_not", "shift_left", "shift_right")
SUM_THEN = "%s = add(%x, %w) : {dt}[4,6]\n"  # an inexact operand for the exact ops
UNIT = ["[-0.999, 0.999]", "[-0.5, 0.9]", "[0.99, 0.9999]", "[-1e-30, 1e-30]"]
# (a declared range is widened outward by the analysis, so [-1.0, 1.0] itself is refused)
HALF_UNIT = ["[-0.45, 0.45]", "[0.0, 0.49]", "[-0.1, 0.3]"]  # x + w stays inside (-1, 1)
HALF_SMALL = ["[-0.7, 0.7]", "[0.1, 0.7]", "[-2.0, 2.0]"]  # tan of x + w: no pole for the first


def _of_sum(op: str, r: list[str]) -> tuple:
    return _case(X2, SUM_THEN + f"%y = {op}(%s) : {{dt}}[4,6]", "{dt}[4,6]", r, r)


CASES: dict[str, tuple] = {
    "neg": _case(X2, SUM_THEN + "%y = neg(%s) : {dt}[4,6]", "{dt}[4,6]"),
    "abs": _case(X2, SUM_THEN + "%y = abs(%s) : {dt}[4,6]", "{dt}[4,6]"),
    "relu": _case(X2, SUM_THEN + "%y = relu(%s) : {dt}[4,6]", "{dt}[4,6]"),
    "floor": _case(X2, SUM_THEN + "%y = floor(%s) : {dt}[4,6]", "{dt}[4,6]"),
    "exp": _unary("exp", SMALL),
    "log": _unary("log", POSITIVE),
    "sqrt": _unary("sqrt", POSITIVE + ["[0.0, 4.0]"]),
    "rsqrt": _unary("rsqrt", POSITIVE),
    "tanh": _unary("tanh"),
    "sigmoid": _unary("sigmoid"),
    "erf": _unary("erf"),
    "sin": _unary("sin", SMALL),
    "cos": _unary("cos", SMALL),
    # the inverse and hyperbolic trig functions and tan (issue 19), on exact operands and on an
    # inexact sum (x + w), whose error the derivative carries
    "tan": _unary("tan", ["[-1.0, 1.0]", "[-1.5, 1.5]", "[2.0, 4.0]", "[-100.0, -99.0]"]),
    "asin": _unary("asin", UNIT),
    "acos": _unary("acos", UNIT),
    "atan": _unary("atan"),
    "sinh": _unary("sinh", SMALL),
    "cosh": _unary("cosh", SMALL),
    "asinh": _unary("asinh"),
    "acosh": _unary("acosh", ["[1.0001, 2.0]", "[1.5, 100.0]", "[1.00001, 1.001]", "[1e6, 1e30]"]),
    "atanh": _unary("atanh", ["[-0.9, 0.9]", "[-0.999, 0.5]", "[0.0, 0.99]", "[-1e-30, 1e-30]"]),
    "tan_of_sum": _of_sum("tan", HALF_SMALL),
    "asin_of_sum": _of_sum("asin", HALF_UNIT),
    "acos_of_sum": _of_sum("acos", HALF_UNIT),
    "atan_of_sum": _of_sum("atan", ANY),
    "sinh_of_sum": _of_sum("sinh", HALF_SMALL),
    "cosh_of_sum": _of_sum("cosh", HALF_SMALL),
    "asinh_of_sum": _of_sum("asinh", ANY),
    "acosh_of_sum": _of_sum("acosh", ["[0.6, 1.0]", "[1.0, 50.0]"]),
    "atanh_of_sum": _of_sum("atanh", HALF_UNIT),
    "sqrt_of_sum": _case(
        X2, SUM_THEN + "%y = sqrt(%s) : {dt}[4,6]", "{dt}[4,6]", POSITIVE, POSITIVE
    ),
    "add": _binary("add"),
    "sub": _binary("sub"),
    "mul": _binary("mul"),
    "square": _case(X2, SUM_THEN + "%y = mul(%s, %s) : {dt}[4,6]", "{dt}[4,6]"),
    "div": _binary("div", ANY, POSITIVE),
    "max": _case(X2, SUM_THEN + "%y = max(%s, %x) : {dt}[4,6]", "{dt}[4,6]"),
    "min": _case(X2, SUM_THEN + "%y = min(%s, %w) : {dt}[4,6]", "{dt}[4,6]"),
    "pow": _binary("pow", POSITIVE, SMALL),
    "cmp_select": _case(
        X2,
        '%c = cmp(%x, %w) {{dir = "lt"}} : i1[4,6]\n%y = select(%c, %x, %w) : {dt}[4,6]',
        "{dt}[4,6]",
    ),
    "select_flip": _case(
        X2,
        SUM_THEN + '%c = cmp(%s, %x) {{dir = "ge"}} : i1[4,6]\n%y = select(%c, %s, %w) : {dt}[4,6]',
        "{dt}[4,6]",
    ),
    "convert_narrow": _case(
        X2, SUM_THEN + "%y = convert(%s) : bf16[4,6]", "bf16[4,6]", dtypes=["f32", "f16"]
    ),
    "convert_f16": _case(
        X2,
        SUM_THEN + "%y = convert(%s) : f16[4,6]",
        "f16[4,6]",
        r1=["[-1.0, 1.0]", "[-100.0, 100.0]", "[0.001, 2.0]"],
        r2=["[-1.0, 1.0]", "[0.001, 2.0]"],
        dtypes=["f32"],
    ),
    "convert_widen": _case(
        X2, SUM_THEN + "%y = convert(%s) : f32[4,6]", "f32[4,6]", dtypes=["f16", "bf16"]
    ),
    "convert_to_int": _case(
        X2, SUM_THEN + "%i = convert(%s) : i32[4,6]\n%y = convert(%i) : {dt}[4,6]", "{dt}[4,6]"
    ),
    "convert_to_i1": _case(
        X2, SUM_THEN + "%b = convert(%s) : i1[4,6]\n%y = convert(%b) : {dt}[4,6]", "{dt}[4,6]"
    ),
    "constant": _case(
        X1, "%c = constant() {{value = 0.1}} : {dt}[4,6]\n%y = mul(%x, %c) : {dt}[4,6]", "{dt}[4,6]"
    ),
    "iota": _case(
        X1, "%i = iota() {{axis = 1}} : {dt}[4,6]\n%y = add(%x, %i) : {dt}[4,6]", "{dt}[4,6]"
    ),
    "broadcast": _case(
        "%x: {dt}[6] {{range = {r1}}}, %w: {dt}[6] {{range = {r2}}}",
        "%s = add(%x, %w) : {dt}[6]\n%y = broadcast(%s) {{dims = [1]}} : {dt}[4,6]",
        "{dt}[4,6]",
    ),
    "reshape": _case(X2, SUM_THEN + "%y = reshape(%s) : {dt}[3,8]", "{dt}[3,8]"),
    "transpose": _case(
        X2, SUM_THEN + "%y = transpose(%s) {{perm = [1, 0]}} : {dt}[6,4]", "{dt}[6,4]"
    ),
    "slice": _case(
        X2,
        SUM_THEN + "%y = slice(%s) {{start = [1, 0], limit = [4, 6], stride = [2, 3]}} : {dt}[2,2]",
        "{dt}[2,2]",
    ),
    "concat": _case(X2, SUM_THEN + "%y = concat(%s, %x) {{axis = 0}} : {dt}[8,6]", "{dt}[8,6]"),
    "pad": _case(
        X2,
        SUM_THEN + "%y = pad(%s) {{low = [1, 0], high = [0, 2], value = 0.3}} : {dt}[5,8]",
        "{dt}[5,8]",
    ),
    "reduce_sum": _case(X1, "%y = reduce_sum(%x) {{axes = [1]}} : {dt}[4]", "{dt}[4]"),
    "reduce_sum_all": _case(X1, "%y = reduce_sum(%x) {{axes = [0, 1]}} : {dt}[]", "{dt}[]"),
    "cumsum": _case(X2, SUM_THEN + "%y = cumsum(%s) {{axis = 1}} : {dt}[4,6]", "{dt}[4,6]"),
    "cumsum_exclusive_reverse": _case(
        X1,
        "%y = cumsum(%x) {{axis = 0, exclusive = true, reverse = true}} : {dt}[4,6]",
        "{dt}[4,6]",
        POSITIVE,
    ),
    "cumprod": _case(
        X2, SUM_THEN + "%y = cumprod(%s) {{axis = 1}} : {dt}[4,6]", "{dt}[4,6]", SMALL, SMALL
    ),
    "cumprod_exclusive": _case(
        X1,
        "%y = cumprod(%x) {{axis = 1, exclusive = true}} : {dt}[4,6]",
        "{dt}[4,6]",
        POSITIVE,
    ),
    "argsort": _case(
        X2, SUM_THEN + "%y = argsort(%s) {{axis = 1, descending = true}} : i64[4,6]", "i64[4,6]"
    ),
    "argsort_exact_operand": _case(X1, "%y = argsort(%x) {{axis = 0}} : i64[4,6]", "i64[4,6]"),
    "reduce_max": _case(X2, SUM_THEN + "%y = reduce_max(%s) {{axes = [0]}} : {dt}[6]", "{dt}[6]"),
    "reduce_min": _case(X2, SUM_THEN + "%y = reduce_min(%s) {{axes = [1]}} : {dt}[4]", "{dt}[4]"),
    "dot": _case(
        "%x: {dt}[4,6] {{range = {r1}}}, %w: {dt}[6,5] {{range = {r2}}}",
        "%y = dot(%x, %w) {{lhs_batch = [], rhs_batch = [], lhs_contract = [1], "
        "rhs_contract = [0]}} : {dt}[4,5]",
        "{dt}[4,5]",
    ),
    "dot_acc_f32": _case(
        "%x: {dt}[4,16] {{range = {r1}}}, %w: {dt}[16,5] {{range = {r2}}}",
        "%y = dot(%x, %w) {{lhs_batch = [], rhs_batch = [], lhs_contract = [1], "
        "rhs_contract = [0], acc = f32}} : f32[4,5]",
        "f32[4,5]",
        dtypes=["bf16", "f16"],
    ),
    "dot_acc_f32_narrow_result": _case(
        "%x: {dt}[4,16] {{range = {r1}}}, %w: {dt}[16,5] {{range = {r2}}}",
        "%y = dot(%x, %w) {{lhs_batch = [], rhs_batch = [], lhs_contract = [1], "
        "rhs_contract = [0], acc = f32}} : {dt}[4,5]",
        "{dt}[4,5]",
        dtypes=["bf16", "f16"],
    ),
    "matmul": _case(
        "%x: {dt}[2,3,8] {{range = {r1}}}, %w: {dt}[2,8,4] {{range = {r2}}}",
        "%y = matmul(%x, %w) : {dt}[2,3,4]",
        "{dt}[2,3,4]",
    ),
    "conv2d": _case(
        "%x: {dt}[1,2,6,6] {{range = {r1}}}, %w: {dt}[3,2,3,3] {{range = {r2}}}",
        "%y = conv2d(%x, %w) {{stride = [1, 1], padding = [[1, 1], [1, 0]], "
        "dilation = [1, 1], groups = 1}} : {dt}[1,3,6,5]",
        "{dt}[1,3,6,5]",
    ),
    "take": _case(
        "%x: {dt}[5,6] {{range = {r1}}}, %w: {dt}[5,6] {{range = {r2}}}, "
        "%i: i32[3] {{range = [-2, 7]}}",
        "%s = add(%x, %w) : {dt}[5,6]\n%y = take(%s, %i) {{axis = 0}} : {dt}[3,6]",
        "{dt}[3,6]",
    ),
    "softmax": _case(X1, "%y = softmax(%x) {{axis = 1}} : {dt}[4,6]", "{dt}[4,6]"),
    "softmax_masked": _case(
        X1,
        "%q = iota() {{axis = 0}} : i32[4,6]\n%k = iota() {{axis = 1}} : i32[4,6]\n"
        '%c = cmp(%k, %q) {{dir = "le"}} : i1[4,6]\n'
        "%n = constant() {{value = -inf}} : {dt}[4,6]\n"
        "%m = select(%c, %x, %n) : {dt}[4,6]\n%y = softmax(%m) {{axis = 1}} : {dt}[4,6]",
        "{dt}[4,6]",
    ),
    "log_softmax": _case(X1, "%y = log_softmax(%x) {{axis = 1}} : {dt}[4,6]", "{dt}[4,6]"),
    "layer_norm": _case(
        "%x: {dt}[4,6] {{range = {r1}}}, %g: {dt}[6] {{range = [0.5, 1.5]}}, "
        "%b: {dt}[6] {{range = {r2}}}",
        "%y = layer_norm(%x, %g, %b) {{axes = [1], eps = 1e-05}} : {dt}[4,6]",
        "{dt}[4,6]",
    ),
    "layer_norm_of_inexact": _case(
        "%x: {dt}[4,6,8] {{range = {r1}}}, %g: {dt}[6] {{range = [0.5, 1.5]}}, "
        "%b: {dt}[6] {{range = {r2}}}",
        "%s = reduce_sum(%x) {{axes = [2]}} : {dt}[4,6]\n"
        "%y = layer_norm(%s, %g, %b) {{axes = [1], eps = 0.001}} : {dt}[4,6]",
        "{dt}[4,6]",
    ),
    "gelu": _case(X1, '%y = gelu(%x) {{approximate = "none"}} : {dt}[4,6]', "{dt}[4,6]"),
    "gelu_tanh": _case(X1, '%y = gelu(%x) {{approximate = "tanh"}} : {dt}[4,6]', "{dt}[4,6]"),
    "max_with_masked": _case(
        X2,
        "%q = iota() {{axis = 0}} : i32[4,6]\n%k = iota() {{axis = 1}} : i32[4,6]\n"
        '%c = cmp(%k, %q) {{dir = "le"}} : i1[4,6]\n'
        "%n = constant() {{value = -inf}} : {dt}[4,6]\n"
        "%m = select(%c, %x, %n) : {dt}[4,6]\n%y = max(%m, %w) : {dt}[4,6]",
        "{dt}[4,6]",
    ),
    "softmax_then_dot": _case(
        "%x: {dt}[4,6] {{range = {r1}}}, %w: {dt}[6,5] {{range = {r2}}}",
        "%p = softmax(%x) {{axis = 1}} : {dt}[4,6]\n"
        "%y = dot(%p, %w) {{lhs_batch = [], rhs_batch = [], lhs_contract = [1], "
        "rhs_contract = [0]}} : {dt}[4,5]",
        "{dt}[4,5]",
    ),
    "layer_norm_then_dot": _case(
        "%x: {dt}[4,6] {{range = {r1}}}, %g: {dt}[6] {{range = [0.5, 1.5]}}, "
        "%b: {dt}[6] {{range = [-0.1, 0.1]}}, %w: {dt}[5,6] {{range = {r2}}}",
        "%h = layer_norm(%x, %g, %b) {{axes = [1], eps = 1e-05}} : {dt}[4,6]\n"
        "%y = dot(%w, %h) {{lhs_batch = [], rhs_batch = [], lhs_contract = [1], "
        "rhs_contract = [1]}} : {dt}[5,4]",
        "{dt}[5,4]",
    ),
    "int_arith": _case(
        "%x: i32[4,6] {{range = [-1000, 1000]}}, %w: i32[4,6] {{range = [-50, 50]}}",
        "%p = mul(%x, %w) : i32[4,6]\n%s = sub(%p, %x) : i32[4,6]\n"
        "%m = max(%s, %w) : i32[4,6]\n%n = min(%m, %x) : i32[4,6]\n"
        "%r = reduce_sum(%n) {{axes = [1]}} : i32[4]\n%y = convert(%r) : {dt}[4]",
        "{dt}[4]",
    ),
    **{
        f"int_{name}": _case(
            "%x: i32[4,6] {{range = [-1000, 1000]}}, %w: i32[4,6] {{range = [-3, 40]}}",
            f"%b = {name}(%x{', %w' if name != 'bitwise_not' else ''}) : i32[4,6]\n"
            "%y = convert(%b) : {dt}[4,6]",
            "{dt}[4,6]",
        )
        for name in BITWISE
    },
    "rem": _binary("rem", ANY, POSITIVE),
    "int_rem": _case(
        "%x: i32[4,6] {{range = [-1000, 1000]}}, %w: i32[4,6] {{range = [-7, 40]}}",
        "%b = rem(%x, %w) : i32[4,6]\n%y = convert(%b) : {dt}[4,6]",
        "{dt}[4,6]",
    ),
    "int_div": _case(
        "%x: i32[4,6] {{range = [-1000, 1000]}}, %w: i32[4,6] {{range = [-7, 40]}}",
        "%b = div(%x, %w) : i32[4,6]\n%y = convert(%b) : {dt}[4,6]",
        "{dt}[4,6]",
    ),
    "int_mod": _case(
        "%x: i32[4,6] {{range = [-1000, 1000]}}, %w: i32[4,6] {{range = [-7, 40]}}",
        "%b = mod(%x, %w) : i32[4,6]\n%y = convert(%b) : {dt}[4,6]",
        "{dt}[4,6]",
    ),
    "int_dot_wraps": _case(
        "%x: i8[4,6] {{range = [-100, 100]}}, %w: i8[6,5] {{range = [-100, 100]}}",
        "%d = dot(%x, %w) {{lhs_batch = [], rhs_batch = [], lhs_contract = [1], "
        "rhs_contract = [0]}} : i8[4,5]\n%y = convert(%d) : {dt}[4,5]",
        "{dt}[4,5]",
    ),
    "uint_arith_wraps": _case(
        "%x: u8[4,6] {{range = [0, 255]}}, %w: u16[4,6] {{range = [0, 300]}}",
        "%a = convert(%x) : u16[4,6]\n%p = mul(%a, %w) : u16[4,6]\n"
        "%m = max(%p, %w) : u16[4,6]\n%r = reduce_sum(%m) {{axes = [1]}} : u16[4]\n"
        "%y = convert(%r) : {dt}[4]",
        "{dt}[4]",
    ),
    "float_to_uint_saturates": _case(
        X2, SUM_THEN + "%u = convert(%s) : u8[4,6]\n%y = convert(%u) : {dt}[4,6]", "{dt}[4,6]"
    ),
    "convert_to_float8": _case(
        X2,
        SUM_THEN + "%q = convert(%s) : f8e4m3fn[4,6]\n%y = convert(%q) : {dt}[4,6]",
        "{dt}[4,6]",
        ["[-1.0, 1.0]", "[-100.0, 100.0]", "[0.001, 2.0]", "[-1e-3, 1e-3]"],
        ["[-1.0, 1.0]", "[-100.0, 100.0]", "[-3.0, -0.01]", "[-1e-3, 1e-3]"],
    ),
    "convert_to_int4": _case(
        X2,
        SUM_THEN + "%q = convert(%s) : i4[4,6]\n%r = convert(%q) : u2[4,6]\n"
        "%y = convert(%r) : {dt}[4,6]",
        "{dt}[4,6]",
        ["[-1.0, 1.0]", "[-100.0, 100.0]", "[0.001, 2.0]", "[-3.0, 3.0]"],
        ["[-1.0, 1.0]", "[-3.0, -0.01]", "[0.5, 3.0]"],
    ),
    "convert_float8_formats": _case(
        X2,
        SUM_THEN + "%q = convert(%s) {{saturate = false}} : f8e5m2fnuz[4,6]\n"
        "%r = convert(%q) : f8e4m3fnuz[4,6]\n%y = convert(%r) : {dt}[4,6]",
        "{dt}[4,6]",
        ["[-1.0, 1.0]", "[-100.0, 100.0]", "[0.001, 2.0]", "[-1e-3, 1e-3]"],
        ["[-1.0, 1.0]", "[-100.0, 100.0]", "[-3.0, -0.01]", "[-1e-3, 1e-3]"],
    ),
    "kernel_dot_like": _case(
        "%x: {dt}[4,6] {{range = {r1}}}, %w: {dt}[6,5] {{range = {r2}}}",
        '%y = kernel(%x, %w) {{body = "kbody", space = [4, 5, 6], '
        "maps = [[[1, 0, 0, 0], [0, 0, 1, 0]], [[0, 0, 1, 0], [0, 1, 0, 0]]], out = [0, 1], "
        'reduce = [2], combiner = "add"}} : {dt}[4,5]',
        "{dt}[4,5]",
    ),
    # The condition is computed from rounded values, so it may flip near 0 (sum(x) vs 0).
    "if_on_a_rounded_condition": _case(
        X2,
        "%s = reduce_sum(%x) {{axes = [0, 1]}} : {dt}[]\n"
        "%z = constant() {{value = 0.0}} : {dt}[]\n"
        '%c = cmp(%s, %z) {{dir = "gt"}} : i1[]\n'
        '%y = if(%c, %x, %w) {{then = "ithen", else = "ielse", result = 0}} : {dt}[4,6]',
        "{dt}[4,6]",
        ["[-1.0, 1.0]", "[-100.0, 100.0]", "[0.001, 2.0]", "[-1e-3, 1e-3]"],
    ),
}

IF_BODIES = (
    "func @ithen(%a: {dt}[4,6], %b: {dt}[4,6]) -> {dt}[4,6] {{\n  %p = mul(%a, %b) : {dt}[4,6]\n"
    "  %r = add(%p, %a) : {dt}[4,6]\n  return %r\n}}\n"
    "func @ielse(%a: {dt}[4,6], %b: {dt}[4,6]) -> {dt}[4,6] {{\n  %r = sub(%a, %b) : {dt}[4,6]\n"
    "  return %r\n}}\n"
)
"""The branches of the if case (`x * w + x` and `x - w`)."""

KERNEL_BODY = (
    "func @kbody(%a: {dt}[], %b: {dt}[]) -> {dt}[] {{\n  %p = mul(%a, %b) : {dt}[]\n"
    "  %r = add(%p, %a) : {dt}[]\n  return %r\n}}\n"
)
"""The body of the kernel cases (`x * w + x` per reduced position)."""

OP_OF_CASE = {
    "int_rem": "rem",
    "int_div": "div",
    "int_mod": "mod",
    **{f"int_{name}": name for name in BITWISE},
    **{f"{n}_of_sum": n for n in ("tan asin acos atan sinh cosh asinh acosh atanh".split())},
    "sqrt_of_sum": "sqrt",
    "square": "mul",
    "cmp_select": "select",
    "select_flip": "cmp",
    "convert_narrow": "convert",
    "convert_f16": "convert",
    "convert_widen": "convert",
    "convert_to_int": "convert",
    "convert_to_i1": "convert",
    "reduce_sum_all": "reduce_sum",
    "cumsum_exclusive_reverse": "cumsum",
    "argsort_exact_operand": "argsort",
    "cumprod_exclusive": "cumprod",
    "dot_acc_f32": "dot",
    "dot_acc_f32_narrow_result": "dot",
    "softmax_masked": "softmax",
    "gelu_tanh": "gelu",
    "int_arith": "add",
    "int_dot_wraps": "dot",
    "uint_arith_wraps": "mul",
    "float_to_uint_saturates": "convert",
    "convert_to_float8": "convert",
    "convert_float8_formats": "convert",
    "convert_to_int4": "convert",
    "softmax_then_dot": "dot",
    "layer_norm_then_dot": "dot",
    "max_with_masked": "max",
    "layer_norm_of_inexact": "layer_norm",
    "kernel_dot_like": "kernel",
    "if_on_a_rounded_condition": "if",
}


def test_every_op_has_a_rule_and_a_soundness_case() -> None:
    specs = set(REGISTRY.values())
    assert specs <= set(RULES), (
        f"ops without a bound rule: {sorted(s.name for s in specs - set(RULES))}"
    )
    covered = {OP_OF_CASE.get(c, c) for c in CASES}
    covered |= {"cmp", "iota", "constant", "add", "sub", "max", "min", "convert", "select"}
    # The collectives' soundness cases need an SPMD function and its simulation:
    # tests/validate/test_spmd.py, test_every_collective_s_error_bound_holds_on_the_simulation.
    covered |= {s.name for s in specs if s.family == "collective"}
    # The loops' soundness cases carry state across trips and compare with the loop run in
    # the reals: tests/validate/test_bounds_control.py.
    covered |= {"while", "scan"}
    missing = sorted(s.name for s in specs if s.name not in covered)
    assert not missing, f"ops without a soundness case: {missing}"


@functools.cache
def _program(case: str, dt: str, r1: str, r2: str):
    params, body, result, *_ = CASES[case]
    body = "\n  ".join(body.split("\n"))
    fill = {"dt": dt, "r1": r1, "r2": r2}
    text = "func @main(" + params.format(**fill) + ") -> " + result.format(**fill) + " {\n  "
    text += body.format(**fill) + "\n  return %y\n}\n"
    if "kernel(" in body:
        text += KERNEL_BODY.format(**fill)
    if "if(" in body:
        text += IF_BODIES.format(**fill)
    module = parse(text, f"<{case}>")
    return module, analyze(module), analyze(module, ideal=True)


def _inputs(module, kind: str, seed: int) -> dict[str, np.ndarray]:
    try:
        return make_inputs(module.entry, kind, seed)
    except ValueError:  # a range with no value of the dtype (1e-20 in f16): no valid input
        assume(False)
        raise


@st.composite
def _draw(draw, case: str):
    _, _, _, r1s, r2s, dtypes = CASES[case]
    return (
        draw(st.sampled_from(dtypes)),
        draw(st.sampled_from(r1s)),
        draw(st.sampled_from(r2s)),
        draw(st.sampled_from(KINDS)),
        draw(st.integers(0, 2**32 - 1)),
    )


@pytest.mark.parametrize("case", sorted(CASES))
@settings(max_examples=12)
@given(data=st.data())
def test_op_error_within_bound(case: str, data) -> None:
    dt, r1, r2, kind, seed = data.draw(_draw(case))
    module, rigorous, ideal = _program(case, dt, r1, r2)
    inputs = _inputs(module, kind, seed)
    ((measured, values),) = output_errors(module, inputs)
    out = rigorous.outputs[0]
    slack = ideal.outputs[0].abs
    assert measured <= out.abs + slack, (
        f"{case} {dt} x in {r1}, w in {r2}, {kind} inputs (seed {seed}): measured "
        f"{measured:.4e} > bound {out.abs:.4e} (+ {slack:.2e}); reason {out.reason}"
    )
    finite = values[np.isfinite(values)]
    if finite.size and out.abs < np.inf:
        lo, hi = out.interval
        assert lo - slack <= finite.min() and finite.max() <= hi + slack, (
            f"{case}: ideal values [{finite.min()}, {finite.max()}] outside [{lo}, {hi}]"
        )


def test_layout_ops_are_exact() -> None:
    """Data movement never adds error: the bound of a moved exact input is exactly 0."""
    module = parse(
        "func @main(%x: f32[4,6] {range = [-1.0, 1.0]}) -> f32[6,4] {\n"
        "  %y = transpose(%x) {perm = [1, 0]} : f32[6,4]\n  return %y\n}\n"
    )
    assert analyze(module).outputs[0].abs == 0


# --- f64 programs against 200-bit mpmath ----------------------------------------------------

_MP = {
    "exp": mpmath.exp,
    "log": mpmath.log,
    "sqrt": mpmath.sqrt,
    "rsqrt": lambda x: 1 / mpmath.sqrt(x),
    "tanh": mpmath.tanh,
    "sigmoid": lambda x: 1 / (1 + mpmath.exp(-x)),
    "erf": mpmath.erf,
    "sin": mpmath.sin,
    "cos": mpmath.cos,
    "tan": mpmath.tan,
    "asin": mpmath.asin,
    "acos": mpmath.acos,
    "atan": mpmath.atan,
    "sinh": mpmath.sinh,
    "cosh": mpmath.cosh,
    "asinh": mpmath.asinh,
    "acosh": mpmath.acosh,
    "atanh": mpmath.atanh,
}


def _mp_eval(module, inputs: dict[str, np.ndarray]) -> np.ndarray:
    """The entry function's result at 200 bits, for the ops the f64 cases use."""
    fn = module.entry
    names = iter(range(10**9))
    ops = []
    for op in fn.ops:  # composites by their decomposition (IR_SPEC.md section 4)
        spec = REGISTRY[op.name]
        ops += spec.decompose(op, lambda b: f"{b}#{next(names)}") if spec.is_composite else [op]
    with mpmath.workprec(200):
        env = {
            k: np.vectorize(mpmath.mpf, otypes=[object])(v.astype(np.float64))
            for k, v in inputs.items()
        }
        for op in ops:
            args = [env[n] for n in op.operands]
            if op.name == "constant":
                v = Fraction(op.attrs["value"])
                env[op.result] = np.full(op.type.shape, mpmath.mpf(v.numerator) / v.denominator)
                continue
            if op.name == "broadcast":
                shape = [1] * op.type.rank
                for i, d in enumerate(op.attrs["dims"]):
                    shape[d] = args[0].shape[i]
                env[op.result] = np.broadcast_to(args[0].reshape(shape), op.type.shape).copy()
                continue
            if op.name == "reduce_max":
                env[op.result] = np.max(args[0], axis=tuple(op.attrs["axes"]))
                continue
            if op.name in _MP:
                env[op.result] = np.vectorize(_MP[op.name], otypes=[object])(args[0])
            elif op.name in ("add", "sub", "mul", "div"):
                a, b = args
                arith = {"add": np.add, "sub": np.subtract, "mul": np.multiply, "div": np.divide}
                env[op.result] = arith[op.name](a, b)
            elif op.name == "reduce_sum":
                env[op.result] = np.sum(args[0], axis=tuple(op.attrs["axes"]))
            elif op.name == "dot":
                env[op.result] = np.dot(args[0], args[1])
            else:
                raise AssertionError(f"no mpmath meaning for {op.name}")
        return env[fn.returns[0]]


F64_CASES = [
    "softmax",
    "log_softmax",
    "layer_norm",
    "gelu",
    "gelu_tanh",
    "exp",
    "log",
    "sqrt",
    "rsqrt",
    "tanh",
    "sigmoid",
    "erf",
    "sin",
    "cos",
    "tan",
    "asin",
    "acos",
    "atan",
    "sinh",
    "cosh",
    "asinh",
    "acosh",
    "atanh",
    "add",
    "sub",
    "mul",
    "div",
    "reduce_sum",
    "dot",
]


@pytest.mark.parametrize("case", F64_CASES)
@settings(max_examples=6)
@given(data=st.data())
def test_f64_op_error_within_bound(case: str, data) -> None:
    _, dt_r1, r2, kind, seed = data.draw(_draw(case))
    module, rigorous, _ = _program(case, "f64", dt_r1, r2)
    inputs = _inputs(module, kind, seed)
    (computed,) = reference.run(module, inputs, mode="exact")
    exact = _mp_eval(module, inputs)
    with mpmath.workprec(200):
        diff = np.vectorize(lambda c, e: float(abs(mpmath.mpf(float(c)) - e)))(computed, exact)
    measured = float(np.max(diff))
    assert measured <= rigorous.outputs[0].abs, (
        f"f64 {case} x in {dt_r1}, {kind} (seed {seed}): measured {measured:.3e} > bound "
        f"{rigorous.outputs[0].abs:.3e}"
    )


# --- domains of the inverse and hyperbolic trig functions and tan (issue 19) ---------------------


def _one_op(op: str, r: str, inexact: bool = False, dt: str = "f32"):
    x = f"%x: {dt}[4] {{range = {r}}}, %w: {dt}[4] {{range = [0.0, 0.0]}}"
    body = (
        f"%s = add(%x, %w) : {dt}[4]\n  %y = {op}(%s) : {dt}[4]"
        if inexact
        else (f"%y = {op}(%x) : {dt}[4]")
    )
    text = f"func @main({x}) -> {dt}[4] {{\n  {body}\n  return %y\n}}\n"
    return analyze(parse(text, f"<{op}>")).outputs[0]


@pytest.mark.parametrize(
    ("op", "r", "why"),
    [
        ("asin", "[-1.5, 0.5]", "asin of values that may lie outside [-1, 1]"),
        ("acos", "[0.0, 1.0001]", "acos of values that may lie outside [-1, 1]"),
        ("acosh", "[0.5, 2.0]", "acosh of values that may lie outside [1, inf]"),
        ("atanh", "[-1.0, 0.5]", "atanh of values that may lie outside (-1, 1)"),
        ("tan", "[1.0, 2.0]", "may meet a pole"),
        ("tan", "[-1.5707963267948966, 0.0]", "may meet a pole"),
        ("tan", "[0.0, 4.0]", "wider than pi"),
    ],
)
def test_outside_the_domain_the_bound_is_infinite_with_the_reason(op, r, why) -> None:
    out = _one_op(op, r)
    assert out.abs == np.inf and why in out.reason, out.reason
    # just inside, the bound is finite: the refusal is the domain's, not the op's
    inside = {"asin": "[-0.999, 0.5]", "acos": "[0.0, 0.999]", "acosh": "[1.001, 2.0]"}
    inside |= {"atanh": "[-0.999, 0.5]", "tan": "[1.0, 1.57]"}
    assert _one_op(op, inside[op]).abs < 1e-3


def test_a_declared_range_reaching_the_domain_s_end_is_refused() -> None:
    """Parameter ranges are widened outward (a decimal literal may round), so asin of a range
    declared as exactly [-1, 1] may see values beyond 1: refused, never a finite bound."""
    out = _one_op("asin", "[-1.0, 1.0]")
    assert out.abs == np.inf and "outside [-1, 1]" in out.reason


def test_an_unbounded_derivative_on_an_inexact_operand() -> None:
    """At the end of the domain (asin, acos at +-1, acosh at 1) with an inexact operand the
    derivative is unbounded: asin and acos fall back to their range's width (pi; the result
    bound is also never wider than its interval), acosh has none (infinite, with the reason).
    Just inside, the bound is finite and grows as the operand nears the end."""
    from gdv.ir.types import TensorType
    from gdv.validate.bounds.model import Err, make_tb
    from gdv.validate.bounds.registry import Context

    t = TensorType(DType.F32, (4,))
    for op, end in (("asin", (0.5, 1.0)), ("acos", (-1.0, -0.5)), ("acosh", (1.0, 2.0))):
        x = make_tb(t, end, Err.make({}, 1e-7), end)
        res = RULES[REGISTRY[op]](Op("y", op, ["x"], {}, t), [x], Context())
        if op == "acosh":
            assert res.err.total == np.inf and "unbounded derivative" in res.err.reason
        else:
            # the width of pi, or less where the result's interval is narrower (pi/3 here)
            assert np.pi / 3 <= res.err.total <= 3.1417, (op, res.err.total)
    near = [_one_op("asin", f"[0.5, {m}]", inexact=True).abs for m in (0.9, 0.99, 0.9999)]
    assert near[0] < near[1] < near[2] < np.inf


def test_ranges_of_the_trig_functions() -> None:
    """The exact intervals hold the functions' values (atan of +-inf is +-pi/2)."""
    lo, hi = _one_op("asin", "[-0.999, 0.999]").interval
    assert lo <= np.arcsin(-0.999) and np.arcsin(0.999) <= hi < 1.5708
    lo, hi = _one_op("acos", "[-0.999, 0.999]").interval
    assert lo <= np.arccos(0.999) and np.arccos(-0.999) <= hi < 3.1416
    lo, hi = _one_op("cosh", "[-2.0, 1.0]").interval
    assert lo == 1.0 and np.cosh(2.0) <= hi < np.cosh(2.0) * (1 + 1e-12)
    out = _one_op("sinh", "[0.0, 100.0]")
    assert out.abs == np.inf  # sinh(100) overflows f32


def test_an_if_whose_condition_flips_stays_within_its_bound() -> None:
    """sum(x) is 1 exactly but 0 in f32 ((1e8 + 1) - 1e8 after rounding): the exact program
    takes the then branch and the computed one the else branch; the bound covers that flip
    (the span of the branches' exact values), not only the branches' own rounding."""
    module, rigorous, ideal = _program(
        "if_on_a_rounded_condition", "f32", "[-1e8, 1e8]", "[-1.0, 1.0]"
    )
    x = np.zeros((4, 6), np.float32)
    x[0, 0], x[0, 1], x[0, 2] = 1e8, 1, -1e8
    w = np.full((4, 6), 0.5, np.float32)
    ((measured, _),) = output_errors(module, {"x": x, "w": w})
    assert measured >= 1e7  # the branches differ by about x * w there
    assert measured <= rigorous.outputs[0].abs + ideal.outputs[0].abs
