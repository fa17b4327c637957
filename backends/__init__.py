"""Backends: `reference` (numpy, the executable meaning of every op), later compiled targets."""
