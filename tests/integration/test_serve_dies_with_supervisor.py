"""A real serve (FastChat's controller, model_worker and API server on CPU, one tiny finished run
shared by the module) on an address other than 127.0.0.1 becomes ready where it listens, and
`kill -9` of whatever holds it (the detached supervisor, or a foreground `trainwiz serve`) leaves
no server behind: the children die with their parent, found by the serve marker and by the port.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import threading
import urllib.request
from pathlib import Path

import pytest
import yaml

from backend.results.serve import serve_processes
from backend.results.serve_run import read_record, stop_serving
from tests.run_records import make_ended_run
from tests.trainwiz_cli import ROOT, cli
from tests.waiting import wait_until

pytestmark = [pytest.mark.slow]

READY_S = 300  # a fresh worker process imports torch and loads the model on a busy machine


@pytest.fixture(scope="module")
def finished(tmp_path_factory: pytest.TempPathFactory, tiny_model: Path) -> Path:
    """One finished full-weights run for the module: the tiny model as its output_dir."""
    root = tmp_path_factory.mktemp("served-run")
    run_dir = make_ended_run(root, "finished", None, preset="r", log="done\n")
    shutil.copytree(tiny_model, root / "out")
    preset = yaml.safe_load((run_dir / "preset.yaml").read_text())
    preset["model"]["dir"] = str(tiny_model)
    (run_dir / "preset.yaml").write_text(yaml.safe_dump(preset))
    return run_dir


def free_port(host: str) -> int:
    with socket.socket(socket.AF_INET6 if ":" in host else socket.AF_INET) as sock:
        sock.bind((host, 0))
        return int(sock.getsockname()[1])


def ask(base: str, model: str, key: str | None = None) -> dict:
    body = {"model": model, "messages": [{"role": "user", "content": "Hello!"}], "max_tokens": 4}
    headers = {"Content-Type": "application/json"}
    if key:
        headers["Authorization"] = f"Bearer {key}"
    request = urllib.request.Request(f"{base}/chat/completions", data=json.dumps(body).encode(),
                                     headers=headers, method="POST")  # fmt: skip
    with urllib.request.urlopen(request, timeout=120) as answer:
        return dict(json.loads(answer.read()))


def listens(host: str, port: int) -> bool:
    with socket.socket(socket.AF_INET6 if ":" in host else socket.AF_INET) as sock:
        sock.settimeout(2)
        return sock.connect_ex((host, port)) == 0


def all_gone(run_dir: Path, host: str, port: int) -> None:
    """Every process of the serve ends, and nothing answers on its port any more."""
    wait_until(lambda: not serve_processes(run_dir) and not listens(host, port),
               what="every serve process to end with its parent", timeout=60,
               seen=lambda: (serve_processes(run_dir), listens(host, port)))  # fmt: skip


def test_detached_on_127_0_0_2_is_ready_and_its_servers_die_with_the_supervisor(
    finished: Path,
) -> None:
    port = free_port("127.0.0.2")
    try:
        proc = cli("serve", str(finished), "--detach", "--host", "127.0.0.2", "--port", str(port),
                   "--device", "cpu", timeout=READY_S)  # fmt: skip
        base = proc.stdout.splitlines()[0]
        assert base == f"http://127.0.0.2:{port}/v1"
        assert ask(base, finished.name)["model"] == finished.name
        record = read_record(finished)
        assert record is not None and record["api_key"] is False
        supervisor = int(record["pid"])
        assert len([p for p in serve_processes(finished) if p != supervisor]) >= 3
        os.kill(supervisor, signal.SIGKILL)
        all_gone(finished, "127.0.0.2", port)
    finally:
        stop_serving(finished)


def test_foreground_on_every_ipv6_address_is_ready_and_dies_with_the_cli(finished: Path) -> None:
    port = free_port("::")
    env = {**os.environ, "TW_SERVE_KEY": "k-3x4mple"}
    argv = [sys.executable, "-m", "tui.cli", "serve", str(finished), "--host", "::",
            "--port", str(port), "--device", "cpu", "--api-key-env", "TW_SERVE_KEY"]  # fmt: skip
    server = subprocess.Popen(argv, cwd=ROOT, env=env, stdout=subprocess.PIPE,
                              stderr=subprocess.DEVNULL, text=True)  # fmt: skip
    lines: list[str] = []
    assert server.stdout is not None
    reader = threading.Thread(target=lambda: lines.extend(server.stdout or ()), daemon=True)
    reader.start()
    try:
        wait_until(lambda: lines or server.poll() is not None, what="the served URL",
                   timeout=READY_S, seen=lambda: (server.poll(), lines))  # fmt: skip
        assert lines and lines[0].strip() == f"http://[::1]:{port}/v1", server.poll()
        assert ask(lines[0].strip(), finished.name, "k-3x4mple")["model"] == finished.name
        assert len(serve_processes(finished)) >= 3
        server.send_signal(signal.SIGKILL)
        server.wait(10)
        all_gone(finished, "::1", port)
    finally:
        if server.poll() is None:
            server.kill()
            server.wait(10)
        stop_serving(finished)
