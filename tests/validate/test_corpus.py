"""The tv corpus (tests/lit/tv): every pair in both theories gets its expected verdict, every
refutation's counterexample really makes the reference outputs differ, and no pair takes
10 s or more. Each file also round-trips through the printer."""

from __future__ import annotations

import pytest

from gdv.api import parse
from gdv.ir.printer import print_function
from gdv.validate.corpus import corpus_files, load_pair, run_pair
from gdv.validate.counterexample import same_bits

FILES = corpus_files()
LIMIT_SECONDS = 10.0


def test_the_corpus_is_large_and_covers_every_verdict():
    pairs = [load_pair(p) for p in FILES]
    assert len(pairs) >= 80
    seen = {(t, v) for p in pairs for t, v in p.expected.items()}
    for theory in ("fp", "real"):
        for verdict in ("equivalent", "not-equivalent", "unknown"):
            assert (theory, verdict) in seen, (theory, verdict)
    # Pairs that only the real theory proves (reassociation and friends).
    assert any(p.expected == {"fp": "not-equivalent", "real": "equivalent"} for p in pairs)


@pytest.mark.parametrize("path", FILES, ids=[p.stem for p in FILES])
def test_corpus_file_round_trips(path):
    pair = load_pair(path)
    for fn in (pair.src, pair.tgt):
        text = print_function(fn)
        assert print_function(parse(text).entry) == text


@pytest.mark.slow
@pytest.mark.parametrize("theory", ["fp", "real"])
@pytest.mark.parametrize("path", FILES, ids=[p.stem for p in FILES])
def test_corpus_pair(path, theory):
    from gdv.backends import reference

    pair = load_pair(path)
    result, seconds = run_pair(pair, theory)
    assert result.verdict == pair.expected[theory], result.reason
    assert seconds < LIMIT_SECONDS
    if result.verdict == "not-equivalent":
        cex = result.counterexample
        assert cex is not None
        assert set(cex.inputs) == {p.name for p in pair.src.params}
        out_a = reference.run(pair.src, cex.inputs)
        inputs_b = {
            q.name: cex.inputs[p.name]
            for p, q in zip(pair.src.params, pair.tgt.params, strict=True)
        }
        out_b = reference.run(pair.tgt, inputs_b)
        a, b = out_a[cex.output], out_b[cex.output]
        assert not same_bits(a, b).all()
        assert not same_bits(a[cex.index], b[cex.index])
