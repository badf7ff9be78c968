"""Chat with a run's model: a worker process holds the model, the wizard sends prompts.

The worker (``worker.py chat``) runs with the training side's python and answers one JSON line
per prompt, keeping the conversation between turns in the chat template the run trained with
(``serve_template.run_template``: the metrics ``start`` line's ``chat_template``). ``ChatSession`` is the wizard side:
start it, ``ask`` as often as wanted, ``close``. Every read has a deadline, so a worker that hangs
or dies becomes an error naming its last stderr lines, never a frozen terminal. A ``cancel``
event (the wizard's Chat view closing) kills the worker within a fraction of a second, while it
loads the model or generates, so closing the view never leaves a process behind.
"""

from __future__ import annotations

import json
import os
import selectors
import signal
import subprocess
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import IO, Any

from backend import subproc
from backend.errors import BadInput, TrainwizError
from backend.i18n import _
from backend.results.serve_template import run_template
from backend.results.weights import WORKER, weights, worker_python

_POLL_S = 0.1  # how quickly a cancel is noticed while waiting for the worker


class ChatCancelled(TrainwizError):
    """The caller's cancel event was set: the worker was killed."""


class ChatSession:
    """``progress(seconds_waited)`` is called about every second while the model loads."""

    def __init__(
        self,
        run_dir: Path,
        *,
        checkpoint: int | None = None,
        device: str = "auto",
        max_new_tokens: int = 128,
        load_timeout: float = 300.0,
        reply_timeout: float = 600.0,
        cancel: threading.Event | None = None,
        progress: Callable[[float], None] | None = None,
    ) -> None:
        source = weights(run_dir, checkpoint)
        self.model = source.path
        self.consolidated = source.sharded  # an FSDP-sharded checkpoint, consolidated to load
        self.reply_timeout = reply_timeout
        self.cancel = cancel or threading.Event()
        argv = [
            worker_python(run_dir),
            str(WORKER),
            "chat",
            *source.worker_args(),
            f"--template={run_template(run_dir)}",
            "--device",
            device,
            "--max-new-tokens",
            str(max_new_tokens),
        ]
        self._err_path = Path(run_dir) / "chat.log"
        self._err: IO[bytes] = open(self._err_path, "ab")  # noqa: SIM115 (closed in close())
        self.proc = subproc.spawn(  # its own group: closing ends what the worker started too
            argv,
            stdin=subprocess.PIPE,
            stderr=self._err,
            env={**os.environ, "PYTHONUNBUFFERED": "1", "TOKENIZERS_PARALLELISM": "false"},
        )
        ready = self._read(load_timeout, progress)
        if not ready.get("ready"):
            self.close()
            raise TrainwizError(f"the chat worker exited: {ready.get('error') or ready} "
                                f"(full log: {self._err_path})")  # fmt: skip
        self.device = str(ready.get("device"))
        self.template = str(ready.get("template"))  # what the worker renders with

    @property
    def pid(self) -> int:
        return self.proc.pid

    def _read(
        self, timeout: float, progress: Callable[[float], None] | None = None
    ) -> dict[str, Any]:
        assert self.proc.stdout is not None
        start = time.monotonic()
        deadline = start + timeout
        told = 0
        with selectors.DefaultSelector() as sel:
            sel.register(self.proc.stdout, selectors.EVENT_READ)
            while time.monotonic() < deadline:
                if self.cancel.is_set():
                    self.close()
                    raise ChatCancelled("the chat was closed: its worker was stopped")
                wait = min(_POLL_S, max(0.0, deadline - time.monotonic()))
                if sel.select(timeout=wait):
                    line = self.proc.stdout.readline()
                    if not line:
                        break
                    return dict(json.loads(line))
                if self.proc.poll() is not None:
                    break
                waited = time.monotonic() - start
                if progress is not None and int(waited) > told:
                    told = int(waited)
                    progress(waited)
        timed_out = time.monotonic() >= deadline
        self.close()  # waits for the worker: stdout's EOF can come before its exit status
        code = self.proc.returncode
        if code == 2 and self.consolidated:  # consolidate.py refused the shards (incomplete)
            said = [ln for ln in self._tail().split(" | ") if ln.startswith("consolidate:")]
            raise BadInput(said[-1] if said else self._tail())
        what = f"gave no answer within {timeout:.0f} s" if timed_out else f"exited ({code})"
        raise TrainwizError(
            _("the chat worker {what}: {tail}").format(what=what, tail=self._tail())
        )

    def _tail(self) -> str:
        try:
            lines = self._err_path.read_text(encoding="utf-8", errors="replace").splitlines()
        except OSError:
            return "(no log)"
        return " | ".join(lines[-5:]) + f" (full log: {self._err_path})"

    def ask(self, prompt: str) -> str:
        assert self.proc.stdin is not None
        try:
            self.proc.stdin.write(json.dumps({"prompt": prompt}) + "\n")
            self.proc.stdin.flush()
        except BrokenPipeError as exc:
            raise TrainwizError(f"the chat worker is gone: {self._tail()}") from exc
        answer = self._read(self.reply_timeout)
        if "error" in answer:
            self.close()
            raise TrainwizError(f"the chat worker failed: {answer['error']} ({self._err_path})")
        return str(answer.get("reply", ""))

    def close(self) -> None:
        """End the worker: stdin closed (it exits after its reply), its whole process group
        killed when cancelled or when it does not exit within 10 s."""
        if self.cancel.is_set():
            subproc.signal_group(self.proc, signal.SIGKILL)
        if self.proc.stdin is not None and not self.proc.stdin.closed:
            try:
                self.proc.stdin.close()
            except BrokenPipeError:
                pass
        try:
            self.proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            subproc.signal_group(self.proc, signal.SIGKILL)
            self.proc.wait()
        if self.proc.stdout is not None:
            self.proc.stdout.close()
        self._err.close()

    def __enter__(self) -> ChatSession:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
