"""`gdv.fuzzing.ddmin.ddmin` (issue 18): a 1-minimal interesting subsequence, the same
whether candidates are tested one at a time or a round at once, and deterministic."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from gdv.fuzzing.ddmin import ddmin


@st.composite
def items_and_hidden(draw, min_hidden: int = 0):
    n = draw(st.integers(min_value=max(1, min_hidden), max_value=40))
    items = list(range(n))
    hidden = draw(st.sets(st.sampled_from(items), min_size=min_hidden, max_size=min(n, 8)))
    return items, hidden


def one_minimal(result: list, interesting) -> bool:
    return all(not interesting(result[:i] + result[i + 1 :]) for i in range(len(result)))


@given(items_and_hidden())
def test_contains_all_of_a_hidden_set(data) -> None:
    items, hidden = data
    calls = []

    def interesting(c: list[int]) -> bool:
        calls.append(list(c))
        return hidden <= set(c)

    out = ddmin(items, interesting)
    assert out == sorted(hidden)  # the hidden set itself, in the original order
    assert one_minimal(out, interesting)
    assert all(set(c) <= set(items) for c in calls)


@given(items_and_hidden(min_hidden=1))
def test_contains_one_of_a_hidden_set(data) -> None:
    items, hidden = data

    def interesting(c: list[int]) -> bool:
        return bool(hidden & set(c))

    out = ddmin(items, interesting)
    assert len(out) == 1 and out[0] in hidden


@given(items_and_hidden(), st.integers(min_value=1, max_value=5))
def test_at_least_k_of_a_hidden_set_is_one_minimal(data, k) -> None:
    items, hidden = data
    k = min(k, len(hidden)) if hidden else 0

    def interesting(c: list[int]) -> bool:
        return len(hidden & set(c)) >= k

    out = ddmin(items, interesting)
    assert interesting(out)
    assert len(out) == k and set(out) <= hidden
    assert one_minimal(out, interesting)
    assert out == sorted(out)  # order kept


@given(items_and_hidden(), st.booleans())
def test_interesting_many_gives_the_sequential_result(data, all_true) -> None:
    items, hidden = data

    def interesting(c: list[int]) -> bool:
        return hidden <= set(c) and (all_true or len(c) % 3 != 1 or c == items)

    rounds: list[int] = []

    def many(cands: list[list[int]]) -> list[bool]:
        rounds.append(len(cands))
        return [interesting(c) for c in cands]  # every candidate, as a pool would

    sequential = ddmin(items, interesting)
    batched = ddmin(items, interesting_many=many)
    assert batched == sequential
    assert interesting(batched)


@given(items_and_hidden())
def test_deterministic(data) -> None:
    items, hidden = data

    def interesting(c: list[int]) -> bool:
        return hidden <= set(c)

    assert ddmin(items, interesting) == ddmin(list(items), interesting)


def test_only_the_full_list_is_interesting() -> None:
    items = list("abcdefghij")
    seen = []

    def interesting(c: list[str]) -> bool:
        seen.append(len(c))
        return c == items

    assert ddmin(items, interesting) == items
    assert max(seen) < len(items)  # the full list itself is not re-tested


def test_empty_set_interesting_gives_empty() -> None:
    assert ddmin([1, 2, 3], lambda c: True) == []
    assert ddmin([7], lambda c: True) == []
    assert ddmin([7], lambda c: c == [7]) == [7]
    assert ddmin([], lambda c: True) == []


def test_non_integer_items_order_kept() -> None:
    items = [("op", i) for i in range(17)]
    want = [items[2], items[9], items[16]]
    assert ddmin(items, lambda c: all(x in c for x in want)) == want
