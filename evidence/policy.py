"""The policy gate: what a bundle must satisfy beyond "every obligation proved".

A policy is read from `--policy FILE`, else `gdv-policy.toml` in the current directory, else
`[tool.gdv.policy]` in `./pyproject.toml`; without any, the defaults below apply (to `gdv
evidence verify`; `gdv compile` gates only on a policy it was given or found). Keys:

- `allow_unknown` (false): a required solver may answer `unknown` on re-solving a query that
  another solver proved (a compile with an `unknown` obligation is still rejected: unknown is
  never proved);
- `allow_real` (false): obligations and stages claimed over the reals (`--fast-math`);
- `allow_fallback` (true): whole-function obligations where a pass made no local claim;
- `allow_reference_kernels` (false): an artifact in which ops the target cannot do run on
  reference kernels (compiled with `--allow-fallback`);
- `allow_trusted_kernels` (false): obligations resting on an assumption named `trusted ...`;
- `allow_reordered_collectives` (false): a partitioned program (`gdv partition`, `gdv compile
  --mesh`) whose split float sums are finished in a declared collective order (`rank`,
  `tree`, `ring`): `real` claims, within the recorded error bound; `--order carry` needs no
  such permission (it keeps every bit);
- `max_abs_error` (none): every output's rigorous absolute error bound at most this (bounds
  unavailable, or an unbounded output, violate it);
- `required_solvers` (["z3"]): each must answer `unsat` on every stored query.
"""

from __future__ import annotations

import math
import tomllib
from dataclasses import dataclass, field, fields
from pathlib import Path
from typing import Any

from gdv.evidence.bundle import EvidenceError
from gdv.evidence.solvers import SOLVERS

POLICY_FILE = "gdv-policy.toml"


@dataclass(frozen=True)
class Policy:
    """A policy; `origin` says where it was read from."""

    allow_unknown: bool = False
    allow_real: bool = False
    allow_fallback: bool = True
    allow_trusted_kernels: bool = False
    allow_reference_kernels: bool = False
    allow_reordered_collectives: bool = False
    max_abs_error: float | None = None
    required_solvers: tuple[str, ...] = ("z3",)
    origin: str = field(default="defaults", compare=False)

    @classmethod
    def from_dict(cls, data: dict[str, Any], origin: str) -> Policy:
        """A policy from a TOML table; unknown keys and wrong types are input errors."""
        known = {f.name for f in fields(cls)} - {"origin"}
        unknown = sorted(set(data) - known)
        if unknown:
            raise EvidenceError(
                f"{origin}: unknown policy key(s) {', '.join(unknown)} (known: "
                f"{', '.join(sorted(known))})"
            )
        values: dict[str, Any] = {}
        for key, value in data.items():
            if key.startswith("allow_"):
                if not isinstance(value, bool):
                    raise EvidenceError(f"{origin}: {key} must be true or false")
                values[key] = value
            elif key == "max_abs_error":
                ok = isinstance(value, int | float) and not isinstance(value, bool)
                if not ok or not math.isfinite(value) or value < 0:
                    raise EvidenceError(f"{origin}: max_abs_error must be a number >= 0")
                values[key] = float(value)
            else:
                if not isinstance(value, list) or not all(v in SOLVERS for v in value):
                    raise EvidenceError(
                        f"{origin}: required_solvers must be a list of {', '.join(SOLVERS)}"
                    )
                values[key] = tuple(value)
        return cls(**values, origin=origin)


def load_policy(path: str | None = None, cwd: str | Path = ".") -> Policy | None:
    """The policy in `path`, or the one discovered in `cwd`; None when there is none."""
    if path is not None:
        return Policy.from_dict(_toml(Path(path)), str(path))
    here = Path(cwd)
    if (here / POLICY_FILE).is_file():
        return Policy.from_dict(_toml(here / POLICY_FILE), POLICY_FILE)
    if (here / "pyproject.toml").is_file():
        table = _toml(here / "pyproject.toml").get("tool", {}).get("gdv", {}).get("policy")
        if table is not None:
            if not isinstance(table, dict):
                raise EvidenceError("pyproject.toml: [tool.gdv.policy] must be a table")
            return Policy.from_dict(table, "pyproject.toml [tool.gdv.policy]")
    return None


def _toml(path: Path) -> dict:
    try:
        return tomllib.loads(path.read_text())
    except OSError as e:
        raise EvidenceError(f"cannot read policy {path}: {e.strerror}") from None
    except tomllib.TOMLDecodeError as e:
        raise EvidenceError(f"{path}: not valid TOML: {e}") from None


@dataclass(frozen=True)
class Violation:
    """A policy rule a bundle breaks, and where."""

    rule: str
    message: str

    def __str__(self) -> str:
        return f"policy {self.rule}: {self.message}"


def check_policy(policy: Policy, manifest: dict) -> list[Violation]:
    """Every rule of `policy` the manifest's claims break (solver rules are checked where the
    queries are re-solved)."""
    out: list[Violation] = []
    obligations = manifest["obligations"]
    if not policy.allow_real:
        real = [o["id"] for o in obligations if o["theory"] == "real"]
        real += [f"stage {s['pass']}" for s in manifest["stages"] if s["theory"] == "real"]
        if real:
            out.append(Violation("allow_real", f"claims over the reals: {real[0]}"))
    if not policy.allow_fallback:
        whole = [o["id"] for o in obligations if o["scope"] == "whole-function"]
        if whole:
            out.append(Violation("allow_fallback", f"whole-function obligation {whole[0]}"))
    if not policy.allow_trusted_kernels:
        for o in obligations:
            trusted = [a for a in o["assumptions"] if a.lower().startswith("trusted")]
            if trusted:
                out.append(Violation("allow_trusted_kernels", f"{o['id']} assumes {trusted[0]!r}"))
                break
    if not policy.allow_reference_kernels:
        fallbacks = manifest.get("artifact", {}).get("fallbacks", [])
        if fallbacks:
            f = fallbacks[0]
            out.append(
                Violation(
                    "allow_reference_kernels",
                    f"{f['op']} at {f['location']} runs on a reference kernel: {f['reason']}",
                )
            )
    if policy.max_abs_error is not None:
        out += _bound_violations(policy.max_abs_error, manifest["bounds"])
        for s in manifest["stages"]:
            # A step claimed over the reals (fast-math, reassociation) changed the error: the
            # bound after it must meet the limit too.
            change = s.get("bound_change")
            if change is None:
                continue
            if "unavailable" in change:
                why = change["unavailable"]
                out.append(Violation("max_abs_error", f"{s['pass']}: no error bound ({why})"))
                continue
            for k, b in enumerate(change["after"]):
                if b is None or b > policy.max_abs_error:
                    shown = "unbounded" if b is None else f"{b:.3g}"
                    out.append(
                        Violation(
                            "max_abs_error",
                            f"after {s['pass']}, output {k} error bound {shown} exceeds "
                            f"{policy.max_abs_error:.3g}",
                        )
                    )
                    break
    return out


def _bound_violations(limit: float, bounds: dict) -> list[Violation]:
    if bounds["status"] != "available":
        return [Violation("max_abs_error", f"no error bound: {bounds['reason']}")]
    for o in bounds["outputs"]:
        if o["abs"] is None:
            why = o.get("reason") or "unbounded"
            return [Violation("max_abs_error", f"output {o['name']} is unbounded ({why})")]
        if o["abs"] > limit:
            return [
                Violation(
                    "max_abs_error",
                    f"output {o['name']} error bound {o['abs']:.3g} exceeds {limit:.3g}",
                )
            ]
    return []
