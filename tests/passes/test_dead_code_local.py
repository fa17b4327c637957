"""eliminate-dead-code proves a local claim (the function cut at its live values), so a deep
network with dead ops costs one small query, where a whole-function query would grow
exponentially with the depth (every residual connection doubles the index-symbolic term)."""

from __future__ import annotations

from gdv.api import parse
from gdv.passes.eliminate_dead_code import EliminateDeadCode
from gdv.validate.discharge import discharge


def _deep(layers: int) -> str:
    lines = ["func @main(%x: f32[4,8]) -> f32[4,8] {"]
    prev = "x"
    for k in range(layers):
        lines.append(f"  %s{k} = reduce_sum(%{prev}) {{axes = [1]}} : f32[4]")
        lines.append(f"  %b{k} = broadcast(%s{k}) {{dims = [0]}} : f32[4,8]")
        lines.append(f"  %d{k} = sub(%{prev}, %b{k}) : f32[4,8]")
        lines.append(f"  %dead{k} = exp(%d{k}) : f32[4,8]")
        lines.append(f"  %r{k} = add(%{prev}, %d{k}) : f32[4,8]")
        prev = f"r{k}"
    lines += [f"  return %{prev}", "}"]
    return "\n".join(lines) + "\n"


def test_deep_network_dead_ops_are_a_small_local_obligation() -> None:
    module = parse(_deep(24))
    result = EliminateDeadCode().run(module)
    (ob,) = result.obligations
    assert ob.src.name == "src" and ob.tgt.name == "tgt"  # local scope in evidence
    assert [op.name for op in ob.src.ops] == ["exp"] * 24 and ob.tgt.ops == []
    assert {p.name for p in ob.src.params} == {f"d{k}" for k in range(24)} | {"r23"}
    assert [op.result for op in result.module.entry.ops if op.name == "exp"] == []
    (out,) = discharge([ob], jobs=1, timeout=20.0, use_cache=False)
    assert out.status == "proved", out.reason


def test_a_return_of_a_removed_value_cannot_be_proved() -> None:
    # The claim is about the returns: if a removed value were returned, the cut function
    # with the removed ops would differ from the one without them.
    module = parse(_deep(2))
    ob = EliminateDeadCode().run(module).obligations[0]
    import dataclasses

    bad_src = dataclasses.replace(ob.src, returns=["dead1"])
    bad_tgt = dataclasses.replace(ob.tgt, returns=["d1"])
    bad = dataclasses.replace(ob, src=bad_src, tgt=bad_tgt)
    (out,) = discharge([bad], jobs=1, timeout=20.0, use_cache=False)
    assert out.status == "refuted"
