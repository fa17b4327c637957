"""argsort (IR_SPEC.md section 7, "Sorting"): the reference against a plain Python stable sort
(NaN above every number, -0.0 equal to +0.0, ties by position) and numpy's stable argsort, the
SMT meaning at symbolic positions (proofs and replayed refutations, small and large axes), the
C target against the reference, and type errors with positions. The SMT meaning on concrete
values is checked against the reference in tests/validate/test_agreement.py (`c_argsort`)."""

from __future__ import annotations

import math

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st
from hypothesis.extra import numpy as hnp

from gdv.api import parse
from gdv.backends import reference
from gdv.ir.diagnostics import IRError
from gdv.validate.counterexample import same_bits
from gdv.validate.equivalence import check_equivalence

POOL = [0.0, -0.0, 1.0, -1.0, 2.0, np.inf, -np.inf, np.nan]


def program(dt: str, shape: list[int], attrs: str) -> str:
    s = ",".join(map(str, shape))
    return (
        f"func @main(%x: {dt}[{s}]) -> i64[{s}] {{\n"
        f"  %y = argsort(%x) {{{attrs}}} : i64[{s}]\n  return %y\n}}\n"
    )


def python_argsort(row: list[float], descending: bool) -> list[int]:
    """Python's stable sort on (NaN class, value): an independent statement of the rule."""

    def key(p: int) -> tuple[int, float]:
        v = float(row[p])
        nan = math.isnan(v)
        if descending:
            return (0 if nan else 1, 0.0 if nan else -v)
        return (1 if nan else 0, 0.0 if nan else v)

    return sorted(range(len(row)), key=key)


DTYPES = {np.float32: "f32", np.float64: "f64", np.int8: "i8", np.int64: "i64"}


@given(data=st.data())
def test_reference_is_the_stable_sort(data: st.DataObject) -> None:
    np_dt = data.draw(st.sampled_from(list(DTYPES)))
    pool = POOL if np_dt in (np.float32, np.float64) else [-128, -1, 0, 1, 2, 127]
    shape = data.draw(hnp.array_shapes(min_dims=1, max_dims=3, max_side=6))
    x = data.draw(hnp.arrays(np_dt, shape, elements=st.sampled_from(pool)))
    axis = data.draw(st.integers(0, x.ndim - 1))
    descending = data.draw(st.booleans())
    dt = DTYPES[np_dt]
    text = program(dt, list(x.shape), f"axis = {axis}, descending = {str(descending).lower()}")
    got = reference.run(parse(text), {"x": x})[0]
    assert got.dtype == np.int64
    rows = np.moveaxis(x, axis, -1).reshape(-1, x.shape[axis])
    want = np.array([python_argsort(list(r), descending) for r in rows], np.int64)
    want = np.moveaxis(want.reshape(np.moveaxis(x, axis, -1).shape), -1, axis)
    np.testing.assert_array_equal(got, want)
    if not descending:  # numpy's stable argsort: NaN last, -0.0 == +0.0
        np.testing.assert_array_equal(got, np.argsort(x, axis=axis, kind="stable"))


def test_integer_extremes_and_ties() -> None:
    x = np.array([5, -(2**63), 2**63 - 1, 5, 0, -1], np.int64)
    for desc, want in ((False, [1, 5, 4, 0, 3, 2]), (True, [2, 0, 3, 4, 5, 1])):
        text = program("i64", [6], f"axis = 0, descending = {str(desc).lower()}")
        assert reference.run(parse(text), {"x": x})[0].tolist() == want


# --- the SMT meaning at symbolic positions ----------------------------------------------------


def prog(n: int, body: str):
    return parse(f"func @main(%x: f32[3,{n}]) -> i64[3,{n}] {{\n{body}\n  return %y\n}}\n").entry


@pytest.mark.parametrize("n", [5, 40])
def test_argsort_proofs_and_refutations(n: int) -> None:
    a = prog(n, f"  %y = argsort(%x) {{axis = 1}} : i64[3,{n}]")
    transposed = prog(
        n,
        f"  %t = transpose(%x) {{perm = [1, 0]}} : f32[{n},3]\n"
        f"  %c = argsort(%t) {{axis = 0}} : i64[{n},3]\n"
        f"  %y = transpose(%c) {{perm = [1, 0]}} : i64[3,{n}]",
    )
    assert check_equivalence(a, transposed, "fp").verdict == "equivalent"
    for other in (
        prog(n, f"  %y = argsort(%x) {{axis = 1, descending = true}} : i64[3,{n}]"),
        prog(n, f"  %m = neg(%x) : f32[3,{n}]\n  %y = argsort(%m) {{axis = 1}} : i64[3,{n}]"),
    ):
        r = check_equivalence(a, other, "fp", timeout=30)
        assert r.verdict == "not-equivalent"
        ya = reference.run(a, r.counterexample.inputs)[0]
        yb = reference.run(other, r.counterexample.inputs)[0]
        assert not same_bits(ya, yb).all()


def test_small_axis_facts_prove() -> None:
    # sorting a sorted-by-construction input: argsort of iota is iota (unrolled, decided)
    a = parse(
        "func @main(%x: f32[4]) -> i64[4] {\n  %i = iota() {axis = 0} : f32[4]\n"
        "  %y = argsort(%i) {axis = 0} : i64[4]\n  return %y\n}\n"
    ).entry
    b = parse(
        "func @main(%x: f32[4]) -> i64[4] {\n  %y = iota() {axis = 0} : i64[4]\n  return %y\n}\n"
    ).entry
    assert check_equivalence(a, b, "fp").verdict == "equivalent"


# --- the C target -----------------------------------------------------------------------------


@pytest.mark.parametrize("dt", ["f32", "bf16", "i8"])
def test_c_target_matches_the_reference(dt: str, tmp_path) -> None:
    from gdv.driver import compile as gdv_compile

    text = (
        f"func @main(%x: {dt}[3,9,4]) -> (i64[3,9,4], i64[3,9,4]) {{\n"
        "  %a = argsort(%x) {axis = 1} : i64[3,9,4]\n"
        "  %b = argsort(%x) {axis = 2, descending = true} : i64[3,9,4]\n"
        "  return %a, %b\n}\n"
    )
    src = tmp_path / "s.gdv"
    src.write_text(text)
    comp = gdv_compile(src, target="c", cache_dir=str(tmp_path / "cache"))
    module = parse(text)
    npdt = module.entry.params[0].type.dtype.np
    x = np.random.default_rng(0).integers(-3, 3, (3, 9, 4)).astype(npdt)
    if dt != "i8":
        x.flat[[0, 7, 13, 20, 22]] = np.array([np.nan, -0.0, np.inf, np.nan, -np.inf]).astype(npdt)
    for g, w in zip(comp(x=x), reference.run(module, {"x": x}), strict=True):
        np.testing.assert_array_equal(g, w)


def test_c_target_on_a_long_axis_with_many_ties(tmp_path) -> None:
    # enough positions for ten merge passes, the runs full of equal values and NaNs
    from gdv.driver import compile as gdv_compile

    text = (
        "func @main(%x: f32[2,1000,3]) -> (i64[2,1000,3], i64[2,1000,3]) {\n"
        "  %a = argsort(%x) {axis = 1} : i64[2,1000,3]\n"
        "  %b = argsort(%x) {axis = 1, descending = true} : i64[2,1000,3]\n"
        "  return %a, %b\n}\n"
    )
    src = tmp_path / "long.gdv"
    src.write_text(text)
    comp = gdv_compile(src, target="c", cache_dir=str(tmp_path / "cache"))
    rng = np.random.default_rng(5)
    x = rng.choice(np.array(POOL, np.float32), size=(2, 1000, 3))
    got = comp(x=x)
    want = reference.run(parse(text), {"x": x})
    for g, w in zip(got, want, strict=True):
        np.testing.assert_array_equal(g, w)
    np.testing.assert_array_equal(want[0], np.argsort(x, axis=1, kind="stable"))


# --- type errors --------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "dt, attrs, where, message",
    [
        ("f32", "axis = -1", "2:21", "argsort: axis -1 is out of range for rank 2"),
        ("i1", "axis = 0", "2:16", "argsort takes a float or integer operand, operand 1 is i1"),
        ("f32", "axis = 0, descending = 0", "2:31", "expected true or false, got integer 0"),
    ],
)
def test_type_errors_have_positions(dt: str, attrs: str, where: str, message: str) -> None:
    with pytest.raises(IRError) as e:
        parse(program(dt, [3, 4], attrs).replace("-> i64", f"-> {dt}", 0), "s.gdv")
    text = str(e.value)
    assert text.startswith(f"s.gdv:{where}: error:") and message in text, text
