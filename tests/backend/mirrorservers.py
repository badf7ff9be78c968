"""Loopback mirrors for the mirror-chain tests: a PEP 503 simple index, a Registry v2 root, a
slow or 5xx front for any of them, and a black hole (a socket that listens and never answers).

All bind 127.0.0.1 port 0. The index serves real wheels from a directory, so the real pip
downloads and installs through it; the Hub is tests/backend/hubserver.py's FakeHub.
"""

from __future__ import annotations

import base64
import hashlib
import io
import socket
import threading
import time
import zipfile
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

Handler = type[BaseHTTPRequestHandler]


class Server:
    """A ThreadingHTTPServer on 127.0.0.1:0 in a daemon thread; ``delay_s`` before every answer,
    ``status`` (e.g. 503) instead of every answer."""

    def __init__(self, handler: Handler, *, delay_s: float = 0.0, status: int | None = None):
        outer = self

        class Wrapped(handler):  # type: ignore[valid-type, misc]
            def log_message(self, *args: object) -> None:
                return

            def do_GET(self) -> None:
                outer.requests.append(self.path)
                outer.authorization.append(self.headers.get("Authorization"))
                if outer.delay_s:
                    time.sleep(outer.delay_s)
                if outer.status is not None:
                    body = b"<html><body>502 Bad Gateway</body></html>"
                    self.send_response(outer.status)
                    self.send_header("Content-Type", "text/html")
                    self.send_header("Content-Length", str(len(body)))
                    self.end_headers()
                    self.wfile.write(body)
                    return
                super().do_GET()

            def do_HEAD(self) -> None:
                self.do_GET()

        self.delay_s = delay_s
        self.status = status
        self.requests: list[str] = []
        self.authorization: list[str | None] = []  # the Authorization header of each request
        self._server = ThreadingHTTPServer(("127.0.0.1", 0), Wrapped)
        self._server.daemon_threads = True
        threading.Thread(
            target=self._server.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True
        ).start()

    @property
    def url(self) -> str:
        host, port = self._server.server_address[:2]
        return f"http://{host}:{port}"

    def stop(self) -> None:
        self._server.shutdown()
        self._server.server_close()


class BlackHole:
    """Accepts TCP connections in the kernel backlog and never reads or answers."""

    def __init__(self) -> None:
        self._sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        self._sock.bind(("127.0.0.1", 0))
        self._sock.listen(64)

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self._sock.getsockname()[1]}"

    def stop(self) -> None:
        self._sock.close()


def index_handler(wheels: Path, extra_projects: tuple[str, ...] = ("pip",)) -> Handler:
    """PEP 503: ``/simple/<project>/`` lists the wheels in ``wheels`` with sha256 fragments,
    ``/files/<name>`` serves them. ``extra_projects`` get a page listing a file that is never
    fetched (the probe only reads the page)."""

    class Index(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def _send(self, code: int, body: bytes, ctype: str) -> None:
            self.send_response(code)
            self.send_header("Content-Type", ctype)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            if self.command != "HEAD":
                self.wfile.write(body)

        def do_GET(self) -> None:
            path = self.path.split("?")[0]
            parts = [p for p in path.split("/") if p]
            if len(parts) == 2 and parts[0] == "simple":
                project = parts[1].lower().replace("_", "-")
                links = []
                for wheel in sorted(wheels.glob("*.whl")):
                    if wheel.name.split("-")[0].lower().replace("_", "-") == project:
                        digest = hashlib.sha256(wheel.read_bytes()).hexdigest()
                        links.append(
                            f'<a href="/files/{wheel.name}#sha256={digest}">{wheel.name}</a>'
                        )
                if project in extra_projects:
                    links.append(
                        f'<a href="/files/{project}-24.0-py3-none-any.whl">{project}-24.0-py3-none-any.whl</a>'
                    )
                if not links:
                    self._send(404, b"not found", "text/plain")
                    return
                page = "<!DOCTYPE html><html><body>\n" + "<br/>\n".join(links) + "\n</body></html>"
                self._send(200, page.encode(), "text/html")
            elif len(parts) == 2 and parts[0] == "files" and (wheels / parts[1]).is_file():
                self._send(200, (wheels / parts[1]).read_bytes(), "application/octet-stream")
            else:
                self._send(404, b"not found", "text/plain")

    return Index


def registry_root_handler() -> Handler:
    """Only the Registry v2 version check: ``GET /v2/`` answers 200 ``{}`` with the API header."""

    class Root(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def do_GET(self) -> None:
            code, body = (200, b"{}") if self.path.split("?")[0] == "/v2/" else (404, b"{}")
            self.send_response(code)
            self.send_header("Content-Type", "application/json")
            self.send_header("Docker-Distribution-API-Version", "registry/2.0")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

    return Root


def portal_handler() -> Handler:
    """A captive portal: 200 with an HTML login page for every path (answers, but wrongly)."""

    class Portal(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def do_GET(self) -> None:
            body = b"<html><body><form>Please log in to the Wi-Fi</form></body></html>"
            self.send_response(200)
            self.send_header("Content-Type", "text/html")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

    return Portal


def build_wheel(directory: Path, name: str = "twmirror_probe", version: str = "0.1") -> Path:
    """A minimal, valid pure-Python wheel (one module), written by hand: no build backend."""
    dist = f"{name}-{version}"
    files = {
        f"{name}.py": b'VALUE = "served through the mirror"\n',
        f"{dist}.dist-info/METADATA": (
            f"Metadata-Version: 2.1\nName: {name}\nVersion: {version}\n".encode()
        ),
        f"{dist}.dist-info/WHEEL": (
            b"Wheel-Version: 1.0\nGenerator: trainwiz-tests\nRoot-Is-Purelib: true\n"
            b"Tag: py3-none-any\n"
        ),
    }
    record_lines = []
    for path, data in files.items():
        digest = base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()
        record_lines.append(f"{path},sha256={digest},{len(data)}")
    record_lines.append(f"{dist}.dist-info/RECORD,,")
    files[f"{dist}.dist-info/RECORD"] = ("\n".join(record_lines) + "\n").encode()
    directory.mkdir(parents=True, exist_ok=True)
    target = directory / f"{dist}-py3-none-any.whl"
    buf = io.BytesIO()
    with zipfile.ZipFile(buf, "w", zipfile.ZIP_DEFLATED) as zf:
        for path, data in files.items():
            zf.writestr(path, data)
    target.write_bytes(buf.getvalue())
    return target


def loopback_only(monkeypatch: object) -> None:
    """Make every mirror probe of a test assert it goes to 127.0.0.1 (pytest monkeypatch), and
    send whatever else a real client might try (telemetry, a default endpoint) to a dead proxy
    on 127.0.0.1:9, so nothing in these tests can reach a real mirror."""
    from urllib.parse import urlparse

    from backend.mirrors import probe

    real_get = probe._get

    def guarded(url: str, *args: object, **kwargs: object) -> object:
        assert urlparse(url).hostname == "127.0.0.1", f"a test probed {url}"
        return real_get(url, *args, **kwargs)  # type: ignore[arg-type]

    monkeypatch.setattr(probe, "_get", guarded)  # type: ignore[attr-defined]
    for name in ("HTTP_PROXY", "HTTPS_PROXY", "http_proxy", "https_proxy"):
        monkeypatch.setenv(name, "http://127.0.0.1:9")  # type: ignore[attr-defined]
    for name in ("NO_PROXY", "no_proxy"):
        monkeypatch.setenv(name, "127.0.0.1,localhost")  # type: ignore[attr-defined]
    probe.clear_cache()


def modelscope_handler(repos: dict[str, dict[str, bytes]]) -> Handler:
    """The part of ModelScope's API its client uses to take a snapshot: the model's info,
    ``/repo/files`` (paths, sizes, sha256) and ``/repo?FilePath=`` (the bytes)."""
    from urllib.parse import parse_qs, unquote, urlparse

    class ModelScope(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def _send(self, code: int, body: bytes, ctype: str = "application/json") -> None:
            self.send_response(code)
            self.send_header("Content-Type", ctype)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            if self.command != "HEAD":
                self.wfile.write(body)

        def _json(self, code: int, data: object) -> None:
            import json

            self._send(
                code, json.dumps({"Code": code, "Success": code == 200, "Data": data}).encode()
            )

        def do_GET(self) -> None:
            url = urlparse(self.path)
            query = parse_qs(url.query)
            path = unquote(url.path)
            for repo_id, files in repos.items():
                base = f"/api/v1/models/{repo_id}"
                if path == base:
                    self._json(200, {"Path": repo_id.split("/")[0], "Name": repo_id.split("/")[1]})
                    return
                if path == base + "/repo/files":
                    listing = [
                        {
                            "Name": name.rsplit("/", 1)[-1],
                            "Path": name,
                            "Type": "blob",
                            "Size": len(data),
                            "Sha256": hashlib.sha256(data).hexdigest(),
                        }
                        for name, data in sorted(files.items())
                    ]
                    self._json(200, {"Files": listing})
                    return
                if path == base + "/repo" and query.get("FilePath", [""])[0] in files:
                    self._send(200, files[query["FilePath"][0]], "application/octet-stream")
                    return
            self._json(404, {"Message": "not found"})

    return ModelScope
