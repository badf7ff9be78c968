"""`trainwiz serve` on CPU through FastChat's real stack (controller, model_worker, OpenAI API
server): a tiny finished run and a LoRA run are served, a real HTTP POST /v1/chat/completions
is answered, and after `trainwiz stop` / ctrl+c no process of the serve is left."""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
from pathlib import Path

import pytest
import yaml

from backend.results.serve import serve_processes
from backend.results.serve_run import stop_serving
from tests.backend.test_results_add_up import trained_lora_run
from tests.integration.test_launch_host import ROOT, cli, home, wait_state  # noqa: F401
from tests.integration.test_resume_host import free_port

pytestmark = [pytest.mark.training, pytest.mark.slow]


def finished_run(tmp_path: Path) -> Path:
    data = yaml.safe_load((ROOT / "presets" / "tiny-cpu.yaml").read_text())
    data["training"]["max_steps"] = 2
    data["launch"]["master_port"] = free_port()
    preset = tmp_path / "serve.yaml"
    preset.write_text(yaml.safe_dump(data))
    started = json.loads(cli("launch", str(preset), "--detach", "--json").stdout)
    assert wait_state(started["run_id"], ("finished", "failed"))["state"] == "finished"
    return Path(started["run_dir"])


def ask(port: int, model: str, key: str | None = None) -> dict:
    """One chat completion, greedy: the API's default temperature (0.7) samples, and a sampled
    first token of the 2-step tiny model was now and then its end of sequence (an empty answer,
    0 completion tokens). The seeded run's greedy answer is the same every time."""
    body = {"model": model, "messages": [{"role": "user", "content": "Hello!"}],
            "max_tokens": 8, "temperature": 0}  # fmt: skip
    request = urllib.request.Request(
        f"http://127.0.0.1:{port}/v1/chat/completions",
        data=json.dumps(body).encode(),
        headers={"Content-Type": "application/json",
                 **({"Authorization": f"Bearer {key}"} if key else {})},
        method="POST",
    )  # fmt: skip
    with urllib.request.urlopen(request, timeout=120) as answer:
        return dict(json.loads(answer.read()))


def cmdlines() -> list[bytes]:
    out = []
    for entry in Path("/proc").glob("[0-9]*"):
        try:
            out.append((entry / "cmdline").read_bytes())
        except OSError:
            pass
    return out


def nothing_left(run_dir: Path, timeout: float = 15) -> None:
    deadline = time.monotonic() + timeout
    while serve_processes(run_dir) and time.monotonic() < deadline:
        time.sleep(0.2)
    assert serve_processes(run_dir) == []
    assert not (run_dir / "serve" / "serve.json").exists()


@pytest.mark.usefixtures("home")
def test_detached_serve_answers_and_stop_leaves_nothing(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    run_dir = finished_run(tmp_path)
    port = free_port()
    monkeypatch.setenv("TW_SERVE_KEY", "k-3x4mple-secret")
    try:
        proc = cli("serve", run_dir.name, "--detach", "--port", str(port), "--device", "cpu",
                   "--api-key-env", "TW_SERVE_KEY")  # fmt: skip
        base, curl = proc.stdout.strip().splitlines()
        assert base == f"http://127.0.0.1:{port}/v1"
        assert curl.startswith(f"curl {base}/chat/completions ") and run_dir.name in curl
        assert "$API_KEY" in curl and "k-3x4mple-secret" not in proc.stdout + proc.stderr
        assert not any(b"k-3x4mple-secret" in c for c in cmdlines())  # never on a command line
        with pytest.raises(urllib.error.HTTPError) as refused:
            ask(port, run_dir.name)
        assert refused.value.code == 401
        answer = ask(port, run_dir.name, "k-3x4mple-secret")
        assert answer["model"] == run_dir.name
        assert isinstance(answer["choices"][0]["message"]["content"], str)
        assert answer["usage"]["completion_tokens"] >= 1
        workers = [c for c in cmdlines() if b"fastchat.serve.model_worker" in c]
        assert any(b"--model-names\0" + run_dir.name.encode() in c for c in workers)
        assert len(serve_processes(run_dir)) >= 3  # controller, worker, API server (+ supervisor)
        stopped = cli("stop", run_dir.name)
        assert "stopped serving" in stopped.stdout
        nothing_left(run_dir)
        with socket.socket() as sock:  # nothing listens there any more (TIME_WAIT aside)
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            sock.bind(("127.0.0.1", port))
    finally:  # a failed assertion must not leave the servers running for the rest of the suite
        stop_serving(run_dir)


def test_foreground_serve_of_a_lora_run_stops_on_ctrl_c(tmp_path: Path, tiny_model: Path) -> None:
    run_dir = trained_lora_run(tmp_path, tiny_model)
    port = free_port()
    server = subprocess.Popen(
        [sys.executable, "-m", "tui.cli", "serve", str(run_dir), "--port", str(port),
         "--device", "cpu"],
        cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
    )  # fmt: skip
    try:
        assert server.stdout is not None
        base = server.stdout.readline().strip()  # printed once the model answers
        assert base == f"http://127.0.0.1:{port}/v1", server.stderr.read() if server.stderr else ""
        answer = ask(port, run_dir.name)
        assert isinstance(answer["choices"][0]["message"]["content"], str)
        adapter = run_dir / "serve" / f"adapter-{(tmp_path / 'out').name}" / "adapter_config.json"
        assert json.loads(adapter.read_text())["base_model_name_or_path"] == str(tiny_model)
        server.send_signal(signal.SIGINT)  # ctrl+c
        assert server.wait(60) == 0
    finally:
        if server.poll() is None:
            server.kill()
    nothing_left(run_dir)


def test_refusals_before_anything_starts(tmp_path: Path) -> None:
    from backend.results.serve import plan_serve
    from tests.backend.test_results_add_up import make_run

    run_dir = make_run(tmp_path, "finished", checkpoint=None)
    no_model = cli("serve", str(run_dir), "--port", str(free_port()), check=False)
    assert no_model.returncode == 2 and "no saved model" in no_model.stderr
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        sock.listen()
        taken = cli("serve", str(run_dir), "--port", str(sock.getsockname()[1]), check=False)
    assert taken.returncode == 2 and "in use" in taken.stderr
    assert serve_processes(run_dir) == []
    os.environ.pop("TW_NOT_SET", None)
    unset = cli("serve", str(run_dir), "--api-key-env", "TW_NOT_SET", check=False)
    assert unset.returncode == 2 and "TW_NOT_SET" in unset.stderr
    with pytest.raises(Exception, match="no saved model"):
        plan_serve(run_dir, host="0.0.0.0", port=free_port())


def test_another_host_needs_a_key_or_allow_no_key_and_warns(
    tmp_path: Path, tiny_model: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from backend.results.serve import plan_serve

    run_dir = trained_lora_run(tmp_path, tiny_model)
    with pytest.raises(Exception, match="--allow-no-key"):
        plan_serve(run_dir, host="0.0.0.0", port=free_port(), device="cpu")
    plan = plan_serve(run_dir, host="0.0.0.0", port=free_port(), device="cpu", allow_no_key=True)
    (warning,) = plan.warnings
    assert "0.0.0.0" in warning and "other machines" in warning and "--allow-no-key" in warning
    assert plan.engine == "model_worker" and plan.model_name == run_dir.name
    monkeypatch.setenv("TW_KEY", "x")
    keyed = plan_serve(run_dir, host="0.0.0.0", port=free_port(), api_key_env="TW_KEY")
    assert "--api-key-env" not in keyed.warnings[0] and "$API_KEY" in keyed.curl()
    assert plan_serve(run_dir, port=free_port(), device="cpu").warnings == []
