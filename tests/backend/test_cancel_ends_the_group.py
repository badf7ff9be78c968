"""Cancelling a helper process ends everything it started: git (and its lfs/ssh children), the
hub download worker, pip building a venv, the chat worker, a multi-node run's ssh client (and a
ProxyCommand beside it), a short probe that times out. Each child here starts a grandchild that
outlives its parent unless the whole process group is signalled, then waits; after the cancel
neither may be alive."""

from __future__ import annotations

import os
import subprocess
import sys
import threading
import time
from pathlib import Path
from types import SimpleNamespace

import pytest

from backend.checks import tools
from backend.images import venv
from backend.model import gitlfs, hub
from backend.model.hub import Cancelled, HubPlan
from backend.results import chat
from backend.rundir import STOP_REQUEST
from backend.runs.multinode import ssh
from tests.backend.test_subproc import _alive

# Writes "<own pid> <grandchild pid>" to argv[1] once both run, then waits. The grandchild's
# output goes nowhere, so a parent's reader never waits on it.
PARENT = """
import os, subprocess, sys, time
child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(600)"],
                         stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
tmp = sys.argv[1] + ".tmp"
open(tmp, "w").write(f"{os.getpid()} {child.pid}")
os.replace(tmp, sys.argv[1])
print("started", flush=True)
time.sleep(600)
"""


def _script(tmp_path: Path) -> tuple[Path, Path]:
    script = tmp_path / "parent.py"
    script.write_text(PARENT)
    return script, tmp_path / "pids"


def _when_started(pids: Path, then: threading.Event | Path) -> threading.Thread:
    """Sets the cancel event (or creates the stop file) once the child and grandchild run."""

    def wait() -> None:
        deadline = time.monotonic() + 60
        while not pids.exists() and time.monotonic() < deadline:
            time.sleep(0.05)
        if isinstance(then, threading.Event):
            then.set()
        else:
            then.touch()

    thread = threading.Thread(target=wait, daemon=True)
    thread.start()
    return thread


def _assert_all_ended(pids: Path) -> None:
    parent, grandchild = (int(p) for p in pids.read_text().split())
    deadline = time.monotonic() + 15
    while (_alive(parent) or _alive(grandchild)) and time.monotonic() < deadline:
        time.sleep(0.05)
    try:
        assert not _alive(parent), "the child survived its cancel"
        assert not _alive(grandchild), "the child's own child survived the cancel"
    finally:
        for pid in (parent, grandchild):
            if _alive(pid):
                os.kill(pid, 9)


def test_git_cancel_ends_git_and_its_children(tmp_path: Path) -> None:
    script, pids = _script(tmp_path)
    cancel = threading.Event()
    _when_started(pids, cancel)
    with pytest.raises(Cancelled):
        gitlfs._run([sys.executable, str(script), str(pids)], None, cancel, dict(os.environ))
    _assert_all_ended(pids)


def test_venv_build_cancel_ends_pip_and_its_children(tmp_path: Path) -> None:
    script, pids = _script(tmp_path)
    cancel = threading.Event()
    _when_started(pids, cancel)
    lines: list[str] = []
    code = venv._run([sys.executable, str(script), str(pids)], lines, None, cancel)
    assert code != 0 and "started" in lines
    _assert_all_ended(pids)


def test_hub_download_cancel_ends_the_worker_and_its_children(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    _script_path, pids = _script(tmp_path)
    # The worker reads its job on stdin; this one also takes its pid file from an argument.
    worker = tmp_path / "worker.py"
    worker.write_text(f"import sys; sys.stdin.read(); sys.argv[1:] = [{str(pids)!r}]\n" + PARENT)
    monkeypatch.setattr(hub, "WORKER", worker)
    monkeypatch.delenv("HF_TOKEN", raising=False)
    plan = HubPlan("org/m", "main", "0" * 40, "http://127.0.0.1:9", str(tmp_path / "dst"),
                   [], [], 0, 0, 1 << 30)  # fmt: skip
    cancel = threading.Event()
    _when_started(pids, cancel)
    with pytest.raises(Cancelled):
        hub.fetch_hub(plan, cancel=cancel)
    _assert_all_ended(pids)


def test_chat_cancel_ends_the_worker_and_its_children(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    _script_path, pids = _script(tmp_path)
    worker = tmp_path / "worker.py"
    silent = PARENT.replace('print("started", flush=True)', "")  # stdout is JSON replies
    worker.write_text(f"import sys; sys.argv[1:] = [{str(pids)!r}]\n" + silent)
    source = SimpleNamespace(path=tmp_path, sharded=False, worker_args=list)
    monkeypatch.setattr(chat, "weights", lambda run_dir, checkpoint=None: source)
    monkeypatch.setattr(chat, "worker_python", lambda run_dir: sys.executable)
    monkeypatch.setattr(chat, "WORKER", worker)
    cancel = threading.Event()
    _when_started(pids, cancel)
    with pytest.raises(chat.ChatCancelled):
        chat.ChatSession(tmp_path, cancel=cancel, load_timeout=60)
    _assert_all_ended(pids)


def test_ssh_stop_ends_a_nodes_client_and_its_proxy(tmp_path: Path) -> None:
    # A node whose agent never told its pid (ssh still connecting through its ProxyCommand):
    # the stop ends the local client's whole group.
    script, pids = _script(tmp_path)
    spec = {
        "nodes": [
            {"index": 0, "host": "node-a", "ssh": ["true"],
             "argv": [sys.executable, str(script), str(pids)], "stdin_env": []}
        ],
        "stop_timeout": 5,
    }  # fmt: skip
    _when_started(pids, tmp_path / STOP_REQUEST)
    with open(tmp_path / "train.log", "ab") as log:
        code, _, _ = ssh.run(tmp_path, spec, log)
    assert code != 0
    _assert_all_ended(pids)


def test_a_timed_out_probe_ends_its_children_too(tmp_path: Path) -> None:
    # A version probe that hangs (3 s): no version, and nothing it started is left running.
    script, pids = _script(tmp_path)
    assert tools._version([sys.executable, str(script), str(pids)]) is None
    _assert_all_ended(pids)


def test_the_grandchild_outlives_a_signal_to_its_parent_alone(tmp_path: Path) -> None:
    # The control: without the group signal the grandchild lives on (what the tests above catch).
    script, pids = _script(tmp_path)
    proc = subprocess.Popen([sys.executable, str(script), str(pids)], stdout=subprocess.DEVNULL)
    deadline = time.monotonic() + 60
    while not pids.exists() and time.monotonic() < deadline:
        time.sleep(0.05)
    proc.kill()
    proc.wait()
    grandchild = int(pids.read_text().split()[1])
    try:
        assert _alive(grandchild)
    finally:
        os.kill(grandchild, 9)
