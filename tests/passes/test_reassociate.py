"""-O3 / --reassociate: `lanes` and `contract = "fma"` kernels, the pass that sets them, and
what the evidence records of them (IR_SPEC.md section 7, the loop stage)."""

from __future__ import annotations

import json
import shutil
from dataclasses import replace
from fractions import Fraction
from pathlib import Path

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from gdv.api import parse
from gdv.backends import reference
from gdv.backends.reference.kernel import fma_f32
from gdv.driver import CompileOptions, compile_module, write_evidence
from gdv.ir.diagnostics import IRError
from gdv.ir.ops.kernel import kernel_bodies
from gdv.passes.manager import PassManager
from gdv.passes.pipelines import pass_names
from gdv.passes.reassociate_reductions import ReassociateReductions
from gdv.passes.schedule_kernels import ScheduleKernels
from gdv.passes.select_products import SelectProducts
from gdv.validate.discharge import discharge
from gdv.validate.evaluate import evaluate
from tests.support import manifest_of, save_manifest, verify_cli

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"

PRODUCT = """func @body(%a: f32[], %b: f32[]) -> f32[] {
  %p = mul(%a, %b) : f32[]
  return %p
}
func @main(%x: f32[_M_, _K_], %y: f32[_K_, _N_]) -> f32[_M_, _N_] {
  %r = kernel(%x, %y) {body = "body", space = [_M_, _N_, _K_], maps = [[[1, 0, 0, 0],
    [0, 0, 1, 0]], [[0, 0, 1, 0], [0, 1, 0, 0]]], out = [0, 1], reduce = [2],
    combiner = "add"_EXTRA_} : f32[_M_, _N_]
  return %r
}
"""

ROWSUM = """func @body(%a: _DT_[]) -> _DT_[] {
  %e = exp(%a) : _DT_[]
  return %e
}
func @main(%x: _DT_[_R_, _C_]) -> _DT_[_R_] {
  %r = kernel(%x) {body = "body", space = [_R_, _C_], maps = [[[1, 0, 0], [0, 1, 0]]],
    out = [0], reduce = [1], combiner = "add"_EXTRA_} : _DT_[_R_]
  return %r
}
"""


def _fill(template: str, **values) -> str:
    for key, value in values.items():
        template = template.replace(f"_{key}_", str(value))
    return template


def product(m: int, k: int, n: int, extra: str = "") -> str:
    return _fill(PRODUCT, M=m, K=k, N=n, EXTRA=extra)


def rowsum(r: int, c: int, extra: str = "", dt: str = "f32") -> str:
    return _fill(ROWSUM, R=r, C=c, EXTRA=extra, DT=dt)


def bits_equal(a: np.ndarray, b: np.ndarray) -> bool:
    return reference.bit_equal(np.asarray(a), np.asarray(b))


# --- the reference meaning ------------------------------------------------------------------


def _round_f32(v: Fraction) -> np.float32:
    """The f32 nearest to the rational v, ties to even (by brute force around float(v))."""
    f = np.float32(float(v))
    near = [np.nextafter(f, np.float32(-np.inf)), f, np.nextafter(f, np.float32(np.inf))]
    return min(
        near, key=lambda z: (abs(Fraction(float(z)) - v), int(np.array(z).view(np.int32)) & 1)
    )


finite32 = st.floats(-(2.0**60), 2.0**60, width=32)
"""Finite f32 values whose products and sums stay finite (overflow is IEEE's, not checked)."""


@given(finite32, finite32, finite32, st.booleans())
def test_fma_rounds_once(x: float, y: float, z: float, cancel: bool) -> None:
    x32, y32 = np.float32(x), np.float32(y)
    # Near-cancellation is where rounding twice goes wrong: z close to -x*y.
    z32 = np.float32(-float(x32) * float(y32)) if cancel else np.float32(z)
    got = fma_f32(np.array([x32]), np.array([y32]), np.array([z32]))[0]
    exact = Fraction(float(x32)) * Fraction(float(y32)) + Fraction(float(z32))
    want = _round_f32(exact)
    assert got == want, (x32, y32, z32, got, want)
    if exact == 0:  # an exact zero is +0, unless both addends are zeros of sign -
        product_negative_zero = float(x32) * float(y32) == 0 and np.signbit(x32) != np.signbit(y32)
        assert bool(np.signbit(got)) == bool(product_negative_zero and np.signbit(z32))


def test_fma_specials() -> None:
    inf, nan = np.float32(np.inf), np.float32(np.nan)
    xs = np.array([inf, 0, nan, 1, -0.0, 1e30], np.float32)
    ys = np.array([0, inf, 1, 1, 1, 1e30], np.float32)
    zs = np.array([1, 1, 1, -1, -0.0, -inf], np.float32)
    got = fma_f32(xs, ys, zs)
    assert np.isnan(got[:3]).all()
    assert got[3] == 0 and not np.signbit(got[3])
    assert got[4] == 0 and np.signbit(got[4])
    assert got[5] == -np.inf


def test_lanes_and_contract_change_the_result_as_their_meaning_says() -> None:
    # 1e8 + 1 == 1e8 in f32: in order, [1e8, 1, -1e8, 1] sums to 1; in two lanes (1e8 - 1e8,
    # 1 + 1) to 2.
    src = rowsum(1, 4, "", "f32").replace("exp(%a)", "neg(%a)")
    x = -np.array([[1e8, 1, -1e8, 1]], np.float32)
    seq, two = parse(src), parse(src.replace('"add"', '"add", lanes = 2'))
    assert reference.run(seq, {"x": x})[0][0] == 1.0
    assert reference.run(two, {"x": x})[0][0] == 2.0
    for module, want in ((seq, 1.0), (two, 2.0)):
        with kernel_bodies(module.functions):
            assert evaluate(module.entry, {"x": x})[0][0] == want
    # fma keeps the product's low bits: -(1 + 2^-11) + (1 + 2^-12)^2 is 2^-24 exactly, where
    # the rounded square is 1 + 2^-11 (a tie, to even) and the plain sum 0.
    a = np.float32(1 + 2.0**-12)
    xs = np.array([[np.float32(-(1 + 2.0**-11)), a]], np.float32)
    ys = np.array([[1], [a]], np.float32)
    plain, fused = parse(product(1, 2, 1)), parse(product(1, 2, 1, ', contract = "fma"'))
    assert reference.run(plain, {"x": xs, "y": ys})[0][0, 0] == 0.0
    assert reference.run(fused, {"x": xs, "y": ys})[0][0, 0] == np.float32(2.0**-24)
    for module in (plain, fused):
        with kernel_bodies(module.functions):
            smt = evaluate(module.entry, {"x": xs, "y": ys})[0]
        assert bits_equal(smt, reference.run(module, {"x": xs, "y": ys})[0])


@given(
    st.integers(1, 3),
    st.sampled_from([2, 4, 8]),
    st.integers(1, 3),
    st.integers(0, 2**32 - 1),
    st.booleans(),
)
def test_smt_meaning_equals_the_reference_on_concrete_values(
    rows: int, lanes: int, times: int, seed: int, fused: bool
) -> None:
    rng = np.random.default_rng(seed)
    cols = lanes * times
    if fused:
        module = parse(product(rows, cols, 2, ', contract = "fma"'))
        scale = rng.choice([1.0, 1e-3, 1e4], size=(rows, cols)).astype(np.float32)
        inputs = {
            "x": (rng.standard_normal((rows, cols)) * scale).astype(np.float32),
            "y": rng.standard_normal((cols, 2)).astype(np.float32),
        }
    else:
        module = parse(rowsum(rows, cols, f", lanes = {lanes}").replace("exp(%a)", "neg(%a)"))
        inputs = {"x": (rng.standard_normal((rows, cols)) * 1e3).astype(np.float32)}
    want = reference.run(module, inputs)[0]
    with kernel_bodies(module.functions):
        got = evaluate(module.entry, inputs)[0]
    assert bits_equal(got, want)


@pytest.mark.parametrize(
    "src, message",
    [
        (rowsum(2, 6, ", lanes = 4"), "lanes 4 needs exactly one reduce dim whose extent"),
        (rowsum(2, 8, ", lanes = 4", "i32").replace("exp(%a)", "add(%a, %a)"), "float result"),
        (product(2, 4, 2, ', contract = "fma"').replace("f32", "f64"), "add fold of f32"),
        (product(2, 4, 2, ', contract = "fma", lanes = 2'), "no lanes"),
        (rowsum(2, 8, ', contract = "fma"'), "must return a mul"),
    ],
)
def test_verifier_refuses_what_has_no_meaning(src: str, message: str) -> None:
    with pytest.raises(IRError, match=message):
        parse(src)


# --- the pass -------------------------------------------------------------------------------


def _reassociated(src: str):
    passes = [ScheduleKernels(vector_bytes=64), SelectProducts(vector_bytes=64)]
    return PassManager([*passes, ReassociateReductions()]).run(parse(src))


def test_products_fuse_and_row_sums_get_lanes_each_a_real_claim_that_proves() -> None:
    res = _reassociated(product(8, 256, 32))
    (k,) = res.module.entry.ops
    assert k.attrs["contract"] == "fma" and k.attrs["strategy"] == "product"
    claims = [o for o in res.obligations if o.kind == "equivalence"]
    assert [(o.id, o.theory) for o in claims] == [
        ("reassociate-reductions/contract/equivalence", "real")
    ]
    res2 = _reassociated(rowsum(4, 1024))
    (k2,) = res2.module.entry.ops
    assert k2.attrs["lanes"] == 64  # 4 vectors of 16 f32 lanes
    (lanes,) = [o for o in res2.obligations if o.kind == "equivalence"]
    assert lanes.assumptions == ["nest"]
    outs = discharge(res.obligations + res2.obligations, jobs=1, use_cache=False)
    assert all(o.status == "proved" for o in outs), [o.reason for o in outs]
    # The same claims bit-exact are false, and refuted.
    exact = [replace(o, theory="fp", id=f"test/{n}") for n, o in enumerate([claims[0], lanes])]
    assert [o.status for o in discharge(exact, jobs=1, use_cache=False)] == ["refuted"] * 2


def linear(m: int, k: int, n: int) -> str:
    """x @ W^T with W as [n, k] (a linear layer's weight, read along k)."""
    src = PRODUCT.replace("%y: f32[_K_, _N_]", "%y: f32[_N_, _K_]").replace(
        "[[0, 0, 1, 0], [0, 1, 0, 0]]]", "[[0, 1, 0, 0], [0, 0, 1, 0]]]"
    )
    return _fill(src, M=m, K=k, N=n, EXTRA="")


def _reassociated_o3(src: str):
    """As -O3 runs them: select-products told that reassociate-reductions follows."""
    passes = [
        ScheduleKernels(vector_bytes=64),
        SelectProducts(vector_bytes=64, vectors_in_lanes=True),
    ]
    return PassManager([*passes, ReassociateReductions()]).run(parse(src))


@pytest.mark.parametrize("m,n", [(1, 300), (300, 1)])
def test_o3_matrix_vector_products_sum_in_lanes_and_run_as_their_meaning_says(m, n) -> None:
    """A batch-1 linear layer (one row or one column) is not a register tile with one live row
    or column at -O3: it stays a reduction nest and sums its 256-long dot products in 64 lanes
    (a `real` claim that proves); the C target runs that meaning bit for bit. Two rows or more
    are still products, and the exact mode (-O2) keeps matrix-vector products as products."""
    from gdv.backends.targets import get_target

    res = _reassociated_o3(linear(m, 256, n))
    (k,) = res.module.entry.ops
    assert "strategy" not in k.attrs and k.attrs["lanes"] == 64
    (claim,) = [o for o in res.obligations if o.kind == "equivalence"]
    assert claim.theory == "real" and claim.assumptions == ["nest"]
    assert [o.status for o in discharge(res.obligations, jobs=1, use_cache=False)] == [
        "proved"
    ] * len(res.obligations)
    rng = np.random.default_rng(m + n)
    inputs = {
        "x": rng.standard_normal((m, 256)).astype(np.float32),
        "y": rng.standard_normal((n, 256)).astype(np.float32),
    }
    got = get_target("c").run(res.module, inputs)[0]
    assert bits_equal(got, reference.run(res.module, inputs)[0])
    # the sequential fold differs from the lanes' fold on these values: the run is the new one
    exact = reference.run(_reassociated(linear(m, 256, n)).module, inputs)[0]
    assert not bits_equal(got, exact)
    (two,) = _reassociated_o3(linear(2, 256, n if n > 1 else 2)).module.entry.ops
    assert two.attrs["strategy"] == "product"
    (o2,) = _reassociated(linear(m, 256, n)).module.entry.ops
    assert o2.attrs["strategy"] == "product" and "lanes" not in o2.attrs
    # a reduce dim no lane count divides stays a product (a plain sequential nest would be slower)
    (odd,) = _reassociated_o3(linear(m, 250, n)).module.entry.ops
    assert odd.attrs["strategy"] == "product" and "lanes" not in odd.attrs


@pytest.mark.parametrize(
    "src",
    [
        rowsum(4, 1000),  # no lane count divides 1000 at least twice: left alone
        rowsum(4, 1024, "", "i32").replace("exp(%a)", "add(%a, %a)"),  # integers: exact already
        product(8, 64, 32).replace("f32", "f64"),  # fma only for f32
    ],
)
def test_the_pass_leaves_alone_what_it_cannot_prove_or_run(src: str) -> None:
    res = _reassociated(src)
    assert not [o for o in res.obligations if o.theory == "real"]
    assert all("lanes" not in o.attrs and "contract" not in o.attrs for o in res.module.entry.ops)


def test_o3_is_o2_with_the_pass() -> None:
    o2 = pass_names("c", 2, False)
    assert o2[-4:] == ["fuse-epilogues", "group-rows", "fold-pads", "plan-memory"]
    assert pass_names("c", 3, False) == [*o2[:-4], "reassociate-reductions", *o2[-4:]]
    assert "reassociate-reductions" not in pass_names("c", 2, False)


# --- compiled, run and recorded ----------------------------------------------------------------


LAYER_NORM = """func @main(%x: f32[32, 768], %g: f32[768], %b: f32[768]) -> f32[32, 768] {
  %y = layer_norm(%x, %g, %b) {axes = [1], eps = 1e-5} : f32[32, 768]
  return %y
}
"""


@pytest.mark.parametrize(
    "source",
    [EXAMPLES / "mlp.gdv", LAYER_NORM, product(37, 300, 53), rowsum(9, 512).replace("exp", "neg")],
    ids=["mlp", "layer_norm", "product", "rowsum"],
)
def test_o3_c_target_runs_the_recorded_meaning_bit_for_bit(source, tmp_path) -> None:
    # Programs without transcendentals, whose C bits are the reference's (IR_SPEC.md 3).
    comp = compile_module(
        source, CompileOptions(target="c", level=3, jobs=1, cache_dir=str(tmp_path))
    )
    assert comp.verdict == "proved"
    attrs = [o.attrs for f in comp.module.functions for o in f.ops if o.name == "kernel"]
    assert any("contract" in a or a.get("lanes", 1) > 1 for a in attrs)
    for seed in (0, 1):
        inputs = reference.random_inputs(comp.source, seed)
        want = reference.run(comp.module, inputs)  # the final module's own meaning
        got = comp.executable()(inputs)
        assert all(bits_equal(a, b) for a, b in zip(want, got, strict=True))


@pytest.mark.parametrize("name", ["layernorm_gelu", "attention"])
def test_o3_examples_with_transcendentals_agree_within_their_bounds(name: str, tmp_path) -> None:
    from gdv.evidence.bundle import conformance

    comp = compile_module(
        EXAMPLES / f"{name}.gdv",
        CompileOptions(target="c", level=3, jobs=1, cache_dir=str(tmp_path)),
    )
    assert comp.verdict == "proved"
    result = conformance(comp.source, comp.module, exact=False, target="c")
    assert result["status"] in ("agree", "close"), result


@given(st.integers(1, 20), st.integers(1, 70), st.integers(1, 40), st.integers(0, 1000))
def test_c_fma_products_equal_the_reference_at_every_shape(m: int, k: int, n: int, seed: int):
    from gdv.backends.targets import get_target

    module = _reassociated(product(m, k, n)).module
    (op,) = module.entry.ops
    if "contract" not in op.attrs:
        return  # not a product (a shape select-products leaves as a nest)
    rng = np.random.default_rng(seed)
    inputs = {
        "x": rng.standard_normal((m, k)).astype(np.float32),
        "y": rng.standard_normal((k, n)).astype(np.float32),
    }
    got = get_target("c").run(module, inputs)[0]
    assert bits_equal(got, reference.run(module, inputs)[0])


def test_o3_bundle_records_the_bound_change_and_verifies_under_a_policy_allowing_reals(
    tmp_path, capsys
) -> None:
    comp = compile_module(
        EXAMPLES / "mlp.gdv", CompileOptions(target="c", level=3, jobs=1, cache_dir=str(tmp_path))
    )
    bundle = write_evidence(comp, str(tmp_path / "ev"))
    m = manifest_of(bundle)
    assert m["pipeline"]["level"] == 3
    (real,) = [s for s in m["stages"] if s["theory"] == "real"]
    assert real["pass"] == "reassociate-reductions"
    before, after = real["bound_change"]["before"], real["bound_change"]["after"]
    assert len(before) == len(after) == 1 and 0 < after[0] <= before[0]
    policy = tmp_path / "policy.toml"
    policy.write_text(f"allow_real = true\nmax_abs_error = {after[0] * 2}\n")
    rc, out, _ = verify_cli(capsys, bundle, "--policy", policy)
    assert rc == 0, out
    assert "error-bound changes recomputed" in out
    # The default policy refuses claims over the reals; a tight max_abs_error refuses the bound.
    assert verify_cli(capsys, bundle, "--policy", tmp_path / "none.toml")[0] != 0
    (tmp_path / "default.toml").write_text("")
    rc, out, _ = verify_cli(capsys, bundle, "--policy", tmp_path / "default.toml")
    assert rc == 1 and "allow_real" in out
    policy.write_text(f"allow_real = true\nmax_abs_error = {after[0] / 2}\n")
    rc, out, _ = verify_cli(capsys, bundle, "--policy", policy)
    assert rc == 1 and "max_abs_error" in out
    # A recorded bound change that is not the recomputed one fails the check.
    tampered = tmp_path / "tampered"
    shutil.copytree(bundle, tampered)
    m = manifest_of(tampered)
    for s in m["stages"]:
        if "bound_change" in s:
            s["bound_change"]["after"] = [x / 10 for x in s["bound_change"]["after"]]
    save_manifest(tampered, m)
    policy.write_text("allow_real = true\n")
    rc, out, _ = verify_cli(capsys, tampered, "--policy", policy)
    assert rc == 1 and "error-bound change" in out, out
    assert json.loads((bundle / "manifest.json").read_text())["pipeline"]["level"] == 3


def test_c_fma_products_keep_the_sign_of_zero() -> None:
    # A row of -0.0 times positive columns sums to -0.0 in every order; a broadcast written
    # as `0 + a` would make it +0.0.
    from gdv.backends.targets import get_target

    module = _reassociated(product(16, 64, 48)).module
    (op,) = module.entry.ops
    assert "contract" in op.attrs
    x = np.full((16, 64), -0.0, np.float32)
    x[1::2] = 0.0
    y = np.ones((64, 48), np.float32)
    got = get_target("c").run(module, {"x": x, "y": y})[0]
    want = reference.run(module, {"x": x, "y": y})[0]
    assert np.signbit(want[0]).all() and not np.signbit(want[1]).any()
    assert bits_equal(got, want)
