"""Verifier and type-rule rejections: each points at the offending token (line:col) and names
both sides of the mismatch (IR_SPEC.md sections 1, 2 and 4; STYLE.md, Errors).

Cases are written with a `^` just before the token the error must point at.
"""

from __future__ import annotations

import pytest

from gdv.ir import ops as op_registry
from gdv.ir.diagnostics import IRError
from gdv.ir.parser import parse
from gdv.ir.verifier import verify

FILE = "case.gdv"


def _locate(marked: str) -> tuple[str, int, int]:
    assert marked.count("^") == 1, marked
    i = marked.index("^")
    src = marked.replace("^", "", 1)
    line = src.count("\n", 0, i) + 1
    col = i - (src.rfind("\n", 0, i) + 1) + 1
    return src, line, col


def assert_rejected(marked: str, *fragments: str, stage: str = "graph") -> IRError:
    src, line, col = _locate(marked)
    with pytest.raises(IRError) as info:
        verify(parse(src, FILE), stage=stage)
    e = info.value
    assert (e.loc.file, e.loc.line, e.loc.col) == (FILE, line, col), str(e)
    for f in fragments:
        assert f in e.message, f"{f!r} not in {e.message!r}"
    return e


def prog(params: str, op: str, result: str) -> str:
    """A one-op @main returning %r."""
    return f"func @main({params}) -> {result} {{\n  {op}\n  return %r\n}}\n"


UNARY = ["neg", "abs", "exp", "log", "sqrt", "rsqrt", "tanh", "sigmoid", "erf", "sin", "cos"]
UNARY += ["floor", "relu", "tan", "asin", "acos", "atan", "sinh", "cosh", "asinh", "acosh", "atanh"]

# op -> (marked program, fragments the message must contain: both sides of the mismatch)
OP_CASES: dict[str, tuple[str, tuple[str, ...]]] = {
    **{
        name: (
            prog("%x: i32[2]", f"%r = {name}(^%x) : i32[2]", "i32[2]"),
            (f"{name} takes a float operand", "operand 1 is i32[2]"),
        )
        for name in UNARY
    },
    **{
        name: (
            prog("%a: f32[2], %b: f32[3]", f"%r = {name}(%a, ^%b) : f32[2]", "f32[2]"),
            ("operand 2 is f32[3]", "expected f32[2] like operand 1"),
        )
        for name in ("add", "sub", "mul", "max", "min")
    },
    **{
        name: (
            prog("%a: i32[2]", f"%r = {name}(^%a, %a) : i32[2]", "i32[2]"),
            (f"{name} takes float operands", "operand 1 is i32[2]"),
        )
        for name in ("pow",)
    },
    **{
        name: (
            prog("%a: f32[2]", f"%r = {name}(^%a, %a) : f32[2]", "f32[2]"),
            (f"{name} takes integer or i1 operands", "operand 1 is f32[2]"),
        )
        for name in ("bitwise_and", "bitwise_or", "bitwise_xor")
    },
    "div": (
        prog("%a: i1[2]", "%r = div(^%a, %a) : i1[2]", "i1[2]"),
        ("div takes float or integer operands", "operand 1 is i1[2]"),
    ),
    "rem": (
        prog("%a: i1[2]", "%r = rem(^%a, %a) : i1[2]", "i1[2]"),
        ("rem takes float or integer operands", "operand 1 is i1[2]"),
    ),
    "mod": (
        prog("%a: f32[2]", "%r = mod(^%a, %a) : f32[2]", "f32[2]"),
        ("mod takes integer operands", "operand 1 is f32[2]"),
    ),
    "bitwise_not": (
        prog("%a: bf16[2]", "%r = bitwise_not(^%a) : bf16[2]", "bf16[2]"),
        ("bitwise_not takes an integer or i1 operand", "operand 1 is bf16[2]"),
    ),
    **{
        name: (
            prog("%a: i1[2]", f"%r = {name}(^%a, %a) : i1[2]", "i1[2]"),
            (f"{name} takes integer operands", "operand 1 is i1[2]"),
        )
        for name in ("shift_left", "shift_right")
    },
    "cmp": (
        prog("%a: f32[2]", '%r = cmp(%a, %a) {^dir = "lt2"} : i1[2]', "i1[2]"),
        ('expected one of "lt", "le", "gt", "ge", "eq", "ne"', 'got string "lt2"'),
    ),
    "select": (
        prog("%c: f32[2], %a: f32[2]", "%r = select(^%c, %a, %a) : f32[2]", "f32[2]"),
        ("condition must be i1", "operand 1 is f32[2]"),
    ),
    "convert": (
        prog("%a: f32[2]", "%r = convert(%a) : ^f16[3]", "f16[3]"),
        ("written f16[3]", "convert of (f32[2]) gives f16[2]"),
    ),
    "constant": (
        prog("", "%r = constant() {^value = [1.0, 2.0]} : f32[3]", "f32[3]"),
        ("value has shape [2]", "expected [3] like the result type f32[3]"),
    ),
    "iota": (
        prog("", "%r = iota() {^axis = 1} : i32[3]", "i32[3]"),
        ("axis 1", "out of range for rank 1"),
    ),
    "broadcast": (
        prog("%a: f32[3]", "%r = broadcast(%a) {^dims = [0]} : f32[2,4]", "f32[2,4]"),
        ("operand dim 0 has size 3", "expected 1 or 2 like result dim 0 of f32[2,4]"),
    ),
    "reshape": (
        prog("%a: f32[2,3]", "%r = reshape(^%a) : f32[4]", "f32[4]"),
        ("operand f32[2,3] has 6 elements", "the result f32[4] has 4"),
    ),
    "transpose": (
        prog("%a: f32[2,3]", "%r = transpose(%a) {^perm = [0, 0]} : f32[2,2]", "f32[2,2]"),
        ("perm [0, 0]", "not a permutation of the 2 dims of f32[2,3]"),
    ),
    "slice": (
        prog(
            "%a: f32[4]",
            "%r = slice(%a) {start = [0], ^limit = [5], stride = [1]} : f32[5]",
            "f32[5]",
        ),
        ("limit (5)", "size (4) of f32[4]"),
    ),
    "concat": (
        prog(
            "%a: f32[2,3], %b: f32[2,4]", "%r = concat(%a, ^%b) {axis = 0} : f32[4,3]", "f32[4,3]"
        ),
        ("operand 2 is f32[2,4]", "dims of operand 1 (f32[2,3]) except axis 0"),
    ),
    "pad": (
        prog(
            "%a: i32[2]",
            "%r = pad(%a) {low = [1], high = [1], ^value = 0.5} : i32[4]",
            "i32[4]",
        ),
        ("0.5 is not an integer", "the dtype is i32"),
    ),
    "reduce_sum": (
        prog("%a: f32[2,3]", "%r = reduce_sum(%a) {^axes = [2]} : f32[2]", "f32[2]"),
        ("axis 2", "out of range for rank 2"),
    ),
    "reduce_max": (
        prog("%a: i1[2]", "%r = reduce_max(^%a) {axes = [0]} : i1[]", "i1[]"),
        ("reduce_max takes a float or integer operand", "operand 1 is i1[2]"),
    ),
    "reduce_min": (
        prog("%a: f32[2,3]", "%r = reduce_min(%a) {^axes = [1, 1]} : f32[2]", "f32[2]"),
        ("axes [1, 1] repeats an axis",),
    ),
    "kernel": (
        prog(
            "%x: f32[4]",
            '%r = kernel(%x) {body = "k", space = [5], ^maps = [[[1, 0]]], out = [0], '
            'reduce = [], combiner = "none"} : f32[5]',
            "f32[5]",
        ),
        ("map 0 row 0 reads indices 0..4 of operand 1 (f32[4])", "has size 4"),
    ),
    "dot": (
        prog(
            "%a: f32[2,3], %b: f32[4,5]",
            "%r = dot(%a, %b) {lhs_batch = [], rhs_batch = [], lhs_contract = [1], "
            "^rhs_contract = [0]} : f32[2,5]",
            "f32[2,5]",
        ),
        ("operand 2 dim 0 has size 4", "expected 3 like operand 1 dim 1"),
    ),
    "cumsum": (
        prog("%a: f32[2,3]", "%r = cumsum(%a) {^axis = 2} : f32[2,3]", "f32[2,3]"),
        ("axis 2", "out of range for rank 2"),
    ),
    "cumprod": (
        prog("%a: i1[4]", "%r = cumprod(^%a) {axis = 0} : i1[4]", "i1[4]"),
        ("cumprod takes a float or integer operand", "operand 1 is i1[4]"),
    ),
    "argsort": (
        prog("%a: i1[4]", "%r = argsort(^%a) {axis = 0} : i64[4]", "i64[4]"),
        ("argsort takes a float or integer operand", "operand 1 is i1[4]"),
    ),
    "take": (
        prog("%t: f32[4,2], %i: f32[3]", "%r = take(%t, ^%i) {axis = 0} : f32[3,2]", "f32[3,2]"),
        ("indices must be an integer type", "operand 2 is f32[3]"),
    ),
    "conv2d": (
        prog(
            "%x: f32[1,3,4,4], %w: f32[2,2,3,3]",
            "%r = conv2d(%x, ^%w) {stride = [1, 1], padding = [[0, 0], [0, 0]], "
            "dilation = [1, 1], groups = 1} : f32[1,2,2,2]",
            "f32[1,2,2,2]",
        ),
        ("operand 2 is f32[2,2,3,3]", "C/groups = 3", "operand 1 is f32[1,3,4,4]"),
    ),
    "matmul": (
        prog("%a: f32[2,3], %b: f32[4,5]", "%r = matmul(%a, ^%b) : f32[2,5]", "f32[2,5]"),
        ("operand 2 is f32[4,5]", "expected K = 3", "operand 1 (f32[2,3])"),
    ),
    "softmax": (
        prog("%a: f32[2,3]", "%r = softmax(%a) {^axis = 2} : f32[2,3]", "f32[2,3]"),
        ("axis 2", "out of range for rank 2"),
    ),
    "log_softmax": (
        prog("%a: i32[2,3]", "%r = log_softmax(^%a) {axis = 1} : i32[2,3]", "i32[2,3]"),
        ("log_softmax takes a float operand", "operand 1 is i32[2,3]"),
    ),
    "layer_norm": (
        prog(
            "%x: f32[2,4], %g: f32[3], %b: f32[4]",
            "%r = layer_norm(%x, ^%g, %b) {axes = [1], eps = 1e-05} : f32[2,4]",
            "f32[2,4]",
        ),
        ("operand 2 is f32[3]", "expected f32[4]", "normalised dims [1] of f32[2,4]"),
    ),
    "gelu": (
        prog("%a: f32[2]", '%r = gelu(%a) {^approximate = "erf"} : f32[2]', "f32[2]"),
        ('expected one of "none", "tanh"', 'got string "erf"'),
    ),
    # Collectives: the type rules' own rejections (the mesh-level ones: tests/ir/test_mesh.py).
    "all_reduce": (
        prog(
            "%a: i1[2]",
            '%r = all_reduce(^%a) {axes = ["d"], combiner = "add", order = "rank"} : i1[2]',
            "i1[2]",
        ),
        ("a reduction needs a numeric operand", "operand 1 is i1[2]"),
    ),
    "all_gather": (
        prog("%a: f32[2]", '%r = all_gather(%a) {axes = ["d"], ^dim = 1} : f32[4]', "f32[4]"),
        ("dim 1", "out of range for rank 1"),
    ),
    "reduce_scatter": (
        prog(
            "%a: f32[2]",
            '%r = reduce_scatter(%a) {axes = ["d"], ^dim = 3, combiner = "add", '
            'order = "rank"} : f32[1]',
            "f32[1]",
        ),
        ("dim 3", "out of range for rank 1"),
    ),
    "all_to_all": (
        prog(
            "%a: f32[2]",
            '%r = all_to_all(%a) {axes = ["d"], ^split_dim = 1, concat_dim = 0} : f32[2]',
            "f32[2]",
        ),
        ("split_dim 1", "out of range for rank 1"),
    ),
    "shard_slice": (
        prog("%a: f32[2]", '%r = shard_slice(%a) {axes = ["d"], ^dim = 2} : f32[1]', "f32[1]"),
        ("dim 2", "out of range for rank 1"),
    ),
    "collective_permute": (
        prog(
            "%a: f32[2]",
            '%r = collective_permute(%a) {axes = ["d"], ^pairs = [[0, 1], [0, 2]]} : f32[2]',
            "f32[2]",
        ),
        ("each member is a source at most once",),
    ),
    "if": (
        prog(
            "%c: i32[], %x: f32[2]",
            '%r = if(^%c, %x) {then = "t", else = "e", result = 0} : f32[2]',
            "f32[2]",
        ),
        ("the condition (operand 1) is i32[]", "expected i1[]"),
    ),
    "while": (
        prog(
            "%x: f32[2]",
            '%r = while(%x) {cond = "c", body = "b", ^max_trips = 2147483648, result = 0} : f32[2]',
            "f32[2]",
        ),
        ("max_trips 2147483648", "more than the limit of 2147483647"),
    ),
    "scan": (
        prog(
            "%a: f32[2,3], %b: f32[3,3]",
            '%r = scan(%a, ^%b) {body = "f", num_scan_inputs = 2, result = 0} : f32[3]',
            "f32[3]",
        ),
        ("scanned operand 2 is f32[3,3]", "expected length 2 on axis 0 like operand 1"),
    ),
    "carry_reduce": (
        prog(
            "%a: f32[2,3]",
            '%r = carry_reduce(%a) {axes = ["d"], ^dims = [0, 0], combiner = "add"} : f32[3]',
            "f32[3]",
        ),
        ("dims [0, 0] repeats an axis",),
    ),
}


def test_every_registered_op_has_a_rejection_case() -> None:
    assert sorted(op_registry.REGISTRY) == sorted(OP_CASES)


@pytest.mark.parametrize("name", sorted(OP_CASES))
def test_op_type_rule_rejection(name: str) -> None:
    marked, fragments = OP_CASES[name]
    assert f"{name}(" in marked
    assert_rejected(marked, *fragments)


# --- more type-rule rejections ---------------------------------------------------------------

MORE_CASES = {
    "select branches differ": (
        prog("%c: i1[2], %a: f32[2], %b: f16[2]", "%r = select(%c, %a, ^%b) : f32[2]", "f32[2]"),
        ("operand 3 is f16[2]", "expected f32[2] like operand 2"),
    ),
    "select condition shape": (
        prog("%c: i1[3], %a: f32[2]", "%r = select(^%c, %a, %a) : f32[2]", "f32[2]"),
        ("condition is i1[3]", "expected shape [2] like operand 2"),
    ),
    "constant ragged": (
        prog("", "%r = constant() {^value = [[1, 2], [3]]} : i32[2,2]", "i32[2,2]"),
        ("ragged",),
    ),
    "constant out of range int": (
        prog("", "%r = constant() {^value = 128} : i8[]", "i8[]"),
        ("128 is out of range for i8", "[-128, 127]"),
    ),
    "constant bool in float": (
        prog("", "%r = constant() {^value = true} : f32[]", "f32[]"),
        ("a boolean is not a f32 value",),
    ),
    "iota i1": (
        prog("", "%r = ^iota() {axis = 0} : i1[2]", "i1[2]"),
        ("float or integer type", "got i1[2]"),
    ),
    "broadcast dims not increasing": (
        prog("%a: f32[2,2]", "%r = broadcast(%a) {^dims = [1, 0]} : f32[2,2]", "f32[2,2]"),
        ("dims [1, 0] must be strictly increasing",),
    ),
    "broadcast dims count": (
        prog("%a: f32[2,2]", "%r = broadcast(%a) {^dims = [0]} : f32[2,2]", "f32[2,2]"),
        ("dims has 1 entries, expected 2", "f32[2,2]"),
    ),
    "slice stride": (
        prog(
            "%a: f32[4]",
            "%r = slice(%a) {start = [0], limit = [4], ^stride = [0]} : f32[4]",
            "f32[4]",
        ),
        ("stride 0 must be >= 1",),
    ),
    "pad negative": (
        prog(
            "%a: f32[2]", "%r = pad(%a) {^low = [-1], high = [0], value = 0.0} : f32[1]", "f32[1]"
        ),
        ("low [-1] has a negative entry",),
    ),
    "dot operand dtypes": (
        prog(
            "%a: f32[2,3], %b: f16[3,2]",
            "%r = dot(%a, ^%b) {lhs_batch = [], rhs_batch = [], lhs_contract = [1], "
            "rhs_contract = [0]} : f32[2,2]",
            "f32[2,2]",
        ),
        ("operand 2 is f16[3,2]", "expected dtype f32 like operand 1 (f32[2,3])"),
    ),
    "dot int acc": (
        prog(
            "%a: i8[2,3], %b: i8[3,2]",
            "%r = dot(%a, %b) {lhs_batch = [], rhs_batch = [], lhs_contract = [1], "
            "rhs_contract = [0], ^acc = i32} : i8[2,2]",
            "i8[2,2]",
        ),
        ("acc i32 must equal the integer operand dtype i8",),
    ),
    "dot float acc int": (
        prog(
            "%a: f32[2,3], %b: f32[3,2]",
            "%r = dot(%a, %b) {lhs_batch = [], rhs_batch = [], lhs_contract = [1], "
            "rhs_contract = [0], ^acc = i32} : f32[2,2]",
            "f32[2,2]",
        ),
        ("acc i32 must be a float dtype like the operands (f32)",),
    ),
    "take from empty axis": (
        prog("%t: f32[0,2], %i: i32[3]", "%r = take(^%t, %i) {axis = 0} : f32[3,2]", "f32[3,2]"),
        ("cannot take from axis 0 of f32[0,2]",),
    ),
    "conv2d groups": (
        prog(
            "%x: f32[1,3,4,4], %w: f32[2,1,3,3]",
            "%r = conv2d(%x, %w) {stride = [1, 1], padding = [[0, 0], [0, 0]], "
            "dilation = [1, 1], ^groups = 2} : f32[1,2,2,2]",
            "f32[1,2,2,2]",
        ),
        ("groups 2", "divide both C (3) and O (2)"),
    ),
    "conv2d kernel too large": (
        prog(
            "%x: f32[1,1,2,2], %w: f32[1,1,3,3]",
            "%r = conv2d(%x, ^%w) {stride = [1, 1], padding = [[0, 0], [0, 0]], "
            "dilation = [1, 1], groups = 1} : f32[1,1,1,1]",
            "f32[1,1,1,1]",
        ),
        ("dilated kernel (3x3)", "padded input (2x2)"),
    ),
    "conv2d rank": (
        prog(
            "%x: f32[3,4,4], %w: f32[2,3,3,3]",
            "%r = conv2d(^%x, %w) {stride = [1, 1], padding = [[0, 0], [0, 0]], "
            "dilation = [1, 1], groups = 1} : f32[1,2,2,2]",
            "f32[1,2,2,2]",
        ),
        ("rank 4", "operand 1 is f32[3,4,4]"),
    ),
    "matmul batch": (
        prog("%a: f32[2,2,3], %b: f32[3,3,4]", "%r = matmul(%a, ^%b) : f32[2,2,4]", "f32[2,2,4]"),
        ("batch dims differ", "operand 1 is f32[2,2,3]", "operand 2 is f32[3,3,4]"),
    ),
    "layer_norm axes order": (
        prog(
            "%x: f32[2,4], %g: f32[4,2], %b: f32[4,2]",
            "%r = layer_norm(%x, %g, %b) {^axes = [1, 0], eps = 0.5} : f32[2,4]",
            "f32[2,4]",
        ),
        ("axes [1, 0] must be strictly increasing",),
    ),
    "layer_norm eps boolean": (
        prog(
            "%x: f32[2,4], %g: f32[4], %b: f32[4]",
            "%r = layer_norm(%x, %g, %b) {axes = [1], ^eps = true} : f32[2,4]",
            "f32[2,4]",
        ),
        ("eps", "a boolean is not a f32 value"),
    ),
}


@pytest.mark.parametrize("case", sorted(MORE_CASES))
def test_more_type_rule_rejections(case: str) -> None:
    marked, fragments = MORE_CASES[case]
    assert_rejected(marked, *fragments)


# --- control flow: the functions an if / while / scan names (IR_SPEC.md section 9) ------------

_BODIES = """
func @id(%a: f32[2]) -> f32[2] {
  return %a
}
func @twice(%a: f32[2]) -> f32[2] {
  %b = add(%a, %a) : f32[2]
  return %b
}
func @pair(%a: f32[2]) -> (f32[2], f32[2]) {
  return %a, %a
}
func @yes(%a: f32[2]) -> i1[] {
  %t = constant() {value = true} : i1[]
  return %t
}
func @half(%a: f32[2]) -> f16[2] {
  %b = convert(%a) : f16[2]
  return %b
}
func @f16id(%a: f16[2]) -> f16[2] {
  return %a
}
func @step(%s: f32[2], %x: f32[2]) -> (f32[2], f32[2]) {
  %t = add(%s, %x) : f32[2]
  return %t, %t
}
"""


def _main(params: str, op: str, result: str) -> str:
    return prog(params, op, result) + _BODIES


CONTROL_CASES = {
    "if names no function": (
        _main(
            "%c: i1[], %x: f32[2]",
            '%r = if(%c, %x) {^then = "nope", else = "id", result = 0} : f32[2]',
            "f32[2]",
        ),
        ("then @nope is not a function of the module",),
    ),
    "if then takes other types": (
        _main(
            "%c: i1[], %x: f16[2]",
            '%r = if(%c, %x) {^then = "id", else = "f16id", result = 0} : f16[2]',
            "f16[2]",
        ),
        ("then branch @id takes (f32[2])", "expected (f16[2])"),
    ),
    "if branches return differently": (
        _main(
            "%c: i1[], %x: f32[2]",
            '%r = if(%c, %x) {then = "id", ^else = "half", result = 0} : f32[2]',
            "f32[2]",
        ),
        ("else branch @half returns (f16[2])", "expected (f32[2])"),
    ),
    "if result out of range": (
        _main(
            "%c: i1[], %x: f32[2]",
            '%r = if(%c, %x) {then = "pair", else = "pair", ^result = 2} : f32[2]',
            "f32[2]",
        ),
        ("result 2 is out of range", "gives 2 value(s) (f32[2], f32[2])"),
    ),
    "if written type": (
        _main(
            "%c: i1[], %x: f32[2]",
            '%r = if(%c, %x) {then = "id", else = "twice", result = 0} : ^f16[2]',
            "f16[2]",
        ),
        ("result type is written f16[2]", "result 0 of if is f32[2]"),
    ),
    "if negative result": (
        _main(
            "%c: i1[], %x: f32[2]",
            '%r = if(%c, %x) {then = "id", else = "id", ^result = -1} : f32[2]',
            "f32[2]",
        ),
        ("expected an integer >= 0, got -1",),
    ),
    "while cond returns no i1": (
        _main(
            "%x: f32[2]",
            '%r = while(%x) {^cond = "id", body = "twice", max_trips = 4, result = 0} : f32[2]',
            "f32[2]",
        ),
        ("cond @id returns (f32[2])", "expected (i1[])"),
    ),
    "while body changes the types": (
        _main(
            "%x: f32[2]",
            '%r = while(%x) {cond = "yes", ^body = "half", max_trips = 4, result = 0} : f32[2]',
            "f32[2]",
        ),
        ("loop body @half returns (f16[2])", "expected (f32[2])"),
    ),
    "while needs max_trips": (
        _main(
            "%x: f32[2]",
            '%r = ^while(%x) {cond = "yes", body = "id", result = 0} : f32[2]',
            "f32[2]",
        ),
        ("while needs attribute 'max_trips'",),
    ),
    "while result out of range": (
        _main(
            "%x: f32[2]",
            '%r = while(%x) {cond = "yes", body = "id", max_trips = 4, ^result = 1} : f32[2]',
            "f32[2]",
        ),
        ("result 1 is out of range: the loop carries 1 value(s)",),
    ),
    "scan body takes the whole operand": (
        _main(
            "%s: f32[2], %x: f32[3,2]",
            '%r = scan(%s, %x) {^body = "pair", num_scan_inputs = 1, result = 0} : f32[2]',
            "f32[2]",
        ),
        ("scan body @pair takes (f32[2])", "expected (f32[2], f32[2])"),
    ),
    "scan states first": (
        _main(
            "%s: f16[2], %x: f32[3,2]",
            '%r = scan(%s, %x) {^body = "step", num_scan_inputs = 1, result = 0} : f16[2]',
            "f16[2]",
        ),
        ("scan body @step takes (f32[2], f32[2])", "expected (f16[2], f32[2])"),
    ),
    "scan written type of an output": (
        _main(
            "%s: f32[2], %x: f32[3,2]",
            '%r = scan(%s, %x) {body = "step", num_scan_inputs = 1, result = 1} : ^f32[2]',
            "f32[2]",
        ),
        ("result type is written f32[2]", "result 1 of scan is f32[3,2]"),
    ),
    "scan no scanned operand": (
        _main(
            "%s: f32[2]",
            '%r = scan(%s) {body = "id", ^num_scan_inputs = 0, result = 0} : f32[2]',
            "f32[2]",
        ),
        ("num_scan_inputs 0 must be between 1 and the number of operands (1)",),
    ),
    "scan of a scalar": (
        _main(
            "%s: f32[]",
            '%r = scan(^%s) {body = "id", num_scan_inputs = 1, result = 0} : f32[]',
            "f32[]",
        ),
        ("scanned operand 1 is f32[], it needs an axis 0 to scan",),
    ),
    "main calls itself": (
        _main(
            "%x: f32[2]",
            '%r = while(%x) {cond = "yes", ^body = "main", max_trips = 2, result = 0} : f32[2]',
            "f32[2]",
        ),
        ("body @main calls itself (@main -> @main)", "not recursive"),
    ),
}

CONTROL_CASES["recursion through another function"] = (
    prog(
        "%x: f32[2]",
        '%r = while(%x) {cond = "c", body = "b", max_trips = 3, result = 0} : f32[2]',
        "f32[2]",
    )
    + """
func @c(%a: f32[2]) -> i1[] {
  %t = constant() {value = true} : i1[]
  return %t
}
func @b(%a: f32[2]) -> f32[2] {
  %t = constant() {value = true} : i1[]
  %r = if(%t, %a) {then = "same", ^else = "main", result = 0} : f32[2]
  return %r
}
func @same(%a: f32[2]) -> f32[2] {
  return %a
}
""",
    ("else @main calls itself", "@main -> @b -> @main"),
)


@pytest.mark.parametrize("case", sorted(CONTROL_CASES))
def test_control_flow_rejections(case: str) -> None:
    marked, fragments = CONTROL_CASES[case]
    assert_rejected(marked, *fragments)


# --- SSA, names, operands, attributes, results ----------------------------------------------


def test_ssa_redefinition() -> None:
    assert_rejected(
        "func @main(%x: f32[2]) -> f32[2] {\n"
        "  %a = neg(%x) : f32[2]\n"
        "  ^%a = abs(%x) : f32[2]\n"
        "  return %a\n}\n",
        "%a is defined twice (first at line 2)",
        "SSA",
    )


def test_op_result_redefines_a_parameter() -> None:
    assert_rejected(
        "func @main(%x: f32[2]) -> f32[2] {\n  ^%x = neg(%x) : f32[2]\n  return %x\n}\n",
        "%x is defined twice (first at line 1)",
    )


def test_use_before_definition() -> None:
    assert_rejected(
        "func @main(%x: f32[2]) -> f32[2] {\n"
        "  %a = add(%x, ^%b) : f32[2]\n"
        "  %b = neg(%x) : f32[2]\n"
        "  return %a\n}\n",
        "%b is used before its definition at line 3",
    )


def test_undefined_value() -> None:
    assert_rejected(
        "func @main(%x: f32[2]) -> f32[2] {\n  %a = neg(^%nope) : f32[2]\n  return %a\n}\n",
        "use of undefined value %nope",
    )


def test_values_do_not_leak_between_functions() -> None:
    assert_rejected(
        "func @f(%x: f32[2]) -> f32[2] {\n  return %x\n}\n"
        "func @main(%y: f32[2]) -> f32[2] {\n  %a = neg(^%x) : f32[2]\n  return %a\n}\n",
        "use of undefined value %x",
    )


def test_unknown_op_with_suggestion() -> None:
    e = assert_rejected(
        prog("%x: f32[2]", "%r = ^sofmax(%x) {axis = 0} : f32[2]", "f32[2]"),
        "unknown op 'sofmax'",
        "did you mean 'softmax'?",
    )
    assert str(e).startswith(f"{FILE}:2:8: error: ")


def test_unknown_op_without_close_match() -> None:
    e = assert_rejected(prog("%x: f32[2]", "%r = ^zzzzzz(%x) : f32[2]", "f32[2]"), "zzzzzz")
    assert "did you mean" not in e.message


@pytest.mark.parametrize(
    "op, fragments",
    [
        ("%r = ^add(%x) : f32[2]", ("add takes 2 operand(s), got 1",)),
        ("%r = ^neg(%x, %x) : f32[2]", ("neg takes 1 operand(s), got 2",)),
        ("%r = ^constant(%x) {value = 1.0} : f32[2]", ("constant takes 0 operand(s), got 1",)),
        ("%r = ^concat() {axis = 0} : f32[2]", ("concat takes at least 1 operand(s), got 0",)),
        ("%r = ^select(%x, %x) : f32[2]", ("select takes 3 operand(s), got 2",)),
    ],
)
def test_wrong_operand_count(op: str, fragments: tuple[str, ...]) -> None:
    assert_rejected(prog("%x: f32[2]", op, "f32[2]"), *fragments)


def test_unknown_attribute() -> None:
    assert_rejected(
        prog("%x: f32[2]", "%r = neg(%x) {^k = 1} : f32[2]", "f32[2]"),
        "neg has no attribute 'k'",
        "it takes: no attributes",
    )
    assert_rejected(
        prog("%x: f32[2]", "%r = softmax(%x) {axis = 0, ^dim = 0} : f32[2]", "f32[2]"),
        "softmax has no attribute 'dim' (it takes: axis)",
    )


def test_missing_attribute() -> None:
    assert_rejected(
        prog("%x: f32[2,3]", "%r = ^transpose(%x) : f32[3,2]", "f32[3,2]"),
        "transpose needs attribute 'perm'",
    )


def test_attribute_given_twice() -> None:
    assert_rejected(
        prog("%x: f32[2]", "%r = softmax(%x) {axis = 0, ^axis = 0} : f32[2]", "f32[2]"),
        "attribute 'axis' is given twice",
    )


@pytest.mark.parametrize(
    "op, fragments",
    [
        (
            "%r = transpose(%x) {^perm = 1.5} : f32[2]",
            ("attribute 'perm' of transpose", "expected a list of integers, got float 1.5"),
        ),
        (
            '%r = softmax(%x) {^axis = "0"} : f32[2]',
            ("attribute 'axis' of softmax", 'expected an integer, got string "0"'),
        ),
        (
            "%r = softmax(%x) {^axis = true} : f32[2]",
            ("expected an integer, got true",),
        ),
        (
            "%r = constant() {^value = f32} : f32[2]",
            ("expected a number or a nested list of numbers, got dtype f32",),
        ),
        (
            "%r = cmp(%x, %x) {dir = ^lt} : i1[2]",
            ("unexpected 'lt'", "a dtype name or a list"),
        ),
        (
            "%r = dot(%x, %x) {lhs_batch = [], rhs_batch = [], lhs_contract = [0], "
            'rhs_contract = [0], ^acc = "f32"} : f32[]',
            ("attribute 'acc' of dot", 'expected a dtype name, got string "f32"'),
        ),
    ],
)
def test_ill_typed_attribute(op: str, fragments: tuple[str, ...]) -> None:
    assert_rejected(prog("%x: f32[2]", op, "f32[2]"), *fragments)


def test_written_result_type_mismatch() -> None:
    assert_rejected(
        prog("%x: f32[2]", "%r = add(%x, %x) : ^f32[3]", "f32[3]"),
        "result type is written f32[3]",
        "add of (f32[2], f32[2]) gives f32[2]",
    )
    assert_rejected(
        prog("%x: f32[2]", '%r = cmp(%x, %x) {dir = "lt"} : ^f32[2]', "f32[2]"),
        "result type is written f32[2]",
        "gives i1[2]",
    )


def test_return_arity() -> None:
    assert_rejected(
        "func @main(%x: f32[2]) -> f32[2] {\n  ^return %x, %x\n}\n",
        "@main returns 2 value(s) but declares 1 result(s) (f32[2])",
    )
    assert_rejected(
        "func @main(%x: f32[2]) -> (f32[2], i32[]) {\n  ^return\n}\n",
        "@main returns 0 value(s) but declares 2 result(s) (f32[2], i32[])",
    )


def test_return_type_mismatch() -> None:
    assert_rejected(
        "func @main(%x: f32[2], %y: i32[]) -> (f32[2], f32[]) {\n  return %x, ^%y\n}\n",
        "returned value 2 (%y) is i32[]",
        "expected f32[] as @main declares",
    )


def test_return_of_undefined_value() -> None:
    assert_rejected(
        "func @main(%x: f32[2]) -> f32[2] {\n  return ^%q\n}\n", "return of undefined value %q"
    )


def test_duplicate_function() -> None:
    assert_rejected(
        "func @main() -> () {\n  return\n}\nfunc ^@main() -> () {\n  return\n}\n",
        "function @main is defined twice (first at line 1)",
    )


def test_no_entry_function() -> None:
    assert_rejected(
        "func ^@f() -> () {\n  return\n}\nfunc @g() -> () {\n  return\n}\n",
        "2 functions and none is named @main",
        "no entry function",
    )


def test_single_function_of_any_name_is_the_entry() -> None:
    m = verify(parse("func @only() -> () {\n  return\n}\n"))
    assert m.entry is m.functions[0]


def test_duplicate_params() -> None:
    assert_rejected(
        "func @main(%x: f32[2], ^%x: f32[3]) -> () {\n  return\n}\n",
        "parameter %x is declared twice",
    )


@pytest.mark.parametrize(
    "attr, fragments",
    [
        ("^range = [1.0, -1.0]", ("range [1.0, -1.0]", "lo <= hi")),
        ("^range = [nan, 1.0]", ("no NaN",)),
        ("^range = [1.0]", ("range must be [lo, hi] with two numbers",)),
        ("^range = [0.0, 1.0, 2.0]", ("range must be [lo, hi] with two numbers",)),
        ('^range = ["a", "b"]', ("range must be [lo, hi] with two numbers",)),
        ("^range = 1.0", ("range must be [lo, hi] with two numbers",)),
        ("^range = [true, false]", ("range must be [lo, hi] with two numbers",)),
    ],
)
def test_bad_range(attr: str, fragments: tuple[str, ...]) -> None:
    assert_rejected(f"func @main(%x: f32[2] {{{attr}}}) -> () {{\n  return\n}}\n", *fragments)


def test_range_edges_accepted() -> None:
    src = (
        "func @main(%x: f32[2] {range = [-inf, inf]}, %y: i8[] {range = [3, 3]},\n"
        "           %z: f32[] {range = [-1e400, 1" + "0" * 400 + "]}) -> () {\n  return\n}\n"
    )
    fn = verify(parse(src)).functions[0]
    assert [p.range for p in fn.params] == [
        (float("-inf"), float("inf")),
        (3.0, 3.0),
        (float("-inf"), float("inf")),
    ]


def test_huge_shapes() -> None:
    big = "2147483648,2147483648,2"  # 2^63 elements
    assert_rejected(
        f"func @main(^%x: f32[{big}]) -> () {{\n  return\n}}\n",
        f"type f32[{big}] has {2**63} elements",
        "more than the limit of 2^62",
    )
    assert_rejected(
        f"func @main() -> () {{\n  %r = iota() {{axis = 0}} : ^i32[{big}]\n  return\n}}\n",
        f"{2**63} elements",
        "2^62",
    )
    # The limit itself is allowed.
    verify(parse(f"func @main(%x: f32[{2**31},{2**31}]) -> () {{\n  return\n}}\n"))


def test_huge_result_type_in_the_signature() -> None:
    e = assert_rejected(
        "func @main(%x: f32[2]) -> ^f32[4611686018427387905] {\n  return %x\n}\n", "2^62"
    )
    assert "4611686018427387905" in e.message


def test_composite_at_core_stage() -> None:
    assert_rejected(
        prog("%x: f32[2]", "%r = ^softmax(%x) {axis = 0} : f32[2]", "f32[2]"),
        "softmax is a graph-stage op",
        "core stage",
        stage="core",
    )


def test_errors_format_as_file_line_col() -> None:
    e = assert_rejected(prog("%x: f32[2]", "%r = neg(^%q) : f32[2]", "f32[2]"), "%q")
    assert str(e) == f"{FILE}:2:12: error: use of undefined value %q"
