"""The planner on real data: lengths -> padding/fill, measured H200 rows re-predicted, the host-RAM
constraint, tune's pick on the benchmark shapes, and the monitor's real-token headline.

Rows and lengths: tests/fixtures/perf/ (copied from docs/gpu/perf/, measured on nvidia-h200 by
benchmarks/device/perf.sh on 2026-12-01, plus the shared notes' rows). Calibration used the
3.37B rows measured here ("calibration"); every 6.74B row is out of sample ("prediction").
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from backend.monitor import MetricsFollower, RunTracker
from backend.planner import gpu_spec
from backend.planner.gpu import GIB
from backend.planner.hostram import host_ram_for, read_meminfo
from backend.planner.perfrows import load_rows, repredict, row_shape
from backend.planner.realdata import LengthDist, dist_from_report, sharegpt_lengths
from backend.planner.tune import tune
from backend.preset.loader import parse_preset_text

ROOT = Path(__file__).resolve().parents[2]
PERF = ROOT / "tests" / "fixtures" / "perf"
DIST = dist_from_report(PERF / "lengths-sharegpt-1500.json")
ROWS = load_rows(PERF / "rows.jsonl")


def test_lengths_give_padding_and_packed_fill() -> None:
    assert DIST.n == 1500 and DIST.source.startswith("measured")
    # FastChat pads to 2048: about half the compute is padding on ShareGPT-shaped data.
    assert 0.45 < DIST.padding_fraction(2048) < 0.6
    assert DIST.packed_fill(2048, 4096) > 0.98  # whole conversations, best-fit decreasing
    assert DIST.attended(2048) > DIST.mean_tokens(2048)  # long conversations dominate attention


def test_sharegpt_default_matches_its_stated_shape() -> None:
    lengths = sharegpt_lengths(20000)
    truncated = [min(x, 2048) for x in lengths]
    assert 650 < sorted(lengths)[10000] < 750  # median ~700
    assert 0.07 < sum(x >= 2048 for x in lengths) / 20000 < 0.11  # ~9 % reach 2048
    assert 800 < sum(truncated) / 20000 < 920  # mean ~860 after truncation


@pytest.mark.parametrize("row", ROWS, ids=lambda r: f"{r['model']}-{r['what'][:40]}")
def test_measured_rows_are_predicted_within_the_stated_error(row: dict) -> None:
    (c,) = repredict([row], DIST)
    if row.get("host_oom"):
        assert not c.estimate.fits_host  # the old tune's 7B offload pick: the host OOM-killed it
        return
    assert c.estimate.memory.fits and c.estimate.fits_host  # it ran: never predicted not to fit
    if row.get("path"):
        # A hand-written packed loop, not trainwiz's launch: trainwiz's own path ran 1.26x such
        # a loop in the same call, so the planner (of trainwiz's path) must predict above it.
        assert c.real_error is not None and 0.05 < c.real_error < 0.40, c.real_error
        return
    # In sample 7 %; out of sample 15 % (ours) and 20 % (the notes' rows: another session's data).
    bound = {"calibration": 0.07, "prediction": 0.15}[row["role"]]
    if row["source"].startswith("shared notes"):
        bound = 0.20
    assert c.real_error is not None and abs(c.real_error) <= bound, c.real_error


OTHER = load_rows(PERF / "rows-other-session.jsonl")
OTHER_DIST = LengthDist(tuple(sharegpt_lengths(800, seed=1, median=703, sigma=0.76)), "re-drawn")


@pytest.mark.parametrize("row", OTHER, ids=lambda r: f"{r['model']}-{r['pack_tokens']}")
def test_packed_constants_fit_the_row_lengths_they_were_fitted_on(row: dict) -> None:
    """In sample: the packed micro-step overhead and efficiency were refitted on these rows (the
    old model ranked 2,048-token rows first; they ran at 0.6x the 8,192 ones)."""
    (c,) = repredict([row], OTHER_DIST)
    assert c.real_error is not None and abs(c.real_error) <= 0.08, c.real_error


def test_longer_rows_rank_above_model_max_length_as_measured() -> None:
    by_len = {}
    for c in repredict([r for r in OTHER if r["model"] == "3.37b"], OTHER_DIST):
        by_len[c.row["pack_tokens"]] = c.estimate.throughput.real_tokens_per_s
    assert by_len[8192] > by_len[4096] > by_len[2048]
    if c.memory_error is not None:
        assert abs(c.memory_error) <= 0.20, c.memory_error


def test_tune_picks_within_gpu_and_host_and_beats_every_measured_row() -> None:
    text = (PERF / "7b-base.yaml").read_text()
    preset = parse_preset_text(text, "7b-base.yaml")
    for model in ("3.37b", "6.74b"):
        shape = row_shape({"model": model})
        result = tune(preset, gpu_spec("h200"), shape, dist=DIST, host_ram=128 * GIB)
        after = result.after
        assert after.settings.packing and after.settings.liger and not after.settings.offload
        assert after.memory.fits and after.fits_host
        best_measured = max(r.get("real_tokens_per_s") or 0 for r in ROWS if r["model"] == model)
        # Its prediction is within the planner's error of the best measured configuration.
        assert after.throughput.real_tokens_per_s > 0.85 * best_measured
        assert any("host RAM" in n for n in result.notes) == (model == "6.74b")


def test_host_ram_from_flag_or_machine(tmp_path: Path) -> None:
    meminfo = tmp_path / "meminfo"
    meminfo.write_text("MemTotal:       131072000 kB\nMemFree: 1 kB\n")
    assert read_meminfo(meminfo) == 131072000 * 1024
    assert host_ram_for(64, "h200") == 64 * GIB
    assert host_ram_for(None, "h200") is None  # planning for another machine: unknown
    with pytest.raises(Exception, match="host-ram"):
        host_ram_for(-1, None)


def test_monitor_headline_is_real_tokens_and_real_mfu() -> None:
    tracker = RunTracker(source="metrics")
    tracker.update(MetricsFollower(PERF / "7b-probe1-packed2048-metrics.jsonl").poll())
    s = tracker.summary()
    assert s.tokens_nonpad_per_s == pytest.approx(8723, rel=0.05)
    assert s.mfu_nonpad == pytest.approx(0.35, abs=0.01)


def test_cli_tune_writes_the_preset_diff(tmp_path: Path) -> None:
    base = PERF / "3b-base.yaml"
    config = tmp_path / "config.json"
    config.write_text(json.dumps({"hidden_size": 3072, "intermediate_size": 8192,
                                  "num_hidden_layers": 28, "num_attention_heads": 24,
                                  "vocab_size": 32000}))  # fmt: skip
    out = tmp_path / "tuned.yaml"
    proc = subprocess.run(
        [sys.executable, "-m", "tui.cli", "tune", str(base), "--gpu", "h200", "--config",
         str(config), "--lengths", str(PERF / "lengths-sharegpt-1500.json"), "--host-ram", "128",
         "--write", str(out)],
        capture_output=True, text=True, cwd=ROOT, timeout=120,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    assert "real tokens/s" in proc.stdout and "training.packing: False -> True" in proc.stdout
    tuned = out.read_text()
    assert "packing: true" in tuned and "use_liger_kernel: true" in tuned
    assert "liger-kernel" in tuned  # the environment installs what the preset now needs
    bad = subprocess.run(
        [sys.executable, "-m", "tui.cli", "tune", str(base), "--gpu", "h200", "--config",
         str(config), "--lengths", str(tmp_path / "missing.json")],
        capture_output=True, text=True, cwd=ROOT, timeout=120,
    )  # fmt: skip
    assert bad.returncode == 2 and "--lengths" in bad.stderr


def test_probe_summary_of_a_measured_run() -> None:
    from backend.runs.probe import summarize_metrics

    got = summarize_metrics(PERF / "7b-probe1-packed2048-metrics.jsonl", warmup=4)
    assert got["steps"] == 20
    assert got["real"] == pytest.approx(8723, rel=0.01)  # what `tune --probe` printed there
    assert 120 < got["peak"] < 130
    assert 20 < got["first_step_at"] < 40  # flex compile in the first step, reported apart


def test_benchmark_generator_writes_valid_fastchat_data(tmp_path: Path) -> None:
    from backend.data.check import check_data

    out = tmp_path / "bench.json"
    proc = subprocess.run(
        [sys.executable, str(ROOT / "benchmarks" / "make_conversations.py"), str(out), "--n", "300"],
        capture_output=True, text=True, timeout=60,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    assert "median 700" in proc.stdout
    report = check_data(out)
    assert report.n_records == 300 and report.errors == 0 and report.ok
    words = [
        len(t["value"].split()) for r in json.loads(out.read_text()) for t in r["conversations"]
    ]
    assert 300 * 300 < sum(words) < 300 * 1100  # ~one word per token, median ~700 tokens
