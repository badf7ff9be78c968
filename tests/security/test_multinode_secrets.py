"""Secrets stay out of multi-node plans, launch.json, job.sbatch, train.log and `logs`.

A node's secret values travel over its ssh's stdin (the node's shell reads them with
``read -r``) or in sbatch's own environment (exported to the job by Slurm), from a 0600 file
in the run dir; a value equal to one of this process's secrets (HF_TOKEN's) under a key that is
not secret-looking (NCCL_DEBUG) is treated as the secret it is.
"""

from __future__ import annotations

import json
import os
import stat
import subprocess
import sys
import time
from pathlib import Path

import pytest
import yaml

from backend.redact import REDACTED, redact_env, split_secret_env

ROOT = Path(__file__).resolve().parents[2]
PASSWORD = "pw_multinode_SECRET_0001"
WANDB = "wandb_multinode_SECRET_0002"
HF = "hf_processTOKENvalue0123456789ab"
SECRETS = (PASSWORD, WANDB, HF)
ENV = {"MY_PASSWORD": PASSWORD, "WANDB_API_KEY": WANDB, "NCCL_DEBUG": HF, "OMP_NUM_THREADS": "1"}


def _preset(tmp_path: Path, **launch: object) -> Path:
    data = yaml.safe_load((ROOT / "presets" / "tiny-cpu.yaml").read_text())
    data["launch"].update(env=ENV, **launch)
    path = tmp_path / "p.yaml"
    path.write_text(yaml.safe_dump(data))
    return path


def _cli(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "tui.cli", *args],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=120,
        env={**os.environ, "HF_TOKEN": HF, **(env or {})},
        check=False,
    )


def _clean(text: str) -> None:
    for secret in SECRETS:
        assert secret not in text


def test_a_process_secret_under_a_plain_key_is_secret(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("HF_TOKEN", HF)
    assert redact_env({"NCCL_DEBUG": HF, "OMP_NUM_THREADS": "2"}) == {
        "NCCL_DEBUG": REDACTED,
        "OMP_NUM_THREADS": "2",
    }
    public, secret = split_secret_env(ENV)
    assert public == {"OMP_NUM_THREADS": "1"} and set(secret) == {*ENV} - {"OMP_NUM_THREADS"}


@pytest.mark.parametrize(
    "launch",
    [
        {"scheduler": "ssh", "nnodes": 2, "nodes": ["gpu-a", "gpu-b"]},
        {"scheduler": "slurm", "nnodes": 2},
        {"scheduler": "local"},
        {"scheduler": "ssh", "nnodes": 2, "nodes": ["gpu-a", "gpu-b"], "runner": "docker"},
    ],
    ids=["ssh", "slurm", "local", "ssh-docker"],
)
def test_multinode_plans_hold_no_secret(tmp_path: Path, launch: dict[str, object]) -> None:
    path = _preset(tmp_path, **launch)
    shown = _cli("plan", str(path))
    assert shown.returncode == 0, shown.stderr
    _clean(shown.stdout + shown.stderr)
    assert "MY_PASSWORD" in shown.stdout  # named, so a reader knows it is passed
    as_json = _cli("plan", str(path), "--json")
    assert as_json.returncode == 0, as_json.stderr
    _clean(as_json.stdout)


def test_docker_nodes_pass_secrets_on_stdin(tmp_path: Path) -> None:
    from backend.preset import load_preset
    from backend.runs.multinode.docker_nodes import hide_secret_flags, remote_command

    argv, names = hide_secret_flags(
        ["docker", "run", "-e", f"MY_PASSWORD={PASSWORD}", "-e", "OMP_NUM_THREADS=1", "img"]
    )
    assert argv == ["docker", "run", "-e", "MY_PASSWORD", "-e", "OMP_NUM_THREADS=1", "img"]
    assert names == ["MY_PASSWORD"]
    text = remote_command(argv, "c", names)
    assert "IFS= read -r MY_PASSWORD && export MY_PASSWORD" in text and PASSWORD not in text
    assert load_preset  # the module imports cleanly beside the runner


def _environ_with(run_id: str, needle: bytes) -> bool:
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            named = run_id.encode() in (entry / "cmdline").read_bytes()
            if named and needle in (entry / "environ").read_bytes():
                return True
        except OSError:
            continue
    return False


def _launch_until_a_process_has_the_secret(path: Path, timeout: float) -> tuple[dict, Path]:
    """Launch ``path`` detached, wait until one of the run's processes (the agent on a node, the
    Slurm task) holds the secret in its environment, then stop the run; return its record."""
    started = _cli("launch", str(path), "--detach", "--json")
    assert started.returncode == 0, started.stderr
    run = json.loads(started.stdout)
    run_dir = Path(run["run_dir"])
    seen = False
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline and not seen:
        seen = _environ_with(run["run_id"], f"MY_PASSWORD={PASSWORD}".encode())
        status = json.loads((run_dir / "status.json").read_text())
        if status["state"] in ("finished", "failed", "stopped"):
            break
        time.sleep(0.2)
    assert seen, (run_dir / "train.log").read_text()[-2000:]
    _cli("stop", run["run_id"])
    return run, run_dir


@pytest.mark.training
@pytest.mark.slow
def test_an_ssh_run_gets_its_secrets_and_writes_none(
    tmp_path: Path, sshd_port: int, ssh_keys: dict[str, str], home: Path
) -> None:
    from tests.integration.test_multinode_ssh import ssh_preset

    node = f"127.0.0.1:{sshd_port}"
    path = ssh_preset(tmp_path, ssh_keys, [node, node], max_steps=30, env=ENV)
    run, run_dir = _launch_until_a_process_has_the_secret(path, timeout=120)
    for name in ("launch.json", "plan.json", "train.log", "status.json", "preset.yaml"):
        _clean((run_dir / name).read_text(errors="replace"))
    _clean(_cli("logs", run["run_id"]).stdout)
    secret_file = run_dir / "secret.env.json"
    assert stat.S_IMODE(secret_file.stat().st_mode) == 0o600


@pytest.mark.training
@pytest.mark.slow
def test_a_slurm_job_gets_its_secrets_from_sbatch_and_the_script_holds_none(
    tmp_path: Path, slurm: str, home: Path
) -> None:
    from tests.integration.test_multinode_slurm import slurm_preset

    path = slurm_preset(tmp_path, 30)
    data = yaml.safe_load(path.read_text())
    data["launch"]["env"] = ENV
    path.write_text(yaml.safe_dump(data))
    _, run_dir = _launch_until_a_process_has_the_secret(path, timeout=180)
    script = (run_dir / "job.sbatch").read_text()
    _clean(script)
    assert "# MY_PASSWORD: from sbatch's environment" in script
    for name in ("launch.json", "plan.json", "train.log"):
        _clean((run_dir / name).read_text(errors="replace"))


@pytest.mark.training
@pytest.mark.slow
def test_a_single_node_run_gets_its_secrets_and_launch_json_holds_none(
    tmp_path: Path, home: Path
) -> None:
    data = yaml.safe_load((ROOT / "presets" / "tiny-cpu.yaml").read_text())
    data["launch"]["env"] = ENV
    data["training"]["max_steps"] = 30
    path = tmp_path / "p.yaml"
    path.write_text(yaml.safe_dump(data))
    started = _cli("launch", str(path), "--detach", "--json")
    assert started.returncode == 0, started.stderr
    run = json.loads(started.stdout)
    run_dir = Path(run["run_dir"])
    seen = False
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline and not seen:
        seen = _environ_with(str(run_dir / "entry"), f"MY_PASSWORD={PASSWORD}".encode())
        if json.loads((run_dir / "status.json").read_text())["state"] in ("finished", "failed"):
            break
        time.sleep(0.2)
    assert seen, (run_dir / "train.log").read_text()[-2000:]  # the trainer has it
    _cli("stop", run["run_id"])
    for name in ("launch.json", "plan.json", "train.log", "status.json"):
        _clean((run_dir / name).read_text(errors="replace"))
    if (run_dir / "fallback.json").exists():
        _clean((run_dir / "fallback.json").read_text())
