"""Failures become minimized regression cases (issue 18): `gdv reduce` (signatures and the
reducer), `gdv fuzz` (random well-typed programs checked against the reference) and
`gdv selftest --mutants` (seeded bugs in gdv's own passes and C printer, and which check
catches each)."""
