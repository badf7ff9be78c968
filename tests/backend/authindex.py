"""A private PEP 503 index on 127.0.0.1 that REQUIRES basic auth, over TLS.

The TLS leaf is tests/fixtures/tls (a throwaway CA, see its README), so credentials travel over
https as they must (backend/images/pipindex.py refuses them over http). Every request without the
right ``Authorization`` gets 401; every request is recorded (path, whether it was authorised).
``absolute=True`` makes index pages link their files by absolute https URL (as Artifactory and
devpi do) instead of by origin-relative path (as mirrorservers.index_handler does).
"""

from __future__ import annotations

import base64
import hashlib
import ssl
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

TLS_DIR = Path(__file__).resolve().parents[1] / "fixtures" / "tls"
SYSTEM_CA = Path("/etc/ssl/certs/ca-certificates.crt")


class AuthIndex:
    def __init__(self, wheels: Path, user: str, password: str, absolute: bool = False) -> None:
        self.wheels = wheels
        self.expected = "Basic " + base64.b64encode(f"{user}:{password}".encode()).decode()
        self.absolute = absolute
        self.log: list[tuple[str, str, bool]] = []  # (method, path, authorised)
        self._server = ThreadingHTTPServer(("127.0.0.1", 0), _handler(self))
        self._server.daemon_threads = True
        context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        context.load_cert_chain(TLS_DIR / "server.crt", TLS_DIR / "server.key")
        self._server.socket = context.wrap_socket(self._server.socket, server_side=True)
        threading.Thread(
            target=self._server.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True
        ).start()

    @property
    def origin(self) -> str:
        return f"https://127.0.0.1:{self._server.server_address[1]}"

    def url(self, user: str, password: str) -> str:
        return f"https://{user}:{password}@127.0.0.1:{self._server.server_address[1]}/simple"

    def authorised_files(self) -> list[str]:
        return [p for m, p, ok in self.log if ok and p.startswith("/files/")]

    def stop(self) -> None:
        self._server.shutdown()
        self._server.server_close()


def _handler(index: AuthIndex) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def log_message(self, *args: object) -> None:
            return

        def _send(self, code: int, body: bytes, ctype: str, extra: dict[str, str] | None = None):
            self.send_response(code)
            self.send_header("Content-Type", ctype)
            self.send_header("Content-Length", str(len(body)))
            for key, value in (extra or {}).items():
                self.send_header(key, value)
            self.end_headers()
            if self.command != "HEAD":
                self.wfile.write(body)

        def do_GET(self) -> None:
            ok = self.headers.get("Authorization") == index.expected
            index.log.append((self.command, self.path, ok))
            if not ok:
                self._send(401, b"login", "text/plain", {"WWW-Authenticate": 'Basic realm="x"'})
                return
            parts = [p for p in self.path.split("?")[0].split("/") if p]
            if len(parts) == 2 and parts[0] == "simple":
                project = parts[1].lower().replace("_", "-")
                prefix = index.origin if index.absolute else ""
                links = [
                    f'<a href="{prefix}/files/{w.name}#sha256='
                    f'{hashlib.sha256(w.read_bytes()).hexdigest()}">{w.name}</a>'
                    for w in sorted(index.wheels.glob("*.whl"))
                    if w.name.split("-")[0].lower().replace("_", "-") == project
                ]
                if not links:
                    self._send(404, b"not found", "text/plain")
                    return
                page = "<!DOCTYPE html><html><body>\n" + "<br/>\n".join(links) + "</body></html>"
                self._send(200, page.encode(), "text/html")
            elif len(parts) == 2 and parts[0] == "files" and (index.wheels / parts[1]).is_file():
                self._send(200, (index.wheels / parts[1]).read_bytes(), "application/octet-stream")
            elif parts == ["moved"]:
                self._send(302, b"", "text/plain", {"Location": f"{index.origin}/simple/"})
            else:
                self._send(404, b"not found", "text/plain")

        def do_HEAD(self) -> None:
            self.do_GET()

    return Handler


def ca_bundle(folder: Path) -> Path:
    """The system CAs plus the test CA: what a build needs to reach both PyPI and the index."""
    bundle = folder / "ca-bundle.crt"
    system = SYSTEM_CA.read_bytes() if SYSTEM_CA.is_file() else b""
    bundle.write_bytes(system + b"\n" + (TLS_DIR / "ca.crt").read_bytes())
    return bundle
