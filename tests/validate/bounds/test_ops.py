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


SUM_THEN = "%s = add(%x, %w) : {dt}[4,6]\n"  # an inexact operand for the exact ops

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
    "kernel_dot_like": _case(
        "%x: {dt}[4,6] {{range = {r1}}}, %w: {dt}[6,5] {{range = {r2}}}",
        '%y = kernel(%x, %w) {{body = "kbody", space = [4, 5, 6], '
        "maps = [[[1, 0, 0, 0], [0, 0, 1, 0]], [[0, 0, 1, 0], [0, 1, 0, 0]]], out = [0, 1], "
        'reduce = [2], combiner = "add"}} : {dt}[4,5]',
        "{dt}[4,5]",
    ),
}

KERNEL_BODY = (
    "func @kbody(%a: {dt}[], %b: {dt}[]) -> {dt}[] {{\n  %p = mul(%a, %b) : {dt}[]\n"
    "  %r = add(%p, %a) : {dt}[]\n  return %r\n}}\n"
)
"""The body of the kernel cases (`x * w + x` per reduced position)."""

OP_OF_CASE = {
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
    "dot_acc_f32": "dot",
    "dot_acc_f32_narrow_result": "dot",
    "softmax_masked": "softmax",
    "gelu_tanh": "gelu",
    "int_arith": "add",
    "int_dot_wraps": "dot",
    "uint_arith_wraps": "mul",
    "float_to_uint_saturates": "convert",
    "softmax_then_dot": "dot",
    "layer_norm_then_dot": "dot",
    "max_with_masked": "max",
    "layer_norm_of_inexact": "layer_norm",
    "kernel_dot_like": "kernel",
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
