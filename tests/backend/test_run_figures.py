"""One figure per quantity, whichever view shows it (docs/run-format.md, "Figures of a run").

Two runs built as files: the recorded tiny-cpu run (12 steps, one attempt, CPU) and a resumed
2-GPU run (attempt 1 runs steps 1-50 and is stopped, attempt 2 resumes from checkpoint 40 an
hour later at another pace). Their real tokens/s, wall time, GPU-hours and mean train loss must
read the same in the launch/resume summary line, `trainwiz runs`, `runs compare`, the Monitor
(its backend: ``RunTracker.summary``), the model card and the end-of-run notification; the
expected figures are computed here from the lines themselves, by the documented definitions.
"""

from __future__ import annotations

import argparse
import json
import shutil
from pathlib import Path

import pytest

from backend.monitor import MetricsFollower, RunTracker
from backend.preset.loader import load_preset
from backend.results.compare import run_figures
from backend.results.model_card import render
from backend.results.summary import run_summary
from backend.runs import notify
from backend.runs.summary import ProgressLine, summarize_run
from backend.units import duration
from tests.run_records import make_ended_run
from widgets.throughput import render_summary

TINY = Path(__file__).resolve().parents[1] / "fixtures" / "metrics" / "tiny-cpu-12steps.jsonl"
T0 = 1_796_000_000.0
GAP_S = 3600.0  # between the attempts: no part of any figure
SAVE_S = 5.0  # checkpoint-40's save, between steps 40 and 41: wall time, not a step's time


def step(n: int, attempt: int, step_time: float, at: float, tokens: int, loss: float) -> dict:
    return {"kind": "step", "step": n, "max_steps": 60, "loss": loss, "step_time_s": step_time,
            "tokens": 2048, "tokens_nonpad": tokens, "time": at, "attempt": attempt}  # fmt: skip


def resumed_lines() -> list[dict]:
    start = {"kind": "start", "world_size": 2, "gpu_name": "NVIDIA H100", "real_tokens_total": 0}
    lines: list[dict] = [{**start, "attempt": 1, "time": T0}]
    at = T0
    for n in range(1, 51):
        spent = 3.0 if n == 1 else 1.0  # the first step warms up
        at += spent + (SAVE_S if n == 41 else 0.0)
        lines.append(step(n, 1, spent, at, 1000 + n, 6 - n / 10))
    lines.append({"kind": "end", "ok": False, "attempt": 1, "time": at + 1, "train_runtime": 70.0})
    at += GAP_S
    lines.append({**start, "attempt": 2, "resumed_from": 40, "time": at})
    for n in range(41, 61):
        spent = 4.0 if n == 41 else 2.0
        at += spent
        lines.append(step(n, 2, spent, at, 900 + n, 6 - n / 10 + 0.05))
    lines.append({"kind": "end", "ok": True, "attempt": 2, "time": at + 2, "train_runtime": 50.0,
                  "train_loss": 9.9, "saved_to": "/tmp/out"})  # fmt: skip
    kept = [x for x in lines if x["kind"] == "step" and (x["attempt"] == 2 or x["step"] <= 40)]
    for x in lines:
        if x["kind"] == "start":
            x["real_tokens_total"] = sum(s["tokens_nonpad"] for s in kept)
    return lines


def read(path: Path) -> list[dict]:
    return [json.loads(x) for x in path.read_text().splitlines() if x.strip()]


def expected(lines: list[dict]) -> dict[str, float]:
    """The definitions, applied by hand: real tokens/s over the steps counted once (a resumed
    attempt's steps replace the failed attempt's after the checkpoint) and the time those steps
    took; wall time per attempt from its first step's start to its last step's end."""
    steps: dict[int, dict] = {}
    spans: dict[int, list[float]] = {}
    gpus: dict[int, int] = {}
    for x in lines:
        if x["kind"] == "start":
            gpus[x.get("attempt", 1)] = (x.get("world_size") or 1) if x.get("gpu_name") else 0
            if x.get("resumed_from") is not None:
                steps = {k: v for k, v in steps.items() if k <= x["resumed_from"]}
        elif x["kind"] == "step":
            steps[x["step"]] = x
            span = spans.setdefault(x["attempt"], [x["time"] - x["step_time_s"], x["time"]])
            span[1] = x["time"]
    kept = [steps[k] for k in sorted(steps)]
    walls = {a: end - begin for a, (begin, end) in spans.items()}
    return {
        "real_tokens_per_s": sum(s["tokens_nonpad"] for s in kept)
        / sum(s["step_time_s"] for s in kept),
        "wall_s": sum(walls.values()),
        "gpu_hours": sum(gpus[a] * wall for a, wall in walls.items()) / 3600,
        "mean_loss": sum(s["loss"] for s in kept) / len(kept),
        "points": len(kept),
    }


def write(run_dir: Path, lines: list[dict]) -> None:
    (run_dir / "metrics.jsonl").write_text("".join(json.dumps(x) + "\n" for x in lines))


def tiny_run(home: Path) -> Path:
    run_dir = make_ended_run(home, "finished", None, preset="tiny", log="done\n")
    shutil.copy(TINY, run_dir / "metrics.jsonl")
    return run_dir


def resumed_run(home: Path) -> Path:
    run_dir = make_ended_run(home, "finished", 40, preset="resumed", log="done\n")
    write(run_dir, resumed_lines())
    # attempts.json: each attempt's watcher clock, setup included (not what the figures use)
    (run_dir / "attempts.json").write_text(json.dumps([
        {"attempt": 1, "how": "launch", "started_at": T0 - 120, "ended_at": T0 + 80},
        {"attempt": 2, "how": "resume", "resumed_from": 40, "started_at": T0 + GAP_S,
         "ended_at": T0 + GAP_S + 200},
    ]))  # fmt: skip
    return run_dir


def monitor(run_dir: Path, now: float | None = None):  # type: ignore[no-untyped-def]
    """What the Monitor's metrics worker computes: the follower, the tracker, its summary."""
    tracker = RunTracker(source="metrics")
    follower = MetricsFollower(run_dir / "metrics.jsonl")
    while True:
        batch = follower.poll()
        tracker.update(batch)
        if not batch and not follower.behind:
            return tracker, tracker.summary(now)


@pytest.fixture(params=["tiny", "resumed"])
def run(request: pytest.FixtureRequest, _trainwiz_home: Path) -> Path:
    return tiny_run(_trainwiz_home) if request.param == "tiny" else resumed_run(_trainwiz_home)


def test_every_view_gives_the_same_figures(run: Path, capsys: pytest.CaptureFixture[str]) -> None:
    want = expected(read(run / "metrics.jsonl"))
    rate, wall, gpu_h, mean = (want[k] for k in ("real_tokens_per_s", "wall_s", "gpu_hours",
                                                   "mean_loss"))  # fmt: skip
    approx = {"real_tokens_per_s": pytest.approx(rate), "wall_s": pytest.approx(wall),
              "gpu_hours": pytest.approx(gpu_h), "mean_loss": pytest.approx(mean)}  # fmt: skip

    line = summarize_run(run)  # `trainwiz launch` / `resume`: the summary line
    assert {k: getattr(line, k) for k in approx} == approx
    text = line.line()
    assert f"{rate:,.0f} real tokens/s" in text and f"wall time {duration(wall)}" in text
    assert f"mean {mean:.3g}" in text
    assert (f"{gpu_h:.2f} GPU-hours" in text) == (gpu_h > 0)

    compared = run_figures(run)  # `trainwiz runs compare`
    assert {k: getattr(compared, k) for k in approx} == approx

    _tracker, s = monitor(run)  # the Monitor, through its backend
    shown = {"real_tokens_per_s": s.run_real_tokens_per_s, "wall_s": s.wall_s,
             "gpu_hours": s.gpu_hours, "mean_loss": s.mean_loss}  # fmt: skip
    assert shown == approx
    panel = str(render_summary(s, "finished"))
    assert f"real tok/s {rate:,.0f}" in panel and f"wall time {duration(wall)}" in panel

    produced = run_summary(run)  # the model card's reader, then the card
    assert {k: getattr(produced, k) for k in ("real_tokens_per_s", "wall_s", "gpu_hours")} == {
        k: approx[k] for k in ("real_tokens_per_s", "wall_s", "gpu_hours")
    }
    assert produced.train_loss == pytest.approx(mean)
    card = render(run.name, load_preset(run / "preset.yaml"), produced, data_file=None,
                  source=run, n_params=None)  # fmt: skip
    assert f"{rate:,.0f} real tokens/s" in card and f"wall time {duration(wall)}" in card
    assert f"{gpu_h:.2f} GPU-hours" in card

    sent = notify.end_message(run, "finished", "training finished", None)  # the webhook payload
    assert {k: sent.fields[k] for k in approx} == approx
    assert f"{rate:,.0f} real tokens/s" in sent.text

    from tui.commands.runs import run_list  # `trainwiz runs --json`

    capsys.readouterr()
    assert run_list(argparse.Namespace(json=True)) == 0
    (listed,) = json.loads(capsys.readouterr().out)
    assert {k: listed[k] for k in approx} == approx


def test_a_resumed_runs_steps_count_once(_trainwiz_home: Path) -> None:
    run_dir = resumed_run(_trainwiz_home)
    tracker, s = monitor(run_dir)
    view = tracker.view()
    assert view.points == 60 and s.step == 60  # not 70: steps 41-50 replayed, not added
    steps, _losses = tracker.loss.points()
    assert steps == sorted(set(steps)) and steps[-1] == 60
    assert run_figures(run_dir).loss[0] == list(range(1, 61))
    # the replayed steps' losses are attempt 2's (the ones the model kept)
    assert tracker.loss.last == (60, pytest.approx(6 - 60 / 10 + 0.05))


def test_a_resumed_run_trains_live_and_its_eta_counts_down(_trainwiz_home: Path) -> None:
    run_dir = resumed_run(_trainwiz_home)
    lines = resumed_lines()
    second = next(i for i, x in enumerate(lines) if x.get("resumed_from"))
    etas = []
    for upto in (45, 50, 55):  # attempt 2 is at this step; attempt 1's end line is in the file
        write(run_dir, lines[: second + 1 + upto - 40])
        _tracker, s = monitor(run_dir)
        assert not s.finished and s.step == upto
        panel = str(render_summary(s, "running"))
        assert "Final summary" not in panel and "ETA" in panel
        want = expected(lines[: second + 1 + upto - 40])
        assert s.run_real_tokens_per_s == pytest.approx(want["real_tokens_per_s"])
        assert s.wall_s == pytest.approx(want["wall_s"])  # attempt 1's and attempt 2's so far
        attempt2 = [x for x in lines[second + 1 : second + 1 + upto - 40]]
        assert s.attempt_real_tokens_per_s == pytest.approx(
            sum(x["tokens_nonpad"] for x in attempt2) / sum(x["step_time_s"] for x in attempt2)
        )
        progress = ProgressLine(run_dir).line()  # `trainwiz resume`'s progress line
        assert progress is not None and f"ETA {duration(s.eta_s)}" in progress
        assert s.eta_s is not None and s.eta_s > 0
        etas.append(s.eta_s)
    assert etas == sorted(etas, reverse=True) and len(set(etas)) == 3
    write(run_dir, lines)
    _tracker, s = monitor(run_dir)
    assert s.finished and s.eta_s == 0
    assert "Final summary" in str(render_summary(s, "finished"))


def test_runs_keeps_the_figures_while_the_metrics_are_unchanged(_trainwiz_home: Path) -> None:
    """`trainwiz runs` reads a long run's figures once: figures.json (0600) keeps them, keyed by
    metrics.jsonl's size and time, and a grown file is read again."""
    from backend.monitor.figures import FIGURES_CACHE, cached_figures, read_figures

    run_dir = tiny_run(_trainwiz_home)
    first = cached_figures(run_dir)
    assert first == read_figures(run_dir) and first.step == 12
    assert (run_dir / FIGURES_CACHE).stat().st_mode & 0o777 == 0o600
    assert cached_figures(run_dir) == first
    lines = read(TINY)
    more = {**lines[-2], "step": 13, "max_steps": 13, "time": lines[-2]["time"] + 1.0}
    write(run_dir, [*lines[:-1], more])
    assert cached_figures(run_dir).step == 13
