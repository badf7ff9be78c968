"""ModelScope as a model source through the real ``modelscope`` client, against a loopback
ModelScope (tests/backend/mirrorservers.py): the probe picks it over a black-holed and a 5xx
endpoint, then both the fetch a launch runs and the plan's printed command download through it."""

from __future__ import annotations

import os
import shlex
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from backend.mirrors import apply_mirrors, plan_lines
from backend.mirrors.probe import clear_cache
from backend.model.fetch import ensure_model
from backend.plan import build_plan
from backend.preset.loader import parse_preset_text
from tests.backend.mirrorservers import BlackHole, Server, loopback_only, modelscope_handler

ROOT = Path(__file__).resolve().parents[2]
REPO = "AI-ModelScope/tiny-llama"


@pytest.fixture()
def endpoints(monkeypatch: pytest.MonkeyPatch):
    loopback_only(monkeypatch)
    files = {"config.json": b'{"model_type": "llama"}', "tokenizer/tokenizer.model": b"t" * 4096}
    made = {
        "hole": BlackHole(),
        "error": Server(modelscope_handler({REPO: files}), status=500),
        "good": Server(modelscope_handler({REPO: files})),
    }
    yield made, files
    for server in made.values():
        server.stop()
    clear_cache()


def modelscope_preset(tmp_path: Path, urls: list[str]):
    data = yaml.safe_load((ROOT / "presets" / "tiny-cpu.yaml").read_text())
    data["model"] = {"source": "modelscope", "repo": REPO, "dir": str(tmp_path / "model")}
    data["mirrors"] = {"profile": "custom", "custom": {"modelscope": urls}, "probe_timeout_s": 0.6}
    return parse_preset_text(yaml.safe_dump(data))


def test_the_real_modelscope_client_downloads_through_the_probed_endpoint(
    endpoints, tmp_path: Path
) -> None:
    made, files = endpoints
    urls = [made["hole"].url, made["error"].url, made["good"].url]
    resolved = apply_mirrors(modelscope_preset(tmp_path, urls))
    assert resolved.model.endpoint == made["good"].url
    result = ensure_model(resolved.model)
    assert result.action == "downloaded"
    for name, data in files.items():
        assert (tmp_path / "model" / name).read_bytes() == data
    assert result.fetch is not None and sorted(result.fetch.files) == sorted(files)
    assert not [p for p in made["error"].requests if "/repo" in p]  # only probed, never fetched
    assert any(
        line.startswith(f"  model: MODELSCOPE_ENDPOINT={made['good'].url}")
        for line in plan_lines(resolved)
    )


def test_the_plans_modelscope_command_runs_as_printed(endpoints, tmp_path: Path) -> None:
    made, files = endpoints
    resolved = apply_mirrors(modelscope_preset(tmp_path, [made["error"].url, made["good"].url]))
    step = build_plan(resolved).step("model")
    assert step.argv == ["trainwiz", "model", "fetch", resolved.name]  # what a launch runs
    by_hand = shlex.split(step.note.split("by hand: ", 1)[1])  # ModelScope's own CLI
    assert by_hand == [
        "modelscope",
        "download",
        REPO,
        "--revision",
        "master",
        "--local-dir",
        str(tmp_path / "model"),
    ]
    assert step.env == {"MODELSCOPE_ENDPOINT": made["good"].url}
    cli = Path(sys.executable).with_name("modelscope")
    env = {**os.environ, **step.env, "MODELSCOPE_CACHE": str(tmp_path / "cache")}
    done = subprocess.run(
        [str(cli), *by_hand[1:]], capture_output=True, text=True, timeout=180, env=env
    )
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-2000:]
    assert (tmp_path / "model" / "config.json").read_bytes() == files["config.json"]


def test_a_modelscope_source_needs_its_repo() -> None:
    data = yaml.safe_load((ROOT / "presets" / "tiny-cpu.yaml").read_text())
    data["model"] = {"source": "modelscope", "dir": "/tmp/x"}
    with pytest.raises(Exception, match="source 'modelscope' needs 'repo'"):
        parse_preset_text(yaml.safe_dump(data))
