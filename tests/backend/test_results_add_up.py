"""Results of a resumed run add up: one resume decision for the CLI and the Monitor, the mean
train loss over every step once, rates and ETA of the attempt running now.

The metrics are written the way the entry writes them after a resume: attempt 2 starts with a
``start`` line carrying ``resumed_from`` and repeats the steps after that checkpoint; its ``end``
line carries the HF Trainer's ``train_loss``, which is attempt 2's sum over *all* steps."""

from __future__ import annotations

import functools
import json
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from backend.monitor import RunTracker
from backend.monitor.metrics import event_from_json
from backend.results.model_card import _fmt, render
from backend.results.offers import resume_offer
from backend.results.summary import run_summary
from backend.runs.summary import summarize_run
from tests.run_records import make_ended_run
from tests.trainwiz_cli import cli as run_cli
from widgets.throughput import render_summary

ROOT = Path(__file__).resolve().parents[2]
cli = functools.partial(run_cli, check=False)  # these tests assert the exit code themselves


def make_run(tmp_path: Path, state: str, checkpoint: int | None = 40) -> Path:
    return make_ended_run(tmp_path, state, checkpoint, preset="r", log="done\n")


def step(n: int, loss: float, attempt: int, step_time: float, tokens: int = 1000) -> dict:
    return {
        "kind": "step",
        "step": n,
        "max_steps": 60,
        "loss": loss,
        "step_time_s": step_time,
        "tokens": tokens,
        "tokens_nonpad": tokens,
        "time": 1000.0 + n,
        "attempt": attempt,
    }


def resumed_metrics() -> list[dict]:
    """Attempt 1: steps 1-50 (loss 6 - step/10, 1 s/step) and a crash; a checkpoint at 40.
    Attempt 2: steps 41-60 again at 4 s/step; the Trainer's end line says what HF computes."""
    lines: list[dict] = [{"kind": "start", "attempt": 1, "real_tokens_total": 60_000}]
    lines += [step(n, 6 - n / 10, 1, 1.0) for n in range(1, 51)]
    lines.append({"kind": "start", "attempt": 2, "resumed_from": 40, "real_tokens_total": 60_000})
    second = [step(n, 6 - n / 10 + 0.05, 2, 4.0) for n in range(41, 61)]
    lines += second
    hf_train_loss = sum(r["loss"] for r in second) / 60  # attempt 2's sum over all 60 steps
    lines.append({"kind": "end", "ok": True, "train_loss": hf_train_loss, "attempt": 2})
    return lines


def true_mean() -> float:
    losses = [6 - n / 10 for n in range(1, 41)] + [6 - n / 10 + 0.05 for n in range(41, 61)]
    return sum(losses) / len(losses)


def write_metrics(run_dir: Path, lines: list[dict]) -> None:
    (run_dir / "metrics.jsonl").write_text("".join(json.dumps(x) + "\n" for x in lines))


def test_resume_of_a_finished_run_is_refused_with_the_monitors_reason(tmp_path: Path) -> None:
    run_dir = make_run(tmp_path, "finished", checkpoint=40)
    before = sorted(p.name for p in run_dir.iterdir())
    proc = cli("resume", str(run_dir), "--detach")
    assert proc.returncode == 2, proc.stdout + proc.stderr
    reason = resume_offer(run_dir, "finished")
    assert not reason.available
    assert proc.stderr.strip().splitlines()[-1].endswith(reason.reason)
    assert sorted(p.name for p in run_dir.iterdir()) == before  # no attempt recorded
    assert json.loads((run_dir / "status.json").read_text())["state"] == "finished"


def test_resume_of_a_failed_run_is_offered_by_the_same_function(tmp_path: Path) -> None:
    run_dir = make_run(tmp_path, "failed", checkpoint=40)
    offer = resume_offer(run_dir, "failed")
    assert offer.available and offer.checkpoint == 40


def test_mean_train_loss_of_a_resumed_run_is_the_mean_of_its_steps(tmp_path: Path) -> None:
    run_dir = make_run(tmp_path, "finished")
    write_metrics(run_dir, resumed_metrics())
    mean = true_mean()
    summary = run_summary(run_dir)
    assert summary.train_loss == pytest.approx(mean)
    card = render(
        run_dir.name, _preset(run_dir), summary, data_file=None, source=run_dir, n_params=None
    )
    assert f"(mean over the run {_fmt(mean)})" in card
    line = summarize_run(run_dir).line()
    assert f"(mean {mean:.3g})" in line
    tracker = RunTracker(source="metrics")
    tracker.update(e for e in map(event_from_json, resumed_metrics()) if e is not None)
    shown = tracker.summary()
    assert shown.mean_loss == pytest.approx(mean)
    assert f"mean train loss {mean:.4g}" in str(render_summary(shown, "finished"))


def test_logged_every_few_steps_each_loss_weighs_the_steps_it_covers() -> None:
    from backend.monitor.figures import mean_loss
    from backend.monitor.metrics import StepRecord

    steps = [StepRecord(step=5, loss=4.0), StepRecord(step=6, loss=1.0)]
    assert mean_loss(steps) == pytest.approx((4.0 * 5 + 1.0) / 6)


def test_rates_and_eta_after_a_resume_are_the_attempts_own() -> None:
    lines = resumed_metrics()[:-1]  # attempt 2 still running
    cut = next(i for i, x in enumerate(lines) if x.get("resumed_from"))
    lines = lines[: cut + 6]  # attempt 2 has run 5 steps (41-45), 4 s each
    tracker = RunTracker(source="metrics")
    tracker.update(e for e in map(event_from_json, lines) if e is not None)
    s = tracker.summary()
    assert s.tokens_nonpad_per_s == pytest.approx(1000 / 4.0)  # not attempt 1's 1000/s
    assert s.step_time_s == pytest.approx(4.0)
    left = 60_000 - 45 * 1000
    assert s.real_tokens_left == left
    assert s.eta_s == pytest.approx(left / 250.0)


def test_the_end_lines_real_rate_is_the_runs_and_the_last_attempts(tmp_path: Path) -> None:
    """The run's figure over its steps counted once (1-40 at 1 s, 41-60 at 4 s, 1,000 real
    tokens each), the last attempt's own pace beside it (docs/run-format.md)."""
    run_dir = make_run(tmp_path, "finished")
    write_metrics(run_dir, resumed_metrics())
    summary = summarize_run(run_dir)
    assert summary.real_tokens_per_s == pytest.approx(60_000 / (40 * 1.0 + 20 * 4.0))
    assert summary.attempt_real_tokens_per_s == pytest.approx(250.0)
    assert "500 real tokens/s (attempt 2: 250)" in summary.line()


def _preset(run_dir: Path):  # type: ignore[no-untyped-def]
    from backend.preset.loader import load_preset

    return load_preset(run_dir / "preset.yaml")


TORCHRUN_SIGKILL = (
    "torch.distributed.elastic.multiprocessing.errors.ChildFailedError:\n"
    "============================================================\n"
    "Root Cause (first observed failure):\n"
    "[0]:\n"
    "  time      : 2026-12-01_12:00:00\n"
    "  rank      : 0 (local_rank: 0)\n"
    "  exitcode  : -9 (pid: 4628)\n"
    "  error_file: <N/A>\n"
    "  traceback : Signal 9 (SIGKILL) received by PID 4628\n"
)


def test_a_manual_kill_9_with_free_ram_is_not_host_oom(tmp_path: Path) -> None:
    """A real process killed by `kill -9` (the kernel's OOM killer did nothing meanwhile): the
    attempt's cause and `trainwiz diagnose` must not blame host RAM."""
    from backend.runs.oomkills import oom_kill_count
    from backend.runs.resume import begin_attempt, end_attempt, read_attempts

    if oom_kill_count() is None:
        pytest.fail("/proc/vmstat has no oom_kill counter on this kernel")
    run_dir = make_run(tmp_path, "failed", checkpoint=40)
    begin_attempt(run_dir, "launch")
    victim = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    victim.kill()  # SIGKILL, as a user's kill -9
    assert victim.wait() == -9
    with open(run_dir / "train.log", "a") as log:
        log.write(TORCHRUN_SIGKILL.replace("4628", str(victim.pid)))
    end_attempt(run_dir, 1, 1, "exit code 1")
    (record,) = read_attempts(run_dir)
    assert record["oom_kills_at_start"] == record["oom_kills_at_end"]
    assert record["diagnosis_category"] == "killed"
    found = json.loads(cli("diagnose", str(run_dir), "--json").stdout)["findings"]
    categories = [f["category"] for f in found]
    assert "host_oom" not in categories and categories[0] == "killed"
    assert "oom_kill" in found[0]["explanation"]


def test_a_sigkill_while_the_kernel_counted_an_oom_kill_stays_host_oom(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from backend.runs import oomkills
    from backend.runs.resume import begin_attempt, end_attempt, read_attempts

    run_dir = make_run(tmp_path, "failed", checkpoint=40)
    counts = iter([7, 8])
    monkeypatch.setattr(oomkills, "oom_kill_count", lambda path=None: next(counts))
    begin_attempt(run_dir, "launch")
    with open(run_dir / "train.log", "a") as log:
        log.write(TORCHRUN_SIGKILL)
    end_attempt(run_dir, 1, 1, "exit code 1")
    assert read_attempts(run_dir)[0]["diagnosis_category"] == "host_oom"


def lora_run(tmp_path: Path) -> Path:
    run_dir = make_run(tmp_path, "finished", checkpoint=None)
    preset = yaml.safe_load((run_dir / "preset.yaml").read_text())
    preset["training"]["method"] = "lora"
    (run_dir / "preset.yaml").write_text(yaml.safe_dump(preset))
    out = tmp_path / "out"
    out.mkdir()
    modes = {
        "adapter_config.json": 0o600,
        "adapter_model.safetensors": 0o755,
        "tokenizer_config.json": 0o640,
        "special_tokens_map.json": 0o644,
    }
    (out / "adapter_config.json").write_text(json.dumps({"base_model_name_or_path": "b"}))
    for name, mode in modes.items():
        if not (out / name).exists():
            (out / name).write_bytes(b"{}")
        (out / name).chmod(mode)
    return run_dir


def test_exported_files_all_get_one_mode(tmp_path: Path) -> None:
    import os

    from backend.results.export import export_run

    run_dir = lora_run(tmp_path)
    old = os.umask(0o022)
    try:
        result = export_run(run_dir, tmp_path / "export")
    finally:
        os.umask(old)
    modes = {p.name: p.stat().st_mode & 0o777 for p in result.to.iterdir()}
    assert "README.md" in modes and "adapter_model.safetensors" in modes
    assert set(modes.values()) == {0o644}, modes
    assert result.to.stat().st_mode & 0o777 == 0o755


def trained_lora_run(tmp_path: Path, tiny_model: Path) -> Path:
    """A finished LoRA run as the entry leaves it: adapter + tokenizer in output_dir, the base
    model elsewhere (named in adapter_config.json). The adapter is made by peft itself, with
    one non-zero weight so it changes the model."""
    import torch
    import transformers
    from peft import LoraConfig, get_peft_model

    run_dir = make_run(tmp_path, "finished", checkpoint=None)
    preset = yaml.safe_load((run_dir / "preset.yaml").read_text())
    preset["training"]["method"] = "lora"
    preset["model"]["dir"] = str(tiny_model)
    (run_dir / "preset.yaml").write_text(yaml.safe_dump(preset))
    base = transformers.AutoModelForCausalLM.from_pretrained(str(tiny_model))
    peft_model = get_peft_model(base, LoraConfig(r=4, target_modules=["q_proj", "v_proj"]))
    with torch.no_grad():
        for name, param in peft_model.named_parameters():
            if "lora_B" in name:
                param.fill_(0.5)
    out = tmp_path / "out"
    peft_model.save_pretrained(str(out))
    transformers.AutoTokenizer.from_pretrained(str(tiny_model), use_fast=False).save_pretrained(
        str(out)
    )
    config = json.loads((out / "adapter_config.json").read_text())
    assert config["base_model_name_or_path"] == str(tiny_model)
    return run_dir


@pytest.mark.slow
def test_chat_works_on_a_finished_lora_run(tmp_path: Path, tiny_model: Path) -> None:
    from backend.results.offers import chat_offer

    run_dir = trained_lora_run(tmp_path, tiny_model)
    offer = chat_offer(run_dir, "finished")
    assert offer.available, offer.reason
    proc = cli(
        "chat", str(run_dir), "--prompt", "Hello", "--device", "cpu", "--max-new-tokens", "4",
        "--json",
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    answer = json.loads(proc.stdout)
    assert answer["model"] == str(tmp_path / "out")  # the adapter, on its base
    assert len(answer["turns"]) == 1 and isinstance(answer["turns"][0]["reply"], str)


@pytest.mark.parametrize("command", ["plan", "check"])
def test_zero_on_a_cpu_preset_is_refused_like_qlora(tmp_path: Path, command: str) -> None:
    data = yaml.safe_load((ROOT / "presets" / "tiny-cpu.yaml").read_text())
    data["training"]["zero"] = {"stage": 2}
    preset = tmp_path / "zero-cpu.yaml"
    preset.write_text(yaml.safe_dump(data))
    proc = cli(command, str(preset)) if command == "plan" else cli(command, "--preset", str(preset))
    assert proc.returncode == 2, proc.stdout + proc.stderr
    (line,) = proc.stderr.strip().splitlines()
    assert "training.zero" in line and "launch.device" in line and "cuda" in line
    assert "Traceback" not in proc.stderr
