"""Partition evidence (issue 17): `gdv compile --mesh ... --emit-evidence` and `gdv partition
--emit-evidence` write a bundle that `gdv evidence verify` re-checks without trusting the
partitioner: the SPMD program must be the claims' snippets composed, every claim's query is
re-encoded and re-solved, the ranks' blocks and both bounds are recomputed, every compiled
segment's own bundle verifies, and the policy gates reordered sums. Tampering of each kind is
caught, by the check that is about it."""

from __future__ import annotations

import json
import re
import shutil
from pathlib import Path

import pytest

from gdv.cli import main
from gdv.evidence.bundle import sha256
from gdv.evidence.policy import Policy
from gdv.evidence.verify import verify_bundle

ROOT = Path(__file__).resolve().parents[2]
MLP = str(ROOT / "examples" / "mlp.gdv")
MEGATRON = ["--shard", "x=[data,-]", "--shard", "w1=[-,model]", "--shard", "w2=[model,-]"]
REORDER_OK = Policy(allow_reordered_collectives=True)


@pytest.fixture(scope="module")
def bundle(tmp_path_factory) -> Path:
    """The Megatron MLP compiled for a 2 x 2 mesh, with its segments' bundles."""
    out = tmp_path_factory.mktemp("megatron")
    rc = main(
        [
            "compile",
            MLP,
            "--mesh",
            "data=2,model=2",
            *MEGATRON,
            "-o",
            str(out / "spmd.gdv"),
            "--emit-evidence",
            str(out / "ev"),
        ]
    )
    assert rc == 0
    return out / "ev"


def _copy(bundle: Path, tmp_path: Path) -> Path:
    dst = tmp_path / "ev"
    shutil.copytree(bundle, dst)
    return dst


def _failure(directory: Path, policy: Policy = REORDER_OK) -> tuple[str, str] | None:
    report = verify_bundle(directory, policy=policy)
    bad = report.failure
    return None if bad is None else (bad.item, bad.detail)


def _rehash(directory: Path) -> None:
    """Recompute every hash the manifest records (a tamperer who rewrites consistently)."""
    path = directory / "manifest.json"
    m = json.loads(path.read_text())
    entries = [m["source"], m["spmd"]]
    for c in m["claims"]:
        entries += [e for e in (c["global"], c["spmd"]) if e] + c["queries"]
    for e in entries:
        e["sha256"] = sha256((directory / e["file"]).read_bytes())
    path.write_text(json.dumps(m, indent=2, sort_keys=True) + "\n")


def test_the_megatron_bundle_verifies_and_records_the_plan(bundle: Path) -> None:
    assert _failure(bundle) is None
    m = json.loads((bundle / "manifest.json").read_text())
    assert m["mesh"] == {"name": "m", "axes": [["data", 2], ["model", 2]]}
    assert [c["op"] for c in m["collectives"]] == ["all_reduce"]
    assert [c["theory"] for c in m["claims"]].count("real") == 1
    assert len(m["segments"]) == 2 and len(m["ranks"]) == 4
    # Rank (data=1, model=1) loads rows 4.. of x and the second column block of w1.
    r3 = {i["name"]: i for i in m["ranks"][3]["inputs"]}
    assert r3["x"]["offsets"] == [4, 0] and r3["w1"]["offsets"] == [0, 64]
    bounds = m["bounds"]
    assert 0 < bounds["partitioned"][0] <= bounds["global"][0]


def test_the_default_policy_refuses_a_reordered_sum_and_carry_needs_no_permission(
    bundle: Path, tmp_path: Path
) -> None:
    item, detail = _failure(bundle, Policy())
    assert item == "policy" and "allow_reordered_collectives" in detail
    item, detail = _failure(bundle, Policy(allow_reordered_collectives=True, max_abs_error=1e-4))
    assert item == "policy" and "partitioned output 0 error bound" in detail
    out = tmp_path / "carry"
    rc = main(
        [
            "compile",
            MLP,
            "--mesh",
            "data=2,model=2",
            *MEGATRON,
            "--order",
            "carry",
            "--emit-evidence",
            str(out),
        ]
    )
    assert rc == 0
    assert _failure(out, Policy()) is None


def test_gdv_compile_mesh_gates_on_a_policy(tmp_path: Path, capsys) -> None:
    policy = tmp_path / "gdv-policy.toml"
    policy.write_text("allow_reordered_collectives = false\n")
    rc = main(["compile", MLP, "--mesh", "data=2,model=2", *MEGATRON, "--policy", str(policy)])
    assert rc == 1
    assert "allow_reordered_collectives" in capsys.readouterr().err


@pytest.mark.parametrize(
    ("tamper", "item"),
    [
        ("edit the SPMD program", "files"),
        ("swap two SPMD ops and rehash", "composition"),
        ("drop the all_reduce from the program and its claim, rehash", "solvers"),
        ("claim an op the source does not have, rehash", "composition"),
        ("move a rank's block", "ranks"),
        ("change a segment's C", "segments"),
    ],
)
def test_tampering_is_caught(bundle: Path, tmp_path: Path, tamper: str, item: str) -> None:
    ev = _copy(bundle, tmp_path)
    spmd = ev / "spmd" / "main.gdv"
    m = json.loads((ev / "manifest.json").read_text())
    if tamper == "edit the SPMD program":
        spmd.write_text(spmd.read_text().replace("relu", "abs"))
    elif tamper.startswith("swap"):
        lines = spmd.read_text().splitlines()
        i = next(k for k, ln in enumerate(lines) if "= broadcast(%b1" in ln)
        lines[i - 1], lines[i] = lines[i], lines[i - 1]
        spmd.write_text("\n".join(lines) + "\n")
        _rehash(ev)
    elif tamper.startswith("drop"):
        # A consistent forgery: the program returns the partial product, and the claim (its
        # snippet and its re-encoded query) says so. Only the solver can tell.
        from gdv.ir.parser import parse
        from gdv.validate.spmd import claim_queries

        text = spmd.read_text()
        ar = re.search(r"  %(\S+) = all_reduce\(%(\S+)\).*\n", text)
        spmd.write_text(text.replace(ar.group(0), "").replace(f"%{ar.group(1)}", f"%{ar.group(2)}"))
        c = next(c for c in m["claims"] if c["theory"] == "real")
        s_path = ev / c["spmd"]["file"]
        s_text = s_path.read_text()
        ar = re.search(r"  %(\S+) = all_reduce\(%(\S+)\).*\n", s_text)
        s_path.write_text(
            s_text.replace(ar.group(0), "").replace(f"%{ar.group(1)}", f"%{ar.group(2)}")
        )
        g = parse((ev / c["global"]["file"]).read_text())
        s = parse(s_path.read_text())
        (ev / c["queries"][0]["file"]).write_text(claim_queries(g, s, "real")[0])
        _rehash(ev)
    elif tamper.startswith("claim an op"):
        # The relu's claim, both sides made an abs (a true claim, consistently re-encoded),
        # and the SPMD program with it: only the source's op tells.
        from gdv.ir.parser import parse
        from gdv.validate.spmd import claim_queries

        c = next(c for c in m["claims"] if "relu" in (ev / c["global"]["file"]).read_text())
        for side in ("global", "spmd"):
            f = ev / c[side]["file"]
            f.write_text(f.read_text().replace("relu", "abs"))
        spmd.write_text(spmd.read_text().replace("relu", "abs"))
        g, s = (parse((ev / c[k]["file"]).read_text()) for k in ("global", "spmd"))
        (ev / c["queries"][0]["file"]).write_text(claim_queries(g, s, c["theory"])[0])
        _rehash(ev)
    elif tamper == "move a rank's block":
        m["ranks"][3]["inputs"][0]["offsets"] = [0, 0]  # x: rows 4.. in truth
        (ev / "manifest.json").write_text(json.dumps(m, indent=2, sort_keys=True) + "\n")
    else:
        c_file = next((ev / "segments" / "00" / "artifact").glob("*.c"))
        c_file.write_text(c_file.read_text() + "\n/* tampered */\n")
    got = _failure(ev)
    assert got is not None and got[0] == item, got


def test_gdv_partition_emit_evidence_verifies_without_segments(tmp_path: Path) -> None:
    out = tmp_path / "ev"
    spmd = tmp_path / "spmd.gdv"
    rc = main(
        [
            "partition",
            str(ROOT / "examples" / "attention.gdv"),
            "--mesh",
            "model=2",
            "-o",
            str(spmd),
            "--emit-evidence",
            str(out),
        ]
    )
    assert rc == 0
    assert _failure(out, Policy()) is None
    m = json.loads((out / "manifest.json").read_text())
    assert m["segments"] == [] and m["verdict"] == "proved"
    assert main(["evidence", "verify", str(out)]) == 0


def test_shard_without_mesh_is_an_input_error(capsys) -> None:
    assert main(["compile", MLP, "--shard", "x=[data,-]"]) == 3
    assert "give --mesh too" in capsys.readouterr().err
