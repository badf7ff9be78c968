"""A process group is signalled only while it can still be the child's: once the leader is reaped
and its pid belongs to another process (the kernel hands pids out again; the suite's machine wraps
at 32,768), that process's own session is left alone, while a reaped leader's surviving group is
still ended. The reuse is made, not waited for: root sets the next pid (``ns_last_pid``)."""

from __future__ import annotations

import signal
import subprocess
import sys
from pathlib import Path

from backend import subproc
from backend.procinfo import proc_info
from tests.waiting import wait_until

NS_LAST_PID = Path("/proc/sys/kernel/ns_last_pid")
# Says what reaches it: TERM (caught), then a real-time marker that the test sends last. Standard
# signals are delivered before real-time ones, so once it says MARK, any TERM or KILL sent before
# has shown (a KILL as the end of its output).
WITNESS = """
import signal, time
signal.signal(signal.SIGTERM, lambda *_: print("TERM", flush=True))
signal.signal(signal.SIGRTMIN, lambda *_: print("MARK", flush=True))
print("ready", flush=True)
while True:
    time.sleep(60)
"""


def _reaped_leader_and_its_pids_new_owner() -> tuple[
    subprocess.Popen[bytes], subprocess.Popen[str]
]:
    """A reaped session leader, and a new session leader that the kernel gave the same pid."""
    for _attempt in range(50):  # another process may take the pid between the write and the fork
        gone = subprocess.Popen(["true"], start_new_session=True)
        gone.wait()
        NS_LAST_PID.write_text(str(gone.pid - 1))
        other = subprocess.Popen([sys.executable, "-c", WITNESS], start_new_session=True,
                                 stdout=subprocess.PIPE, text=True)  # fmt: skip
        if other.pid == gone.pid:
            return gone, other
        other.kill()
        other.communicate()
    raise AssertionError("no new process got a reaped child's pid in 50 attempts")


def test_a_reaped_leaders_pid_now_anothers_session_is_not_signalled() -> None:
    gone, other = _reaped_leader_and_its_pids_new_owner()
    assert other.stdout is not None and other.stdout.readline() == "ready\n"
    try:
        subproc.signal_group(gone, signal.SIGTERM)  # e.g. a serve's stop of a server that died
        subproc.stop_group(gone, 1.0)  # the leader is gone; "KILL the rest" of its group
        other.send_signal(signal.SIGRTMIN)
        assert other.stdout.readline() == "MARK\n", (
            "the reaped child's pid's new owner was signalled"
        )
    finally:
        other.kill()
        other.communicate()


def test_a_reaped_leaders_surviving_group_is_still_ended() -> None:
    # the leader starts a child in its group and exits; the child keeps the group alive
    leader = subprocess.Popen(
        ["sh", "-c", f"{sys.executable} -c 'import time; time.sleep(120)' & echo $!"],
        start_new_session=True, stdout=subprocess.PIPE, text=True,
    )  # fmt: skip
    assert leader.stdout is not None
    child = int(leader.stdout.readline())
    leader.wait()
    leader.stdout.close()
    subproc.signal_group(leader, signal.SIGKILL)
    wait_until(lambda: proc_info(child) is None, what=f"the group's survivor {child} to end",
               seen=lambda: proc_info(child))  # fmt: skip
