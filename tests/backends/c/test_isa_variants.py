"""The C target as on another host class (`GDV_C_ISA`, backends/c/isa.py).

Every x86 variant (AVX-512, AVX2, SSE2) is compiled with its own `-march` and, where this host
can execute it, run on the examples' products and checked bit for bit against the reference
backend (f32 transcendentals in double, GDV_C_F32_IN_DOUBLE=1, as test_examples.py does). The
instructions in each shared object are those of its class (no zmm register in AVX2 code, no
ymm in SSE2 code). NEON's descriptor and schedule parameters are produced on any host; building
it with an x86 compiler is refused with a clear error, and with an AArch64 cross compiler
(where installed) it compiles to AArch64 code that this host refuses to load.
"""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import jsonschema
import numpy as np
import pytest

from gdv.api import parse
from gdv.backends import c, reference
from gdv.backends.c import isa as isas
from gdv.backends.c import toolchain
from gdv.backends.c.elementwise import F32_DOUBLE_ENV
from gdv.backends.capabilities import SCHEMA
from gdv.ir import products
from gdv.ir.diagnostics import IRError
from gdv.passes.manager import PassManager
from gdv.passes.pipelines import pipeline

EXAMPLES = Path(__file__).resolve().parents[3] / "examples"
X86 = ["avx512", "avx2", "sse2"]
CROSS = "aarch64-linux-gnu-gcc"


def _features() -> set[str]:
    return set(toolchain.isa_features())


def _runs_here(name: str) -> str:
    return isas.runnable(isas.ISAS[name], _features())


def _compile(text: str, filename: str = "<isa>"):
    """The -O2 module for the C target with the current environment's schedule parameters
    (the pipeline `gdv compile` runs; the proofs are test_examples.py's business)."""
    passes = pipeline("c", 2, False, **c.schedule_parameters())
    return PassManager(passes).run(parse(text, filename)).module


def _products(module) -> list:
    return [
        op
        for fn in module.functions
        for op in fn.ops
        if op.name == "kernel" and op.attrs.get("strategy") == "product"
    ]


@pytest.mark.parametrize("name", X86)
@pytest.mark.parametrize(
    "example", ["mlp", "attention", "conv_block", "layernorm_gelu", "bf16_matmul"]
)
def test_x86_variant_bit_exact_on_examples(
    name: str, example: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    why = _runs_here(name)
    if why:
        pytest.skip(why)
    monkeypatch.setenv(isas.ISA_ENV, name)
    monkeypatch.setenv(F32_DOUBLE_ENV, "1")
    text = (EXAMPLES / f"{example}.gdv").read_text()
    module = _compile(text, f"{example}.gdv")
    want_isa = isas.ISAS[name]
    found = _products(module)
    if example not in ("bf16_matmul", "layernorm_gelu"):  # bf16 and no contraction: none
        assert found, "the example has products"
    for op in found:
        size = op.type.dtype.itemsize
        assert op.attrs["vector"] * size == want_isa.vector_bytes
        mr, nr = op.attrs["micro"]
        nv = nr // op.attrs["vector"]
        assert mr * nv + nv + 1 <= want_isa.registers
    source = c.lower(module)
    assert f"vector_size({want_isa.vector_bytes})" in source
    for seed in (0, 1):
        inputs = reference.random_inputs(module.entry, seed)
        want = reference.run(module, inputs)
        got = c.run(module, inputs)
        for g, w in zip(got, want, strict=True):
            assert reference.bit_equal(g, w), reference.describe_difference(g, w)


def _registers(library: Path) -> set[str]:
    text = subprocess.run(
        ["objdump", "-d", "--no-show-raw-insn", str(library)],
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    return {kind for kind in ("xmm", "ymm", "zmm") if f"%{kind}" in text}


@pytest.mark.skipif(shutil.which("objdump") is None, reason="no objdump")
@pytest.mark.parametrize("name", X86)
def test_x86_variant_uses_its_own_registers(name: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """The flags reach the compiler: AVX-512 code uses zmm registers, AVX2 code ymm and no zmm,
    SSE2 code neither; each variant is a different shared object (the cache key has the flags)."""
    monkeypatch.setenv(isas.ISA_ENV, name)
    text = (
        "func @main(%a: f32[64,64], %b: f32[64,64]) -> f32[64,64] {\n"
        "  %0 = matmul(%a, %b) : f32[64,64]\n  return %0\n}\n"
    )
    module = _compile(text)
    ours = [f for f in toolchain.flags("cc") if f.startswith(("-march", "-mprefer"))]
    assert list(isas.ISAS[name].march) == ours
    library = toolchain.build(c.lower(module))
    used = _registers(library)
    expect = {"avx512": {"zmm"}, "avx2": {"ymm"}, "sse2": {"xmm"}}[name]
    assert expect <= used
    if name == "avx2":
        assert "zmm" not in used
    if name == "sse2":
        assert not used & {"ymm", "zmm"}


def test_variants_are_cached_apart(monkeypatch: pytest.MonkeyPatch) -> None:
    """The same C source built for two ISAs gives two shared objects."""
    text = (
        "func @main(%a: f32[8,8], %b: f32[8,8]) -> f32[8,8] {\n"
        "  %0 = add(%a, %b) : f32[8,8]\n  return %0\n}\n"
    )
    source = c.lower(_compile(text))
    built = set()
    for name in X86:
        monkeypatch.setenv(isas.ISA_ENV, name)
        built.add(toolchain.build(source))
    assert len(built) == len(X86)


@pytest.mark.parametrize("name", [*X86, "neon"])
def test_descriptor_and_schedule_parameters_per_isa(
    name: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv(isas.ISA_ENV, name)
    want = isas.ISAS[name]
    params = c.schedule_parameters()
    assert params["vector_bytes"] == want.vector_bytes
    assert params["vector_registers"] == want.registers
    assert params["chains"] == want.add_latency * want.add_pipes
    assert params["tuned"] == ()
    assert params["fma"] is (name != "sse2")
    d = c.capabilities(measure=False)
    jsonschema.validate(d, SCHEMA)
    v = d["execution"]["vectorization"]
    assert v["isa"] == name and v["isa_requested"] == name
    assert v["march"] == list(want.march)
    assert v["vector_registers"] == want.registers
    assert d["compiler"]["flags"][-2] == want.march[-1]
    f32 = v["contraction"]["f32"]
    mr, nv, vl = products.micro_tile(4, 1 << 30, 1 << 30, *_numbers(want))
    assert (f32["mr"], f32["nr"]) == (mr, nv * vl)
    assert mr * nv + nv + 1 <= want.registers
    assert f32["source"] == "model"
    runs = not _runs_here(name) and not toolchain.unbuildable("cc")
    assert d["available"]["ok"] is runs
    if not runs:
        assert name in d["available"]["reason"]


@pytest.mark.parametrize("name", [*X86, "neon"])
def test_o3_fuses_products_only_with_an_fma_instruction(
    name: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """-O3 contracts a product into fused multiply-adds where the ISA has the instruction; on
    SSE2 each would be a software `fmaf`, so the products keep the exact mode's steps there."""
    monkeypatch.setenv(isas.ISA_ENV, name)
    passes = pipeline("c", 3, False, **c.schedule_parameters())
    text = (EXAMPLES / "mlp.gdv").read_text()
    found = _products(PassManager(passes).run(parse(text, "mlp.gdv")).module)
    assert found
    assert all(("contract" in op.attrs) is (name != "sse2") for op in found)


def test_native_fma_follows_the_host_flags() -> None:
    """`native` resolves to the host's class; its FMA comes from the host's flags (an AVX host
    without FMA runs as `avx2` without it), and only with `-march=native` accepted."""
    if isas.host_arch() != "x86_64":
        pytest.skip("the x86 flag sets below describe an x86-64 host")
    assert isas.native({"avx", "avx2", "fma"}, True).fma
    assert not isas.native({"avx"}, True).fma
    assert not isas.native({"avx2", "fma"}, False).fma
    assert isas.native({"avx512f", "fma"}, True).fma


def _numbers(i: isas.Isa) -> tuple[int, int, int]:
    return i.vector_bytes, i.registers, i.chains


def test_neon_plan_attributes(monkeypatch: pytest.MonkeyPatch) -> None:
    """The schedule a NEON host gets: 4-lane f32 vectors, a 12 x 4 micro-kernel within its 32
    registers (6 chains: 3-cycle adds on 2 pipes), blocks from the caches."""
    monkeypatch.setenv(isas.ISA_ENV, "neon")
    text = (
        "func @main(%a: f32[256,256], %b: f32[256,256]) -> f32[256,256] {\n"
        "  %0 = matmul(%a, %b) : f32[256,256]\n  return %0\n}\n"
    )
    (op,) = _products(_compile(text))
    assert op.attrs["vector"] == 4
    assert op.attrs["micro"] == [12, 4]
    mc, kc, nc = op.attrs["blocks"]
    assert mc % 12 == 0 and nc % 4 == 0 and kc % 8 == 0
    assert (kc, mc, nc) == products.blocking(4, 12, 4, c.schedule_parameters()["cache_bytes"])


def test_neon_build_refused_with_x86_compiler(monkeypatch: pytest.MonkeyPatch) -> None:
    if isas.host_arch() != "x86_64":
        pytest.skip("an x86-64 host")
    monkeypatch.setenv(isas.ISA_ENV, "neon")
    text = "func @main(%a: f32[4]) -> f32[4] {\n  %0 = add(%a, %a) : f32[4]\n  return %0\n}\n"
    module = _compile(text)
    with pytest.raises(IRError, match="GDV_C_ISA=neon: ISA neon is aarch64 code"):
        c.run(module, {"a": np.ones(4, np.float32)})


@pytest.mark.skipif(shutil.which(CROSS) is None, reason=f"no {CROSS} (apt: gcc-aarch64-linux-gnu)")
def test_neon_compiles_with_cross_compiler_and_is_not_run_here(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    if isas.host_arch() == "aarch64":
        pytest.skip("an x86-64 host")
    monkeypatch.setenv(isas.ISA_ENV, "neon")
    monkeypatch.setenv("CC", CROSS)
    text = (
        "func @main(%a: f32[64,64], %b: f32[64,64]) -> f32[64,64] {\n"
        "  %0 = matmul(%a, %b) : f32[64,64]\n  return %0\n}\n"
    )
    module = _compile(text)
    library = toolchain.build(c.lower(module))
    assert library.read_bytes()[:4] == b"\x7fELF"
    assert library.read_bytes()[18] == 183  # e_machine EM_AARCH64
    with pytest.raises(IRError, match="cannot run code built for GDV_C_ISA=neon"):
        c.run(module, {"a": np.ones((64, 64), np.float32), "b": np.ones((64, 64), np.float32)})


def test_unknown_isa_is_a_clear_error(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(isas.ISA_ENV, "avx1024")
    with pytest.raises(IRError, match="unknown ISA 'avx1024' .*native, avx512, avx2, sse2, neon"):
        c.schedule_parameters()


def test_cli_isa_option(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    from gdv.cli import main

    assert main(["compile", "--isa", "avx1024", str(EXAMPLES / "mlp.gdv")]) == 3
    assert "unknown ISA 'avx1024'" in capsys.readouterr().err


def test_cli_compile_for_another_isa(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """`gdv compile --isa sse2` proves and builds the SSE2 schedule (the option sets
    GDV_C_ISA for the process; monkeypatch restores it afterwards)."""
    from gdv.cli import main

    if _runs_here("sse2"):
        pytest.skip(_runs_here("sse2"))
    monkeypatch.setenv(isas.ISA_ENV, "native")
    src = tmp_path / "mm.gdv"
    src.write_text(
        "func @main(%a: f32[32,48], %b: f32[48,40]) -> f32[32,40] {\n"
        "  %0 = matmul(%a, %b) : f32[32,40]\n  return %0\n}\n"
    )
    out = tmp_path / "mm.so"
    assert main(["compile", "--isa", "sse2", str(src), "-o", str(out), "--no-cache"]) == 0
    assert "vector_size(16)" in (tmp_path / "mm.c").read_text()
    assert "-march=x86-64" in c.capabilities(measure=False)["compiler"]["flags"]
