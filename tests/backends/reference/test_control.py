"""The reference meaning of `if`, `while` and `scan` (IR_SPEC.md section 9) against plain
Python loops over numpy on drawn values: both branches of `if`, the `max_trips` cut-off of
`while`, a scan of length 0, loops nested in loop bodies, and the ops of one group (same
operands and functions, another `result`)."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from gdv.backends.reference import bit_equal, run
from gdv.ir.diagnostics import IRError
from gdv.ir.parser import parse

f32 = np.float32


def _floats(n: int):
    return st.lists(st.floats(-100, 100, allow_nan=False, width=32), min_size=n, max_size=n).map(
        lambda v: np.array(v, f32)
    )


IF = """
func @main(%c: i1[], %x: f32[3], %y: f32[3]) -> (f32[3], f32[3]) {
  %r0 = if(%c, %x, %y) {then = "sum_diff", else = "prod_x", result = 0} : f32[3]
  %r1 = if(%c, %x, %y) {then = "sum_diff", else = "prod_x", result = 1} : f32[3]
  return %r0, %r1
}
func @sum_diff(%a: f32[3], %b: f32[3]) -> (f32[3], f32[3]) {
  %s = add(%a, %b) : f32[3]
  %d = sub(%a, %b) : f32[3]
  return %s, %d
}
func @prod_x(%a: f32[3], %b: f32[3]) -> (f32[3], f32[3]) {
  %p = mul(%a, %b) : f32[3]
  return %p, %a
}
"""


@given(c=st.booleans(), x=_floats(3), y=_floats(3))
def test_if_takes_the_branch_the_condition_names(c: bool, x, y) -> None:
    r0, r1 = run(parse(IF), {"c": np.array(c), "x": x, "y": y})
    want = (x + y, x - y) if c else (x * y, x)
    assert bit_equal(r0, want[0]) and bit_equal(r1, want[1])


# Collatz-like: while n > 1 and trips < N: n = n odd ? 3n + 1 : n / 2; also counts steps and
# sums the n seen, in f32, so a loop that stops at the wrong trip gives other sums.
WHILE = """
func @main(%n: i32[], %acc: f32[]) -> (i32[], i32[], f32[]) {
  %z = constant() {value = 0} : i32[]
  %n1 = while(%n, %z, %acc) {cond = "more", body = "step", max_trips = MAX, result = 0} : i32[]
  %k1 = while(%n, %z, %acc) {cond = "more", body = "step", max_trips = MAX, result = 1} : i32[]
  %a1 = while(%n, %z, %acc) {cond = "more", body = "step", max_trips = MAX, result = 2} : f32[]
  return %n1, %k1, %a1
}
func @more(%n: i32[], %k: i32[], %acc: f32[]) -> i1[] {
  %one = constant() {value = 1} : i32[]
  %p = cmp(%n, %one) {dir = "gt"} : i1[]
  return %p
}
func @step(%n: i32[], %k: i32[], %acc: f32[]) -> (i32[], i32[], f32[]) {
  %one = constant() {value = 1} : i32[]
  %two = constant() {value = 2} : i32[]
  %three = constant() {value = 3} : i32[]
  %r = rem(%n, %two) : i32[]
  %odd = cmp(%r, %one) {dir = "eq"} : i1[]
  %t = mul(%n, %three) : i32[]
  %up = add(%t, %one) : i32[]
  %down = div(%n, %two) : i32[]
  %n2 = select(%odd, %up, %down) : i32[]
  %k2 = add(%k, %one) : i32[]
  %f = convert(%n2) : f32[]
  %acc2 = add(%acc, %f) : f32[]
  return %n2, %k2, %acc2
}
"""


def _collatz(n: int, acc: float, limit: int) -> tuple[int, int, np.float32]:
    k, a = 0, f32(acc)
    while k < limit and n > 1:
        n = 3 * n + 1 if n % 2 == 1 else n // 2
        k += 1
        a = f32(a + f32(n))
    return n, k, a


@given(
    n=st.integers(-5, 3000),
    acc=st.floats(-10, 10, width=32),
    limit=st.sampled_from([0, 1, 2, 7, 30, 1000]),
)
def test_while_stops_at_the_condition_or_max_trips(n: int, acc: float, limit: int) -> None:
    module = parse(WHILE.replace("MAX", str(limit)))
    got = run(module, {"n": np.array(n, np.int32), "acc": np.array(acc, f32)})
    want_n, want_k, want_acc = _collatz(n, acc, limit)
    assert int(got[0]) == want_n and int(got[1]) == want_k
    assert bit_equal(got[2], np.array(want_acc, f32))


def test_max_trips_cuts_a_loop_that_never_ends() -> None:
    """A condition that is always true: the loop stops after exactly max_trips trips."""
    text = """
func @main(%x: i32[]) -> i32[] {
  %r = while(%x) {cond = "always", body = "inc", max_trips = 1000, result = 0} : i32[]
  return %r
}
func @always(%x: i32[]) -> i1[] {
  %t = constant() {value = true} : i1[]
  return %t
}
func @inc(%x: i32[]) -> i32[] {
  %one = constant() {value = 1} : i32[]
  %y = add(%x, %one) : i32[]
  return %y
}
"""
    (r,) = run(parse(text), {"x": np.array(5, np.int32)})
    assert int(r) == 1005


SCAN = """
func @main(%s: f32[2], %xs: f32[L,2], %ws: f32[L]) -> (f32[2], f32[L,2], f32[L]) {
  %fin = scan(%s, %xs, %ws) {body = "cell", num_scan_inputs = 2, result = 0} : f32[2]
  %hs = scan(%s, %xs, %ws) {body = "cell", num_scan_inputs = 2, result = 1} : f32[L,2]
  %ds = scan(%s, %xs, %ws) {body = "cell", num_scan_inputs = 2, result = 2} : f32[L]
  return %fin, %hs, %ds
}
func @cell(%h: f32[2], %x: f32[2], %w: f32[]) -> (f32[2], f32[2], f32[]) {
  %wb = broadcast(%w) {dims = []} : f32[2]
  %p = mul(%h, %wb) : f32[2]
  %h2 = add(%p, %x) : f32[2]
  %d = reduce_sum(%h2) {axes = [0]} : f32[]
  return %h2, %h2, %d
}
"""


@given(data=st.data(), length=st.integers(0, 6))
def test_scan_threads_states_and_stacks_outputs(data, length: int) -> None:
    s = data.draw(_floats(2))
    xs = data.draw(_floats(2 * length)).reshape(length, 2)
    ws = data.draw(_floats(length))
    module = parse(SCAN.replace("L", str(length)))
    fin, hs, ds = run(module, {"s": s, "xs": xs, "ws": ws})
    h, want_h, want_d = s.copy(), [], []
    for t in range(length):
        h = (h * ws[t]) + xs[t]
        want_h.append(h)
        want_d.append(f32(h[0] + h[1]))
    assert bit_equal(fin, h)
    assert hs.shape == (length, 2) and ds.shape == (length,)
    if length:
        assert bit_equal(hs, np.stack(want_h)) and bit_equal(ds, np.array(want_d, f32))


NESTED = """
func @main(%m: f32[3,3], %n: i32[]) -> f32[3] {
  %v = constant() {value = 1.0} : f32[3]
  %z = constant() {value = 0} : i32[]
  %r = while(%v, %z, %n, %m) {cond = "below", body = "apply", max_trips = 50, result = 0} : f32[3]
  return %r
}
func @below(%v: f32[3], %i: i32[], %n: i32[], %m: f32[3,3]) -> i1[] {
  %p = cmp(%i, %n) {dir = "lt"} : i1[]
  return %p
}
func @apply(%v: f32[3], %i: i32[], %n: i32[], %m: f32[3,3]) -> (f32[3], i32[], i32[], f32[3,3]) {
  %w = scan(%v, %m) {body = "row", num_scan_inputs = 1, result = 1} : f32[3]
  %one = constant() {value = 1} : i32[]
  %two = constant() {value = 2} : i32[]
  %r = rem(%i, %two) : i32[]
  %even = cmp(%r, %one) {dir = "ne"} : i1[]
  %u = if(%even, %w) {then = "keep", else = "halve", result = 0} : f32[3]
  %i2 = add(%i, %one) : i32[]
  return %u, %i2, %n, %m
}
func @row(%v: f32[3], %row: f32[3]) -> (f32[3], f32[]) {
  %p = mul(%v, %row) : f32[3]
  %d = reduce_sum(%p) {axes = [0]} : f32[]
  return %v, %d
}
func @keep(%w: f32[3]) -> f32[3] {
  return %w
}
func @halve(%w: f32[3]) -> f32[3] {
  %h = constant() {value = 0.5} : f32[3]
  %r = mul(%w, %h) : f32[3]
  return %r
}
"""


@given(m=_floats(9), n=st.integers(-1, 8))
def test_nested_control_flow(m, n: int) -> None:
    """A while whose body holds a scan (a matrix-vector product, row by row) and an if."""
    m = (m / f32(100)).reshape(3, 3)
    (got,) = run(parse(NESTED), {"m": m, "n": np.array(n, np.int32)})
    v = np.ones(3, f32)
    for i in range(max(n, 0)):
        w = np.array([f32(f32(f32(v[0] * r[0]) + f32(v[1] * r[1])) + f32(v[2] * r[2])) for r in m])
        v = w if i % 2 == 0 else w * f32(0.5)
    assert bit_equal(got, v)


def test_a_module_with_bodies_is_verified_as_a_whole() -> None:
    """run() checks the functions a control op names, not only the entry."""
    text = IF.replace("%p = mul(%a, %b) : f32[3]\n  return %p, %a", "return %a, %a").replace(
        "func @prod_x(%a: f32[3], %b: f32[3])", "func @prod_x(%a: f32[3], %b: f16[3])"
    )
    with pytest.raises(IRError, match="else branch @prod_x takes"):
        run(parse(text), {"c": np.array(True), "x": np.zeros(3, f32), "y": np.zeros(3, f32)})


def test_a_group_runs_its_loop_once(monkeypatch) -> None:
    """The three whiles of WHILE (one per result) run the loop once: the body is called once
    per trip, not three times per trip; a fresh run of the module runs it again."""
    from gdv.backends.reference import control

    calls: list[str] = []
    real = control.call

    def counted(fn, args, ctx):
        calls.append(fn.name)
        return real(fn, args, ctx)

    monkeypatch.setattr(control, "call", counted)
    module = parse(WHILE.replace("MAX", "1000"))
    inputs = {"n": np.array(27, np.int32), "acc": np.array(0.5, f32)}
    got = run(module, inputs)
    want_n, want_k, want_acc = _collatz(27, 0.5, 1000)
    assert int(got[0]) == want_n and int(got[1]) == want_k == 111
    assert bit_equal(got[2], np.array(want_acc, f32))
    assert calls.count("step") == 111 and calls.count("more") == 112
    run(module, inputs)
    assert calls.count("step") == 222
