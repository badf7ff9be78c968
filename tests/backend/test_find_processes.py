"""One scan finds processes by what their environment or command line holds
(``backend.procinfo.find_processes``): a run's trainers and watcher, a queue item's launcher, a
run's servers. Real child processes: an exact ``KEY=VALUE`` entry matches and a longer value
does not (a run dir that is a prefix of another), a zombie never counts, nor does the caller."""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from backend.procinfo import env_entry, find_processes, holds_entry
from tests.waiting import wait_until

SLEEPER = "import sys, time; sys.stdout.write('up\\n'); sys.stdout.flush(); time.sleep(60)"


@pytest.fixture
def children() -> Iterator[list[subprocess.Popen[str]]]:
    started: list[subprocess.Popen[str]] = []
    yield started
    for proc in started:
        proc.kill()
        proc.wait()


def start(children: list, env: dict[str, str], *argv: str) -> subprocess.Popen[str]:
    proc = subprocess.Popen(
        [sys.executable, "-c", SLEEPER, *argv],
        env={**os.environ, **env},
        stdout=subprocess.PIPE,
        text=True,
    )
    children.append(proc)
    assert proc.stdout is not None and proc.stdout.readline() == "up\n"
    return proc


def test_an_exact_environment_entry_matches_and_a_longer_value_does_not(
    children: list, tmp_path: Path
) -> None:
    run = tmp_path / "runs" / "r1"
    mine = start(children, {"TW_TEST_RUN": str(run)})
    longer = start(children, {"TW_TEST_RUN": f"{run}0"})
    found = {p.pid for p in find_processes(env=env_entry("TW_TEST_RUN", run))}
    assert mine.pid in found and longer.pid not in found
    assert holds_entry(b"A=1\0TW_TEST_RUN=x\0", env_entry("TW_TEST_RUN", "x"))
    assert holds_entry(env_entry("TW_TEST_RUN", "x") + b"B=2\0", env_entry("TW_TEST_RUN", "x"))
    assert not holds_entry(b"XTW_TEST_RUN=x\0", env_entry("TW_TEST_RUN", "x"))


def test_a_command_line_needle_matches_and_skip_and_the_caller_never_count(
    children: list, tmp_path: Path
) -> None:
    needle = str(tmp_path / "entry" / "train_entry.py")
    one = start(children, {}, needle)
    two = start(children, {}, needle)
    found = {p.pid for p in find_processes(cmdline=needle.encode(), skip=(two.pid,))}
    assert found == {one.pid}
    assert os.getpid() not in {p.pid for p in find_processes(cmdline=b"python")}


def test_a_zombie_is_not_a_live_process(children: list, tmp_path: Path) -> None:
    marker = env_entry("TW_TEST_ZOMBIE", tmp_path)
    proc = subprocess.Popen(
        [sys.executable, "-c", "pass"], env={**os.environ, "TW_TEST_ZOMBIE": str(tmp_path)}
    )
    try:
        wait_until(  # exited, not reaped: /proc still lists it, as state Z
            lambda: Path(f"/proc/{proc.pid}/stat").read_text().rsplit(")", 1)[1].split()[0] == "Z",
            what=f"pid {proc.pid} a zombie",
            timeout=20,
        )
        assert proc.pid not in {p.pid for p in find_processes(env=marker)}
    finally:
        proc.wait()
