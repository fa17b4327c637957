"""The gate `gdv compile` applies after proving: hooks, then the policy.

Hooks see every obligation's result (and the finished bundle, when one is written); the policy
(given with `--policy` or discovered, see `gdv.evidence.policy`) sees the manifest, built in a
scratch directory when no bundle was asked for. The first hook veto or policy violation is the
compile's failure (exit status 1)."""

from __future__ import annotations

import shutil
import tempfile
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING

from gdv.evidence.bundle import build_manifest, obligation_result, read_manifest
from gdv.evidence.hooks import on_bundle, on_obligations, python_hooks, run_external
from gdv.evidence.policy import Policy, check_policy, load_policy
from gdv.evidence.solvers import solve

if TYPE_CHECKING:
    from gdv.driver import Compilation


def gate(
    comp: Compilation,
    bundle: Path | None,
    *,
    policy: Policy | None = None,
    policy_path: str | None = None,
    hook_commands: Sequence[str] = (),
    timeout: float = 30.0,
) -> str | None:
    """Why the compile fails the gate, or None when it passes."""
    hooks = python_hooks()
    manifest = read_manifest(bundle) if bundle is not None else None
    results = (
        manifest["obligations"]
        if manifest is not None
        else [obligation_result(o) for o in comp.outcomes]
    )
    veto = on_obligations(hooks, results)
    if veto is not None:
        return str(veto)
    if bundle is not None and manifest is not None:
        veto = on_bundle(hooks, bundle, manifest)
        for command in hook_commands:
            veto = veto or run_external(command, bundle)
        if veto is not None:
            return str(veto)
    policy = policy or load_policy(policy_path)
    if policy is None:
        return None
    if manifest is None:
        scratch = Path(tempfile.mkdtemp(prefix=".gdv-gate-"))
        try:
            manifest = build_manifest(comp, scratch)
        finally:
            shutil.rmtree(scratch, ignore_errors=True)
    violations = check_policy(policy, manifest)
    if violations:
        return f"{violations[0]} (policy from {policy.origin})"
    return _second_solvers(comp, policy, timeout)


def _second_solvers(comp: Compilation, policy: Policy, timeout: float) -> str | None:
    """Required solvers besides Z3 (which proved the compile) re-solve every query."""
    for name in policy.required_solvers:
        if name == "z3":
            continue
        for out in comp.outcomes:
            for k, text in enumerate(out.smt2):
                r = solve(name, text, timeout)
                if r.result == "unsat" or (r.result == "unknown" and policy.allow_unknown):
                    continue
                return (
                    f"policy required_solvers: {name} gives {r.result} on "
                    f"{out.obligation.id} out{k} {r.reason} (policy from {policy.origin})"
                )
    return None
