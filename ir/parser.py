"""Text -> IR. Lark (LALR) builds the tree from `grammar/gdv.lark`; this module turns it into a
`Module` and every failure into an `IRError` at the offending token (IR_SPEC.md section 1).

The parser only checks syntax and literal forms; `gdv.ir.verifier` checks meaning.
"""

from __future__ import annotations

import json
import math
import re
from decimal import Decimal, InvalidOperation
from fractions import Fraction
from functools import cache
from typing import Any

import lark
from lark import Lark, Token, Tree

from gdv.ir.core import Function, Module, Op, Param
from gdv.ir.diagnostics import IRError, Loc, printable
from gdv.ir.dtypes import DType
from gdv.ir.mesh import Mesh
from gdv.ir.numerics import is_narrow_midpoint
from gdv.ir.types import TensorType

MAX_SOURCE_BYTES = 64 * 1024 * 1024
MAX_NESTING = 64
MAX_NAME_LENGTH = 128
MAX_INT_DIGITS = 4000

_TERMINAL_WORDS = {
    "FUNC_NAME": "a function name (@name)",
    "VALUE_NAME": "a value name (%name)",
    "NAME": "a name",
    "INT": "an integer",
    "FLOAT": "a float",
    "STRING": "a string",
    "RETURN": "'return'",
    "TRUE": "'true'",
    "FALSE": "'false'",
    "FUNC": "'func'",
    "MESH": "'mesh'",
    "LPAR": "'('",
    "RPAR": "')'",
    "LSQB": "'['",
    "RSQB": "']'",
    "LBRACE": "'{'",
    "RBRACE": "'}'",
    "COMMA": "','",
    "COLON": "':'",
    "EQUAL": "'='",
    "__ANON_0": "'->'",
    "$END": "the end of the input",
}


@cache
def _lark() -> Lark:
    return Lark.open_from_package(
        "gdv.grammar",
        "gdv.lark",
        parser="lalr",
        propagate_positions=True,
        maybe_placeholders=True,
        strict=True,
    )


def parse(source: str | bytes, filename: str = "<input>") -> Module:
    """Parse a module. Raises `IRError` with the position of the first problem."""
    text = _decode(source, filename)
    if len(text) > MAX_SOURCE_BYTES:
        raise IRError(
            f"input is {len(text)} characters, more than the limit of {MAX_SOURCE_BYTES}",
            Loc(filename, 1, 1),
        )
    _check_nesting(text, filename)
    if not text.strip() or _only_comments(text):
        raise IRError("empty input: expected at least one 'func'", Loc(filename, 1, 1))
    try:
        tree = _lark().parse(text)
    except lark.exceptions.UnexpectedInput as e:
        raise _syntax_error(e, text, filename) from None
    return _Builder(filename).module(tree)


def parse_file(path: str) -> Module:
    """Read and parse `path`; a missing or unreadable file is an `IRError` too."""
    try:
        with open(path, "rb") as f:
            data = f.read(MAX_SOURCE_BYTES + 1)
    except OSError as e:
        raise IRError(
            f"cannot read {printable(path, 200)}: {e.strerror}", Loc(path, 1, 1)
        ) from None
    if len(data) > MAX_SOURCE_BYTES:
        raise IRError(
            f"input is larger than the limit of {MAX_SOURCE_BYTES} bytes", Loc(path, 1, 1)
        )
    return parse(data, path)


def _decode(source: str | bytes, filename: str) -> str:
    if isinstance(source, str):
        return source
    try:
        return source.decode("utf-8")
    except UnicodeDecodeError as e:
        line, col = _line_col_of_byte(source, e.start)
        raise IRError(
            f"input is not UTF-8 text: byte 0x{source[e.start]:02x} cannot start or continue a "
            "character",
            Loc(filename, line, col),
        ) from None


def _line_col_of_byte(data: bytes, offset: int) -> tuple[int, int]:
    line = data.count(b"\n", 0, offset) + 1
    start = data.rfind(b"\n", 0, offset) + 1
    col = len(data[start:offset].decode("utf-8", errors="replace")) + 1
    return line, col


def _line_col(text: str, offset: int) -> tuple[int, int]:
    line = text.count("\n", 0, offset) + 1
    return line, offset - (text.rfind("\n", 0, offset) + 1) + 1


def _only_comments(text: str) -> bool:
    return all(not ln.strip() or ln.strip().startswith("//") for ln in text.splitlines())


_NESTING_TOKENS = re.compile(r'//[^\n]*|"(?:[^"\\\n]|\\.)*"?|[(\[{]|[)\]}]')
"""Comments and strings (skipped whole) and brackets: the only text the nesting scan visits."""


def _check_nesting(text: str, filename: str) -> None:
    """Refuse absurd bracket nesting before Lark (and our recursive tree walk) sees it."""
    depth = 0
    for m in _NESTING_TOKENS.finditer(text):
        c = m.group()
        if c in "([{":
            depth += 1
            if depth > MAX_NESTING:
                line, col = _line_col(text, m.start())
                raise IRError(
                    f"brackets nest deeper than {MAX_NESTING} levels", Loc(filename, line, col)
                )
        elif c in ")]}":
            depth = max(0, depth - 1)


def _syntax_error(e: lark.exceptions.UnexpectedInput, text: str, filename: str) -> IRError:
    line, col = getattr(e, "line", 1), getattr(e, "column", 1)
    if isinstance(e, lark.exceptions.UnexpectedCharacters):
        ch = text[e.pos_in_stream] if e.pos_in_stream < len(text) else ""
        if ch == '"':  # STRING did not match from here: no closing quote on this line
            return IRError(
                'unterminated string: no closing " on the same line', Loc(filename, line, col)
            )
        return IRError(f"unexpected character '{printable(ch)}'", Loc(filename, line, col))
    if isinstance(e, lark.exceptions.UnexpectedEOF):
        line, col = _line_col(text, len(text))
        return IRError(
            f"unexpected end of input, expected {_expected(e.expected)}", Loc(filename, line, col)
        )
    assert isinstance(e, lark.exceptions.UnexpectedToken)
    tok = e.token
    if tok.type == "$END":
        line, col = _line_col(text, len(text))
        return IRError(
            f"unexpected end of input, expected {_expected(e.expected)}", Loc(filename, line, col)
        )
    return IRError(
        f"unexpected '{printable(str(tok))}', expected {_expected(e.expected)}",
        Loc(filename, tok.line, tok.column),
    )


def _expected(names: Any) -> str:
    words = sorted({_TERMINAL_WORDS.get(n, n.lower()) for n in names})
    if len(words) > 6:
        words = words[:6] + ["..."]
    return " or ".join(words) if len(words) <= 2 else "one of " + ", ".join(words)


class _Builder:
    """Walks Lark's tree into IR objects, checking literal forms with positions."""

    def __init__(self, filename: str) -> None:
        self.filename = filename

    def loc(self, item: Token | Tree) -> Loc:
        if isinstance(item, Token):
            return Loc(self.filename, item.line or 1, item.column or 1)
        return Loc(self.filename, item.meta.line, item.meta.column)

    def error(self, message: str, item: Token | Tree) -> IRError:
        return IRError(message, self.loc(item))

    def name(self, tok: Token) -> str:
        text = str(tok)[1:]
        if len(text) > MAX_NAME_LENGTH:
            raise self.error(
                f"name '{text[:20]}...' is {len(text)} characters, more than {MAX_NAME_LENGTH}",
                tok,
            )
        return text

    def module(self, tree: Tree) -> Module:
        meshes = [self.mesh(c) for c in tree.children if c.data == "mesh"]
        functions = [self.function(c) for c in tree.children if c.data == "func"]
        return Module(functions, self.filename, meshes)

    def mesh(self, tree: Tree) -> Mesh:
        kw, name_tok, *axes = tree.children
        pairs: list[tuple[str, int]] = []
        locs: list[Loc] = []
        for a in axes:
            if a is None:
                continue
            axis_tok, size_tok = a.children
            pairs.append((str(axis_tok), self.int(size_tok)))
            locs.append(self.loc(axis_tok))
        return Mesh(self.name(name_tok), pairs, self.loc(kw), locs)

    def function(self, tree: Tree) -> Function:
        name_tok, *rest = tree.children
        params: list[Param] = []
        i = 0
        while i < len(rest) and (rest[i] is None or rest[i].data == "param"):
            if rest[i] is not None:
                params.append(self.param(rest[i]))
            i += 1
        results_tree = rest[i]
        results = [self.type(t) for t in results_tree.children if t is not None]
        i += 1
        attrs: dict[str, Any] = {}
        attr_locs: dict[str, Loc] = {}
        if isinstance(rest[i], Tree) and rest[i].data == "attr_dict":
            attrs, attr_locs = self.attr_dict(rest[i])
            i += 1
        elif rest[i] is None:
            i += 1
        ops = [self.op(t) for t in rest[i:-1]]
        ret = rest[-1]
        ret_names = [t for t in ret.children[1:] if t is not None]
        return Function(
            name=self.name(name_tok),
            params=params,
            results=results,
            ops=ops,
            returns=[self.name(t) for t in ret_names],
            attrs=attrs,
            loc=self.loc(name_tok),
            return_loc=self.loc(ret.children[0]),
            return_locs=[self.loc(t) for t in ret_names],
            results_parenthesized=results_tree.data == "result_list",
            result_locs=[self.loc(t) for t in results_tree.children if t is not None],
            attr_locs=attr_locs,
        )

    def param(self, tree: Tree) -> Param:
        name_tok, type_tree, attr_tree = tree.children
        attrs, locs = self.attr_dict(attr_tree) if attr_tree is not None else ({}, {})
        return Param(self.name(name_tok), self.type(type_tree), attrs, self.loc(name_tok), locs)

    def op(self, tree: Tree) -> Op:
        result_tok, name_tok, *rest = tree.children
        type_tree = rest[-1]
        attr_tree = rest[-2]
        operand_toks = [t for t in rest[:-2] if t is not None]
        attrs, attr_locs = self.attr_dict(attr_tree) if attr_tree is not None else ({}, {})
        return Op(
            result=self.name(result_tok),
            name=str(name_tok),
            operands=[self.name(t) for t in operand_toks],
            attrs=attrs,
            type=self.type(type_tree),
            loc=self.loc(result_tok),
            operand_locs=[self.loc(t) for t in operand_toks],
            attr_locs=attr_locs,
            name_loc=self.loc(name_tok),
            type_loc=self.loc(type_tree),
        )

    def type(self, tree: Tree) -> TensorType:
        dtype_tok, *dims = tree.children
        dtype = DType.parse(str(dtype_tok))
        if dtype is None:
            known = ", ".join(d.value for d in DType)
            raise self.error(
                f"unknown dtype '{printable(str(dtype_tok))}' (expected one of {known})", dtype_tok
            )
        shape = []
        for d in dims:
            if d is None:
                continue
            v = self.int(d)
            if v < 0:
                raise self.error(f"dimension {v} is negative", d)
            shape.append(v)
        return TensorType(dtype, tuple(shape))

    def int(self, tok: Token) -> int:
        text = str(tok)
        if len(text.lstrip("+-")) > MAX_INT_DIGITS:
            raise self.error(f"integer literal has more than {MAX_INT_DIGITS} digits", tok)
        return int(text)

    def attr_dict(self, tree: Tree) -> tuple[dict[str, Any], dict[str, Loc]]:
        attrs: dict[str, Any] = {}
        locs: dict[str, Loc] = {}
        for a in tree.children:
            if a is None:
                continue
            key_tok, value_tree = a.children
            key = str(key_tok)
            if key in attrs:
                raise self.error(f"attribute '{key}' is given twice", key_tok)
            attrs[key] = self.value(value_tree)
            locs[key] = self.loc(key_tok)
        return attrs, locs

    def value(self, item: Tree | Token) -> Any:
        kind = item.data
        if kind == "list_value":
            return [self.value(c) for c in item.children if c is not None]
        (tok,) = item.children
        if kind == "int_value":
            return self.int(tok)
        if kind == "float_value":
            return self.float(tok)
        if kind == "string_value":
            try:
                return json.loads(str(tok))
            except ValueError:
                raise self.error(
                    'invalid string literal (escapes: \\" \\\\ \\n \\t \\r \\uXXXX)', tok
                ) from None
        if kind == "true_value":
            return True
        if kind == "false_value":
            return False
        assert kind == "name_value"
        dtype = DType.parse(str(tok))
        if dtype is None:
            raise self.error(
                f"unexpected '{printable(str(tok))}': an attribute value is a number, a string, "
                "true, false, a dtype name or a list",
                tok,
            )
        return dtype

    def float(self, tok: Token) -> float | Fraction:
        return float_literal(str(tok))


def float_literal(text: str) -> float | Fraction:
    """The value of a float literal: the nearest f64, except where that f64 is halfway between
    two f32, f16 or bf16 values and the literal is not exactly it; then the exact Fraction,
    so that the literal is still rounded once in every dtype (`ir.numerics`)."""
    body = text.lstrip("+-")
    negative = text.startswith("-")
    if body in ("inf", "nan"):
        v = math.inf if body == "inf" else math.nan
        return -v if negative and body == "inf" else v
    try:
        d = Decimal(text)
    except InvalidOperation:  # pragma: no cover - the grammar admits only valid forms
        return float(text)
    if d.is_zero():
        return -0.0 if negative else 0.0
    # Beyond these every dtype (f64 included) rounds to +-inf or +-0; avoid building huge ints.
    if d.adjusted() > 400:
        return -math.inf if negative else math.inf
    if d.adjusted() < -400:
        return -0.0 if negative else 0.0
    q = Fraction(d)
    try:
        f = float(q)  # correctly rounded; OverflowError exactly when that rounding gives +-inf
    except OverflowError:  # so every dtype rounds the literal to +-inf too
        return -math.inf if negative else math.inf
    # Keep the exact value only where rounding through f64 could differ from rounding once.
    return f if Fraction(f) == q or not is_narrow_midpoint(f) else q
