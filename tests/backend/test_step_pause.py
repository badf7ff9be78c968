"""The entry's step pause (backend/entry/stepmetrics.py, ``step_pause``): the test suite's live
runs idle between steps past a given step instead of spinning a core, and the pause is never
counted in a step's measured time. Driven with a clock of its own, so nothing here is timed."""

from __future__ import annotations

import importlib.util
import json
import sys
from pathlib import Path
from types import ModuleType, SimpleNamespace

import pytest

ENTRY = Path(__file__).resolve().parents[2] / "backend" / "entry"


@pytest.fixture(scope="module")
def stepmetrics() -> ModuleType:
    pytest.importorskip("torch")  # the training side; installed with the dev extras
    sys.path.insert(0, str(ENTRY))  # its siblings (guards, realtokens), as in a run directory
    try:
        spec = importlib.util.spec_from_file_location("stepmetrics", ENTRY / "stepmetrics.py")
        assert spec is not None and spec.loader is not None
        module = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(module)
    finally:
        sys.path.remove(str(ENTRY))
    return module


class Clock:
    """perf_counter/time/sleep of one fake clock: a sleep moves it on by exactly its length."""

    def __init__(self) -> None:
        self.now = 100.0
        self.slept: list[float] = []

    def perf_counter(self) -> float:
        return self.now

    def time(self) -> float:
        return self.now

    def sleep(self, seconds: float) -> None:
        self.slept.append(seconds)
        self.now += seconds


def test_no_pause_unless_asked(stepmetrics: ModuleType, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(stepmetrics.PAUSE_ENV, raising=False)
    monkeypatch.delenv(stepmetrics.PAUSE_FROM_ENV, raising=False)
    assert stepmetrics.step_pause() == (0.0, 0)
    monkeypatch.setenv(stepmetrics.PAUSE_ENV, "0.25")
    monkeypatch.setenv(stepmetrics.PAUSE_FROM_ENV, "20")
    assert stepmetrics.step_pause() == (0.25, 20)


@pytest.mark.parametrize("value", ["abc", "-1", "nan", "61", "inf"])
def test_a_bad_pause_names_the_variable(
    stepmetrics: ModuleType, monkeypatch: pytest.MonkeyPatch, value: str
) -> None:
    monkeypatch.setenv(stepmetrics.PAUSE_ENV, value)
    with pytest.raises(SystemExit, match=stepmetrics.PAUSE_ENV):
        stepmetrics.step_pause()


def test_steps_past_the_threshold_pause_and_the_pause_is_not_step_time(
    stepmetrics: ModuleType, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    clock = Clock()
    monkeypatch.setattr(stepmetrics, "time", clock)
    monkeypatch.setenv(stepmetrics.PAUSE_ENV, "0.5")
    monkeypatch.setenv(stepmetrics.PAUSE_FROM_ENV, "2")
    monkeypatch.setenv("RANK", "0")
    monkeypatch.setenv("WORLD_SIZE", "1")
    counter = SimpleNamespace(tokens=8, nonpad=6, samples=2, reset=lambda: None)
    metrics_path = tmp_path / "metrics.jsonl"
    callback = stepmetrics.MetricsCallback(str(metrics_path), counter, {})
    state = SimpleNamespace(global_step=0, max_steps=4, epoch=0.0)
    for step in range(1, 5):
        state.global_step = step
        callback.on_step_begin(None, state, None)
        clock.now += 0.125  # the step's own work
        callback.on_step_end(None, state, None)
    callback.flush_pending()
    steps = [json.loads(line) for line in metrics_path.read_text().splitlines()]
    assert [s["step"] for s in steps] == [1, 2, 3, 4]
    assert clock.slept == [0.5, 0.5]  # after steps 3 and 4 only
    assert [s["step_time_s"] for s in steps] == [0.125] * 4  # the pauses are in no step's time
