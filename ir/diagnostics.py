"""Errors with positions: `FILE:LINE:COL: error: MESSAGE` (IR_SPEC.md section 1)."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Loc:
    """A position in a source file; lines and columns count from 1."""

    file: str
    line: int
    col: int

    def __str__(self) -> str:
        return f"{self.file}:{self.line}:{self.col}"


UNKNOWN_LOC = Loc("<unknown>", 1, 1)


class IRError(Exception):
    """A rejected input: a message and the position it points at."""

    def __init__(self, message: str, loc: Loc | None = None) -> None:
        super().__init__(message)
        self.message = message
        self.loc = loc or UNKNOWN_LOC

    def __str__(self) -> str:
        return f"{self.loc}: error: {self.message}"


def printable(text: str, limit: int = 40) -> str:
    """`text` safe to show in a terminal: escapes control and non-ASCII characters, cut short."""
    shown = text if len(text) <= limit else text[:limit] + "..."
    shown = shown.encode("ascii", "backslashreplace").decode("ascii")
    # ASCII control characters (NUL, ESC, BEL, CR, DEL, ...) are ASCII too: escape them as well.
    return "".join(f"\\x{ord(c):02x}" if ord(c) < 0x20 or ord(c) == 0x7F else c for c in shown)
