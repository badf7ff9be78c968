"""Chat with a run's model: a worker process holds the model, the wizard sends prompts.

The worker (``worker.py chat``) runs with the training side's python and answers one JSON line
per prompt, keeping FastChat's conversation between turns. ``ChatSession`` is the wizard side:
start it, ``ask`` as often as wanted, ``close``. Every read has a deadline, so a worker that hangs
or dies becomes an error naming its last stderr lines, never a frozen terminal.
"""

from __future__ import annotations

import json
import os
import selectors
import subprocess
import time
from pathlib import Path
from typing import IO, Any

from backend.errors import TrainwizError
from backend.i18n import _
from backend.results.weights import WORKER, model_dir, worker_python


class ChatSession:
    def __init__(
        self,
        run_dir: Path,
        *,
        checkpoint: int | None = None,
        device: str = "auto",
        max_new_tokens: int = 128,
        load_timeout: float = 300.0,
        reply_timeout: float = 600.0,
    ) -> None:
        self.model = model_dir(run_dir, checkpoint)
        self.reply_timeout = reply_timeout
        argv = [
            worker_python(run_dir),
            str(WORKER),
            "chat",
            "--model",
            str(self.model),
            "--device",
            device,
            "--max-new-tokens",
            str(max_new_tokens),
        ]
        self._err_path = Path(run_dir) / "chat.log"
        self._err: IO[bytes] = open(self._err_path, "ab")  # noqa: SIM115 (closed in close())
        self.proc = subprocess.Popen(
            argv,
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=self._err,
            text=True,
            env={**os.environ, "PYTHONUNBUFFERED": "1", "TOKENIZERS_PARALLELISM": "false"},
        )
        ready = self._read(load_timeout)
        if not ready.get("ready"):
            self.close()
            raise TrainwizError(_("the chat worker did not start: {ready}").format(ready=ready))
        self.device = str(ready.get("device"))
        self.template = str(ready.get("template"))

    def _read(self, timeout: float) -> dict[str, Any]:
        assert self.proc.stdout is not None
        deadline = time.monotonic() + timeout
        with selectors.DefaultSelector() as sel:
            sel.register(self.proc.stdout, selectors.EVENT_READ)
            while time.monotonic() < deadline:
                if sel.select(timeout=min(1.0, max(0.0, deadline - time.monotonic()))):
                    line = self.proc.stdout.readline()
                    if not line:
                        break
                    return dict(json.loads(line))
                if self.proc.poll() is not None:
                    break
        code = self.proc.poll()
        self.close()
        what = "exited" if code is not None else f"gave no answer within {timeout:.0f} s"
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
            raise TrainwizError(
                _("the chat worker is gone: {tail}").format(tail=self._tail())
            ) from exc
        return str(self._read(self.reply_timeout).get("reply", ""))

    def close(self) -> None:
        if self.proc.stdin is not None and not self.proc.stdin.closed:
            try:
                self.proc.stdin.close()
            except BrokenPipeError:
                pass
        try:
            self.proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
        if self.proc.stdout is not None:
            self.proc.stdout.close()
        self._err.close()

    def __enter__(self) -> ChatSession:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
