"""Values are checked when the preset is read or planned, never coerced or left to the run."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest
import yaml

ROOT = Path(__file__).resolve().parents[2]


def _plan(tmp_path: Path, *extra: str, **training: object) -> subprocess.CompletedProcess[str]:
    data = yaml.safe_load((ROOT / "presets" / "tiny-cpu.yaml").read_text())
    data["training"].update(training)
    path = tmp_path / "p.yaml"
    path.write_text(yaml.safe_dump(data))
    return subprocess.run(
        [sys.executable, "-m", "tui.cli", "plan", str(path), *extra],
        cwd=ROOT, capture_output=True, text=True, timeout=60, check=False,
    )  # fmt: skip


@pytest.mark.parametrize(
    ("field", "value"),
    [("lr_scheduler_type", "x" * 8192), ("lr_scheduler_type", "cosin"), ("optim", "adamw"),
     ("report_to", "wandbb"), ("optim", "adamw_torch --evil")],
)  # fmt: skip
def test_hf_enum_options_are_checked_at_plan_time(tmp_path: Path, field: str, value: str) -> None:
    done = _plan(tmp_path, **{field: value})
    assert done.returncode == 2, done.stdout[-300:]
    assert (
        f"training.{field}:" in done.stderr and "is not one of transformers 4.57.6's" in done.stderr
    )
    assert len(done.stderr) < 2000  # the 8 KiB value is cut, not echoed


def test_known_names_plan_and_another_version_uses_every_known_name(tmp_path: Path) -> None:
    ok = _plan(
        tmp_path,
        optim="paged_adamw_8bit",
        lr_scheduler_type="warmup_stable_decay",
        report_to="tensorboard",
    )
    assert ok.returncode == 0, ok.stderr
    older = _plan(tmp_path, "--transformers", "4.31.0", optim="adamw_hf")
    assert older.returncode == 0, older.stderr
    assert _plan(tmp_path, optim="adamw_hf").returncode == 2  # gone from 4.57
    # 4.31 has its own lists (its release's enums): a scheduler added later is refused there
    newer = _plan(tmp_path, "--transformers", "4.31.0", lr_scheduler_type="warmup_stable_decay")
    assert newer.returncode == 2 and "is not one of transformers 4.31.0's" in newer.stderr
    assert "reduce_lr_on_plateau" in newer.stderr and "cosine_with_min_lr" not in newer.stderr
    assert _plan(tmp_path, "--transformers", "4.31.0", report_to="trackio").returncode == 2
    unknown = _plan(tmp_path, "--transformers", "4.40.0", lr_scheduler_type="warmup_stable_decay")
    assert unknown.returncode == 0, unknown.stderr  # a version without lists: every known name


@pytest.mark.parametrize(
    ("field", "value", "words"),
    [("lazy_preprocess", "yes", "must be true or false"), ("gradient_checkpointing", 1, "must be true or false"),
     ("warmup_steps", True, "must be a number, not true"), ("max_steps", "10", "must be a number, not the text"),
     ("per_device_train_batch_size", 2.5, "must be a whole number"), ("learning_rate", False, "must be a number")],
)  # fmt: skip
def test_booleans_and_integers_are_strict(
    tmp_path: Path, field: str, value: object, words: str
) -> None:
    done = _plan(tmp_path, **{field: value})
    assert done.returncode == 2, done.stdout[-300:]
    assert f"training.{field}" in done.stderr and words in done.stderr


def test_a_float_written_as_yaml_text_still_reads(tmp_path: Path) -> None:
    """YAML 1.1 reads 2e-5 as a string: that is still a learning rate."""
    done = _plan(tmp_path, "--json", learning_rate="2e-5")
    assert done.returncode == 0, done.stderr
    assert "--learning_rate" in done.stdout and "2e-05" in done.stdout
