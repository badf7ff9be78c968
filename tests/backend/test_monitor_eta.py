"""ETA from real tokens left (docs/monitor.md), on recorded metrics lines.

``tiny-cpu-12steps.jsonl`` is a real tiny-cpu run (CPU, 12 steps of batch 4, lazy_preprocess)
with the entry's ``real_tokens_total``; ``7b-probe1-packed2048-metrics.jsonl`` is a recorded H200
run whose entry predates the field: the ETA falls back to steps and says so.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from backend.monitor import RunTracker
from backend.monitor.metrics import event_from_json
from backend.runs.summary import ProgressLine
from widgets.throughput import _tokens, render_summary

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures"
TINY = FIXTURES / "metrics" / "tiny-cpu-12steps.jsonl"
H200 = FIXTURES / "perf" / "7b-probe1-packed2048-metrics.jsonl"


def lines(path: Path) -> list[dict]:
    return [json.loads(x) for x in path.read_text().splitlines() if x.strip()]


def track(records: list[dict]) -> RunTracker:
    tracker = RunTracker(source="metrics")
    tracker.update(e for e in (event_from_json(r) for r in records) if e is not None)
    return tracker


def test_eta_is_real_tokens_left_over_recent_real_rate() -> None:
    recorded = lines(TINY)
    start, steps = recorded[0], [r for r in recorded if r["kind"] == "step"]
    assert start["real_tokens_total"] > 0
    s = track([start, *steps[:6]]).summary()
    left = start["real_tokens_total"] - sum(r["tokens_nonpad"] for r in steps[:6])
    assert s.eta_basis == "real tokens" and s.real_tokens_left == left
    assert s.eta_s == pytest.approx(left / s.tokens_nonpad_per_s)
    shown = str(render_summary(s, "running"))
    assert "(step-based)" not in shown
    assert f"\n{_tokens(left)} real tokens left" in shown
    finished = track(recorded).summary()
    assert finished.eta_s == 0 and finished.finished


def test_a_resumed_attempt_counts_its_repeated_steps_once() -> None:
    recorded = lines(TINY)
    start, steps = recorded[0], [r for r in recorded if r["kind"] == "step"]
    # Attempt 1 ran to step 8 and died; attempt 2 resumed from checkpoint 4 and is at step 6.
    resumed = {**start, "attempt": 2, "resumed_from": 4}
    again = [{**r, "attempt": 2} for r in steps[4:6]]
    s = track([start, *steps[:8], resumed, *again]).summary()
    assert s.real_tokens_left == start["real_tokens_total"] - sum(
        r["tokens_nonpad"] for r in steps[:6]
    )
    # An OOM fallback without a checkpoint starts over: nothing done yet.
    fresh = {**start, "attempt": 2, "resumed_from": None}
    s = track([start, *steps[:3], fresh, {**steps[0], "attempt": 2}]).summary()
    assert s.real_tokens_left == start["real_tokens_total"] - steps[0]["tokens_nonpad"]


def test_a_run_before_the_field_gets_a_step_based_eta_that_says_so() -> None:
    recorded = lines(H200)
    assert "real_tokens_total" not in recorded[0]
    steps = [r for r in recorded if r["kind"] == "step"]
    s = track([recorded[0], *steps[:10]]).summary()
    assert s.eta_basis == "steps" and s.real_tokens_left is None
    assert s.eta_s == pytest.approx((steps[9]["max_steps"] - 10) * s.step_time_s)
    assert "(step-based)" in str(render_summary(s, "running"))


def test_cli_follow_line_has_the_real_token_eta(tmp_path: Path) -> None:
    recorded = lines(TINY)
    path = tmp_path / "metrics.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in recorded[:7]))
    line = ProgressLine(tmp_path).line()
    assert line is not None and line.startswith("step 6/12 · ")
    assert "real tok/s" in line and "real tokens left)" in line
    old = tmp_path / "old"
    old.mkdir()
    (old / "metrics.jsonl").write_text("".join(json.dumps(r) + "\n" for r in lines(H200)[:8]))
    assert "(step-based" in (ProgressLine(old).line() or "")


def test_entry_counts_real_tokens_per_epoch() -> None:
    import torch

    from backend.entry import packing, realtokens

    class Padded:  # FastChat's SupervisedDataset keeps the whole attention mask
        attention_mask = torch.tensor([[1, 1, 1, 0], [1, 1, 0, 0]])

    assert realtokens.per_epoch(Padded()) == (5, "counted")
    ids = [torch.tensor([5, 6, 7]), torch.tensor([8, 9])]
    rows = packing.build_rows([(t, t.clone()) for t in ids], 8, 0)
    assert realtokens.per_epoch(packing.PackedDataset(rows)) == (5, "counted")
    assert realtokens.per_epoch(object())[0] is None

    class Loader:
        def __len__(self) -> int:
            return 50

    fields = realtokens.run_fields(1000, "counted", Loader(), 2, 10)
    assert fields["steps_per_epoch"] == 25 and fields["real_tokens_total"] == 400
    assert realtokens.run_fields(None, "why", Loader(), 1, 10)["real_tokens_per_epoch"] is None


def test_meter_shows_the_oom_fallback_line() -> None:
    said = "host OOM at step 1 with b64 no-recompute; restarted with b64 + recompute (candidate 2 of 4)"
    assert str(render_summary(None, "running", note=said)).endswith(said)
    s = track(lines(TINY)).summary()
    assert said in str(render_summary(s, "finished", note=said))
