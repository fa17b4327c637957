"""Control flow ops in the textual IR (IR_SPEC.md section 9): canonical printing round-trips,
the entry function is still `@main` (or the only function), and the group helpers."""

from __future__ import annotations

import pytest

from gdv.ir.diagnostics import IRError
from gdv.ir.ops.control import bodies_called, functions_named
from gdv.ir.parser import parse
from gdv.ir.printer import print_module
from gdv.ir.verifier import verify

# Attributes written out of their canonical order: the printer puts them in the spec's order.
WRITTEN = """
func @main(%c: i1[], %x: f32[4], %n: i32[]) -> (f32[4], i32[], f32[3,4]) {
  %r = if(%c, %x) {result = 0, else = "neg", then = "dbl"} : f32[4]
  %wn = while(%x, %n) {result = 1, max_trips = 100, body = "step", cond = "pos"} : i32[]
  %xs = broadcast(%x) {dims = [1]} : f32[3,4]
  %s = scan(%x, %xs) {result = 1, num_scan_inputs = 1, body = "acc"} : f32[3,4]
  return %r, %wn, %s
}
func @dbl(%a: f32[4]) -> f32[4] {
  %b = add(%a, %a) : f32[4]
  return %b
}
func @neg(%a: f32[4]) -> f32[4] {
  %b = neg(%a) : f32[4]
  return %b
}
func @pos(%a: f32[4], %n: i32[]) -> i1[] {
  %z = constant() {value = 0} : i32[]
  %p = cmp(%n, %z) {dir = "gt"} : i1[]
  return %p
}
func @step(%a: f32[4], %n: i32[]) -> (f32[4], i32[]) {
  %o = constant() {value = 1} : i32[]
  %m = sub(%n, %o) : i32[]
  return %a, %m
}
func @acc(%s: f32[4], %x: f32[4]) -> (f32[4], f32[4]) {
  %t = add(%s, %x) : f32[4]
  return %t, %t
}
"""


def test_canonical_printing_round_trips() -> None:
    module = verify(parse(WRITTEN))
    text = print_module(module)
    assert '%r = if(%c, %x) {then = "dbl", else = "neg", result = 0} : f32[4]' in text
    assert (
        '%wn = while(%x, %n) {cond = "pos", body = "step", max_trips = 100, result = 1} : i32[]'
        in text
    )
    assert '%s = scan(%x, %xs) {body = "acc", num_scan_inputs = 1, result = 1} : f32[3,4]' in text
    again = verify(parse(text))
    assert again == module
    assert print_module(again) == text


def test_the_entry_is_main_and_bodies_are_not_candidates() -> None:
    module = parse(WRITTEN)
    assert module.entry is not None and module.entry.name == "main"
    assert bodies_called(module.functions) == {"dbl", "neg", "pos", "step", "acc"}
    assert functions_named(module.entry.ops[0]) == ["dbl", "neg"]
    # Without @main, a module of several functions has no entry, as before this addition.
    renamed = WRITTEN.replace("@main(", "@top(")
    with pytest.raises(IRError, match="none is named @main"):
        verify(parse(renamed))
