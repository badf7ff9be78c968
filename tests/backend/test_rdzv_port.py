"""A multi-node SSH run's rendezvous port is decided once: the printed plan's node commands,
plan.json and launch.json (what the watcher starts on every node) name the same endpoint, also
when the preset's master_port is taken on node 0 (this machine) and another port is chosen."""

from __future__ import annotations

import shlex
import socket
from collections.abc import Iterator
from pathlib import Path

import pytest
import yaml

from backend.preset import load_preset
from backend.preset.schema import Preset
from backend.runs.spec import build_spec

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture
def busy_port() -> Iterator[int]:
    """A port something else listens on here, as another run's store would."""
    with socket.socket() as sock:
        sock.bind(("", 0))
        sock.listen()
        yield int(sock.getsockname()[1])


def _ssh_preset(tmp_path: Path, port: int) -> Preset:
    data = yaml.safe_load((ROOT / "presets" / "tiny-cpu.yaml").read_text())
    data["launch"].update(scheduler="ssh", nnodes=2, nodes=["127.0.0.1", "me@gpu-b"])
    data["launch"]["master_port"] = port
    path = tmp_path / "tiny-ssh.yaml"
    path.write_text(yaml.safe_dump(data))
    return load_preset(str(path))


def _endpoint(argv: list[str]) -> str:
    remote = shlex.split(argv[-1].split(" && exec ", 1)[1])
    (found,) = [a for a in remote if a.startswith("--rdzv_endpoint=")]
    return found.split("=", 1)[1]


def test_plan_and_launch_name_the_port_the_nodes_meet_on(tmp_path: Path, busy_port: int) -> None:
    preset = _ssh_preset(tmp_path, busy_port)
    printed = build_spec(preset)
    run_dir = tmp_path / "run"
    run_dir.mkdir()
    launched = build_spec(preset, run_dir=run_dir)
    shown = _endpoint(printed.plan.step("node0").argv)
    host, _, port = shown.rpartition(":")
    assert host == "127.0.0.1" and int(port) != busy_port  # the busy port is not offered
    assert printed.master_port == launched.master_port == int(port)
    nodes = launched.launch_json()["nodes"]
    for index, node in enumerate(nodes):
        # plan.json's step is the argv launch.json hands the watcher, the endpoint the printed one
        assert launched.plan.step(f"node{index}").argv == node["argv"]
        assert _endpoint(node["argv"]) == shown
    assert any(f"launch.master_port {busy_port} is in use here" in n for n in launched.notes)


def test_a_free_port_is_the_presets_own(tmp_path: Path) -> None:
    with socket.socket() as sock:
        sock.bind(("", 0))
        free = int(sock.getsockname()[1])
    preset = _ssh_preset(tmp_path, free)
    spec = build_spec(preset)
    assert _endpoint(spec.plan.step("node1").argv) == f"127.0.0.1:{free}"
    assert not any("is in use here" in n for n in spec.notes)
