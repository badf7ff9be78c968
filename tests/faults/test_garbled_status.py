"""A garbled status.json is reported and rebuilt into a valid record (the garbled copy kept as
status.json.garbled): failed once nothing of the run is running, running while processes of the
run live (tests/cli/test_garbled_status.py has the rest)."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

from backend.rundir import create_run_dir
from backend.runs.procs import run_processes
from tests.faults.helpers import cli, runs_json
from tests.waiting import wait_until

GARBLE = {
    "truncated": b'{"run_id": "x", "state": "runn',
    "binary": b"\x00\xff\xfe garbage",
    "list": b"[]",
    "wrong_types": b'{"run_id": 5, "preset": [], "runner": "host", "state": "running"}',
    "empty": b"",
}


@pytest.mark.parametrize("kind", sorted(GARBLE))
def test_a_garbled_record_is_rebuilt_and_kept(kind: str) -> None:
    run_dir = create_run_dir("p", "host")
    (run_dir / "status.json").write_bytes(GARBLE[kind])
    record = runs_json()[run_dir.name]
    assert record["state"] == "failed" and "status.json was unreadable" in record["message"]
    assert (run_dir / "status.json.garbled").read_bytes() == GARBLE[kind]
    json.loads((run_dir / "status.json").read_text())  # valid from now on
    again = cli("logs", run_dir.name)
    assert again.returncode == 0 and "Traceback" not in again.stderr


def test_while_the_run_runs_it_is_rewritten_as_running() -> None:
    run_dir = create_run_dir("p", "host")
    (run_dir / "status.json").write_bytes(GARBLE["truncated"])
    env = {**os.environ, "TRAINWIZ_RUN_DIR": str(run_dir.resolve())}
    proc = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"], env=env)
    try:
        # What makes the run "running" to `runs`: a live process whose environment names it.
        wait_until(
            lambda: proc.pid in {p.pid for p in run_processes(run_dir)},
            what=f"pid {proc.pid} seen as a live process of {run_dir.name}",
            timeout=20,
            seen=lambda: {"run processes": run_processes(run_dir), "exit": proc.poll()},
        )
        record = runs_json()[run_dir.name]
        assert record["state"] == "running" and "unreadable" in record["message"]
        assert json.loads((run_dir / "status.json").read_text())["state"] == "running"
        assert (run_dir / "status.json.garbled").read_bytes() == GARBLE["truncated"]
    finally:
        proc.kill()
        proc.wait()
