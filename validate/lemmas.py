"""Named lemmas of the real theory, instantiated as explicit assumptions (placeholder)."""

from __future__ import annotations


def instantiate(ctx, terms):
    return []
