"""The step table is the one step vocabulary, and ``model_ready`` the one "is the model ready"."""

from __future__ import annotations

import importlib
import json
from pathlib import Path

from backend import replay
from backend.checks import model as checks_model
from backend.checks.model import CheckResult
from backend.model.ready import model_ready
from backend.preset import load_preset
from backend.steps import BLOCKABLE, REPLAY_STAGES, STEP_IDS, Machine, blocked_steps, step
from tests.backend.hubserver import write_llama_dir
from widgets.step_indicator import STEP_TITLES

# backend.runs re-exports a function named launch, so take the module itself.
spec_module = importlib.import_module("backend.runs.spec")  # decides what a launch runs first


def _local(model_dir: Path):  # type: ignore[no-untyped-def]
    preset = load_preset("vicuna-13b-v1.3-8xa100")
    model = preset.model.model_copy(update={"source": "local", "dir": str(model_dir)})
    return preset.model_copy(update={"model": model})


def test_every_step_vocabulary_reads_the_table() -> None:
    assert STEP_IDS == ("checks", "model", "image", "hyperparams", "launch", "monitor")
    assert replay.STEP_ORDER == REPLAY_STAGES == (
        "checks", "model", "environment", "launch", "follow",
    )  # fmt: skip
    assert checks_model.STEPS == BLOCKABLE == ("model", "image", "launch")
    assert [s for s, _ in STEP_TITLES] == list(STEP_IDS)


def _fail(check_id: str, blocks: list[str]) -> CheckResult:
    return CheckResult(id=check_id, status="fail", summary=f"{check_id} broke", fix="do X",
                       blocks=blocks)  # fmt: skip


def test_a_failed_check_blocks_only_the_steps_it_names_with_reasons() -> None:
    results = [_fail("nvidia_driver", ["launch"]), _fail("docker", ["image", "launch"]),
               CheckResult(id="disk", status="warn", summary="low", blocks=["model"])]  # fmt: skip
    assert blocked_steps(results) == {"image": ["docker"], "launch": ["nvidia_driver", "docker"]}
    preset = load_preset("tiny-cpu")
    ready = step("launch").ready(preset, Machine(results))
    assert ready.state == "blocked"
    assert ready.blocking_checks == ["nvidia_driver", "docker"]
    assert "nvidia_driver: nvidia_driver broke — fix: do X" in ready.reasons
    assert step("hyperparams").ready(preset, Machine(results)).state == "ready"  # planning is free
    assert step("checks").ready(preset, Machine()).state == "needs-action"


def test_config_json_alone_is_not_a_ready_model_for_launch_replay_or_the_table(
    tmp_path: Path,
) -> None:
    """Launch used to call a dir with config.json 'present' and skip the fetch; now all agree."""
    broken = tmp_path / "broken"
    broken.mkdir()
    (broken / "config.json").write_text(json.dumps({"model_type": "llama"}))
    preset = _local(broken)
    found = model_ready(preset)
    assert not found.ready and str(broken) in found.reason
    assert spec_module.missing(preset, "model") is True
    assert replay.Replay(preset)._model_satisfied(broken) is False
    assert step("model").ready(preset, Machine()).state == "needs-action"


def test_a_valid_model_dir_is_ready_everywhere(tmp_path: Path) -> None:
    good = tmp_path / "good"
    good.mkdir()
    write_llama_dir(good)
    preset = _local(good)
    assert model_ready(preset).ready, model_ready(preset).reason
    assert spec_module.missing(preset, "model") is False
    assert replay.Replay(preset)._model_satisfied(good) is True
    assert step("model").ready(preset, Machine()).state == "ready"


def test_a_missing_tiny_model_needs_the_make_step(tmp_path: Path) -> None:
    preset = load_preset("tiny-cpu")
    model = preset.model.model_copy(update={"dir": str(tmp_path / "nothing")})
    preset = preset.model_copy(update={"model": model})
    assert not model_ready(preset).ready
    assert spec_module.missing(preset, "model") is True
