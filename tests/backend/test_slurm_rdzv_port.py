"""A Slurm run's rendezvous port is chosen inside the job, on its head node: the preset's
master_port, fixed before the job starts, made two jobs on one head node collide (EADDRINUSE).

The job script is run here by bash with ``scontrol``/``srun`` stubs (no cluster): it asks the
OS for a free port where the batch step runs (the allocation's first node), says it in the
batch log, and every agent gets ``--rdzv_endpoint=$head:$port``. The printed plan shows that
script and says where the port comes from; the watcher records the port the job used.
"""

from __future__ import annotations

import io
import os
import re
import socket
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
import yaml

from backend.checks import run_checks
from backend.preset import load_preset
from backend.preset.schema import Preset
from backend.rundir import RunStatus, read_status, write_status
from backend.runs.multinode import slurm
from backend.runs.multinode.agents import NodeLog
from backend.runs.spec import build_spec

ROOT = Path(__file__).resolve().parents[2]
TORCHRUN = str(Path(sys.executable).with_name("torchrun"))  # its python: this venv's


@pytest.fixture
def busy_port() -> Iterator[int]:
    """A port something listens on here, as another job's c10d store would."""
    with socket.socket() as sock:
        sock.bind(("", 0))
        sock.listen()
        yield int(sock.getsockname()[1])


def _slurm_preset(tmp_path: Path, port: int, **launch: object) -> Preset:
    data = yaml.safe_load((ROOT / "presets" / "tiny-cpu.yaml").read_text())
    data["launch"].update(scheduler="slurm", nnodes=2, master_port=port, **launch)
    path = tmp_path / "tiny-slurm.yaml"
    path.write_text(yaml.safe_dump(data))
    return load_preset(str(path))


def _script(spec_plan_note: str | None) -> str:
    assert spec_plan_note is not None
    return spec_plan_note + "\n"


def test_the_plan_shows_the_port_chosen_in_the_job(tmp_path: Path, busy_port: int) -> None:
    preset = _slurm_preset(tmp_path, busy_port)
    printed = build_spec(preset, torchrun=TORCHRUN)
    script = _script(printed.plan.step("slurm-script").note)
    assert printed.master_port is None  # nothing fixed before the job
    assert '--rdzv_endpoint="$head:$port"' in script
    assert f":{busy_port}" not in script  # the preset's master_port is not the endpoint
    lines = script.splitlines()
    head = lines.index('head=$(scontrol show hostnames "$SLURM_JOB_NODELIST" | sed -n 1p)')
    (choose,) = [i for i, line in enumerate(lines) if line.startswith("port=$(")]
    assert head < choose < next(i for i, line in enumerate(lines) if "--overlap" in line)
    assert lines[choose].startswith(f"port=$({Path(TORCHRUN).with_name('python')} -c ")
    assert 'echo "TRAINWIZ_RDZV_ENDPOINT=$head:$port"' in lines
    assert 'export TRAINWIZ_RDZV_PORT="$port"' in lines
    assert "srun" not in lines[choose]  # the batch step runs on the head node itself
    # The plan as `trainwiz plan` prints it: the script, and a note saying where the port is from.
    text = printed.plan.as_script()
    assert '--rdzv_endpoint="$head:$port"' in text
    (note,) = [n for n in printed.notes if "$head:$port" in n]
    assert "chosen in the job on its head node" in note and "free there at that moment" in note
    # A launch writes exactly that script and fixes no port in launch.json.
    run_dir = tmp_path / "run"
    run_dir.mkdir()
    launched = build_spec(preset, run_dir=run_dir, torchrun=TORCHRUN)
    written = (run_dir / slurm.SCRIPT).read_text()
    assert written == _script(launched.plan.step("slurm-script").note)
    assert launched.launch_json()["master_port"] is None


def test_an_explicit_rdzv_endpoint_is_kept(tmp_path: Path) -> None:
    preset = _slurm_preset(tmp_path, 29511, rdzv_endpoint="gpu-a.example:29400")
    spec = build_spec(preset, torchrun=TORCHRUN)
    script = _script(spec.plan.step("slurm-script").note)
    assert "--rdzv_endpoint=gpu-a.example:29400" in script
    assert "port=$(" not in script and "$port" not in script
    assert not any("$head:$port" in n for n in spec.notes)


def _stubs(tmp_path: Path) -> Path:
    """scontrol names two nodes; srun writes down its argv and the port it was exported."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    (bin_dir / "scontrol").write_text("#!/bin/bash\nprintf 'node-a\\nnode-b\\n'\n")
    (bin_dir / "srun").write_text(
        "#!/bin/bash\n"
        'printf "%s\\0" "$@" > "$STUB_OUT/srun-$$.args"\n'
        'printf "%s" "${TRAINWIZ_RDZV_PORT-}" > "$STUB_OUT/srun-$$.port"\n'
    )
    for stub in bin_dir.iterdir():
        stub.chmod(0o755)
    return bin_dir


def test_the_job_script_gives_every_agent_the_port_it_chose(tmp_path: Path) -> None:
    preset = _slurm_preset(tmp_path, 29511)
    run_dir = tmp_path / "run"
    run_dir.mkdir()
    build_spec(preset, run_dir=run_dir, torchrun=TORCHRUN)
    out = tmp_path / "out"
    out.mkdir()
    env = {**os.environ, "PATH": f"{_stubs(tmp_path)}:{os.environ['PATH']}"}
    env.update(SLURM_JOB_NODELIST="node-[a-b]", STUB_OUT=str(out))
    done = subprocess.run(
        ["bash", str(run_dir / slurm.SCRIPT)], env=env, capture_output=True, text=True, timeout=60
    )
    assert done.returncode == 0, done.stderr
    (said,) = re.findall(r"^TRAINWIZ_RDZV_ENDPOINT=(.*)$", done.stdout, re.M)
    host, _, port = said.rpartition(":")
    assert host == "node-a" and port.isdigit() and int(port) != 29511
    agents = [
        p.read_bytes().split(b"\0")[:-1]
        for p in out.glob("srun-*.args")
        if b"--rdzv_backend=c10d" in p.read_bytes()
    ]
    (agent,) = agents
    assert f"--rdzv_endpoint=node-a:{port}".encode() in agent
    assert {p.read_text() for p in out.glob("srun-*.port")} == {port}
    assert slurm.endpoint_said(f"TRAINWIZ_RDZV_ENDPOINT={said}\n") == ("node-a", int(port))
    for odd in ("TRAINWIZ_RDZV_ENDPOINT=$(reboot):1", "TRAINWIZ_RDZV_ENDPOINT=node-a:70000"):
        assert slurm.endpoint_said(odd) is None


def _run_dir(tmp_path: Path) -> Path:
    run_dir = tmp_path / "20260101-000000-tiny-slurm"
    run_dir.mkdir()
    write_status(run_dir, RunStatus(run_id=run_dir.name, preset="tiny-slurm", runner="host"))
    return run_dir


def test_the_watcher_records_the_port_the_job_used(tmp_path: Path) -> None:
    run_dir = _run_dir(tmp_path)
    (run_dir / "slurm-7.out").write_text(
        "TRAINWIZ_RDZV_ENDPOINT=node-a:45123\nTRAINWIZ_RDZV_ENDPOINT=node-a:x;reboot\n"
    )
    log = io.BytesIO()
    slurm._Follower(run_dir, NodeLog(log, []), "7").poll()
    status = read_status(run_dir)
    assert status.master_port == 45123
    assert (status.model_extra or {})["rdzv_endpoint"] == "node-a:45123"
    assert b"[slurm 7] TRAINWIZ_RDZV_ENDPOINT=node-a:45123" in log.getvalue()
    # Read back from the batch log too (a run followed from another login, no watcher here).
    assert slurm.endpoint_in_log(run_dir, "7") == ("node-a", 45123)
    assert slurm.endpoint_in_log(run_dir, "8") is None


def test_the_port_check_leaves_a_slurm_port_to_the_job(tmp_path: Path, busy_port: int) -> None:
    preset = _slurm_preset(tmp_path, busy_port)
    (result,) = run_checks(preset, only=["master_port"])
    assert result.status == "skip", result.summary
    assert "chosen in the Slurm job on its head node" in result.summary
