"""`benchmarks/models.py`'s side-by-side rounds: blocks of `BLOCK` calls per engine, a probe
before each round, medians over all rounds and over the near and the far rounds apart (the
timing itself is a benchmark, not a test: here the clock and the probe are fakes)."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "benchmarks"))

import models  # noqa: E402
import two_threads  # noqa: E402


class FakeVM:
    """A clock that each engine's call advances by its cost, doubled while the VM is far; a
    probe that reads far on the rounds listed in `far_rounds` (counted from 0)."""

    def __init__(self, costs: dict[str, float], far_rounds: set[int]) -> None:
        self.now = 0.0
        self.costs = costs
        self.far_rounds = far_rounds
        self.round = -1
        self.log: list[tuple[int, str]] = []

    def probe(self) -> tuple[float, float]:
        self.round += 1
        far = self.round in self.far_rounds
        return 10.0, 10.0 * (two_threads.FAR_RATIO if far else 1.2)

    def engine(self, name: str):
        def call() -> None:
            self.log.append((self.round, name))
            self.now += self.costs[name] * (2 if self.round in self.far_rounds else 1)

        return call


@pytest.fixture
def vm(monkeypatch) -> FakeVM:
    fake = FakeVM({"ort": 1.0, "gdv": 1.1}, far_rounds={1, 4})
    monkeypatch.setattr(models.time, "perf_counter", lambda: fake.now)
    monkeypatch.setattr(models.time, "sleep", lambda s: None)
    return fake


def test_rounds_interleave_the_engines_block_by_block(vm: FakeVM) -> None:
    calls = {k: vm.engine(k) for k in ("ort", "gdv")}
    out = models._side_by_side(calls, 23, vm.probe)
    block = models.BLOCK
    sizes = [block] * (23 // block) + [23 % block]
    assert len(out["rounds"]) == len(sizes)
    # warm-up calls before the first probe, then per round each engine's untimed call and block
    assert vm.log[: 2 * models.WARMUP] == [(-1, "ort"), (-1, "gdv")] * models.WARMUP
    rest = vm.log[2 * models.WARMUP :]
    want = []
    for r, n in enumerate(sizes):
        want += [(r, "ort")] * (n + 1) + [(r, "gdv")] * (n + 1)
    assert rest == want


def test_near_and_far_rounds_are_kept_apart(vm: FakeVM) -> None:
    calls = {k: vm.engine(k) for k in ("ort", "gdv")}
    out = models._side_by_side(calls, 30, vm.probe)
    assert [r["far"] for r in out["rounds"]] == [False, True, False, False, True, False]
    assert out["near"] == {"rounds": 4, "ort": 1.0, "gdv": pytest.approx(1.1)}
    assert out["far"] == {"rounds": 2, "ort": 2.0, "gdv": pytest.approx(2.2)}
    assert out["all"]["ort"] == 1.0  # 20 of the 30 calls were near


def test_without_a_probe_there_are_no_states(vm: FakeVM) -> None:
    calls = {k: vm.engine(k) for k in ("ort", "gdv")}
    out = models._side_by_side(calls, 10, None)
    assert set(out) == {"all"}


def test_states_give_each_paths_ratios() -> None:
    side = {
        "near": {"rounds": 3, "torch": 4.0, "ort": 2.0, "gdv:onnx": 3.0, "gdv-bound:onnx": 1.8},
        "far": {"rounds": 1, "torch": 5.0, "ort": 2.5, "gdv-bound:onnx": 3.0},
    }
    st = models._states(side, {"onnx": {}, "torch.export": {}})
    near = st["near"]
    assert near["rounds"] == 3 and near["ort_s"] == 2.0
    assert near["onnx"] == {
        "gdv_s": 3.0,
        "vs_torch": 0.75,
        "vs_ort": 1.5,
        "gdv_bound_s": 1.8,
        "bound_vs_torch": 0.45,
        "bound_vs_ort": 0.9,
    }
    assert near["torch.export"] == {}  # a path that did not run has no figures
    assert st["far"]["onnx"]["bound_vs_ort"] == 1.2


@pytest.mark.parametrize("runs", ["0", "-3"])
def test_fewer_than_one_run_is_a_usage_error(runs: str, capsys, monkeypatch) -> None:
    monkeypatch.delenv("GDV_MODELS_LEVEL", raising=False)
    with pytest.raises(SystemExit) as e:
        models.main(["--runs", runs])
    assert "GDV_MODELS_LEVEL" not in models.os.environ  # refused before anything is set
    assert e.value.code == 2
    assert "--runs: expected at least 1" in capsys.readouterr().err
