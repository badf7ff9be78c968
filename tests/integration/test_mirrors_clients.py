"""The real clients go where the probe sent them: pip downloads and installs a wheel through the
chosen loopback index, huggingface_hub's own CLI runs the plan's model step against the chosen
loopback Hub, and a launch records the choice in the run (mirrors.json, preset.yaml).

Each time the candidates include a black-holed mirror and one answering 5xx, listed first, so a
client sent to the first candidate instead of the probed one would hang or fail.
"""

from __future__ import annotations

import json
import os
import shlex
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from backend.mirrors import apply_mirrors, mirrors_record
from backend.mirrors.probe import clear_cache
from backend.plan import build_plan
from backend.preset.loader import parse_preset_text
from backend.runs import stop_run
from backend.runs.launch import launch
from tests.backend.hubserver import FakeHub, Repo, _handler
from tests.backend.mirrorservers import BlackHole, Server, build_wheel, index_handler, loopback_only

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture(autouse=True)
def _loopback(monkeypatch: pytest.MonkeyPatch):
    loopback_only(monkeypatch)
    yield
    clear_cache()


def tiny_with(**mirrors: object) -> dict:
    data = yaml.safe_load((ROOT / "presets" / "tiny-cpu.yaml").read_text())
    data["mirrors"] = {"probe_timeout_s": 0.6, "probe_budget_s": 2.0, **mirrors}
    return data


@pytest.fixture()
def indexes(tmp_path: Path):
    wheel = build_wheel(tmp_path / "wheels")
    made = {
        "hole": BlackHole(),
        "error": Server(index_handler(wheel.parent), status=503),
        "good": Server(index_handler(wheel.parent)),
    }
    yield {name: s.url + "/simple" for name, s in made.items()}
    for server in made.values():
        server.stop()


def _pip_env() -> dict[str, str]:
    # Only the index on the command line: no pip.conf, no find-links of this machine.
    return {
        **os.environ,
        "PIP_CONFIG_FILE": os.devnull,
        "PIP_NO_CACHE_DIR": "1",
        "PIP_DISABLE_PIP_VERSION_CHECK": "1",
    }


def test_real_pip_installs_through_the_probed_index(indexes, tmp_path: Path) -> None:
    preset = parse_preset_text(
        yaml.safe_dump(
            tiny_with(
                profile="custom",
                custom={"pypi": [indexes["hole"], indexes["error"], indexes["good"]]},
            )
        )
    )
    resolved = apply_mirrors(preset)
    index = resolved.environment.pip_index_url
    assert index == indexes["good"]
    pip = [sys.executable, "-m", "pip"]
    got = subprocess.run(
        [*pip, "download", "--no-deps", "-d", str(tmp_path / "dl"), "-i", index, "twmirror-probe"],
        capture_output=True,
        text=True,
        timeout=120,
        env=_pip_env(),
    )
    assert got.returncode == 0, got.stderr
    assert [p.name for p in (tmp_path / "dl").iterdir()] == ["twmirror_probe-0.1-py3-none-any.whl"]
    target = tmp_path / "site"
    got = subprocess.run(
        [*pip, "install", "--no-deps", "--target", str(target), "-i", index, "twmirror-probe"],
        capture_output=True,
        text=True,
        timeout=120,
        env=_pip_env(),
    )
    assert got.returncode == 0, got.stderr
    value = subprocess.run(
        [sys.executable, "-c", "import twmirror_probe; print(twmirror_probe.VALUE)"],
        capture_output=True,
        text=True,
        env={**os.environ, "PYTHONPATH": str(target)},
        check=True,
    )
    assert value.stdout.strip() == "served through the mirror"


def test_the_plans_model_step_downloads_from_the_probed_hub(tmp_path: Path) -> None:
    hub = FakeHub().start()
    files = {"config.json": b'{"model_type": "llama"}', "tokenizer_config.json": b"{}"}
    hub.repos["lmsys/vicuna-7b-v1.5"] = Repo(files=files)
    broken = Server(_handler(hub), status=502)
    hole = BlackHole()
    try:
        data = tiny_with(profile="custom", custom={"hub": [hole.url, broken.url, hub.url]})
        data["model"] = {"source": "hf", "repo": "lmsys/vicuna-7b-v1.5", "dir": str(tmp_path / "m")}
        resolved = apply_mirrors(parse_preset_text(yaml.safe_dump(data)))
        step = build_plan(resolved).step("model")
        assert step.env == {"HF_ENDPOINT": hub.url}
        assert step.argv == ["trainwiz", "model", "fetch", resolved.name]  # what a launch runs
        by_hand = shlex.split(step.note.split("by hand: ", 1)[1])
        assert by_hand[0] == "huggingface-cli"
        # The by-hand step the plan prints, run with the real huggingface_hub CLI.
        cli = Path(sys.executable).with_name("huggingface-cli")
        env = {**os.environ, **step.env, "HF_HOME": str(tmp_path / "hf"), "HF_HUB_OFFLINE": "0"}
        env.pop("HF_TOKEN", None)
        got = subprocess.run(
            [str(cli), *by_hand[1:]], capture_output=True, text=True, timeout=120, env=env
        )
        assert got.returncode == 0, got.stderr[-2000:]
        assert (tmp_path / "m" / "config.json").read_bytes() == files["config.json"]
        assert not [p for p in broken.requests if "/resolve/" in p]  # only the probe went there
    finally:
        for server in (broken, hole):
            server.stop()
        hub.stop()


def test_a_launch_records_the_choice_and_timings_in_the_run(indexes, tmp_path: Path) -> None:
    data = tiny_with(profile="custom", custom={"pypi": [indexes["hole"], indexes["good"]]})
    preset = parse_preset_text(yaml.safe_dump(data))
    result = launch(preset, prepare=False)
    try:
        record = json.loads((result.run_dir / "mirrors.json").read_text())
        assert record["profile"] == "custom"
        assert record["choices"][0]["chosen"] == indexes["good"]
        results = {r["url"]: r for r in record["probes"]["results"]}
        assert results[indexes["hole"]]["error"].startswith("not waited for")
        assert results[indexes["good"]]["ok"] and results[indexes["good"]]["latency_ms"] > 0
        run_preset = parse_preset_text((result.run_dir / "preset.yaml").read_text())
        assert run_preset.environment.pip_index_url == indexes["good"]
        recorded = mirrors_record(run_preset)
        assert recorded is not None and recorded.choices[0].chosen == indexes["good"]
        plan = json.loads((result.run_dir / "plan.json").read_text())
        assert plan["preset"] == "tiny-cpu"
    finally:
        stop_run(result.run_dir)


def test_model_fetch_of_a_preset_goes_through_the_probed_hub(tmp_path: Path, capsys) -> None:
    from tests.backend.hubserver import write_llama_dir
    from tui.cli import main

    hub = FakeHub().start()
    write_llama_dir(tmp_path / "src")
    hub.repos["lmsys/vicuna-7b-v1.5"] = Repo.from_dir(tmp_path / "src")
    broken = Server(_handler(hub), status=503)
    hole = BlackHole()
    try:
        data = tiny_with(profile="custom", custom={"hub": [hole.url, broken.url, hub.url]})
        data["model"] = {"source": "hf", "repo": "lmsys/vicuna-7b-v1.5", "dir": str(tmp_path / "m")}
        preset = tmp_path / "p.yaml"
        preset.write_text(yaml.safe_dump(data))
        code = main(["model", "fetch", str(preset), "--json"])
        out = capsys.readouterr().out
        assert code == 0, out
        assert (tmp_path / "m" / "config.json").read_bytes() == (
            tmp_path / "src" / "config.json"
        ).read_bytes()
        assert any("/resolve/" in p for _, p, _ in hub.log)
        assert not [p for p in broken.requests if "/resolve/" in p]
    finally:
        for server in (broken, hole):
            server.stop()
        hub.stop()


def test_no_hub_token_reaches_a_mirror_trainwiz_chose(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys
) -> None:
    """The user's HF_TOKEN and cached login are for the Hub they named, not for a mirror that
    won a probe (and never over plain http)."""
    from tests.backend.hubserver import write_llama_dir
    from tui.cli import main

    hub = FakeHub().start()
    write_llama_dir(tmp_path / "src")
    hub.repos["lmsys/vicuna-7b-v1.5"] = Repo.from_dir(tmp_path / "src")
    mirror = Server(_handler(hub))
    official = BlackHole()
    (tmp_path / "hf").mkdir()
    (tmp_path / "hf" / "token").write_text("hf_cached_login_secret")
    monkeypatch.setenv("HF_HOME", str(tmp_path / "hf"))
    monkeypatch.setenv("HF_TOKEN", "hf_env_secret")
    lists = {"official": {"hub": [official.url]}, "cn": {"hub": [mirror.url]}}
    (tmp_path / "mirrors.yaml").write_text(yaml.safe_dump(lists))
    monkeypatch.setenv("TRAINWIZ_MIRRORS_FILE", str(tmp_path / "mirrors.yaml"))
    try:
        data = tiny_with(profile="auto")
        data["model"] = {"source": "hf", "repo": "lmsys/vicuna-7b-v1.5", "dir": str(tmp_path / "m")}
        preset = tmp_path / "p.yaml"
        preset.write_text(yaml.safe_dump(data))
        code = main(["model", "fetch", str(preset), "--json"])
        out = capsys.readouterr().out
        assert code == 0, out
        assert (tmp_path / "m" / "config.json").is_file()
        assert any("/resolve/" in p for p in mirror.requests)  # it went through the mirror
        assert set(mirror.authorization) == {None}  # and no token went with it
    finally:
        mirror.stop()
        official.stop()
        hub.stop()
