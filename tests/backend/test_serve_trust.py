"""What a serve trusts about itself, checked without FastChat: readiness is asked on the address
the API bound (127.0.0.2 as given, :: as ::1 in brackets, 0.0.0.0 as 127.0.0.1), and a child
spawned to die with its parent ends when that parent is killed with SIGKILL (nothing could
catch that signal and stop the servers)."""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest

from backend.procinfo import proc_info
from backend.results import serve, serve_ready
from tests.waiting import wait_until

ROOT = Path(__file__).resolve().parents[2]


class _Models(BaseHTTPRequestHandler):
    """FastChat's /v1/models answer for one model, "m"."""

    def do_GET(self) -> None:
        body = json.dumps({"data": [{"id": "m"}]}).encode()
        self.send_response(200 if self.path == "/v1/models" else 404)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *_args: object) -> None:
        pass


@contextmanager
def _listening(address: str) -> Iterator[int]:
    family = socket.AF_INET6 if ":" in address else socket.AF_INET
    server_class = type("Server", (ThreadingHTTPServer,), {"address_family": family})
    server = server_class((address, 0), _Models)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield int(server.server_address[1])
    finally:
        server.shutdown()
        server.server_close()


def _plan(tmp_path: Path, host: str, port: int) -> serve.ServePlan:
    return serve.ServePlan(
        run_dir=tmp_path,
        model_name="m",
        model_path=tmp_path,
        host=host,
        port=port,
        engine="model_worker",
        python=sys.executable,
        device="cpu",
    )


@pytest.mark.parametrize(
    ("bound", "given", "url_host"),
    [
        ("127.0.0.2", "127.0.0.2", "127.0.0.2"),
        ("::1", "::", "[::1]"),
        ("::1", "::1", "[::1]"),
        ("127.0.0.1", "0.0.0.0", "127.0.0.1"),
    ],
)
def test_readiness_is_asked_where_the_api_listens(
    tmp_path: Path, bound: str, given: str, url_host: str
) -> None:
    with _listening(bound) as port:
        plan = _plan(tmp_path, given, port)
        assert plan.base_url == f"http://{url_host}:{port}/v1"
        assert plan.curl().startswith(f"curl http://{url_host}:{port}/v1/chat/completions ")
        ready = serve_ready.api_lists(plan.base_url, plan.api_key, plan.model_name)
        assert ready, f"{given} listening on {bound}: not seen as ready"


# Spawns a sleeper that must die with this process, prints its pid, then waits to be killed.
PARENT = """
import subprocess, sys, time
from backend import subproc
child = subproc.spawn([sys.executable, "-c", "import time; time.sleep(600)"],
                      stdout=subprocess.DEVNULL, text=False, die_with_parent=True)
print(child.pid, flush=True)
time.sleep(600)
"""


def test_a_child_dies_with_its_parent_killed_by_sigkill() -> None:
    parent = subprocess.Popen([sys.executable, "-c", PARENT], cwd=ROOT, stdout=subprocess.PIPE,
                              stderr=subprocess.PIPE, text=True)  # fmt: skip
    child = 0
    try:
        assert parent.stdout is not None
        line = parent.stdout.readline()
        assert line.strip().isdigit(), parent.stderr.read() if parent.stderr else ""
        child = int(line)
        assert proc_info(child) is not None and os.getsid(child) == child  # its own session
        parent.send_signal(signal.SIGKILL)
        parent.wait(10)
        wait_until(lambda: proc_info(child) is None, what=f"child {child} to end with its parent",
                   timeout=20, seen=lambda: proc_info(child))  # fmt: skip
    finally:
        if parent.poll() is None:
            parent.kill()
            parent.wait(10)
        if child and proc_info(child) is not None:
            os.kill(child, signal.SIGKILL)
