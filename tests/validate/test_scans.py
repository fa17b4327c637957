"""cumsum and cumprod (IR_SPEC.md section 7, "Scans"): the reference against numpy's running
folds and an explicit per-step loop, the SMT meaning at symbolic positions (proofs that must
hold and refutations that must be found, on axes small enough to unroll and large enough to
stay symbolic), the C target against the reference, and type errors with positions. The SMT
meaning on concrete values is checked against the reference in tests/validate/test_agreement.py
(`c_scan`)."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st
from hypothesis.extra import numpy as hnp

from gdv.api import parse
from gdv.backends import reference
from gdv.ir.diagnostics import IRError
from gdv.ir.dtypes import DType
from gdv.ir.numerics import float_to_float
from gdv.validate.counterexample import same_bits
from gdv.validate.equivalence import check_equivalence

POOL = [0.0, -0.0, 1.0, -1.0, 0.5, 3.0, 1e30, -1e30, np.inf, -np.inf, np.nan]


def scan_program(dt: str, shape: list[int], name: str, attrs: str) -> str:
    t = f"{dt}[{','.join(map(str, shape))}]"
    return f"func @main(%x: {t}) -> {t} {{\n  %y = {name}(%x) {{{attrs}}} : {t}\n  return %y\n}}\n"


def run(text: str, x: np.ndarray) -> np.ndarray:
    return reference.run(parse(text), {"x": x})[0]


def numpy_scan(x: np.ndarray, axis: int, name: str, exclusive: bool, reverse: bool):
    """numpy's running fold (ufunc.accumulate: sequential), with the exclusive shift and the
    reversal done around it."""
    ufunc = np.add if name == "cumsum" else np.multiply
    y = np.flip(x, axis) if reverse else x
    y = ufunc.accumulate(y, axis=axis, dtype=x.dtype)
    if exclusive:
        first = np.full_like(np.take(y, [0], axis=axis), 0 if name == "cumsum" else 1)
        y = np.concatenate([first, np.delete(y, -1, axis=axis)], axis=axis)
    return np.flip(y, axis) if reverse else y


def attrs_text(axis: int, exclusive: bool | None, reverse: bool | None) -> str:
    out = [f"axis = {axis}"]
    if exclusive is not None:
        out.append(f"exclusive = {str(exclusive).lower()}")
    if reverse is not None:
        out.append(f"reverse = {str(reverse).lower()}")
    return ", ".join(out)


@given(
    x=hnp.arrays(st.sampled_from([np.float32, np.float64]),
                 hnp.array_shapes(min_dims=1, max_dims=3, max_side=5),
                 elements=st.sampled_from(POOL)),
    data=st.data(),
)  # fmt: skip
def test_float_scans_match_numpy_bit_for_bit(x: np.ndarray, data: st.DataObject) -> None:
    name = data.draw(st.sampled_from(["cumsum", "cumprod"]))
    axis = data.draw(st.integers(0, x.ndim - 1))
    exclusive = data.draw(st.sampled_from([None, False, True]))
    reverse = data.draw(st.sampled_from([None, False, True]))
    dt = "f32" if x.dtype == np.float32 else "f64"
    text = scan_program(dt, list(x.shape), name, attrs_text(axis, exclusive, reverse))
    got = run(text, x)
    want = numpy_scan(x, axis, name, bool(exclusive), bool(reverse))
    assert got.dtype == x.dtype and got.shape == x.shape
    assert same_bits(got, want).all(), (got, want)


@given(
    x=hnp.arrays(np.int8, hnp.array_shapes(min_dims=1, max_dims=2, max_side=6),
                 elements=st.integers(-128, 127)),
    data=st.data(),
)  # fmt: skip
def test_integer_scans_wrap_like_numpy(x: np.ndarray, data: st.DataObject) -> None:
    name = data.draw(st.sampled_from(["cumsum", "cumprod"]))
    axis = data.draw(st.integers(0, x.ndim - 1))
    exclusive, reverse = data.draw(st.booleans()), data.draw(st.booleans())
    text = scan_program("i8", list(x.shape), name, attrs_text(axis, exclusive, reverse))
    np.testing.assert_array_equal(run(text, x), numpy_scan(x, axis, name, exclusive, reverse))


def test_signed_zeros_and_the_empty_prefix() -> None:
    # -0.0 alone stays -0.0 (the fold starts from x[first], not from +0.0); the exclusive
    # first element is +0.0; NaN propagates forward only.
    x = np.array([-0.0, -0.0, np.nan, 1.0], np.float32)
    inc = run(scan_program("f32", [4], "cumsum", "axis = 0"), x)
    exc = run(scan_program("f32", [4], "cumsum", "axis = 0, exclusive = true"), x)
    rev = run(scan_program("f32", [4], "cumsum", "axis = 0, reverse = true"), x)
    assert np.signbit(inc[:2]).all() and np.isnan(inc[2:]).all()
    assert exc[0] == 0 and not np.signbit(exc[0]) and np.signbit(exc[1]) and np.signbit(exc[2])
    assert np.isnan(exc[3]) and np.isnan(rev[:3]).all() and rev[3] == 1.0


@pytest.mark.parametrize("dtype", [DType.F16, DType.BF16])
def test_narrow_floats_round_every_step(dtype: DType) -> None:
    rng = np.random.default_rng(3)
    x = (rng.standard_normal((3, 40)) * 100).astype(dtype.np)
    for name in ("cumsum", "cumprod"):
        got = run(scan_program(dtype.value, [3, 40], name, "axis = 1"), x)
        acc = x[:, 0].astype(np.float64)
        want = [acc]
        for k in range(1, 40):
            step = acc + x[:, k].astype(np.float64) if name == "cumsum" else acc * x[:, k]
            acc = float_to_float(np.asarray(step, np.float64), dtype).astype(np.float64)
            want.append(acc)
        want = np.stack(want, axis=1).astype(dtype.np)
        assert same_bits(got, want).all()
        # rounding once at the end would differ: the test can tell the two apart
        once = float_to_float(np.cumsum(x.astype(np.float64), axis=1), dtype)
        if name == "cumsum":
            assert not same_bits(got, once).all()


def test_an_empty_axis_gives_an_empty_result() -> None:
    x = np.zeros((2, 0), np.float32)
    assert run(scan_program("f32", [2, 0], "cumprod", "axis = 1, exclusive = true"), x).shape == (
        2,
        0,
    )


# --- the SMT meaning at symbolic positions ----------------------------------------------------


def prog(n: int, body: str, out: str | None = None):
    out = out or f"f32[3,{n}]"
    return parse(f"func @main(%x: f32[3,{n}]) -> {out} {{\n{body}\n  return %y\n}}\n").entry


def scan(n: int, name: str = "cumsum", extra: str = ""):
    return prog(n, f"  %y = {name}(%x) {{axis = 1{extra}}} : f32[3,{n}]")


@pytest.mark.parametrize("n", [5, 40])  # unrolled in fp, and the symbolic fold
@pytest.mark.parametrize("theory", ["fp", "real"])
def test_scan_proofs(n: int, theory: str) -> None:
    transposed = prog(
        n,
        f"  %t = transpose(%x) {{perm = [1, 0]}} : f32[{n},3]\n"
        f"  %c = cumsum(%t) {{axis = 0}} : f32[{n},3]\n"
        f"  %y = transpose(%c) {{perm = [1, 0]}} : f32[3,{n}]",
    )
    assert check_equivalence(scan(n), transposed, theory).verdict == "equivalent"
    # the last inclusive element is reduce_sum over the axis
    last = prog(
        n,
        f"  %c = cumsum(%x) {{axis = 1}} : f32[3,{n}]\n"
        f"  %s = slice(%c) {{start = [0, {n - 1}], limit = [3, {n}], stride = [1, 1]}}"
        " : f32[3,1]\n  %y = reshape(%s) : f32[3]",
        "f32[3]",
    )
    total = prog(n, "  %y = reduce_sum(%x) {axes = [1]} : f32[3]", "f32[3]")
    assert check_equivalence(total, last, theory).verdict == "equivalent"
    # exclusive at p + 1 is inclusive at p: both symbolic in p
    shifted = [
        prog(
            n,
            f"  %c = cumprod(%x) {{axis = 1{extra}}} : f32[3,{n}]\n"
            f"  %y = slice(%c) {{start = [0, {lo}], limit = [3, {lo + n - 1}], stride = [1, 1]}}"
            f" : f32[3,{n - 1}]",
            f"f32[3,{n - 1}]",
        )
        for extra, lo in (("", 0), (", exclusive = true", 1))
    ]
    assert check_equivalence(shifted[0], shifted[1], theory).verdict == "equivalent"


@pytest.mark.parametrize("n", [5, 40])
@pytest.mark.parametrize(
    "other",
    [("cumsum", ", exclusive = true"), ("cumsum", ", reverse = true"), ("cumprod", "")],
)
def test_scan_differences_are_refuted_with_replayed_counterexamples(n: int, other) -> None:
    a, b = scan(n), scan(n, *other)
    r = check_equivalence(a, b, "fp")
    assert r.verdict == "not-equivalent"
    ya = reference.run(a, r.counterexample.inputs)[0]
    yb = reference.run(b, r.counterexample.inputs)[0]
    assert not same_bits(ya, yb).all()


# --- the C target -----------------------------------------------------------------------------


@pytest.mark.parametrize("dt", ["f32", "bf16", "i32"])
def test_c_target_matches_the_reference(dt: str, tmp_path) -> None:
    from gdv.driver import compile as gdv_compile

    t = f"{dt}[3,5,4]"
    text = (
        f"func @main(%x: {t}) -> ({t}, {t}, {t}) {{\n"
        f"  %a = cumsum(%x) {{axis = 1}} : {t}\n"
        f"  %b = cumprod(%x) {{axis = 2, exclusive = true}} : {t}\n"
        f"  %c = cumsum(%x) {{axis = 0, exclusive = true, reverse = true}} : {t}\n"
        "  return %a, %b, %c\n}\n"
    )
    src = tmp_path / "scan.gdv"
    src.write_text(text)
    comp = gdv_compile(src, target="c", cache_dir=str(tmp_path / "cache"))
    module = parse(text)
    npdt = module.entry.params[0].type.dtype.np
    rng = np.random.default_rng(0)
    if dt == "i32":
        x = rng.integers(-1000, 1000, (3, 5, 4)).astype(npdt)
    else:
        x = (rng.standard_normal((3, 5, 4)) * 3).astype(npdt)
        x.flat[[0, 7, 13, 22]] = np.array([np.nan, -0.0, np.inf, -0.0]).astype(npdt)
    got = comp(x=x)
    want = reference.run(module, {"x": x})
    for g, w in zip(got, want, strict=True):
        assert same_bits(np.asarray(g), w).all()


# --- type errors --------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "dt, attrs, where, message",
    [
        ("f32", "axis = 2", "2:20", "cumsum: axis 2 is out of range for rank 2"),
        ("i1", "axis = 0", "2:15", "cumsum takes a float or integer operand, operand 1 is i1[3,4]"),
        ("f32", "axis = 0, reverse = 1", "2:30", "expected true or false, got integer 1"),
    ],
)
def test_type_errors_have_positions(dt: str, attrs: str, where: str, message: str) -> None:
    with pytest.raises(IRError) as e:
        parse(scan_program(dt, [3, 4], "cumsum", attrs), "s.gdv")
    text = str(e.value)
    assert text.startswith(f"s.gdv:{where}: error:") and message in text, text
