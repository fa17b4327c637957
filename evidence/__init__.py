"""Evidence bundles (DESIGN.md, Evidence): the writer, the JSON Schema of `manifest.json`, the
independent verifier, the policy gate, hooks, signatures and the review report.

- `bundle`: `write_bundle(compilation, dir)` and `read_manifest(dir)` (schema-checked);
- `schema/manifest-<N>.json`: the versioned schema of `manifest.json`;
- `verify`: `verify_bundle(dir, ...)`, re-checking a bundle without trusting the compiler;
- `solvers`: re-solving stored SMT-LIB queries with Z3 and cvc5;
- `policy`: `Policy` (`gdv-policy.toml` or `[tool.gdv.policy]`) and its gate;
- `hooks`: `gdv.hooks` entry points and external `--hook` commands;
- `signing`: Ed25519 signatures of the manifest's digest;
- `report`: `gdv evidence show` text and the self-contained HTML review page;
- `cross_target`: one source compiled for several targets, each target's bundle and the
  cross-target table (`gdv compile --target c --target triton --emit-evidence`).

Optional packages (jsonschema, cvc5, cryptography) come with the `evidence` extra; a missing
one is an `EvidenceError` naming the extra.
"""

from gdv.evidence.bundle import (
    SCHEMA_VERSION,
    EvidenceError,
    read_manifest,
    require,
    validate_manifest,
    write_bundle,
)

__all__ = [
    "SCHEMA_VERSION",
    "EvidenceError",
    "read_manifest",
    "require",
    "validate_manifest",
    "write_bundle",
]
