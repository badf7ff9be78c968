"""`replay` treats a taken master_port as `launch` does: a single-node run moves to a free one."""

from __future__ import annotations

import socket
import subprocess
import sys
from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parents[2]


def test_replay_checks_pass_on_a_busy_master_port(tmp_path: Path) -> None:
    holder = socket.socket()
    holder.bind(("127.0.0.1", 0))
    holder.listen()
    port = holder.getsockname()[1]
    data = yaml.safe_load((ROOT / "presets" / "tiny-cpu.yaml").read_text())
    data["launch"]["master_port"] = port
    path = tmp_path / "p.yaml"
    path.write_text(yaml.safe_dump(data))
    try:
        done = subprocess.run(
            [sys.executable, "-m", "tui.cli", "replay", str(path), "--until", "checks", "--json", "--yes"],
            cwd=ROOT, capture_output=True, text=True, timeout=120, check=False,
        )  # fmt: skip
    finally:
        holder.close()
    assert "master_port" in done.stdout + done.stderr
    assert "checks failed" not in done.stdout + done.stderr, done.stdout[-2000:]
    assert f"master_port {port} is taken" in done.stdout + done.stderr
    assert "the launch uses" in done.stdout + done.stderr
