"""The textual IR grammar (`gdv.lark`), shipped as package data."""
