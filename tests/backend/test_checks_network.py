"""Network and Docker-socket checks against real sockets: a local HTTP server, a closed port,
an unroutable address, a socket path with no daemon, and a stale socket nobody listens on."""

from __future__ import annotations

import http.server
import socket
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest

from backend.checks import Targets, run_checks
from tests.backend.test_checks_host import make_preset


class _Hub(http.server.BaseHTTPRequestHandler):
    """Answers like the Hub: 200 for a public repo, 401 gated, 404 missing, 503 overloaded."""

    def do_HEAD(self) -> None:
        if "/busy/" in self.path:
            self.send_response(503)
        elif "/moved/" in self.path:  # the Hub redirects file downloads to its CDN
            self.send_response(302)
            self.send_header("Location", "http://127.0.0.1:9/cdn/config.json")
        elif "/gated/" in self.path:
            self.send_response(401)
        elif "/public/" in self.path or self.path in ("/", "/simple/"):
            self.send_response(200)
        else:
            self.send_response(404)
        self.end_headers()

    def log_message(self, *args: object) -> None:
        pass


@pytest.fixture
def hub() -> Iterator[str]:
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), _Hub)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{server.server_address[1]}"
    server.shutdown()
    server.server_close()


def _closed_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def _hf(tmp_path: Path, hub: str, repo: str):  # type: ignore[no-untyped-def]
    preset = make_preset(tmp_path, model={"source": "hf", "repo": repo, "endpoint": hub})
    (result,) = run_checks(preset, only=["hf_endpoint"])
    return result


def test_hf_endpoint_from_the_preset_public_gated_missing(tmp_path: Path, hub: str) -> None:
    ok = _hf(tmp_path, hub, "public/llama-7b")
    assert ok.status == "ok" and ok.data["url"].startswith(hub)
    gated = _hf(tmp_path, hub, "gated/llama-7b")
    assert gated.status == "fail" and "HF_TOKEN" in gated.fix and gated.blocks == ["model"]
    missing = _hf(tmp_path, hub, "nobody/llama-7b")
    assert missing.status == "fail" and "404" in missing.summary
    moved = _hf(tmp_path, hub, "moved/llama-7b")  # the redirect is not followed to a dead CDN
    assert moved.status == "ok" and moved.data["status"] == 302
    busy = _hf(tmp_path, hub, "busy/llama-7b")
    assert busy.status == "warn" and "503" in busy.summary and busy.blocks == []


def test_unreachable_endpoints_fail_with_the_fix(tmp_path: Path) -> None:
    dead = f"http://127.0.0.1:{_closed_port()}"
    preset = make_preset(tmp_path, model={"source": "hf", "repo": "a/b-7b"})
    targets = Targets(
        hf_endpoint=dead,
        pip_index=dead + "/simple",
        registry_url=dead + "/v2/",
        network_timeout_s=1,
    )
    results = {
        r.id: r for r in run_checks(preset, targets=targets, only=["hf_endpoint", "pip_index"])
    }
    assert results["hf_endpoint"].status == "fail"
    assert "refused" in results["hf_endpoint"].summary.lower()
    assert "hf-mirror.com" in results["hf_endpoint"].fix
    assert results["pip_index"].status == "fail" and results["pip_index"].blocks == ["image"]


def test_a_server_that_never_answers_times_out(tmp_path: Path) -> None:
    """A listening socket nobody accepts from: the TCP handshake completes, no reply ever comes."""
    silent = socket.socket()
    silent.bind(("127.0.0.1", 0))
    silent.listen(8)
    try:
        targets = Targets(
            pip_index=f"http://127.0.0.1:{silent.getsockname()[1]}/simple", network_timeout_s=0.5
        )
        (result,) = run_checks(make_preset(tmp_path), targets=targets, only=["pip_index"])
    finally:
        silent.close()
    assert result.status == "fail" and result.blocks == ["image"]
    assert "timed out" in result.summary


def test_pip_index_file_url_and_registry_skip_for_host_runner(tmp_path: Path, hub: str) -> None:
    targets = Targets(pip_index=f"file://{tmp_path}", registry_url=hub + "/v2/")
    results = {
        r.id: r
        for r in run_checks(make_preset(tmp_path), targets=targets, only=["pip_index", "registry"])
    }
    assert results["pip_index"].status == "ok"
    assert results["registry"].status == "skip" and "host" in results["registry"].summary
    missing = Targets(pip_index=f"file://{tmp_path}/nope")
    (result,) = run_checks(make_preset(tmp_path), targets=missing, only=["pip_index"])
    assert result.status == "fail"


def _docker_preset(tmp_path: Path):  # type: ignore[no-untyped-def]
    return make_preset(tmp_path, launch={"runner": "docker", "device": "cuda"})


def test_stopped_daemon_no_socket(tmp_path: Path) -> None:
    targets = Targets(docker_host=f"unix://{tmp_path}/docker.sock")
    results = {
        r.id: r
        for r in run_checks(
            _docker_preset(tmp_path),
            targets=targets,
            only=["docker_daemon", "docker_access", "nvidia_runtime", "gpu_probe"],
        )
    }
    daemon = results["docker_daemon"]
    assert daemon.status == "fail" and "no socket" in daemon.summary
    assert daemon.blocks == ["image", "launch"]
    assert "docker" in daemon.fix
    assert results["docker_access"].status == "skip"
    assert results["nvidia_runtime"].status == "skip"
    assert results["gpu_probe"].status == "skip"


def test_stale_socket_with_no_daemon_is_refused(tmp_path: Path) -> None:
    path = tmp_path / "stale.sock"
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    sock.bind(str(path))  # the file exists, nobody listens: what a crashed dockerd leaves
    try:
        (result,) = run_checks(
            _docker_preset(tmp_path),
            targets=Targets(docker_host=f"unix://{path}"),
            only=["docker_daemon"],
        )
    finally:
        sock.close()
    assert result.status == "fail" and "refused" in result.summary.lower()
    assert "systemctl restart docker" in result.fix


def test_docker_checks_skip_for_a_host_preset(tmp_path: Path) -> None:
    results = run_checks(make_preset(tmp_path), only=["docker_daemon", "nvidia_runtime"])
    assert [r.status for r in results] == ["skip", "skip"]
    assert all("launch.runner: host" in r.summary for r in results)
