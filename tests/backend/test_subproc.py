"""The one child-process helper: output as it comes, cancel and timeout end the whole group
(TERM, then KILL for a child that ignores TERM), a JSON result read back."""

from __future__ import annotations

import subprocess
import sys
import threading
import time
from pathlib import Path

from backend import subproc

# A child that starts a grandchild ignoring TERM, says so, and waits forever.
STUBBORN = """
import os, signal, subprocess, sys, time
child = subprocess.Popen([sys.executable, "-c",
    "import signal, time; signal.signal(signal.SIGTERM, signal.SIG_IGN); time.sleep(600)"])
open(sys.argv[1], "w").write(str(child.pid))
signal.signal(signal.SIGTERM, signal.SIG_IGN)
print("started", flush=True)
time.sleep(600)
"""


def _alive(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except OSError:
        return False
    return state != "Z"


def _ends_within(pid: int, seconds: float) -> bool:
    """The process is gone (or a zombie) within ``seconds``: a killed group's member is reaped
    by init a moment after the kill."""
    deadline = time.monotonic() + seconds
    while _alive(pid) and time.monotonic() < deadline:
        time.sleep(0.05)
    return not _alive(pid)


def test_output_lines_and_exit_code() -> None:
    seen: list[str] = []
    done = subproc.run(
        [sys.executable, "-c", "import sys; print('a'); print('b', file=sys.stderr); sys.exit(3)"],
        on_line=seen.append,
    )
    assert done.code == 3 and not done.ok and not done.cancelled
    assert seen == ["a", "b"] == done.lines
    assert done.last_line() == "b"


def test_a_big_output_never_blocks_the_child() -> None:
    script = "for i in range(50000):\n    print(i)"  # far more than a pipe's buffer
    done = subproc.run([sys.executable, "-c", script], timeout=60)
    assert done.ok and done.lines[-1] == "49999" and len(done.lines) == subproc.KEEP_LINES


def test_cancel_ends_the_whole_group_term_then_kill(tmp_path: Path) -> None:
    pidfile = tmp_path / "grandchild"
    cancel = threading.Event()
    seen: list[str] = []

    def on_line(line: str) -> None:
        seen.append(line)
        if line == "started":
            cancel.set()

    start = time.monotonic()
    done = subproc.run(
        [sys.executable, "-c", STUBBORN, str(pidfile)], cancel=cancel, on_line=on_line, grace=1.0
    )
    assert done.cancelled and done.code is None and seen == ["started"]
    assert time.monotonic() - start < 30
    grandchild = int(pidfile.read_text())
    assert _ends_within(grandchild, 5)


def test_timeout_and_json_result() -> None:
    done = subproc.run([sys.executable, "-c", "import time; time.sleep(60)"], timeout=0.5, grace=1)
    assert done.timed_out and done.code is None
    done, value = subproc.run_json(
        [sys.executable, "-c", "import json; print('working'); print(json.dumps({'n': 2}))"]
    )
    assert done.ok and value == {"n": 2}
    assert subproc.run_json([sys.executable, "-c", "print('not json')"])[1] is None


def test_probe_reads_stdout_and_stderr_apart() -> None:
    script = (
        "import sys\nfor i in range(30000):\n    print(i); print(-i, file=sys.stderr)\nsys.exit(4)"
    )
    done = subproc.probe([sys.executable, "-c", script], 60)  # both pipes far past a buffer
    assert done.code == 4 and done.error is None and not done.timed_out
    assert done.stdout.splitlines()[-1] == "29999" and done.stderr.splitlines()[-1] == "-29999"


def test_probe_of_a_missing_or_unrunnable_binary_is_a_result(tmp_path: Path) -> None:
    done = subproc.probe([str(tmp_path / "no-such-tool"), "--version"], 5)
    assert done.code is None and not done.ok and isinstance(done.error, FileNotFoundError)
    assert done.stderr == f"{tmp_path / 'no-such-tool'}: No such file or directory"
    script = tmp_path / "not-executable"
    script.write_text("#!/bin/sh\necho hi\n")
    done = subproc.probe([str(script)], 5)
    assert isinstance(done.error, PermissionError) and "Permission denied" in done.stderr


def test_probe_timeout_ends_the_whole_group(tmp_path: Path) -> None:
    pidfile = tmp_path / "grandchild"
    start = time.monotonic()
    done = subproc.probe([sys.executable, "-c", STUBBORN, str(pidfile)], 2, grace=0.5)
    assert done.timed_out and done.code is None and done.stdout == "started\n"
    assert isinstance(done.error, subprocess.TimeoutExpired) and done.error.timeout == 2
    assert time.monotonic() - start < 30
    grandchild = int(pidfile.read_text())
    assert _ends_within(grandchild, 5)
