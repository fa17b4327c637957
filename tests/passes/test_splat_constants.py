"""lower-to-kernels turns a splat constant into a kernel with no operands whose body is the
value, so fusion inlines it into its user: no tensor of copies is written and read back. The
rewrite and the fusion are proved (`fp`), the result runs bit-exact on both backends, and a
constant with a list of values stays an op."""

from __future__ import annotations

import numpy as np

from gdv.api import parse
from gdv.backends import c, reference
from gdv.driver import CompileOptions, compile_module

TEXT = """func @main(%x: f32[4,8]) -> (f32[4,8], f32[2]) {
  %h = constant() {value = 0.1} : f32[4,8]
  %m = mul(%x, %h) : f32[4,8]
  %t = constant() {value = [1.5, -0.0]} : f32[2]
  return %m, %t
}
"""


def test_splat_constant_is_fused_and_proved() -> None:
    comp = compile_module(TEXT, CompileOptions(target="c", use_cache=False))
    assert comp.verdict == "proved"
    rules = {o.obligation.rule for o in comp.outcomes}
    assert "splat-constant" in rules
    entry = comp.module.entry
    constants = [op for op in entry.ops if op.name == "constant"]
    assert [op.result for op in constants] == ["t"]  # the list-valued one stays an op
    (k,) = [op for op in entry.ops if op.name == "kernel"]
    assert k.operands == ["x"]  # the splat is inside the body, not an operand
    body = comp.module.function(k.attrs["body"])
    assert any(b.name == "constant" and b.attrs["value"] == 0.1 for b in body.ops)
    x = np.array(np.random.default_rng(3).standard_normal((4, 8)), np.float32)
    x[0, :3] = [np.nan, -0.0, np.inf]
    want = reference.run(parse(TEXT), {"x": x})
    for got, ref in zip(comp(x=x), want, strict=True):
        assert reference.bit_equal(got, ref)
    for got, ref in zip(reference.run(comp.module, {"x": x}), want, strict=True):
        assert reference.bit_equal(got, ref)
    assert "0x1.99999a0000000p-4f" in c.lower(comp.module)  # 0.1 rounded once to f32
