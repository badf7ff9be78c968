"""A real tiny CPU run killed by hand (kill -9, RAM free) and resumed: the resume ends on the
launch's summary line with the mean over every step once, the kill is not blamed on host RAM,
and a second resume of the finished run is refused with the Monitor's reason."""

from __future__ import annotations

import ast
import json
from pathlib import Path

import pytest
import yaml

from backend.monitor.figures import mean_loss
from backend.monitor.metrics import RunEnd, continued_series, read_events
from backend.results.offers import resume_offer
from tests.integration.test_launch_host import cli, home, wait_state  # noqa: F401 (fixture)
from tests.integration.test_resume_host import FINAL, kill_after_checkpoint, launch, preset_file

pytestmark = [pytest.mark.training, pytest.mark.slow, pytest.mark.usefixtures("home")]


def test_killed_by_hand_resumed_run_adds_up(tmp_path: Path) -> None:
    preset = preset_file(tmp_path, "adds-up")
    data = yaml.safe_load(preset.read_text())
    data["training"].update(max_steps=16, save_steps=4, eval_strategy="no", eval_split=None)
    preset.write_text(yaml.safe_dump(data))
    run_dir = launch(preset)
    kill_after_checkpoint(run_dir)
    assert wait_state(run_dir.name, FINAL)["state"] == "failed"
    first = json.loads((run_dir / "attempts.json").read_text())[0]
    assert first.get("diagnosis_category") != "host_oom", first

    out = cli("resume", run_dir.name)
    lines = out.stderr.strip().splitlines()
    assert lines[-2] == f"trainwiz: run {run_dir.name} finished: finished", lines[-3:]
    steps, _evals = continued_series(read_events(run_dir / "metrics.jsonl"))
    assert [s.step for s in steps] == list(range(1, 17))
    mean = mean_loss(steps)
    assert mean is not None
    assert lines[-1].startswith("trainwiz: 16/16 steps, loss "), lines[-1]
    assert f"(mean {mean:.3g}), " in lines[-1] and " real tokens/s (attempt 2: " in lines[-1]
    assert ", wall time " in lines[-1] and ", model in " in lines[-1]

    # The Trainer's own end line and the metrics end line say the same mean (HF alone would
    # divide attempt 2's sum by all 16 steps).
    end_lines = [ln for ln in (run_dir / "train.log").read_text().splitlines()
                 if "'train_runtime'" in ln]  # fmt: skip
    hf_end = ast.literal_eval(end_lines[-1][end_lines[-1].index("{'train_runtime'") :])
    assert hf_end["train_loss"] == pytest.approx(mean, abs=1e-3)
    ends = [e for e in read_events(run_dir / "metrics.jsonl") if isinstance(e, RunEnd)]
    assert ends[-1].train_loss == pytest.approx(mean, abs=1e-3)

    again = cli("resume", run_dir.name, check=False)
    assert again.returncode == 2
    assert again.stderr.strip().endswith(resume_offer(run_dir, "finished").reason)
