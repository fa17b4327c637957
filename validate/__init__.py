"""Validation: SMT semantics of every op, equivalence checking, counterexamples."""
