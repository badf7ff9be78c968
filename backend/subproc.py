"""One way to run a child process that a user may cancel: its own process group, its output
read as it comes (never a full pipe that blocks the child), cancel and timeout ended with TERM
then KILL to the whole group (a child's own children too), and a JSON result read back.

Used where trainwiz runs a helper process and waits for it (``run``: the ModelScope client,
pip for a host venv; ``probe``: a short command whose whole output is wanted -- a version, an
ssh probe of a node, squeue), and by callers that talk to their child as it runs or leave it
running (``spawn`` + ``stop_group`` / ``signal_group``: git, the hub download worker, the chat
worker, the ssh clients of a multi-node run, the run's watcher, a serve's processes). A child
spawned ``die_with_parent`` is also ended by the kernel when its parent dies, ``kill -9``
included, which no handler of the parent could answer (Linux's parent-death signal).
"""

from __future__ import annotations

import ctypes
import json
import os
import signal
import subprocess
import sys
import threading
import time
from collections import deque
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

KEEP_LINES = 200  # the output tail kept for messages
PR_SET_PDEATHSIG = 1  # <linux/prctl.h>


@dataclass
class Finished:
    """How a child ended: its exit code (None when it was cancelled or timed out)."""

    code: int | None
    lines: list[str] = field(default_factory=list)  # the last KEEP_LINES lines of its output
    cancelled: bool = False
    timed_out: bool = False
    # ``probe``'s: the child's whole output, and why it has no exit code -- the OSError that kept
    # it from starting or the TimeoutExpired of its timeout (what subprocess.run would raise).
    stdout: str = ""
    stderr: str = ""
    error: OSError | subprocess.TimeoutExpired | None = None

    @property
    def ok(self) -> bool:
        return self.code == 0

    def last_line(self, default: str = "no output") -> str:
        found = [line for line in self.lines if line.strip()]
        return found[-1].strip() if found else default


def spawn(
    argv: list[str],
    *,
    env: Mapping[str, str] | None = None,
    cwd: str | os.PathLike[str] | None = None,
    stdin: Any = subprocess.DEVNULL,
    stdout: Any = subprocess.PIPE,
    stderr: Any = subprocess.STDOUT,
    text: bool = True,
    die_with_parent: bool = False,
) -> subprocess.Popen[Any]:
    """Start ``argv`` as the leader of its own session and process group, so a cancel reaches
    every process it starts (git's lfs and ssh, a worker's own helpers) and a ^C or SIGHUP at
    the user's terminal never does. ``text`` output is decoded with errors replaced.

    ``die_with_parent``: the kernel KILLs the child when the thread that spawned it ends (the
    parent process, when that is its main thread), so a server never outlives its supervisor.
    Linux only (elsewhere a no-op); the child's own children are not covered."""
    return subprocess.Popen(
        argv,
        env=dict(env) if env is not None else None,
        cwd=cwd,
        stdin=stdin,
        stdout=stdout,
        stderr=stderr,
        text=text,
        errors="replace" if text else None,
        start_new_session=True,
        preexec_fn=_parent_death_signal() if die_with_parent else None,
    )


def _parent_death_signal() -> Callable[[], None] | None:
    """A ``preexec_fn`` (run in the child after its new session, before exec) asking the kernel
    for SIGKILL when the parent dies; the setting survives exec. A parent that died before the
    request took effect is caught by the parent pid having changed."""
    if not sys.platform.startswith("linux"):
        return None
    prctl = ctypes.CDLL(None, use_errno=True).prctl  # looked up before the fork, not in the child
    parent = os.getpid()

    def arm() -> None:
        prctl(ctypes.c_int(PR_SET_PDEATHSIG), ctypes.c_ulong(signal.SIGKILL),
              ctypes.c_ulong(0), ctypes.c_ulong(0), ctypes.c_ulong(0))  # fmt: skip
        if os.getppid() != parent:
            os.kill(os.getpid(), signal.SIGKILL)

    return arm


def signal_group(proc: subprocess.Popen[Any], sig: int) -> None:
    """``sig`` to the child's whole process group (nothing when the group is gone).

    The group's id is the leader's pid. Once the leader is reaped (``returncode`` set) and its
    group is empty, the kernel may give that pid to any new process, and a new session leader's
    group then has that id: signalling it would end a stranger (seen in the suite: a serve's
    stop, sent to a server reaped long before, ended another test's process). While any member
    of the old group lives, the pid stays reserved and no process has it, so a live process
    with that pid means the group is gone: nothing is sent then."""
    if proc.returncode is not None and os.path.exists(f"/proc/{proc.pid}"):
        return
    try:
        os.killpg(proc.pid, sig)
    except (ProcessLookupError, PermissionError):
        pass


def stop_group(proc: subprocess.Popen[Any], grace: float) -> None:
    """TERM to the child's process group, then KILL to whatever is left after ``grace`` s."""
    for sig, wait in ((signal.SIGTERM, grace), (signal.SIGKILL, 5.0)):
        signal_group(proc, sig)
        try:
            proc.wait(wait)
        except subprocess.TimeoutExpired:
            continue
        # The leader is gone; its group may not be: KILL the rest (no-op when empty).
        signal_group(proc, signal.SIGKILL)
        return


def run_all(argvs: list[list[str]], timeout: float) -> list[int | None]:
    """Every argv at once, output discarded (one short command to each node over ssh), each
    waited for until ``timeout`` s after the start; one still running then is KILLed with its
    group. Their exit codes, None for one that had to be killed."""
    procs = [
        spawn(argv, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, text=False)
        for argv in argvs
    ]
    deadline = time.monotonic() + timeout
    codes: list[int | None] = []
    for proc in procs:
        try:
            codes.append(proc.wait(max(0.0, deadline - time.monotonic())))
        except subprocess.TimeoutExpired:
            signal_group(proc, signal.SIGKILL)
            proc.wait()
            codes.append(None)
    return codes


def run(
    argv: list[str],
    *,
    env: Mapping[str, str] | None = None,
    cwd: str | None = None,
    cancel: threading.Event | None = None,
    on_line: Callable[[str], None] | None = None,
    tick: Callable[[], None] | None = None,
    timeout: float | None = None,
    grace: float = 10.0,
) -> Finished:
    """Run ``argv`` to its end (or until ``cancel`` is set / ``timeout`` s pass). ``on_line``
    gets each output line (stdout and stderr together); ``tick`` is called about twice a
    second while it runs (progress from the files it writes). Never raises for the child's
    exit; an argv that cannot start raises OSError."""
    proc = spawn(argv, env=env, cwd=cwd)
    tail: deque[str] = deque(maxlen=KEEP_LINES)

    def keep(line: str) -> None:
        line = line.rstrip("\n")
        tail.append(line)
        if on_line is not None:
            on_line(line)

    reader = _pump(proc.stdout, keep)
    cancelled, timed_out = _supervise(proc, cancel, timeout, grace, tick)
    reader.join(5)
    code = None if cancelled or timed_out else proc.returncode
    return Finished(code, list(tail), cancelled=cancelled, timed_out=timed_out)


def probe(
    argv: list[str],
    timeout: float | None,
    *,
    env: Mapping[str, str] | None = None,
    cwd: str | os.PathLike[str] | None = None,
    stdin: Any = subprocess.DEVNULL,
    grace: float = 1.0,
) -> Finished:
    """A short command run to its end (at most ``timeout`` s, None: no limit) with its stdout
    and stderr read whole and apart (as text). Never raises: a missing binary or a permission
    error is a Finished with ``error`` (the OSError) and that error as its stderr; a timeout
    ends the whole group (TERM, KILL after ``grace`` s) and is a Finished with ``timed_out``.
    Its own group means a probe's own children (ssh's ProxyCommand, srun's steps) end with it,
    and a ^C at the terminal reaches the wizard, not the probe."""
    try:
        proc = spawn(argv, env=env, cwd=cwd, stdin=stdin, stderr=subprocess.PIPE)
    except OSError as exc:
        return Finished(None, stderr=f"{argv[0]}: {exc.strerror or exc}", error=exc)
    out: list[str] = []
    err: list[str] = []
    readers = [_pump(proc.stdout, out.append), _pump(proc.stderr, err.append)]
    _cancelled, timed_out = _supervise(proc, None, timeout, grace, None)
    for reader in readers:
        reader.join(5)
    stdout, stderr = "".join(out), "".join(err)
    lines = (stdout.splitlines() + stderr.splitlines())[-KEEP_LINES:]
    if timed_out:
        expired = subprocess.TimeoutExpired(argv, timeout or 0.0, stdout, stderr)
        return Finished(None, lines, timed_out=True, stdout=stdout, stderr=stderr, error=expired)
    return Finished(proc.returncode, lines, stdout=stdout, stderr=stderr)


def _pump(stream: Any, sink: Callable[[str], None]) -> threading.Thread:
    """A daemon thread handing each line of ``stream`` to ``sink`` as it comes, so a chatty
    child never blocks on a full pipe."""

    def read() -> None:
        assert stream is not None
        for line in stream:
            sink(line)

    reader = threading.Thread(target=read, daemon=True)
    reader.start()
    return reader


def _supervise(
    proc: subprocess.Popen[Any],
    cancel: threading.Event | None,
    timeout: float | None,
    grace: float,
    tick: Callable[[], None] | None,
) -> tuple[bool, bool]:
    """Wait for the child; a set ``cancel`` or a passed ``timeout`` ends its group (TERM, then
    KILL after ``grace`` s). (cancelled, timed out)."""
    deadline = None if timeout is None else time.monotonic() + timeout
    cancelled = timed_out = False
    while proc.poll() is None:
        if cancel is not None and cancel.is_set():
            cancelled = True
        elif deadline is not None and time.monotonic() > deadline:
            timed_out = True
        if cancelled or timed_out:
            stop_group(proc, grace)
            break
        if tick is not None:
            tick()
        wait = 0.5 if deadline is None else min(0.5, max(0.01, deadline - time.monotonic()))
        try:
            proc.wait(wait)
        except subprocess.TimeoutExpired:
            pass
    return cancelled, timed_out


def run_json(argv: list[str], **kwargs: Any) -> tuple[Finished, Any]:
    """``run``, then the child's result: the JSON value on its last output line (None when
    that line is not JSON)."""
    done = run(argv, **kwargs)
    try:
        return done, json.loads(done.last_line(""))
    except ValueError:
        return done, None
