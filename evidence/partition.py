"""Evidence of a partitioned program (issue 17): `gdv partition ... --emit-evidence DIR` and
`gdv compile --mesh ... --emit-evidence DIR` write it; `gdv evidence verify DIR` re-checks it.

A partition bundle (`schema_version` `partition-1`, `schema/manifest-partition-1.json`) holds:

- `source/input.gdv`: the global program, as given;
- `spmd/main.gdv`: the SPMD program every rank runs;
- `claims/NNNN-<op>-global.gdv` and `-spmd.gdv`: each distinct per-op claim, the op alone on
  global operands and its SPMD snippet on their blocks; `claims/NNNN-<op>-out0.smt2`: its
  query (`unsat` proves it), symbolic in the rank;
- `segments/NN/`: with `gdv compile --mesh`, each segment of local ops between collectives,
  compiled for C, as an ordinary evidence bundle of its own;

and a manifest recording the mesh, the annotations, the reduction order, every value's sharding
with the reason for it, the collectives with their bytes, each rank's coordinates and the block
of every input it loads, the error bounds of both programs, and the verdict.

The checker trusts neither the partitioner nor the compile. It checks that the SPMD program is
the claims' snippets composed in the source's op order (`_compose`: each claim's global side is
the source's op, its parameters carry the shardings the SPMD values have at that point, its
snippet is the SPMD function's next ops, and the results and their shardings are what the
claims leave), so proving every claim proves the whole program by induction over the ops. It
re-encodes each claim's query itself and requires the stored one to be the same, re-solves it
with every required solver, recomputes each rank's blocks and both programs' bounds, verifies
every segment's bundle and checks that the segment is the SPMD function's own slice, and
applies the policy: a `real` claim (a split float sum finished in a declared order) needs
`allow_reordered_collectives`, and `max_abs_error` bounds the partitioned program.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import TYPE_CHECKING, Any

from gdv.evidence.bundle import (
    EvidenceError,
    install_bundle,
    manifest_bytes,
    sha256,
    slug,
    tool_versions,
    validate_manifest,
)
from gdv.ir.diagnostics import IRError, printable
from gdv.ir.printer import print_module

if TYPE_CHECKING:
    from gdv.evidence.policy import Policy
    from gdv.ir.core import Module
    from gdv.passes.partition import Partitioned

SCHEMA_VERSION = "partition-1"


def _entry(root: Path, rel: str, data: bytes) -> dict:
    path = root / rel
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(data)
    return {"file": rel, "sha256": sha256(data)}


def _bounds(module: Module) -> tuple[list[float | None] | None, str | None]:
    """Each output's rigorous absolute error bound (None: unbounded), or None and the reason
    when the program has none (an input without a declared range)."""
    import math

    from gdv.validate.bounds import analyze

    try:
        outs = analyze(module).outputs
    except IRError as e:
        return None, e.message
    return [o.abs if o.abs is not None and math.isfinite(o.abs) else None for o in outs], None


def _ranks(module: Module) -> list[dict]:
    from gdv.ir.mesh import block_offsets, function_mesh, param_sharding

    fn = module.entry
    mesh = function_mesh(module, fn)
    out = []
    for r in range(mesh.size):
        coords = mesh.coords(r)
        inputs = [
            {
                "name": p.name,
                "shape": list(p.type.shape),
                "offsets": list(
                    block_offsets(p.type, param_sharding(p.attrs, p.type.rank), mesh, coords)
                ),
            }
            for p in fn.params
        ]
        out.append({"rank": r, "coords": list(coords), "inputs": inputs})
    return out


def build_manifest(
    root: Path,
    source_name: str,
    source: bytes,
    module: Module,
    part: Partitioned,
    annotations: dict[str, list[list[str]]],
    order: str,
    verdict: str,
    segments: list | None = None,
) -> dict:
    """Write the bundle's files under `root` and return its manifest."""
    from gdv.passes.partition import communication_bytes
    from gdv.validate.spmd import claim_queries

    mesh = part.module.meshes[0]
    claims: list[dict] = []
    first: dict[str, int] = {}
    for k, step in enumerate(part.steps):
        entry: dict[str, Any] = {
            "op": step.op,
            "theory": step.theory,
            "status": _status(step.verdict),
            "reason": step.reason,
            "same_as": None,
            "global": None,
            "spmd": None,
            "queries": [],
        }
        if step.key in first:
            entry["same_as"] = first[step.key]
            entry["status"] = claims[first[step.key]]["status"]
        else:
            first[step.key] = k
            stem = f"claims/{k:04d}-{slug(step.op)}"
            entry["global"] = _entry(
                root, f"{stem}-global.gdv", print_module(step.global_).encode()
            )
            entry["spmd"] = _entry(root, f"{stem}-spmd.gdv", print_module(step.spmd).encode())
            texts = claim_queries(step.global_, step.spmd, step.theory)
            entry["queries"] = [
                _entry(root, f"{stem}-out{o}.smt2", t.encode()) for o, t in enumerate(texts)
            ]
        claims.append(entry)
    g_bounds, g_reason = _bounds(module)
    p_bounds, p_reason = _bounds(part.module)
    manifest: dict[str, Any] = {
        "schema_version": SCHEMA_VERSION,
        "source": {**_entry(root, "source/input.gdv", source), "name": printable(source_name)},
        "mesh": {"name": mesh.name, "axes": [[a, n] for a, n in mesh.axes]},
        "annotations": {k: [list(a) for a in v] for k, v in sorted(annotations.items())},
        "order": order,
        "choices": [
            {"value": c.value, "sharding": c.sharding, "reason": c.reason} for c in part.choices
        ],
        "spmd": _entry(root, "spmd/main.gdv", print_module(part.module).encode()),
        "claims": claims,
        "collectives": [
            {"result": r, "op": name, "axes": axes, "bytes": nbytes}
            for r, name, axes, nbytes in part.collectives
        ],
        "communication_bytes_per_rank": communication_bytes(part),
        "ranks": _ranks(part.module),
        "bounds": {
            "global": g_bounds,
            "partitioned": p_bounds,
            "reason": g_reason or p_reason,
        },
        "segments": [],
        "tools": tool_versions(),
        "verdict": verdict,
    }
    if segments is not None:
        from gdv.evidence.bundle import write_bundle

        for k, seg in enumerate(segments):
            rel = f"segments/{k:02d}"
            write_bundle(seg.compilation, root / rel)
            data = (root / rel / "manifest.json").read_bytes()
            manifest["segments"].append(
                {
                    "bundle": rel,
                    "first": seg.segment.first,
                    "end": seg.segment.end,
                    "manifest_sha256": sha256(data),
                }
            )
    return manifest


def _status(verdict: str) -> str:
    return verdict if verdict in ("proved", "refuted") else "unknown"


def write_partition_bundle(directory: str | os.PathLike, **kwargs: Any) -> Path:
    """Write a partition bundle to `directory` (replacing an earlier bundle there, never
    another directory); `kwargs` are `build_manifest`'s."""

    def fill(tmp: Path) -> None:
        manifest = build_manifest(tmp, **kwargs)
        validate_manifest(manifest)
        (tmp / "manifest.json").write_bytes(manifest_bytes(manifest))

    return install_bundle(directory, fill)


# --- checking --------------------------------------------------------------------------------


def verify_partition(
    root: Path,
    manifest: dict,
    solvers: tuple[str, ...],
    policy: Policy,
    timeout: float,
    passed,
    failed,
    verify_segment,
) -> None:
    """Every check of a partition bundle (module docstring), reporting through `passed` and
    `failed` (which raises); `verify_segment(path)` verifies a segment's bundle."""
    from gdv.evidence.solvers import SOLVERS, solve
    from gdv.evidence.verify import same_query
    from gdv.validate.spmd import claim_queries

    _files(root, manifest, passed, failed)
    source = _parse(root, manifest["source"]["file"], failed)
    spmd = _parse(root, manifest["spmd"]["file"], failed)
    _mesh(manifest, spmd, failed)
    pairs = _compose(root, manifest, source, spmd, failed)
    passed(
        "composition",
        f"the SPMD program is the {len(manifest['claims'])} claims' snippets composed in the "
        "source's op order",
    )
    if manifest["verdict"] != "proved" or any(c["status"] != "proved" for c in manifest["claims"]):
        failed("verdict", f"the bundle's verdict is {manifest['verdict']}: nothing is proved")
    use = tuple(s for s in SOLVERS if s in set(solvers) | set(policy.required_solvers))
    count = 0
    for k, (g, s) in pairs.items():
        c = manifest["claims"][k]
        own = claim_queries(g, s, c["theory"])
        if len(own) != len(c["queries"]):
            failed(
                "encoding", f"claim %{c['op']} stores {len(c['queries'])} queries, not {len(own)}"
            )
        for q, text in zip(c["queries"], own, strict=True):
            stored = (root / q["file"]).read_text()
            if not same_query(stored, text):
                failed("encoding", f"{q['file']} is not the query of claim %{c['op']}")
            for name in use:
                a = solve(name, stored, timeout)
                if a.result != "unsat" and (name in policy.required_solvers or a.result == "sat"):
                    failed(
                        "solvers",
                        f"{name} gives {a.result} on {q['file']} (claim %{c['op']}): {a.reason}",
                    )
            count += 1
    passed("solvers", f"{count} claim quer(ies) re-encoded and unsat with {', '.join(use)}")
    if _ranks(spmd) != manifest["ranks"]:
        failed("ranks", "the ranks' blocks are not those of the SPMD program's shardings")
    passed("ranks", f"{len(manifest['ranks'])} ranks' input blocks recomputed")
    again = {"global": _bounds(source)[0], "partitioned": _bounds(spmd)[0]}
    for side in ("global", "partitioned"):
        if again[side] != manifest["bounds"][side]:
            failed("bounds", f"the {side} error bounds differ from the recorded ones")
    passed("bounds", "both programs' error bounds recomputed")
    _segments(root, manifest, spmd, verify_segment, passed, failed)
    violations = check_partition_policy(policy, manifest)
    if violations:
        failed("policy", f"{violations[0]} (policy from {policy.origin})")
    passed("policy", f"every rule holds (policy from {policy.origin})")


def _files(root: Path, manifest: dict, passed, failed) -> None:
    from gdv.evidence.verify import check_files

    listed = [("source", manifest["source"]), ("SPMD program", manifest["spmd"])]
    for c in manifest["claims"]:
        what = f"claim %{c['op']}"
        listed += [(what, e) for e in (c["global"], c["spmd"]) if e]
        listed += [(what, q) for q in c["queries"]]
    check_files(root, listed, passed, failed)


def _parse(root: Path, rel: str, failed) -> Module:
    from gdv.ir.parser import parse
    from gdv.ir.verifier import verify

    try:
        return verify(parse((root / rel).read_text(), rel))
    except (IRError, UnicodeDecodeError) as e:
        failed("parse", f"{rel}: {e}")
        raise AssertionError from None  # failed raises


def _mesh(manifest: dict, spmd: Module, failed) -> None:
    from gdv.ir.mesh import function_mesh

    fn = spmd.entry
    if fn is None or fn.attrs.get("mesh") is None:
        failed("composition", "spmd/main.gdv has no SPMD entry function")
    mesh = function_mesh(spmd, fn)
    if [mesh.name, [[a, n] for a, n in mesh.axes]] != [
        manifest["mesh"]["name"],
        manifest["mesh"]["axes"],
    ]:
        failed("composition", "the SPMD program's mesh is not the recorded one")


def _compose(root: Path, manifest: dict, source: Module, spmd: Module, failed) -> dict:
    """Check the composition; the distinct claims' parsed pairs by claim index."""
    from gdv.ir.mesh import function_mesh, global_type, out_shardings, param_sharding

    gfn, sfn = source.entry, spmd.entry
    mesh = function_mesh(spmd, sfn)
    claims = manifest["claims"]
    if gfn is None or len(claims) != len(gfn.ops):
        failed("composition", f"{len(claims)} claims for the source's ops")
    if [p.name for p in sfn.params] != [p.name for p in gfn.params]:
        failed("composition", "the SPMD parameters are not the source's")
    have: dict[str, list] = {}
    local: dict[str, str] = {}
    types = gfn.types()
    for gp, sp in zip(gfn.params, sfn.params, strict=True):
        s = param_sharding(sp.attrs, sp.type.rank)
        if global_type(sp.type, s, mesh) != gp.type:
            failed("composition", f"%{sp.name} is not the block of %{gp.name} its sharding says")
        have[gp.name], local[gp.name] = s, sp.name
    pairs: dict[int, tuple[Module, Module]] = {}
    pos = 0
    for k, (gop, c) in enumerate(zip(gfn.ops, claims, strict=True)):
        base = k if c["same_as"] is None else c["same_as"]
        if base > k or claims[base]["same_as"] is not None or claims[base]["global"] is None:
            failed("composition", f"claim {k} cites claim {base}, which holds no pair")
        if base not in pairs:
            pairs[base] = (
                _parse(root, claims[base]["global"]["file"], failed),
                _parse(root, claims[base]["spmd"]["file"], failed),
            )
        g, s = pairs[base]
        where = f"claim {k} (%{gop.result})"
        gf, sf = g.entry, s.entry
        distinct = list(dict.fromkeys(gop.operands))
        if gf is None or sf is None or len(gf.ops) != 1 or len(gf.params) != len(distinct):
            failed("composition", f"{where}: its global side is not the source's op alone")
        names = [p.name for p in gf.params]
        rename = dict(zip(distinct, names, strict=True))
        want = gop.__class__(
            gf.ops[0].result,
            gop.name,
            [rename[o] for o in gop.operands],
            gop.attrs,
            gop.type,
        )
        if not _same_op(gf.ops[0], want) or gf.returns != [gf.ops[0].result]:
            failed("composition", f"{where}: its global side is not the source's op")
        for p, o in zip(gf.params, distinct, strict=True):
            if p.type != types[o]:
                failed("composition", f"{where}: %{p.name} is not of %{o}'s type")
        if [p.name for p in sf.params] != names or sf.attrs.get("mesh") != mesh.name:
            failed("composition", f"{where}: its SPMD side's parameters are not the operands'")
        if function_mesh(s, sf) != mesh:
            failed("composition", f"{where}: its mesh is not the program's")
        mapping = {}
        for p, o in zip(sf.params, distinct, strict=True):
            if param_sharding(p.attrs, p.type.rank) != have[o]:
                failed("composition", f"{where}: %{p.name} is not sharded as %{o} is there")
            mapping[p.name] = local[o]
        for op in sf.ops:
            if pos >= len(sfn.ops):
                failed("composition", f"{where}: the SPMD program ends before its snippet")
            mine = sfn.ops[pos]
            moved = op.__class__(
                op.result, op.name, [mapping.get(x, x) for x in op.operands], op.attrs, op.type
            )
            if not _same_op(mine, moved):
                failed(
                    "composition",
                    f"{where}: SPMD op {pos} (%{mine.result} = {mine.name}) is not its snippet's",
                )
            pos += 1
        (res,) = sf.returns
        local[gop.result] = mapping.get(res, res)
        (have[gop.result],) = out_shardings(sf)
    if pos != len(sfn.ops):
        failed("composition", f"SPMD ops from {pos} on belong to no claim")
    if sfn.returns != [local[r] for r in gfn.returns]:
        failed("composition", "the SPMD results are not the claims' results")
    if out_shardings(sfn) != [have[r] for r in gfn.returns]:
        failed("composition", "the SPMD results' shardings are not the claims'")
    # The functions ops name (control flow bodies, kernel bodies) are the source's, in the SPMD
    # program and in every claim: a claim is about the functions its pair holds.
    theirs = {f.name: f for f in source.functions if f is not gfn}
    if {f.name: f for f in spmd.functions if f is not sfn} != theirs:
        failed("composition", "the SPMD program's other functions are not the source's")
    for k, (g, s) in pairs.items():
        for f in [*g.functions, *s.functions]:
            if f is not g.entry and f is not s.entry and theirs.get(f.name) != f:
                failed("composition", f"claim {k}: its function @{f.name} is not the source's")
    return pairs


def _same_op(a, b) -> bool:
    return (a.result, a.name, list(a.operands), a.attrs, a.type) == (
        b.result,
        b.name,
        list(b.operands),
        b.attrs,
        b.type,
    )


def _segments(root: Path, manifest: dict, spmd: Module, verify_segment, passed, failed) -> None:
    if not manifest["segments"]:
        return
    from gdv.backends.mpi.segments import Collective, segment_module, split

    fn = spmd.entry
    want = [s for s in split(fn) if not isinstance(s, Collective)]
    got = manifest["segments"]
    if [(s["first"], s["end"]) for s in got] != [(s.first, s.end) for s in want]:
        failed("segments", "the segments are not the SPMD function's runs of local ops")
    for entry, seg in zip(got, want, strict=True):
        sub = root / entry["bundle"]
        if not (sub / "manifest.json").is_file():
            failed("segments", f"{entry['bundle']} is no bundle")
        if sha256((sub / "manifest.json").read_bytes()) != entry["manifest_sha256"]:
            failed("segments", f"{entry['bundle']}/manifest.json does not match its sha256")
        sub_manifest = json.loads((sub / "manifest.json").read_bytes())
        first = sub_manifest["stages"][0]["file"]
        if (sub / first).read_text() != print_module(segment_module(spmd, fn, seg)):
            failed("segments", f"{entry['bundle']} compiles another program than its segment")
        bad = verify_segment(sub)
        if bad:
            failed("segments", f"{entry['bundle']}: {bad}")
    passed("segments", f"{len(got)} segment bundle(s) verify and are the SPMD function's own")


def policy_view(part: Partitioned, order: str) -> dict:
    """What `check_partition_policy` reads of a manifest, for a partition not written as a
    bundle (the gate of `gdv partition` and `gdv compile --mesh`)."""
    bounds, reason = _bounds(part.module)
    return {
        "claims": [{"op": st.op, "theory": st.theory} for st in part.steps],
        "order": order,
        "bounds": {"partitioned": bounds, "reason": reason},
    }


def check_partition_policy(policy: Policy, manifest: dict) -> list:
    from gdv.evidence.policy import Violation

    out = []
    real = [c["op"] for c in manifest["claims"] if c["theory"] == "real"]
    if real and not policy.allow_reordered_collectives:
        out.append(
            Violation(
                "allow_reordered_collectives",
                f"claim %{real[0]} finishes a split float sum in the declared order "
                f"'{manifest['order']}' (real, not bit-exact); --order carry keeps the bits",
            )
        )
    if policy.max_abs_error is not None:
        bounds = manifest["bounds"]["partitioned"]
        if bounds is None:
            why = manifest["bounds"]["reason"]
            out.append(Violation("max_abs_error", f"no error bound: {why}"))
        else:
            for k, b in enumerate(bounds):
                if b is None or b > policy.max_abs_error:
                    shown = "unbounded" if b is None else f"{b:.3g}"
                    out.append(
                        Violation(
                            "max_abs_error",
                            f"partitioned output {k} error bound {shown} exceeds "
                            f"{policy.max_abs_error:.3g}",
                        )
                    )
                    break
    return out


def show_partition(root: Path, manifest: dict) -> str:
    """A terminal summary of a partition bundle."""
    mesh = ", ".join(f"{a}={n}" for a, n in manifest["mesh"]["axes"])
    claims = manifest["claims"]
    real = sum(c["theory"] == "real" for c in claims)
    lines = [
        f"partition bundle {root}: verdict {manifest['verdict']}",
        f"  source {manifest['source']['name']} on mesh [{mesh}], order {manifest['order']}",
        f"  {len(claims)} op claims ({sum(c['same_as'] is None for c in claims)} distinct, "
        f"{real} real), {len(manifest['collectives'])} collectives, "
        f"{manifest['communication_bytes_per_rank']} bytes sent per rank",
        f"  error bounds: global {manifest['bounds']['global']}, partitioned "
        f"{manifest['bounds']['partitioned']}",
        f"  {len(manifest['segments'])} compiled segment bundle(s)",
    ]
    return "\n".join(lines) + "\n"


def is_partition_manifest(manifest: Any) -> bool:
    return isinstance(manifest, dict) and manifest.get("schema_version") == SCHEMA_VERSION


__all__ = [
    "SCHEMA_VERSION",
    "EvidenceError",
    "check_partition_policy",
    "is_partition_manifest",
    "policy_view",
    "show_partition",
    "verify_partition",
    "write_partition_bundle",
]
