"""Cross-target evidence (issue 20, item 4): `gdv compile --target c --target triton
--emit-evidence` writes one bundle holding both compiles and the cross-target table;
`gdv evidence verify` re-checks all of it and catches tampering with either artifact or with the
table; the review page shows the table; one target behaves as before."""

from __future__ import annotations

import json
import shutil
import sys
from pathlib import Path

import ml_dtypes
import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st
from support import manifest_of, rehash, save_manifest, verify_cli

from gdv.cli import main
from gdv.evidence.bundle import sha256
from gdv.evidence.cross_target import compare, difference

ROOT = Path(__file__).resolve().parents[2]
MLP = ROOT / "examples" / "mlp.gdv"
BF16 = ROOT / "examples" / "bf16_matmul.gdv"
TANH = """func @main(%x: f32[4,8] {range = [-3.0, 3.0]}, %w: f32[8,4] {range = [-1.0, 1.0]})
    -> f32[4,4] {
  %m = matmul(%x, %w) : f32[4,4]
  %t = tanh(%m) : f32[4,4]
  return %t
}
"""
PAIRS = [("reference", "c"), ("reference", "triton"), ("c", "triton")]


# --- comparing outputs (no target needed) ----------------------------------------------------


def _steps(x: np.ndarray, k: int) -> np.ndarray:
    """`x` moved k representable values up, one np.nextafter at a time (the oracle)."""
    y = x.copy()
    for _ in range(k):
        y = np.nextafter(y, np.array(np.inf, dtype=y.dtype))
    return y


@given(
    st.data(),
    st.integers(0, 40),
    st.sampled_from([(np.float16, 16), (np.float32, 32), (np.float64, 64)]),
)
def test_ulp_distance_counts_representable_values(data, k: int, kind) -> None:
    dtype, width = kind
    x = data.draw(st.floats(allow_nan=False, allow_infinity=False, width=width))
    a = np.array([x], dtype=dtype)
    b = _steps(a, k)
    if not np.isfinite(b).all():
        return
    d, u = difference(a, b)
    assert u == k and u == difference(b, a)[1]
    assert d == float(abs(b.astype(np.float64)[0] - a.astype(np.float64)[0]))


def test_differences_of_special_values() -> None:
    f32 = np.float32
    tiny = np.array([np.nextafter(f32(0), f32(1))], dtype=f32)
    # Across zero: -tiny, -0/+0, tiny are two steps apart; the zeros are one value.
    assert difference(-tiny, tiny) == (float(2 * tiny[0]), 2)
    assert difference(np.array([-0.0], f32), np.array([0.0], f32)) == (0.0, 0)
    assert difference(np.array([np.nan], f32), np.array([np.nan], f32)) == (0.0, 0)
    assert difference(np.array([np.nan, 1], f32), np.array([1, 1], f32)) == (None, None)
    big = np.array([np.finfo(f32).max], f32)
    assert difference(big, np.array([np.inf], f32))[1] == 1
    bf = np.array([1.0], ml_dtypes.bfloat16)
    assert difference(bf, np.array([1.0078125], ml_dtypes.bfloat16)) == (0.0078125, 1)
    assert difference(np.array([3, -2], np.int32), np.array([1, 5], np.int32)) == (7.0, 7)
    assert difference(np.array([2**64 - 1], np.uint64), np.array([0], np.uint64))[1] == 2**64 - 1


def _runs(a: list[float], b: list[float]) -> list:
    return [([np.array(a, np.float32)], [np.array(b, np.float32)])]


def test_compare_verdicts() -> None:
    same = compare("c", "triton", _runs([1, 2], [1, 2]), True, None)
    assert same["verdict"] == "agree" and same["outputs"] == [{"max_abs_diff": 0.0, "max_ulp": 0}]
    one_ulp = [1.0, float(np.nextafter(np.float32(2), np.float32(3)))]
    assert compare("c", "triton", _runs([1, 2], one_ulp), True, None)["verdict"] == "disagree"
    loose = compare("c", "triton", _runs([1, 2], one_ulp), False, [1e-6])
    assert loose["verdict"] == "close" and loose["outputs"][0]["max_ulp"] == 1
    assert loose["required"] == "within-bounds" and loose["limits"] == [1e-6]
    assert compare("c", "triton", _runs([1, 2], one_ulp), False, [1e-9])["verdict"] == "disagree"
    assert compare("c", "triton", _runs([1, 2], one_ulp), False, [None])["verdict"] == "disagree"
    assert compare("c", "triton", _runs([1, 2], one_ulp), False, None)["verdict"] == "disagree"
    nan = compare("c", "triton", _runs([1, np.nan], [1, 2]), False, [1e30])
    assert nan["verdict"] == "disagree" and nan["outputs"][0]["max_abs_diff"] is None


# --- bundles ---------------------------------------------------------------------------------


def _compile(tmp: Path, source: Path, *args: str) -> tuple[int, Path, Path]:
    pytest.importorskip("triton")
    bundle, out = tmp / "x.evidence", tmp / "out"
    rc = main(
        [
            "compile",
            str(source),
            "--target",
            "c",
            "--target",
            "triton",
            "--emit-evidence",
            str(bundle),
            "-o",
            str(out),
            "--jobs",
            "1",
            "--cache-dir",
            str(tmp / "cache"),
            *args,
        ]
    )
    return rc, bundle, out


@pytest.fixture(scope="module")
def mlp_pristine(tmp_path_factory) -> tuple[Path, Path]:
    """The two-target bundle of examples/mlp.gdv, written by the command line (never modified:
    copy it first), and the folder of artifacts `-o` wrote (skipped without triton)."""
    rc, bundle, out = _compile(tmp_path_factory.mktemp("mlp"), MLP)
    assert rc == 0
    return bundle, out


@pytest.fixture
def mlp(mlp_pristine, tmp_path) -> Path:
    return Path(shutil.copytree(mlp_pristine[0], tmp_path / "bundle"))


def test_the_bundle_holds_both_compiles_and_the_table(mlp_pristine) -> None:
    bundle, out = mlp_pristine
    assert sorted(p.name for p in out.iterdir()) == ["c.c", "c.so", "triton.py"]
    m = manifest_of(bundle)
    assert m["schema_version"] == "cross-target-1" and m["verdict"] == "proved"
    assert [t["name"] for t in m["targets"]] == ["c", "triton"]
    for t in m["targets"]:
        sub = manifest_of(bundle / t["bundle"])
        assert sub["schema_version"] == "2" and sub["target"]["name"] == t["name"]
        assert t["capabilities"] == sub["target"]["capabilities"]
        assert t["pipeline"] == sub["pipeline"] and t["obligations"] == len(sub["obligations"])
        (art,) = t["artifact"]["files"]
        assert sha256((bundle / art["file"]).read_bytes()) == art["sha256"]
    # Both artifacts are those `-o` wrote: one build of each.
    c, tr = (m["targets"][k]["artifact"]["files"][0]["file"] for k in (0, 1))
    assert (bundle / c).read_bytes() == (out / "c.c").read_bytes()
    assert (bundle / tr).read_bytes() == (out / "triton.py").read_bytes()
    table = m["cross_target"]
    assert table["seeds"] == [0, 1, 2] and table["status"] == "agree"
    assert [(p["a"], p["b"]) for p in table["pairs"]] == PAIRS
    # No transcendental and IR order kept: every pair must be bit for bit.
    for p in table["pairs"]:
        assert p["required"] == "bit-exact" and p["limits"] is None and p["verdict"] == "agree"
        assert p["outputs"] == [{"max_abs_diff": 0.0, "max_ulp": 0}]


def test_the_bundle_verifies_and_shows_its_table(mlp_pristine, tmp_path, capsys) -> None:
    bundle = mlp_pristine[0]
    rc, out, err = verify_cli(capsys, bundle, "--jobs", "1", "--source", MLP)
    assert rc == 0, out + err
    assert "ok    cross-target: agree on seeds [0, 1, 2]: reference~c agree" in out
    assert "ok    target c: targets/c verifies" in out
    assert "ok    target triton: targets/triton verifies" in out
    assert f"verified: {bundle}" in out
    assert main(["evidence", "show", str(bundle)]) == 0
    shown = capsys.readouterr().out
    assert "cross-target agree on seeds [0, 1, 2]" in shown
    assert "triton     agree |diff| 0 ulp 0 | agree |diff| 0 ulp 0 | -" in shown
    page = tmp_path / "page.html"
    assert main(["evidence", "report", str(bundle), "-o", str(page)]) == 0
    html = page.read_text()
    table = html[html.index('<table id="cross-target">') :]
    table = table[: table.index("</table>")]
    assert "<th>reference</th><th>c</th><th>triton</th>" in table
    assert table.count("agree |diff| 0 ulp 0") == 6  # every off-diagonal cell
    assert '<table id="pairs">' in html and "targets/triton/artifact/main.py" in html


@pytest.mark.parametrize("target", ["c", "triton"])
def test_a_tampered_artifact_fails(mlp, target, capsys) -> None:
    m = manifest_of(mlp)
    (art,) = next(t for t in m["targets"] if t["name"] == target)["artifact"]["files"]
    path = mlp / art["file"]
    path.write_text(path.read_text() + "\n# edited\n")
    rc, _, err = verify_cli(capsys, mlp, "--jobs", "1")
    assert rc == 1
    assert (
        f"not verified: files: {art['file']} (artifact of {target}) does not match its "
        "recorded sha256" in err
    )


@pytest.mark.slow
@pytest.mark.parametrize(("k", "target", "edit"), [(0, "c", "/* edited */"), (1, "triton", "# x")])
def test_a_rehashed_tampered_artifact_still_fails(mlp, k, target, edit, capsys) -> None:
    """Every hash fixed after editing an artifact: the target's own bundle check regenerates
    the artifact from its final stage."""
    sub = mlp / "targets" / target
    sm = manifest_of(sub)
    (entry,) = sm["artifact"]["files"]
    path = sub / entry["file"]
    path.write_text(path.read_text() + edit + "\n")
    rehash(sub, entry)
    save_manifest(sub, sm)
    m = manifest_of(mlp)
    t = m["targets"][k]
    t["artifact"]["files"][0]["sha256"] = entry["sha256"]
    t["manifest_sha256"] = sha256((sub / "manifest.json").read_bytes())
    save_manifest(mlp, m)
    rc, _, err = verify_cli(capsys, mlp, "--jobs", "1")
    assert rc == 1
    assert (
        f"not verified: target {target}: targets/{target}: artifact: {entry['file']} is not "
        "the final stage regenerated" in err
    )


@pytest.mark.parametrize(
    "edit",
    [
        lambda t: t["pairs"][2]["outputs"][0].update(max_abs_diff=1e-3),
        lambda t: t["pairs"][2]["outputs"][0].update(max_ulp=3),
        lambda t: t["pairs"][1].update(required="within-bounds", limits=[1.0]),
    ],
)
def test_a_tampered_table_fails(mlp, edit, capsys) -> None:
    m = manifest_of(mlp)
    edit(m["cross_target"])
    save_manifest(mlp, m)
    rc, _, err = verify_cli(capsys, mlp, "--jobs", "1")
    assert rc == 1
    assert "not verified: cross-target: rerunning the recorded seeds does not give the " in err


def test_fewer_seeds_than_the_targets_conformance_fail(mlp, capsys) -> None:
    m = manifest_of(mlp)
    m["cross_target"]["seeds"] = [0, 1]
    save_manifest(mlp, m)
    rc, _, err = verify_cli(capsys, mlp, "--jobs", "1")
    assert rc == 1
    assert (
        "not verified: targets: target c (targets/c): its conformance ran on seeds [0, 1, 2], "
        "the cross-target table on [0, 1]" in err
    )


def test_a_recorded_disagreement_fails(mlp, capsys) -> None:
    m = manifest_of(mlp)
    m["cross_target"]["pairs"][2]["verdict"] = "disagree"
    m["cross_target"]["status"] = "disagree"
    save_manifest(mlp, m)
    rc, _, err = verify_cli(capsys, mlp, "--jobs", "1")
    assert rc == 1 and "not verified: cross-target: the recorded table is disagree: c and " in err


def test_an_entry_unlike_its_bundle_fails(mlp, capsys) -> None:
    m = manifest_of(mlp)
    m["targets"][0]["pipeline"]["level"] = 3
    save_manifest(mlp, m)
    rc, _, err = verify_cli(capsys, mlp, "--jobs", "1")
    assert rc == 1
    assert "not verified: targets: target c (targets/c): the entry is not what its bundle" in err


def test_a_target_that_cannot_run_here_fails(mlp, monkeypatch, capsys) -> None:
    """As an ordinary bundle's conformance fails where its C compiler is missing."""
    from gdv.backends import triton as backend
    from gdv.ir.diagnostics import IRError

    def missing(*args, **kwargs):
        raise IRError("target triton needs the triton and torch packages (pip install ...)")

    monkeypatch.setattr(backend, "Executable", missing)
    rc, _, err = verify_cli(capsys, mlp, "--jobs", "1")
    assert rc == 1
    assert (
        "not verified: cross-target: cannot rerun the targets here: target triton needs the "
        "triton and torch packages" in err
    )


@pytest.mark.slow
def test_another_example_verifies(tmp_path, capsys) -> None:
    rc, bundle, out = _compile(tmp_path, BF16)
    assert rc == 0
    table = manifest_of(bundle)["cross_target"]
    assert table["status"] == "agree"
    assert all(p["required"] == "bit-exact" for p in table["pairs"])
    capsys.readouterr()
    rc, out, err = verify_cli(capsys, bundle, "--jobs", "1")
    assert rc == 0, out + err


def test_transcendentals_compare_within_the_bounds(tmp_path, capsys) -> None:
    """C's tanh is not the reference's: its pairs are held to the two bounds added."""
    src = tmp_path / "tanh.gdv"
    src.write_text(TANH)
    rc, bundle, _ = _compile(tmp_path, src)
    assert rc == 0
    table = manifest_of(bundle)["cross_target"]
    for p in table["pairs"]:
        assert p["required"] == "within-bounds" and p["verdict"] in ("agree", "close")
        (limit,) = p["limits"]
        assert 0 < limit < 1e-4  # finite and small: a few ulps of tanh and the sum
        d = p["outputs"][0]["max_abs_diff"]
        assert d is not None and d <= limit
    capsys.readouterr()
    rc, out, err = verify_cli(capsys, bundle, "--jobs", "1")
    assert rc == 0, out + err
    # Written again: the same bytes (timings aside), as for one target.
    (tmp_path / "again").mkdir()
    rc, again, _ = _compile(tmp_path / "again", src)
    assert rc == 0
    for rel in ("manifest.json", "targets/c/manifest.json", "targets/triton/manifest.json"):
        assert (again / rel).read_bytes() == (bundle / rel).read_bytes(), rel


# --- the command line ------------------------------------------------------------------------


def test_one_target_writes_the_ordinary_bundle(tmp_path, capsys) -> None:
    for args in ([], ["--target", "reference"]):
        ev = tmp_path / f"b{len(args)}"
        rc = main(["compile", str(MLP), *args, "--emit-evidence", str(ev), "--jobs", "1"])
        assert rc == 0
        m = manifest_of(ev)
        assert m["schema_version"] == "2"
        assert m["target"]["name"] == (args[1] if args else "c")
        assert not (ev / "targets").exists()
    out = capsys.readouterr().out
    assert "target c:\n" not in out and "cross-target" not in out


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--target", "c", "--target", "c"], "--target names a target twice"),
        (["--target", "c", "--target", "gpu"], "unknown target 'gpu'"),
        (["--target", "c", "--target", "triton", "--profile"], "--profile works on one target"),
        (
            ["--target", "c", "--target", "triton", "--mesh", "x=2"],
            "--mesh works on one target",
        ),
        (
            ["--target", "c", "--target", "triton", "-o", str(MLP)],
            "with several targets -o names a folder (one artifact per target), and this is a file",
        ),
    ],
)
def test_bad_target_lists_are_input_errors(args, message, capsys) -> None:
    assert main(["compile", str(MLP), *args]) == 3
    assert message in capsys.readouterr().err


def test_the_schema_rejects_a_one_target_table(mlp) -> None:
    from gdv.evidence.bundle import EvidenceError, read_manifest

    m = manifest_of(mlp)
    m["targets"] = m["targets"][:1]
    save_manifest(mlp, m)
    with pytest.raises(EvidenceError, match="does not follow schema cross-target-1"):
        read_manifest(mlp)
    json.loads((mlp / "manifest.json").read_text())


@pytest.mark.slow
def test_hooks_gate_each_target_and_the_signature_covers_all(tmp_path, capsys) -> None:
    """`--hook` runs on each target's bundle (a veto names the target); `--sign-key` signs the
    top manifest, which binds every target's manifest by its hash."""
    pytest.importorskip("cryptography")
    hook = tmp_path / "hook.py"
    log = tmp_path / "hook.log"
    hook.write_text(
        "import sys\n"
        f"open({str(log)!r}, 'a').write(sys.argv[1] + '\\n')\n"
        "sys.exit('no triton today' if sys.argv[1].endswith('triton') else 0)\n"
    )
    key, pub = tmp_path / "key.pem", tmp_path / "pub.pem"
    assert main(["evidence", "keygen", str(key), str(pub)]) == 0
    args = ("--hook", f"{sys.executable} {hook}", "--sign-key", str(key))
    rc, bundle, _ = _compile(tmp_path, MLP, *args)
    err = capsys.readouterr().err
    assert rc == 1 and "gdv: target triton: hook" in err and "no triton today" in err
    assert log.read_text().split() == [str(bundle / "targets" / t) for t in ("c", "triton")]
    rc, out, err = verify_cli(capsys, bundle, "--jobs", "1", "--trust-key", pub)
    assert rc == 0, out + err
    assert "signature: signed, checked against the trust key" in out
    m = manifest_of(bundle)
    m["targets"].reverse()
    save_manifest(bundle, m)
    rc, out, err = verify_cli(capsys, bundle, "--jobs", "1", "--trust-key", pub)
    assert rc == 1 and "not verified: signature: manifest.sig is not a signature" in err
