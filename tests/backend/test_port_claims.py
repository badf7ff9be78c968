"""Two TRAINWIZ_HOMEs on one machine never choose the same master_port for live runs: a launch
from one home skips a port that a run of the other home chose and has not ended (its torchrun
may not have bound it yet), and a run that ended gives its port back. Parallel test workers,
each with its own home, launch tiny-cpu (master_port 29511) at the same moments."""

from __future__ import annotations

from pathlib import Path

import pytest

from backend.ports import PortLock, claim_port, claimed_ports, next_free_port
from backend.preset import load_preset
from backend.rundir import create_run_dir, update_status
from backend.runs.spec import build_spec

ROOT = Path(__file__).resolve().parents[2]


def _live_run_in_home(home: Path, monkeypatch: pytest.MonkeyPatch, port: int) -> Path:
    monkeypatch.setenv("TRAINWIZ_HOME", str(home))
    run_dir = create_run_dir("tiny-cpu", "host")
    with PortLock():
        update_status(run_dir, master_port=port, state="running")
        claim_port(port, run_dir)
    return run_dir


def test_a_live_run_of_another_home_keeps_its_port(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    port = next_free_port(20000 + (hash(tmp_path) % 20000), set())
    other = _live_run_in_home(tmp_path / "home-a", monkeypatch, port)
    monkeypatch.setenv("TRAINWIZ_HOME", str(tmp_path / "home-b"))
    assert port in claimed_ports()
    preset = load_preset(str(ROOT / "presets" / "tiny-cpu.yaml"))
    preset.launch.master_port = port
    run_dir = tmp_path / "run-b"
    run_dir.mkdir()
    with PortLock():
        spec = build_spec(preset, run_dir=run_dir, taken=claimed_ports(run_dir))
    assert spec.master_port != port
    assert f"launch.master_port {port} is chosen by another run" in " ".join(spec.notes)
    # ended: the port is free again for everyone, and the claim is gone
    update_status(other, state="finished")
    assert port not in claimed_ports()


def test_a_claim_whose_run_folder_is_gone_is_dropped(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    port = next_free_port(20000 + (hash(tmp_path) % 20000), set())
    run_dir = _live_run_in_home(tmp_path / "home-a", monkeypatch, port)
    assert port in claimed_ports()
    for child in run_dir.iterdir():
        child.unlink()
    run_dir.rmdir()
    assert port not in claimed_ports()
