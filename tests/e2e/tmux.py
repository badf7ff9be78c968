"""Drive the real ``trainwiz`` console script inside tmux, as a user on an SSH session would.

Each ``Pane`` runs on its own tmux server (``tmux -L <socket>``) with an empty config, at a
fixed size that is never changed (a resize repaints everything and would hide a stale frame).
Keys go in with ``send-keys``; what the user sees comes back with ``capture-pane -p``; every
wait polls against a deadline instead of sleeping a fixed time.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import time
import uuid
from collections.abc import Callable, Sequence
from pathlib import Path

TMUX = shutil.which("tmux")


class PaneDied(AssertionError):
    """The program in the pane exited while the test still expected it on screen."""


class Pane:
    def __init__(self, argv: Sequence[str], *, width: int, height: int, env: dict[str, str],
                 cwd: Path) -> None:  # fmt: skip
        assert TMUX is not None
        self.socket = f"tw-e2e-{uuid.uuid4().hex[:10]}"
        self.width, self.height = width, height
        self.last = ""
        # The server starts with exactly this environment (no COLUMNS/LINES from the caller,
        # which would override the pane's real size), so the program inherits only it.
        self._env = dict(env)
        self._tmux("-f", "/dev/null", "new-session", "-d", "-s", "main", "-x", str(width),
                   "-y", str(height), "-c", str(cwd), "--", *argv)  # fmt: skip
        self._tmux("set-option", "-t", "main", "remain-on-exit", "on")

    def _tmux(self, *args: str) -> str:
        done = subprocess.run(
            [str(TMUX), "-L", self.socket, *args],
            capture_output=True,
            text=True,
            timeout=30,
            env=self._env,
        )
        if done.returncode != 0:
            raise RuntimeError(f"tmux {' '.join(args)}: {done.stderr.strip()}")
        return done.stdout

    # ---- looking -------------------------------------------------------------------------
    def capture(self) -> str:
        self.last = self._tmux("capture-pane", "-p", "-t", "main")
        return self.last

    def dead(self) -> bool:
        return self._tmux("display-message", "-p", "-t", "main", "#{pane_dead}").strip() == "1"

    def exit_status(self) -> str:
        return self._tmux("display-message", "-p", "-t", "main", "#{pane_dead_status}").strip()

    def wait_for(self, what: str | re.Pattern[str] | Callable[[str], bool], *,
                 timeout: float = 30.0, alive: bool = True) -> str:  # fmt: skip
        """Poll the pane until ``what`` (text, regex or predicate) shows; fail with the screen."""
        if isinstance(what, str):
            text = what

            def check(screen: str) -> bool:
                return text in screen
        elif isinstance(what, re.Pattern):
            pattern = what

            def check(screen: str) -> bool:
                return pattern.search(screen) is not None
        else:
            check = what
        deadline = time.monotonic() + timeout
        while True:
            screen = self.capture()
            if check(screen):
                return screen
            if alive and self.dead():
                raise PaneDied(
                    f"trainwiz exited (status {self.exit_status()}) while waiting for "
                    f"{what!r}; last screen:\n{screen}"
                )
            if time.monotonic() > deadline:
                raise AssertionError(
                    f"waited {timeout:.0f} s for {what!r} at {self.width}x{self.height}; "
                    f"the screen shows:\n{screen}"
                )
            time.sleep(0.1)

    def wait_dead(self, timeout: float = 30.0) -> str:
        """The exit status ("0"), "signal N", or "" when tmux never told. tmux marks the pane
        dead when its terminal closes, a moment before it has reaped the process, and its
        status variable may stay empty: its "Pane is dead (status N" line is read too."""
        deadline = time.monotonic() + timeout
        while not self.dead():
            if time.monotonic() > deadline:
                raise AssertionError(f"trainwiz did not exit; the screen shows:\n{self.capture()}")
            time.sleep(0.1)
        told = time.monotonic() + 10
        while True:
            status = self.exit_status()
            if status:
                return status
            said = re.search(r"Pane is dead \((status|signal) (\d+)", self.capture())
            if said:
                return said[2] if said[1] == "status" else f"signal {said[2]}"
            if time.monotonic() > told:
                return ""
            time.sleep(0.1)

    # ---- typing --------------------------------------------------------------------------
    def send(self, *keys: str) -> None:
        """tmux key names: 'C-n', 'M-Right', 'Enter', 'Tab', 'F5' …"""
        if self.dead():
            raise PaneDied(f"trainwiz exited (status {self.exit_status()}):\n{self.capture()}")
        self._tmux("send-keys", "-t", "main", *keys)

    def type(self, text: str) -> None:
        self._tmux("send-keys", "-t", "main", "-l", "--", text)

    def close(self) -> None:
        try:
            self._tmux("kill-server")
        except (RuntimeError, subprocess.TimeoutExpired):
            pass


def trainwiz_env(home: Path) -> dict[str, str]:
    """The test's own TRAINWIZ_HOME and config dir; this checkout first on PYTHONPATH."""
    root = Path(__file__).resolve().parents[2]
    python_path = os.environ.get("PYTHONPATH", "")
    return {
        "TRAINWIZ_HOME": str(home),
        "XDG_CONFIG_HOME": str(home / "config"),
        "PYTHONPATH": f"{root}{os.pathsep}{python_path}" if python_path else str(root),
        "PATH": os.environ.get("PATH", ""),
        "TERM": "xterm-256color",
        "COLORTERM": "truecolor",
        "LANG": "C.UTF-8",
        "HOME": os.environ.get("HOME", str(home)),
        # One compute thread per torch process and live runs idling between steps, as every
        # other test process has (conftest): a wizard's run with torch's default (one thread
        # per core), spinning all the while, fights the other workers' tests.
        "OMP_NUM_THREADS": os.environ.get("OMP_NUM_THREADS", "1"),
        **{k: v for k, v in os.environ.items() if k.startswith("TRAINWIZ_STEP_PAUSE")},
    }
