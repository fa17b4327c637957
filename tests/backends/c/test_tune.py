"""The autotune cache (backends/c/tuning.py, gdv/tune.py): without `GDV_C_AUTOTUNE` or without a
stored result the analytical model decides (compiles are reproducible); with both, the stored
numbers become the products' schedule attributes and the proof covers them; an unreadable
file is ignored with a warning; `gdv tune` measures candidates that all give the same bits."""

from __future__ import annotations

import json
import warnings

import numpy as np
import pytest

from gdv.api import parse
from gdv.backends import c, reference
from gdv.backends.c import isa as isas
from gdv.backends.c import simd, tuning
from gdv.ir import products
from gdv.ir.printer import print_module
from gdv.passes.manager import PassManager
from gdv.passes.pipelines import pipeline

TEXT = (
    "func @main(%a: f32[96,80], %b: f32[80,72]) -> f32[96,72] {\n"
    "  %0 = matmul(%a, %b) : f32[96,72]\n  return %0\n}\n"
)


def _module():
    passes = pipeline("c", 2, False, **c.schedule_parameters())
    return PassManager(passes).run(parse(TEXT, "<tune>")).module


def _product(module):
    return next(
        op
        for fn in module.functions
        for op in fn.ops
        if op.name == "kernel" and op.attrs.get("strategy") == "product"
    )


def _store(choice: dict) -> None:
    tuning.store(simd.vector_bytes(), {"choice": {"f32": choice}})


@pytest.fixture(autouse=True)
def _native(monkeypatch: pytest.MonkeyPatch, tmp_path) -> None:
    """The host's own ISA, no overrides, and a cache directory of the test's own (the
    autotune file lives there)."""
    monkeypatch.setenv("GDV_C_CACHE", str(tmp_path / "c-cache"))
    monkeypatch.delenv(isas.ISA_ENV, raising=False)
    monkeypatch.delenv(tuning.AUTOTUNE_ENV, raising=False)
    monkeypatch.delenv(simd.BLOCKING_ENV, raising=False)
    monkeypatch.delenv(simd.VECTOR_BYTES_ENV, raising=False)


def test_model_without_autotune_even_when_a_result_is_stored() -> None:
    first = print_module(_module())
    _store({"mr": 8, "nv": 2, "kc": 64, "mc": 64, "nc": 128})
    assert c.schedule_parameters()["tuned"] == ()
    assert print_module(_module()) == first  # deterministic: the model, byte for byte
    d = c.capabilities(measure=False)
    assert d["execution"]["vectorization"]["contraction"]["f32"]["source"] == "model"


def test_autotune_on_without_a_result_falls_back_to_the_model(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    model = print_module(_module())
    monkeypatch.setenv(tuning.AUTOTUNE_ENV, "1")
    assert not tuning.path(simd.vector_bytes()).exists()
    assert c.schedule_parameters()["tuned"] == ()
    assert print_module(_module()) == model
    source = c.capabilities(measure=False)["execution"]["vectorization"]["contraction"]["f32"]
    assert source["source"].startswith("model (GDV_C_AUTOTUNE is on but no autotune cache")


def test_cache_hit_becomes_the_schedule(monkeypatch: pytest.MonkeyPatch) -> None:
    vl = simd.vector_bytes() // 4
    _store({"mr": 6, "nv": 2, "kc": 64, "mc": 60, "nc": 4 * vl})  # 15 registers: fits AVX2 too
    monkeypatch.setenv(tuning.AUTOTUNE_ENV, "1")
    assert c.schedule_parameters()["tuned"] == (("f32", 6, 2, 64, 60, 4 * vl),)
    module = _module()
    op = _product(module)
    assert op.attrs["micro"] == [6, 2 * vl]
    assert op.attrs["blocks"] == [60, 64, 4 * vl]
    v = c.capabilities(measure=False)["execution"]["vectorization"]["contraction"]
    assert v["f32"]["source"] == f"autotune cache {tuning.path(simd.vector_bytes())}"
    assert (v["f32"]["mr"], v["f32"]["nr"], v["f32"]["kc"]) == (6, 2 * vl, 64)
    assert v["f64"]["source"] == "model (not tuned for this dtype)"
    inputs = reference.random_inputs(module.entry, 0)
    (got,) = c.run(module, inputs)
    (want,) = reference.run(module, inputs)
    assert reference.bit_equal(got, want)


def test_cached_choice_is_proved(monkeypatch: pytest.MonkeyPatch) -> None:
    """A compile with the stored numbers proves its coverage obligation for them."""
    from gdv.driver import CompileOptions, compile_module

    vl = simd.vector_bytes() // 4
    _store({"mr": 6, "nv": 1, "kc": 32, "mc": 12, "nc": 2 * vl})
    monkeypatch.setenv(tuning.AUTOTUNE_ENV, "1")
    comp = compile_module(TEXT, CompileOptions(use_cache=False))
    assert comp.verdict == "proved"
    op = _product(comp.module)
    assert op.attrs["micro"] == [6, vl] and op.attrs["blocks"] == [12, 32, 2 * vl]


@pytest.mark.parametrize(
    "text",
    [
        "{not json",
        "",
        json.dumps({"version": tuning.TUNE_VERSION + 1, "vector_bytes": 64, "choice": {}}),
        json.dumps([1, 2]),
        "CHOICE",  # replaced below by a record with a negative size
        "\udcff",
    ],
)
def test_corrupted_cache_is_ignored_with_a_warning(
    text: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    vb = simd.vector_bytes()
    path = tuning.path(vb)
    path.parent.mkdir(parents=True, exist_ok=True)
    if text == "CHOICE":
        text = json.dumps(
            {
                "version": tuning.TUNE_VERSION,
                "vector_bytes": vb,
                "choice": {"f32": {"mr": -3, "nv": 1, "kc": 64, "mc": 64, "nc": 64}},
            }
        )
    if text == "\udcff":
        path.write_bytes(b"\xff\xfe\x00garbage")
    else:
        path.write_text(text)
    model = print_module(_module())
    monkeypatch.setenv(tuning.AUTOTUNE_ENV, "1")
    with pytest.warns(tuning.TuneCacheWarning, match="ignoring the autotune cache"):
        params = c.schedule_parameters()
    assert params["tuned"] == ()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", tuning.TuneCacheWarning)
        assert print_module(_module()) == model


def test_cache_key_depends_on_isa_and_width(monkeypatch: pytest.MonkeyPatch) -> None:
    paths = set()
    for name in ("avx512", "avx2", "sse2"):
        monkeypatch.setenv(isas.ISA_ENV, name)
        paths.add(tuning.path(simd.vector_bytes()))
    assert len(paths) == 3


def test_tune_measures_stores_and_is_then_used(monkeypatch: pytest.MonkeyPatch) -> None:
    from gdv import tune

    monkeypatch.setattr(tune, "WARM_S", 0.0)
    monkeypatch.setattr(tune, "TURNS", 1)
    lines: list[str] = []
    record = tune.tune(n=48, runs=1, log=lines.append)
    cands = tune.candidates()
    assert len(record["candidates"]) == len(cands) == len(lines) >= 3
    assert record["candidates"][0]["model"] is True
    mr, nv, _ = products.micro_tile(
        4, 1 << 30, 1 << 30, simd.vector_bytes(), simd.vector_registers(), simd.add_chains()
    )
    assert (cands[0].mr, cands[0].nv) == (mr, nv)
    for cand in cands:  # every candidate fits the registers
        assert cand.mr * cand.nv + cand.nv + 1 <= simd.vector_registers()
    best = min(record["candidates"], key=lambda r: r["seconds"])
    assert record["choice"]["f32"] == {k: best[k] for k in ("mr", "nv", "kc", "mc", "nc")}
    monkeypatch.setenv(tuning.AUTOTUNE_ENV, "1")
    (row,) = c.schedule_parameters()["tuned"]
    assert row == ("f32", *(best[k] for k in ("mr", "nv", "kc", "mc", "nc")))


def test_tune_refuses_an_isa_this_host_cannot_run(monkeypatch: pytest.MonkeyPatch) -> None:
    from gdv.cli import main

    if isas.host_arch() != "x86_64":
        pytest.skip("an x86-64 host")
    monkeypatch.setenv(isas.ISA_ENV, "native")
    assert main(["tune", "--isa", "neon", "--size", "32"]) == 3
    monkeypatch.setenv(isas.ISA_ENV, "native")
    assert main(["tune", "--isa", "avx1024"]) == 3


def test_tuned_inputs_never_change_bits(monkeypatch: pytest.MonkeyPatch) -> None:
    """Two stored choices, one result."""
    vl = simd.vector_bytes() // 4
    monkeypatch.setenv(tuning.AUTOTUNE_ENV, "1")
    outs = []
    for choice in (
        {"mr": 3, "nv": 1, "kc": 16, "mc": 9, "nc": vl},
        {"mr": 10, "nv": 2, "kc": 48, "mc": 30, "nc": 6 * vl},
    ):
        _store(choice)
        module = _module()
        inputs = reference.random_inputs(module.entry, 3)
        outs.append(c.run(module, inputs)[0])
    assert np.array_equal(outs[0], outs[1])
