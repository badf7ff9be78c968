"""Run directories: ids, atomic status, lookup by id/prefix/last, launch refusals."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from backend import paths
from backend.errors import BadInput
from backend.preset.loader import load_preset, parse_preset_text, preset_to_yaml
from backend.rundir import (
    STATUS,
    RunStatus,
    create_run_dir,
    list_run_dirs,
    new_run_id,
    read_status,
    update_status,
    write_status,
)
from backend.runs.control import find_run
from backend.runs.launch import launch
from tui.cli import main


def test_run_ids_are_unique_and_ordered(tmp_path: Path) -> None:
    first = new_run_id("p", tmp_path, now=1_700_000_000)
    (tmp_path / first).mkdir()
    second = new_run_id("p", tmp_path, now=1_700_000_000)
    assert second == first + "-2"
    dirs = [create_run_dir("p", "host") for _ in range(3)]
    assert len({d.name for d in dirs}) == 3
    assert list_run_dirs() == sorted(dirs)


def test_status_roundtrip_and_extra_keys_survive() -> None:
    run_dir = create_run_dir("p", "docker")
    status = read_status(run_dir)
    assert (status.state, status.runner, status.preset) == ("starting", "docker", "p")
    raw = json.loads((run_dir / STATUS).read_text())
    raw["monitor_note"] = "kept"
    (run_dir / STATUS).write_text(json.dumps(raw))
    updated = update_status(run_dir, state="running", pid=123)
    assert updated.state == "running"
    assert json.loads((run_dir / STATUS).read_text())["monitor_note"] == "kept"
    # Atomic writes leave no temp files behind.
    write_status(run_dir, RunStatus(run_id=run_dir.name, preset="p", runner="docker"))
    assert sorted(p.name for p in run_dir.iterdir()) == [".reserve", "status.json", "train.log"]


def test_find_run_by_id_prefix_suffix_last_and_path() -> None:
    a = create_run_dir("alpha", "host")
    b = create_run_dir("beta", "host")
    assert find_run(a.name) == a
    assert find_run("last") == b
    assert find_run(str(b)) == b.resolve()
    assert find_run("beta") == b  # the preset-name suffix is enough when unique
    with pytest.raises(BadInput, match="no such run"):
        find_run("nope")
    with pytest.raises(BadInput, match="ambiguous"):
        find_run(a.name[:8])


def test_find_run_without_runs_says_how_to_start() -> None:
    with pytest.raises(BadInput, match="trainwiz launch"):
        find_run("last")


def _tiny_preset_text(**training: object) -> str:
    preset = load_preset("presets/tiny-cpu.yaml")
    data = preset.model_dump(mode="json", by_alias=True, exclude_unset=True)
    data["training"].update(training)
    import yaml

    return yaml.safe_dump(data, sort_keys=False)


def test_invalid_preset_starts_nothing(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    bad = tmp_path / "bad.yaml"
    bad.write_text(_tiny_preset_text(per_device_train_batch_size=0, learnig_rate=1))
    assert main(["launch", str(bad), "--detach"]) == 2
    err = capsys.readouterr().err
    assert "per_device_train_batch_size" in err
    assert "learnig_rate" in err and "did you mean 'learning_rate'" in err
    assert not paths.runs_dir().exists() or list_run_dirs() == []


def test_missing_training_env_is_refused_before_any_run_dir(tmp_path: Path) -> None:
    text = _tiny_preset_text()
    preset = parse_preset_text(text)
    preset.environment.venv = str(tmp_path / "no-venv")
    assert "venv" in preset_to_yaml(preset)
    with pytest.raises(BadInput, match=r"environment\.venv"):
        launch(preset)
    assert list_run_dirs() == []


def test_train_mem_entry_needs_a_fastchat_workdir(tmp_path: Path) -> None:
    preset = parse_preset_text(_tiny_preset_text())
    preset.launch.entry = "fastchat-train-mem"
    with pytest.raises(BadInput, match=r"launch\.workdir"):
        launch(preset)
    preset.launch.workdir = str(tmp_path)
    with pytest.raises(BadInput, match=r"fastchat/train/train_mem\.py does not exist"):
        launch(preset)
    assert list_run_dirs() == []


def test_a_taken_master_port_is_replaced_on_a_single_node(tmp_path: Path) -> None:
    import socket

    from backend.runs.spec import build_spec

    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as busy:
        busy.bind(("", 0))
        busy.listen()
        port = busy.getsockname()[1]
        preset = parse_preset_text(_tiny_preset_text())
        preset.launch.master_port = port
        run_dir = create_run_dir(preset.name, "host")
        spec = build_spec(preset, run_dir=run_dir, prepare="none").launch_json()
        ports = [a for a in spec["train"]["argv"] if a.startswith("--master_port=")]
        assert ports and ports[0] != f"--master_port={port}"
        assert f"master_port {port} is in use" in spec["notes"][0]
        preset.launch.nnodes = 2  # every node must agree: never changed behind the user's back
        spec = build_spec(preset, run_dir=run_dir, prepare="none").launch_json()
        assert f"--master_port={port}" in spec["train"]["argv"]
        assert spec["notes"] == []


def test_missing_data_file_is_refused_before_any_run_dir(tmp_path: Path) -> None:
    preset = parse_preset_text(_tiny_preset_text(data_path=str(tmp_path / "nope.json")))
    with pytest.raises(BadInput, match=r"training\.data_path: .*nope\.json does not exist"):
        launch(preset)
    assert list_run_dirs() == []


def test_docker_data_paths_are_checked_through_the_volumes(tmp_path: Path) -> None:
    from backend.preset.schema import Volume
    from backend.runs.launch import _host_file

    preset = parse_preset_text(_tiny_preset_text())
    preset.launch.runner = "docker"
    preset.launch.workdir = "/app/FastChat"
    preset.container.volumes = [Volume(host=str(tmp_path), container="/app")]
    # The seed's relative path under the workdir maps onto the host through /data:/app.
    assert _host_file(preset, "data/x.json") == tmp_path / "FastChat" / "data" / "x.json"
    # A path no volume covers exists only inside the image: nothing to check on the host.
    assert _host_file(preset, "/opt/data/x.json") is None
