"""A garbled status.json (invalid JSON, truncated, binary) does not stay garbled.

`trainwiz runs` lists the run saying its record was unreadable (the other runs as they are, no
traceback), and the refresh it runs, like `trainwiz stop RUN`, rewrites the record atomically
into a valid one: ``running`` while processes of the run live, else ``failed`` with cause
``status_unreadable``. The garbled bytes are kept beside it as status.json.garbled; a file
trainwiz did not make (an earlier .garbled, a symlink's target) is never overwritten.
"""

from __future__ import annotations

import io
import json
import os
import subprocess
import sys
from collections.abc import Iterator
from contextlib import redirect_stderr, redirect_stdout
from pathlib import Path

import pytest

from backend.rundir import read_status
from backend.runs.procs import run_processes
from tests.run_records import make_ended_run
from tests.waiting import wait_until
from tui.cli import main

GARBLE = {
    "truncated": b'{"run_id": "x", "state": "runn',
    "invalid": b"{run_id: nope,,}",
    "binary": b"\x00\xff\xfe\x1b]0;TITLE\x07 garbage",
    "empty": b"",
}


def cli(*argv: str) -> tuple[int, str, str]:
    out, err = io.StringIO(), io.StringIO()
    with redirect_stdout(out), redirect_stderr(err):
        try:
            code = main(list(argv))
        except SystemExit as exc:
            code = exc.code if isinstance(exc.code, int) else 2
    return code, out.getvalue(), err.getvalue()


@pytest.fixture(autouse=True)
def home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("TRAINWIZ_HOME", str(tmp_path))
    monkeypatch.setenv("TRAINWIZ_LANG", "en")


def garbled_run(tmp_path: Path, kind: str, preset: str = "bad") -> Path:
    run_dir = make_ended_run(tmp_path, "running", None, preset=preset, log="step 1\n")
    (run_dir / "status.json").write_bytes(GARBLE[kind])
    return run_dir


def assert_rebuilt(run_dir: Path, state: str, garbled: bytes) -> dict:
    record = json.loads((run_dir / "status.json").read_text())  # valid from now on
    status = read_status(run_dir)
    assert status.state == state, record
    assert "status.json was unreadable" in status.message, record
    assert (run_dir / "status.json.garbled").read_bytes() == garbled
    assert not [p for p in run_dir.iterdir() if p.name.startswith(".status.json")]  # no temp
    return record


@pytest.mark.parametrize("kind", sorted(GARBLE))
def test_runs_lists_it_as_unreadable_and_rebuilds_it(tmp_path: Path, kind: str) -> None:
    healthy = make_ended_run(tmp_path, "finished", None, preset="good", log="ok\n")
    run_dir = garbled_run(tmp_path, kind)
    code, out, err = cli("runs")
    assert code == 0 and not err, err
    line = next(t for t in out.splitlines() if t.startswith(run_dir.name))
    assert "failed" in line and "unreadable" in line, out
    assert healthy.name in out and "TITLE" not in out
    record = assert_rebuilt(run_dir, "failed", GARBLE[kind])
    assert record["cause"] == "status_unreadable"
    code, out, _err = cli("runs", "--json")
    listed = {r["run_id"]: r for r in json.loads(out)}
    assert listed[run_dir.name]["state"] == "failed"
    assert "unreadable" in listed[run_dir.name]["message"]


def test_stop_rebuilds_it(tmp_path: Path) -> None:
    run_dir = garbled_run(tmp_path, "truncated")
    code, out, err = cli("stop", run_dir.name, "--timeout", "1")
    assert code == 0, (out, err)
    assert "unreadable" in out
    assert_rebuilt(run_dir, "failed", GARBLE["truncated"])


@pytest.fixture
def sleeper(tmp_path: Path) -> Iterator[tuple[Path, subprocess.Popen[bytes]]]:
    """A run whose status.json is garbled while a process of it still lives."""
    run_dir = garbled_run(tmp_path, "binary")
    env = {**os.environ, "TRAINWIZ_RUN_DIR": str(run_dir.resolve())}
    proc = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"], env=env)
    try:
        wait_until(
            lambda: proc.pid in {p.pid for p in run_processes(run_dir)},
            what=f"pid {proc.pid} seen as a live process of {run_dir.name}",
            timeout=20,
        )
        yield run_dir, proc
    finally:
        proc.kill()
        proc.wait()


def test_a_live_run_is_rebuilt_as_running_then_stop_ends_it(
    sleeper: tuple[Path, subprocess.Popen[bytes]],
) -> None:
    run_dir, proc = sleeper
    code, out, _err = cli("runs", "--json")
    assert code == 0
    listed = {r["run_id"]: r for r in json.loads(out)}[run_dir.name]
    assert listed["state"] == "running" and "unreadable" in listed["message"], listed
    assert_rebuilt(run_dir, "running", GARBLE["binary"])
    code, out, err = cli("stop", run_dir.name, "--timeout", "2")
    assert code == 0, (out, err)
    assert proc.wait(timeout=20) is not None
    assert read_status(run_dir).state == "stopped"


def test_an_earlier_garbled_copy_and_a_symlink_target_are_never_overwritten(
    tmp_path: Path,
) -> None:
    run_dir = garbled_run(tmp_path, "invalid")
    (run_dir / "status.json.garbled").write_bytes(b"kept from before")
    users = tmp_path / "users-file"
    users.write_bytes(b"not trainwiz's: garbage to a status reader")
    (run_dir / "status.json").unlink()
    (run_dir / "status.json").symlink_to(users)
    code, _out, err = cli("runs")
    assert code == 0, err
    assert (run_dir / "status.json.garbled").read_bytes() == b"kept from before"
    assert users.read_bytes() == b"not trainwiz's: garbage to a status reader"
    kept = sorted(p.name for p in run_dir.iterdir() if p.name.startswith("status.json.garbled"))
    assert len(kept) == 2, kept
    assert not (run_dir / "status.json").is_symlink()
    assert read_status(run_dir).cause == "status_unreadable"
