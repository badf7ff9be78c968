"""What a webhook endpoint cannot make the watcher do: follow a redirect elsewhere (taking the
bearer token or the message with it), put a secret into notify.log through an exception's
message, or keep the watcher alive past its delivery deadline by answering slowly.

Real loopback servers only: the webhook is https (tests/fixtures/tls, its throwaway CA trusted
through ``TRAINWIZ_NOTIFY_CA``); the redirect's target is plain http and records every
connection and request that reaches it.
"""

from __future__ import annotations

import socket
import ssl
import threading
import time
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest

from backend.preset.schema_notify import NotifySettings, Webhook
from backend.runs import notify

TLS = Path(__file__).resolve().parents[1] / "fixtures" / "tls"
TOKEN = "tok-8f3e1c0b9d2a"  # the bearer token a redirect must not carry away


def message() -> notify.Message:
    return notify.Message("finished", "run-1", "trainwiz: run run-1 finished", "done", {})


def server_context() -> ssl.SSLContext:
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    context.load_cert_chain(str(TLS / "server.crt"), str(TLS / "server.key"))
    return context


class Recorder(ThreadingHTTPServer):
    """Plain http on 127.0.0.1 (the redirect's target): keeps every connection that arrives and
    every request (method, path, headers), and answers 200."""

    daemon_threads = True

    def __init__(self) -> None:
        self.connections = 0
        self.requests: list[dict[str, Any]] = []
        recorder = self

        class Handler(BaseHTTPRequestHandler):
            def _any(self) -> None:
                size = int(self.headers.get("Content-Length") or 0)
                self.rfile.read(size)
                recorder.requests.append(
                    {"method": self.command, "path": self.path, "headers": dict(self.headers)}
                )
                self.send_response(200)
                self.send_header("Content-Length", "0")
                self.end_headers()

            do_GET = do_POST = do_HEAD = do_PUT = _any

            def log_message(self, *args: Any) -> None:
                pass

        super().__init__(("127.0.0.1", 0), Handler)
        threading.Thread(target=self.serve_forever, args=(0.05,), daemon=True).start()

    def verify_request(self, request: Any, client_address: Any) -> bool:
        self.connections += 1
        return True

    def close(self) -> None:
        self.shutdown()
        self.server_close()


class Redirector(ThreadingHTTPServer):
    """The webhook (https): answers every POST with ``code`` and ``Location: target``."""

    daemon_threads = True

    def __init__(self, target: str, code: int = 302) -> None:
        self.posts: list[str] = []
        server = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                self.rfile.read(int(self.headers.get("Content-Length") or 0))
                server.posts.append(self.path)
                self.send_response(server.code)
                self.send_header("Location", server.target)
                self.send_header("Content-Length", "0")
                self.end_headers()

            def log_message(self, *args: Any) -> None:
                pass

        self.target, self.code = target, code
        super().__init__(("127.0.0.1", 0), Handler)
        self.socket = server_context().wrap_socket(self.socket, server_side=True)
        threading.Thread(target=self.serve_forever, args=(0.05,), daemon=True).start()

    @property
    def url(self) -> str:
        return f"https://127.0.0.1:{self.server_address[1]}"

    def close(self) -> None:
        self.shutdown()
        self.server_close()


class Dripper:
    """An https receiver that reads the request, then sends its answer one byte every
    ``every`` seconds (never long enough for a per-read timeout), for ``at_most`` seconds."""

    def __init__(self, every: float = 0.5, at_most: float = 12.0) -> None:
        self.every, self.at_most = every, at_most
        self.stop = threading.Event()
        self.listener = socket.create_server(("127.0.0.1", 0))
        self.listener.settimeout(0.2)
        self.thread = threading.Thread(target=self._serve, daemon=True)
        self.thread.start()

    @property
    def url(self) -> str:
        return f"https://127.0.0.1:{self.listener.getsockname()[1]}/hook"

    def _serve(self) -> None:
        context = server_context()
        while not self.stop.is_set():
            try:
                raw, _ = self.listener.accept()
            except OSError:
                continue
            threading.Thread(target=self._drip, args=(raw, context), daemon=True).start()

    def _drip(self, raw: socket.socket, context: ssl.SSLContext) -> None:
        answer = b"HTTP/1.1 200 OK\r\nContent-Length: 0\r\nX-Slow: " + b"." * 200 + b"\r\n\r\n"
        try:
            raw.settimeout(5)
            with context.wrap_socket(raw, server_side=True) as conn:
                seen = b""
                while b"\r\n\r\n" not in seen:
                    chunk = conn.recv(4096)
                    if not chunk:
                        return
                    seen += chunk
                ends = time.monotonic() + self.at_most
                for byte in answer:
                    if self.stop.is_set() or time.monotonic() > ends:
                        return
                    conn.sendall(bytes([byte]))
                    time.sleep(self.every)
        except OSError:
            pass

    def close(self) -> None:
        self.stop.set()
        self.listener.close()
        self.thread.join(5)


@pytest.fixture(autouse=True)
def trust_the_test_ca(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(notify.CA_ENV, str(TLS / "ca.crt"))


@pytest.fixture
def leak() -> Iterator[Recorder]:
    server = Recorder()
    yield server
    server.close()


def hook_for(kind: str, url: str, monkeypatch: pytest.MonkeyPatch) -> dict[str, Any]:
    """The webhook of ``kind`` pointed at ``url`` with every secret it can carry."""
    monkeypatch.setenv("HOOK_URL", url)
    monkeypatch.setenv("HOOK_TOKEN", TOKEN)
    monkeypatch.setenv("HOOK_SECRET", "sign-secret-77")
    if kind == "generic":
        return {"kind": kind, "url_env": "HOOK_URL", "token_env": "HOOK_TOKEN"}
    if kind == "slack":
        return {"kind": kind, "url_env": "HOOK_URL"}
    return {"kind": kind, "url_env": "HOOK_URL", "secret_env": "HOOK_SECRET"}


def send(run_dir: Path, hook: dict[str, Any]) -> list[tuple[str, bool, str]]:
    settings = NotifySettings.model_validate({"webhooks": [hook]})
    return notify.send(run_dir, message(), settings)


@pytest.mark.parametrize("kind", ["generic", "slack", "feishu", "dingtalk"])
def test_a_redirect_is_not_followed(
    kind: str, leak: Recorder, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    webhook = Redirector(f"http://127.0.0.1:{leak.server_address[1]}/leak")
    try:
        hook = hook_for(kind, webhook.url + "/hook", monkeypatch)
        ((name, ok, detail),) = send(tmp_path, hook)
    finally:
        webhook.close()
    assert [path.split("?")[0] for path in webhook.posts] == ["/hook"]
    assert (ok, detail) == (False, "HTTP 302: redirects are not followed")
    assert leak.connections == 0 and leak.requests == []  # nothing, not even a connection
    log = (tmp_path / notify.NOTIFY_LOG).read_text()
    assert f"finished -> {name}: NOT delivered (HTTP 302: redirects are not followed)" in log
    assert TOKEN not in log


@pytest.mark.parametrize("code", [301, 303, 307, 308])
def test_no_redirect_code_is_followed(
    code: int, leak: Recorder, monkeypatch: pytest.MonkeyPatch
) -> None:
    webhook = Redirector(f"http://127.0.0.1:{leak.server_address[1]}/leak", code)
    try:
        hook = Webhook.model_validate(hook_for("generic", webhook.url + "/hook", monkeypatch))
        result = notify.deliver(hook, message())
    finally:
        webhook.close()
    assert result == (False, f"HTTP {code}: redirects are not followed")
    assert leak.connections == 0 and leak.requests == []


def test_a_token_ending_in_a_newline_is_not_logged(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    hook = hook_for("generic", "https://127.0.0.1:9/hook", monkeypatch)
    monkeypatch.setenv("HOOK_TOKEN", TOKEN + "\n")
    ((name, ok, detail),) = send(tmp_path, hook)
    assert (ok, detail) == (False, "ValueError")
    for log in (notify.NOTIFY_LOG, "train.log"):
        text = (tmp_path / log).read_text()
        assert f"finished -> {name}: NOT delivered (ValueError)\n" in text
        assert TOKEN not in text and "tok-" not in text and "Bearer" not in text


def test_a_url_with_a_space_is_not_logged(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    hook = hook_for("slack", "https://127.0.0.1:9/services/T0SECRET42/B0 X/zzz", monkeypatch)
    ((name, ok, detail),) = send(tmp_path, hook)
    assert (ok, detail) == (False, "InvalidURL")
    for log in (notify.NOTIFY_LOG, "train.log"):
        text = (tmp_path / log).read_text()
        assert f"finished -> {name}: NOT delivered (InvalidURL)\n" in text
        assert "T0SECRET42" not in text and "/services" not in text


def test_the_module_redaction_covers_every_logged_line(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Even a line that (by a future mistake) held the webhook's URL or token is redacted."""
    hook = Webhook.model_validate(
        hook_for("generic", "https://127.0.0.1:9/x/T0SECRET42", monkeypatch)
    )
    monkeypatch.setattr(
        notify, "deliver", lambda *a, **k: (False, f"https://127.0.0.1:9/x/T0SECRET42 {TOKEN}")
    )
    notify.send(tmp_path, message(), NotifySettings(webhooks=[hook]))
    text = (tmp_path / notify.NOTIFY_LOG).read_text()
    assert "T0SECRET42" not in text and TOKEN not in text and "<redacted>" in text


def test_a_slow_receiver_is_given_up_at_the_deadline(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(notify, "DEADLINE_S", 1.5, raising=False)
    slow = Dripper()
    try:
        hook = hook_for("generic", slow.url, monkeypatch)
        started = time.monotonic()
        ((name, ok, detail),) = send(tmp_path, hook)
        took = time.monotonic() - started
        cut_off = still_sending(within=2.0) is False  # while the receiver still drips
    finally:
        slow.close()
    assert (ok, detail) == (False, "timed out after 1.5 s")
    assert 1.4 < took < 3.5, took
    assert cut_off, "the delivery's thread still reads after its deadline"
    log = (tmp_path / notify.NOTIFY_LOG).read_text()
    assert f"finished -> {name}: NOT delivered (timed out after 1.5 s)" in log


def still_sending(within: float) -> bool:
    """Is a delivery's thread still alive after ``within`` seconds?"""
    ends = time.monotonic() + within
    while any(t.name == "trainwiz-notify-send" for t in threading.enumerate()):
        if time.monotonic() > ends:
            return True
        time.sleep(0.05)
    return False
