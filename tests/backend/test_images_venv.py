"""The host runner's venv: built with the image's pins, reused by hash, nothing left on failure."""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

import pytest

from backend.images.events import LogLine
from backend.images.host import HostGpus
from backend.images.venv import MARKER, build_host_env, venv_path
from backend.preset.loader import load_preset
from backend.preset.schema import EnvironmentConfig, Preset

NO_GPU = HostGpus(ram_bytes=24 << 30, cpu_count=2)


def tiny(**changes: object) -> Preset:
    preset = load_preset("tiny-cpu")
    env = EnvironmentConfig.model_validate({**preset.environment.model_dump(), **changes})
    return preset.model_copy(update={"environment": env})


@pytest.mark.slow
def test_failed_pip_leaves_no_venv_and_says_why() -> None:
    preset = tiny(torch_spec="trainwiz-no-such-torch==0.0.0")
    lines: list[str] = []
    result = build_host_env(
        preset,
        host=NO_GPU,
        progress=lambda e: lines.append(e.text) if isinstance(e, LogLine) else None,
    )
    assert not result.ok and not result.cached
    assert result.error == "exit status 1"
    assert any("trainwiz-no-such-torch" in line for line in result.log_tail)
    assert lines  # pip's output was streamed as it came
    target = Path(result.path)
    assert not target.exists() and not target.with_name(target.name + ".partial").exists()
    assert target == venv_path(preset, NO_GPU)
    assert target.parent == Path(os.environ["TRAINWIZ_HOME"]) / "envs"


@pytest.mark.slow
def test_venv_built_with_the_pins_then_reused() -> None:
    preset = (
        tiny()
    )  # torch==2.13.0 (CPU wheel from the host pip's find-links), fschat, transformers
    first = build_host_env(preset, host=NO_GPU)
    assert first.ok, "\n".join(first.log_tail)
    assert not first.cached
    assert first.versions == {
        "torch": "2.13.0+cpu",
        "transformers": "4.57.6",
        "accelerate": first.versions["accelerate"],
        "fastchat": "0.2.36",
    }
    marker = json.loads((Path(first.path) / MARKER).read_text())
    assert marker["versions"] == first.versions
    out = subprocess.run(
        # peft located, not imported: it imports torch and transformers again (the probe above
        # imported them), ~11 CPU-seconds in a venv whose modules are not yet byte-compiled
        [
            first.python,
            "-c",
            "import sys, importlib.util, sentencepiece, einops; "
            "assert importlib.util.find_spec('peft'); print(sys.prefix)",
        ],
        capture_output=True,
        text=True,
        check=True,
    )
    assert out.stdout.strip() == first.path  # the renamed venv knows its final path
    second = build_host_env(preset, host=NO_GPU)
    assert second.ok and second.cached and second.path == first.path
