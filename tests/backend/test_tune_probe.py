"""Tune that measures: candidate generation, the per-GPU-kind calibration file, and the probe's
fallbacks (OOM, compile budget, a candidate that cannot launch, no GPU).

The probe's launches go through a NAMED fake here (FakeLauncher: it writes the run directory a
real launch leaves - metrics.jsonl, train.log, a final state - without training), so each
fallback is exercised deterministically; tests/backend/test_tune_probe_cpu.py runs the real
path end to end on the CPU. The device rows (tests/fixtures/tune/, copied from docs/gpu/tune/,
measured on nvidia-h200 on 2026-12-01 by benchmarks/device/tune_probe.sh) check the claim that
predictions hold on data the constants were not fitted on.
"""

from __future__ import annotations

import json
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from backend.planner.gpu import GIB, gpu_spec
from backend.planner.learned import (
    calibration_path,
    correction,
    error_lines,
    kind_key,
    load_rows,
    record,
)
from backend.planner.perfrows import row_shape
from backend.planner.realdata import dist_from_report
from backend.planner.rowsearch import (
    TOKENS_PER_STEP_TOLERANCE,
    packed_candidates,
    real_tokens_per_step,
)
from backend.planner.settings import settings_from_preset
from backend.planner.tune import tune
from backend.preset.loader import parse_preset_text
from backend.runs.probe import MAX_EXTRA, probe, probe_choice

ROOT = Path(__file__).resolve().parents[2]
PERF = ROOT / "tests" / "fixtures" / "perf"
TUNE = ROOT / "tests" / "fixtures" / "tune"
DIST = dist_from_report(PERF / "lengths-sharegpt-1500.json")
H200 = gpu_spec("h200")


def base_preset() -> Any:
    return parse_preset_text((PERF / "3b-base.yaml").read_text(), "3b-base.yaml")


# ---------------------------------------------------------------- candidates


def test_candidates_span_row_lengths_rows_recompute_liger_and_keep_tokens_per_step() -> None:
    base = settings_from_preset(base_preset())
    target = real_tokens_per_step(base, DIST)
    pool = packed_candidates(base, DIST)
    assert {s.row for s in pool} <= {2048, 4096, 8192, 16384}
    assert {2048, 4096, 8192} <= {s.row for s in pool}
    assert {s.micro_batch for s in pool} >= {1, 2}
    assert {s.trainer_gc for s in pool} == {True, False} and {s.liger for s in pool} == {
        True,
        False,
    }
    assert all(s.optim == "adamw_torch_fused" and s.attn == "flex_attention" for s in pool)
    for s in pool:  # the learning rate was chosen for the preset's tokens per step
        ratio = real_tokens_per_step(s, DIST) / target
        assert 1 / TOKENS_PER_STEP_TOLERANCE <= ratio <= TOKENS_PER_STEP_TOLERANCE, s.label()
    free = packed_candidates(base, DIST, free_batch=True)
    assert {s.grad_accum for s in free} == {1, 2, 4, 8} and len(free) > len(pool)
    flash = packed_candidates(base, DIST, packed_attn="flash_attention_2")
    assert {s.attn for s in flash} == {"flash_attention_2"}


def test_tune_ranks_by_steady_rate_and_states_the_batch_change() -> None:
    result = tune(base_preset(), H200, row_shape({"model": "3.37b"}), dist=DIST,
                  host_ram=128 * GIB, calibration=[])  # fmt: skip
    after = result.after.settings
    # The row length the measurements favour (8192 ran 1.5x the 2048 rows), not model_max_length.
    assert after.packing and after.row == 8192 and after.grad_accum == 1
    assert "optimizer step: 1 rows of 8192" in result.batch and "learning rate" in result.batch
    rates = [e.throughput.real_tokens_per_s for e in result.ranked]
    assert rates[0] >= max(rates) / 1.02  # compile time is reported apart, not in the rate


def test_one_verdict_on_the_learning_rate_when_rows_are_packed() -> None:
    """The accumulation change gave its own verdict in samples ("re-check the learning rate")
    beside the optimizer step line's in real tokens ("keep the learning rate"): only the
    latter speaks of the learning rate now."""
    result = tune(base_preset(), H200, row_shape({"model": "3.37b"}), dist=DIST,
                  host_ram=128 * GIB, calibration=[])  # fmt: skip
    assert result.after.settings.packing and "keep the learning rate" in result.batch
    accum = [c for c in result.changes if c.path == "training.gradient_accumulation_steps"]
    assert accum, "the fixture's preset accumulates 8 padded samples; the pick does not"
    assert "re-check the learning rate" not in accum[0].reason
    assert "packed row(s) of 8192 per optimizer step" in accum[0].reason
    assert "optimizer step line" in accum[0].reason


def test_batch_line_says_the_learning_rate_consequence() -> None:
    from backend.planner.rowsearch import batch_line
    from backend.planner.tune import estimate

    shape = row_shape({"model": "3.37b"})
    base = settings_from_preset(base_preset())
    packed = base.with_(packing=True, pack_tokens=8192, micro_batch=1, grad_accum=1, fsdp="")
    doubled = packed.with_(grad_accum=2)
    before, same, more = (estimate(shape, s, H200, DIST) for s in (base, packed, doubled))
    assert "within 10 %: keep the learning rate" in batch_line(before, same, DIST)
    line = batch_line(before, more, DIST)
    assert "2 rows of 8192" in line and "re-check the learning rate" in line
    # 2 rows x 8192 x 99.5 % fill against 8 conversations x 956 tokens (lengths of the fixture)
    assert "x2.13" in line and "sqrt(2.13) = 1.46" in line


def test_compile_budget_drops_candidates_with_the_reason() -> None:
    # flex_attention (torch < 2.10, or TRAINWIZ_PACKED_ATTENTION=flex): its compile grows
    # steeply with the row
    result = tune(base_preset(), H200, row_shape({"model": "3.37b"}), dist=DIST,
                  host_ram=128 * GIB, calibration=[], compile_budget_s=45,
                  packed_attn="flex_attention")  # fmt: skip
    assert result.dropped and all("budget 45 s" in why for _e, why in result.dropped)
    assert any("compile over the 45 s budget" in n for n in result.notes)
    assert all(e.throughput.startup_s <= 45 for e in result.probe_pool)
    assert result.after.settings.row < 8192  # 8192-token micro-steps compile ~60 s


# ---------------------------------------------------------------- calibration file


def _record(shape: Any, settings: Any, pred: float, got: float, **kw: Any) -> Path:
    return record("NVIDIA H200", shape, settings, predicted_real_tokens_per_s=pred,
                  predicted_peak_gib=kw.pop("pred_peak", 60.0),
                  measured_real_tokens_per_s=got, measured_peak_gib=kw.pop("peak", 66.0),
                  startup_s=30.0, lengths={"mean": 900.0}, **kw)  # fmt: skip


def test_calibration_file_is_per_gpu_kind_under_trainwiz_home_and_corrects(
    _trainwiz_home: Path,
) -> None:
    home = _trainwiz_home
    shape = row_shape({"model": "3.37b"})
    base = tune(base_preset(), H200, shape, dist=DIST, host_ram=128 * GIB, calibration=[])
    s = base.after.settings  # measured 20 % slower than the base model said
    path = _record(shape, s, base.after.throughput.real_tokens_per_s,
                   0.8 * base.after.throughput.real_tokens_per_s)  # fmt: skip
    assert path == home / "calibration" / "nvidia-h200.jsonl" == calibration_path("NVIDIA H200")
    assert kind_key("NVIDIA H100 80GB HBM3") == "nvidia-h100-80gb-hbm3"
    path.write_text(path.read_text() + "{not json\n")  # a torn line is skipped, never fatal
    rows = load_rows("NVIDIA H200")
    assert len(rows) == 1 and load_rows("NVIDIA A100-SXM4-80GB") == []
    c = correction(rows, shape, s)
    assert 1.15 < c.time < 1.25 and 1.05 < c.memory < 1.10  # shrunk toward 1 (one row)
    # The next prediction uses it (tune loads the file itself) and says so.
    result = tune(base_preset(), H200, shape, dist=DIST, host_ram=128 * GIB)
    assert result.calibrated == 1 and any("corrected by 1 probe row" in n for n in result.notes)
    same = next(e for e in result.probe_pool if e.settings == base.after.settings)
    assert same.throughput.real_tokens_per_s < 0.9 * base.after.throughput.real_tokens_per_s
    assert same.uncalibrated.throughput.real_tokens_per_s == pytest.approx(
        base.after.throughput.real_tokens_per_s
    )
    (line,) = error_lines("NVIDIA H200")
    assert "+25.0%" in line and "0 of 1 within +-10%" in line and str(path) in line


def test_unlike_rows_count_less_than_like_ones() -> None:
    shape = row_shape({"model": "3.37b"})
    like = settings_from_preset(base_preset()).with_(packing=True, pack_tokens=8192, liger=True)
    padded = settings_from_preset(base_preset())
    rows = [{"settings": vars(padded) | {}, "shape": {"n_params": shape.n_params},
             "predicted_real_tokens_per_s": 2000.0, "measured_real_tokens_per_s": 1000.0}]  # fmt: skip
    from dataclasses import asdict

    rows[0]["settings"] = asdict(padded)
    assert correction(rows, shape, padded).time > correction(rows, shape, like).time > 1.0


def test_plan_reports_the_prediction_error_from_the_file() -> None:
    from backend.planner.report import planner_report

    preset = base_preset()
    config = {"hidden_size": 3072, "intermediate_size": 8192, "num_hidden_layers": 28,
              "num_attention_heads": 24, "vocab_size": 32000}  # fmt: skip
    cfg = Path(calibration_path("x").parent.parent) / "config.json"
    cfg.parent.mkdir(parents=True, exist_ok=True)
    cfg.write_text(json.dumps(config))
    lines, _data = planner_report(preset, "h200", str(cfg))
    assert any("no probe measured on NVIDIA H200 yet" in x for x in lines)
    src = TUNE / "calibration-final.jsonl"
    calibration_path("NVIDIA H200").parent.mkdir(parents=True, exist_ok=True)
    calibration_path("NVIDIA H200").write_text(src.read_text())
    lines, _data = planner_report(preset, "h200", str(cfg))
    (err,) = [x for x in lines if x.startswith("prediction error on NVIDIA H200")]
    assert "10 probe rows" in err and "10 of 10 within +-10%" in err


def test_device_rows_held_within_ten_percent_out_of_sample() -> None:
    """The base model (fitted on earlier sessions' rows) on three new length distributions,
    and the learned correction from the rows measured BEFORE each one only."""
    rows = [json.loads(x) for x in (TUNE / "calibration-final.jsonl").read_text().splitlines()]
    measured = [r for r in rows if r["measured_real_tokens_per_s"]]
    assert len(measured) == 10 and {r["lengths"]["mean"] for r in measured} == {
        1039.7, 294.0, 1731.4,
    }  # fmt: skip
    base = [r["predicted_real_tokens_per_s"] / r["measured_real_tokens_per_s"] - 1
            for r in measured]  # fmt: skip
    assert max(abs(e) for e in base) <= 0.10
    learned = []
    for i, r in enumerate(rows):
        if not r["measured_real_tokens_per_s"]:
            continue
        from backend.planner.settings import TrainSettings

        shape = row_shape({"model": "3.37b" if r["shape"]["layers"] == 28 else "6.74b"})
        c = correction(rows[:i], shape, TrainSettings(**r["settings"]))
        learned.append(
            r["predicted_real_tokens_per_s"] / c.time / r["measured_real_tokens_per_s"] - 1
        )
    assert sum(abs(e) <= 0.10 for e in learned) >= 9 and max(abs(e) for e in learned) < 0.12
    tuned = [r for r in measured if r["label"] == "b1 ga1 packed8192 liger fused-adamw 1gpu"]
    assert [round(r["measured_real_tokens_per_s"]) for r in tuned] == [21502, 11461]


# ---------------------------------------------------------------- probe fallbacks


@dataclass
class _Status:
    state: str
    final: bool


@dataclass
class _Launched:
    run_id: str
    run_dir: Path


class FakeLauncher:
    """A NAMED fake of backend.runs' launch/refresh/stop_run for the probe: each launch plays
    the next scripted outcome ("ok RATE PEAK", "oom", "compile" = never reaches step 1,
    "nolaunch") into a real run directory shape."""

    def __init__(self, root: Path, outcomes: list[str]) -> None:
        self.root, self.outcomes, self.launched, self.stopped = root, list(outcomes), [], []

    def launch(self, preset: Any) -> _Launched:
        from backend.errors import BadInput

        outcome = self.outcomes.pop(0)
        if outcome == "nolaunch":
            raise BadInput("environment.venv: /nowhere/bin/torchrun does not exist")
        run_dir = self.root / f"run{len(self.launched) + 1}"
        run_dir.mkdir(parents=True)
        self.launched.append(preset)
        start = {"kind": "start", "time": time.time() - (600 if outcome == "compile" else 5)}
        lines = [json.dumps(start)]
        steps = preset.training.max_steps if outcome.startswith("ok") else 1
        if outcome.startswith("ok"):
            _ok, rate, peak = outcome.split()
            for i in range(steps):
                lines.append(json.dumps({"kind": "step", "time": start["time"] + 30 + i,
                                         "tokens_nonpad_per_s": float(rate) * (1.5 if i == 0 else 1),
                                         "peak_mem_gib": [float(peak)]}))  # fmt: skip
        elif outcome == "oom":
            lines.append(json.dumps({"kind": "step", "time": start["time"] + 30,
                                     "tokens_nonpad_per_s": 1.0, "peak_mem_gib": [130.0]}))  # fmt: skip
            (run_dir / "train.log").write_text(
                "[rank0]: torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 86.00 MiB."
                " GPU 0 has a total capacity of 139.80 GiB of which 37.06 MiB is free.\n"
            )
        (run_dir / "metrics.jsonl").write_text("\n".join(lines) + "\n")
        (run_dir / "output").mkdir()
        state = "running" if outcome == "compile" else ("finished" if steps > 1 else "failed")
        (run_dir / "state").write_text(state)
        return _Launched(run_dir.name, run_dir)

    def refresh(self, run_dir: Path) -> _Status:
        state = (run_dir / "state").read_text()
        return _Status(state, state != "running")

    def stop_run(self, run_dir: Path) -> _Status:
        self.stopped.append(run_dir.name)
        (run_dir / "state").write_text("stopped")
        return _Status("stopped", True)

    @property
    def api(self) -> tuple[Any, Any, Any]:
        return self.launch, self.refresh, self.stop_run


def _tuned() -> tuple[Any, Any]:
    preset = base_preset()
    return preset, tune(preset, H200, row_shape({"model": "3.37b"}), dist=DIST,
                        host_ram=128 * GIB, calibration=[])  # fmt: skip


def test_probe_falls_back_on_oom_and_learns_a_memory_bound(tmp_path: Path) -> None:
    preset, result = _tuned()
    fake = FakeLauncher(tmp_path, ["oom", "ok 21000 72", "ok 17000 71"])
    shape = row_shape({"model": "3.37b"})
    out = probe(preset, result, top=2, steps=6, warmup=2, launcher=fake.api,
                learn=("NVIDIA H200", shape, DIST))  # fmt: skip
    assert [r.state for r in out.rows] == ["failed", "finished", "finished"]
    assert out.rows[0].oom and "out of memory" in out.notes[0]
    assert out.winner is out.rows[1] and out.winner.measured_real_tokens_per_s == 21000
    assert out.winner.startup_s == pytest.approx(30, abs=1)  # reported, not in the rate
    assert not (tmp_path / "run2" / "output").exists()  # the probe's weights are removed
    for p in fake.launched:  # a probe never writes the user's output dir and never saves
        assert p.training.output_dir == "@run/output" and p.training.save_strategy == "no"
    rows = load_rows("NVIDIA H200")
    assert [r["oom"] for r in rows] == [True, False, False]
    assert rows[0]["measured_peak_gib"] >= H200.memory_bytes / 2**30  # at least the GPU
    chosen = probe_choice(result, 3)
    assert rows[0]["label"] == chosen[0].settings.label()


def test_probe_stops_a_candidate_over_the_compile_budget(tmp_path: Path) -> None:
    preset, result = _tuned()
    fake = FakeLauncher(tmp_path, ["compile", "ok 18000 70"])
    out = probe(preset, result, top=1, steps=4, warmup=1, compile_budget_s=120,
                launcher=fake.api)  # fmt: skip
    assert fake.stopped == ["run1"] and out.rows[0].state == "over compile budget"
    assert "120 s compile budget" in out.notes[0] and "dropped" in out.notes[0]
    assert out.winner is out.rows[1]


def test_probe_skips_a_candidate_that_cannot_launch_and_stops_after_the_extras(
    tmp_path: Path,
) -> None:
    preset, result = _tuned()
    fake = FakeLauncher(tmp_path, ["nolaunch"] * (1 + MAX_EXTRA))
    out = probe(preset, result, top=1, steps=4, launcher=fake.api)
    assert [r.state for r in out.rows] == ["not launched"] * (1 + MAX_EXTRA)
    assert out.winner is None and "nothing measured" in out.notes[-1]
    assert "torchrun does not exist" in out.notes[0]


def test_probe_choice_measures_distinct_workloads_and_one_safe() -> None:
    _preset, result = _tuned()
    chosen = probe_choice(result, 3)
    keys = {(e.settings.tokens_micro, e.settings.grad_accum, e.settings.liger,
             e.settings.checkpointing, e.settings.compile_layers) for e in chosen}  # fmt: skip
    assert len(keys) == 3  # b2 x 4096 and b1 x 8192 run the same micro-step: one of them
    # regional compile is a workload of its own: the same rows compiled and not are both measured
    assert {e.settings.compile_layers for e in chosen} == {True, False}
    assert any(not e.memory.tight for e in chosen)


def test_a_probe_that_upsets_the_prediction_says_why_its_pick_differs() -> None:
    """`tune --no-probe` writes the predicted pick, the probe the measured one: when they
    differ, tune says which, with both figures of both."""
    from backend.runs.probe import ProbeResult, ProbeRow, _pick

    out = ProbeResult(
        rows=[
            ProbeRow("b8 ga4 liger", 20_000.0, 60.0, measured_real_tokens_per_s=12_371.0),
            ProbeRow("b8 ga4 compile", 18_000.0, 58.0, measured_real_tokens_per_s=19_562.0),
        ]
    )
    _pick(out)
    assert out.winner is out.rows[1]
    (note,) = out.notes
    assert note.startswith(
        "the measured winner b8 ga4 compile is not the predicted pick b8 ga4 liger"
    )
    assert "b8 ga4 liger predicted 20,000, measured 12,371" in note
    assert "b8 ga4 compile predicted 18,000, measured 19,562" in note
    agree = ProbeResult(rows=[ProbeRow("a", 2.0, 1.0, measured_real_tokens_per_s=2.0),
                              ProbeRow("b", 1.0, 1.0, measured_real_tokens_per_s=1.0)])  # fmt: skip
    _pick(agree)
    assert agree.winner is agree.rows[0] and agree.notes == []
