"""A loopback proxy that adds a private index's credentials, for the duration of one build.

Docker's classic builder has no secret mounts: whatever a ``RUN`` needs is in its argv or its
environment, and both are stored in the image (history, layers). So a build whose pip index
carries credentials never sees them: it talks plain http to this proxy on 127.0.0.1 (the build
runs with host networking), and the proxy forwards GET/HEAD to the real https index with the
``Authorization`` header, streaming the bodies. It only ever talks to the configured origins:

- ``/o<N>/<path>`` goes to origin N's ``<path>``; any other path is 404, any other method 405;
- index pages (HTML; JSON is not asked for) have links back to a configured origin, absolute
  (``https://mirror/x``) or origin-relative (``/x``), rewritten to the proxy; redirects the same;
  links elsewhere stay as they are, so pip fetches them directly and without credentials;
- redirects are never followed here (a followed redirect would carry the header elsewhere);
- only connections from this user's or root's processes are served (``/proc/net/tcp`` owner),
  so another user of the machine cannot borrow the credentials while the build runs.
"""

from __future__ import annotations

import base64
import hashlib
import http.client
import os
import re
import socket
import ssl
import sys
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from urllib.parse import urlsplit

from backend.images.pipindex import PROXY_HOST, PipIndexes, basic_auth, origin

_HOP = {
    "connection",
    "keep-alive",
    "proxy-authenticate",
    "proxy-authorization",
    "te",
    "trailer",
    "transfer-encoding",
    "upgrade",
    "content-length",
    "www-authenticate",  # pip would go looking for a keyring: the proxy is the authority here
}
_HTML = ("text/html", "application/vnd.pypi.simple.v1+html")
_HREF = re.compile(r"""(?P<attr>\bhref\s*=\s*)(?P<q>["']?)(?P<url>[^"'\s>]*)""", re.IGNORECASE)
MAX_PAGE = 64 << 20  # an index page is read whole to rewrite it; wheels are streamed
CHUNK = 1 << 16
UPSTREAM_TIMEOUT_S = 120


class Upstream:
    """One configured origin: where to connect and the header that carries its credentials."""

    def __init__(self, url: str, cafile: Path | None) -> None:
        parts = urlsplit(url)
        self.origin = origin(url)
        self.scheme = parts.scheme
        self.host = parts.hostname or ""
        self.port = parts.port or (443 if parts.scheme == "https" else 80)
        user, password = basic_auth(url)
        token = base64.b64encode(f"{user}:{password}".encode()).decode()
        self.authorization = f"Basic {token}" if (user or password) else None
        self._ssl = ssl.create_default_context(cafile=str(cafile) if cafile else None)

    def connect(self) -> http.client.HTTPConnection:
        if self.scheme == "https":
            return http.client.HTTPSConnection(
                self.host, self.port, timeout=UPSTREAM_TIMEOUT_S, context=self._ssl
            )
        # Reached only for an index without credentials that shares a build with one that has.
        return http.client.HTTPConnection(self.host, self.port, timeout=UPSTREAM_TIMEOUT_S)


def _tcp_hex(host: str, port: int) -> str:
    """``/proc/net/tcp``'s spelling of an IPv4 address: the in-memory word, in this CPU's order."""
    word = int.from_bytes(socket.inet_aton(host), sys.byteorder)
    return f"{word:08X}:{port:04X}"


def peer_uid(client: tuple[str, int], server: tuple[str, int]) -> int | None:
    """The uid owning the client end of a loopback TCP connection (None when not found)."""
    local, remote = _tcp_hex(*client), _tcp_hex(*server)
    try:
        with open("/proc/net/tcp", encoding="ascii") as table:
            next(table)
            for line in table:
                fields = line.split()
                if len(fields) > 7 and fields[1] == local and fields[2] == remote:
                    return int(fields[7])
    except OSError:
        return None
    return None


class IndexProxy:
    """The running proxy: ``base`` is its URL; ``served`` counts the requests it forwarded."""

    def __init__(self, indexes: PipIndexes, cafile: Path | None = None) -> None:
        self.upstreams = [
            Upstream(self._credentialed(indexes, o), cafile) for o in indexes.origins()
        ]
        self.served = 0
        self.refused = 0
        self.allowed_uids = {os.getuid(), 0}
        self._server = self._bind(self._handler(), preferred_port(indexes))
        self._thread = threading.Thread(
            target=self._server.serve_forever, kwargs={"poll_interval": 0.1}, daemon=True
        )

    @staticmethod
    def _credentialed(indexes: PipIndexes, wanted: str) -> str:
        """The first URL of an origin that carries credentials (else its first URL)."""
        urls = [u for u in indexes.urls() if origin(u) == wanted]
        return next((u for u in urls if "@" in urlsplit(u).netloc), urls[0])

    @staticmethod
    def _bind(handler: type[BaseHTTPRequestHandler], port: int) -> ThreadingHTTPServer:
        """The preferred port keeps the build's ARG values, hence its layer cache, stable; a
        port in use (another build, another program) means a free one instead."""
        try:
            server = ThreadingHTTPServer((PROXY_HOST, port), handler)
        except OSError:
            server = ThreadingHTTPServer((PROXY_HOST, 0), handler)
        server.daemon_threads = True
        return server

    @property
    def port(self) -> int:
        return int(self._server.server_address[1])

    @property
    def base(self) -> str:
        return f"http://{PROXY_HOST}:{self.port}"

    def start(self) -> IndexProxy:
        self._thread.start()
        return self

    def stop(self) -> None:
        self._server.shutdown()
        self._server.server_close()
        self._thread.join(timeout=5)

    def rewrite(self, url: str) -> str:
        """A link or Location pointing at a configured origin, made to point at the proxy."""
        if url.startswith("//"):
            url = "https:" + url
        try:
            parts = urlsplit(url)
        except ValueError:
            return url
        if not parts.scheme:
            return url  # relative: resolves against the proxied page, already under /o<N>/
        if parts.scheme not in ("http", "https") or not parts.hostname:
            return url
        for number, upstream in enumerate(self.upstreams):
            if origin(url) == upstream.origin:
                tail = parts.path or "/"
                return (
                    f"{self.base}/o{number}{tail}"
                    + (f"?{parts.query}" if parts.query else "")
                    + (f"#{parts.fragment}" if parts.fragment else "")
                )
        return url

    def _rewrite_page(self, body: bytes, number: int) -> bytes:
        text = body.decode("utf-8", errors="surrogateescape")

        def fix(match: re.Match[str]) -> str:
            url = match.group("url")
            if url.startswith("/") and not url.startswith("//"):
                url = f"/o{number}{url}"  # origin-relative: same origin, under its route
            else:
                url = self.rewrite(url)
            return match.group("attr") + match.group("q") + url

        return _HREF.sub(fix, text).encode("utf-8", errors="surrogateescape")

    def _handler(self) -> type[BaseHTTPRequestHandler]:
        proxy = self

        class Handler(BaseHTTPRequestHandler):
            server_version = "trainwiz-pip-proxy"

            def log_message(self, *args: object) -> None:
                return  # nothing of the traffic is logged: paths can name private packages

            def _refuse(self, code: int, why: str) -> None:
                proxy.refused += 1
                body = why.encode()
                self.send_response(code)
                self.send_header("Content-Type", "text/plain")
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                if self.command != "HEAD":
                    self.wfile.write(body)

            def do_GET(self) -> None:
                client = (str(self.client_address[0]), int(self.client_address[1]))
                uid = peer_uid(client, (PROXY_HOST, proxy.port))
                if uid not in proxy.allowed_uids:
                    self._refuse(403, "trainwiz pip proxy: not this user's build\n")
                    return
                match = re.match(r"^/o(\d+)(/.*)$", self.path)
                if not match or int(match[1]) >= len(proxy.upstreams):
                    self._refuse(404, "trainwiz pip proxy: not a configured index\n")
                    return
                self._forward(int(match[1]), match[2])

            def do_HEAD(self) -> None:
                self.do_GET()

            def _other(self) -> None:
                self._refuse(405, "trainwiz pip proxy: only GET and HEAD\n")

            do_POST = do_PUT = do_DELETE = do_PATCH = do_OPTIONS = do_CONNECT = _other

            def _forward(self, number: int, path: str) -> None:
                upstream = proxy.upstreams[number]
                headers = {"Host": upstream.host, "Accept-Encoding": "identity"}
                for name in ("User-Agent", "Range", "Cache-Control"):
                    if self.headers.get(name):
                        headers[name] = self.headers[name]
                # HTML only: its links are what gets rewritten (PEP 691 JSON would need a second
                # rewriter, and every simple index still serves HTML).
                headers["Accept"] = (
                    "application/vnd.pypi.simple.v1+html, text/html;q=0.9, */*;q=0.1"
                )
                if upstream.authorization:
                    headers["Authorization"] = upstream.authorization
                conn = upstream.connect()
                try:
                    conn.request(self.command, path, headers=headers)
                    reply = conn.getresponse()
                except (OSError, http.client.HTTPException) as exc:
                    self._refuse(502, f"trainwiz pip proxy: {upstream.origin}: {exc}\n")
                    conn.close()
                    return
                try:
                    self._relay(reply, number)
                finally:
                    conn.close()

            def _relay(self, reply: http.client.HTTPResponse, number: int) -> None:
                proxy.served += 1
                ctype = (reply.getheader("Content-Type") or "").split(";")[0].strip().lower()
                body: bytes | None = None
                if self.command == "GET" and ctype in _HTML:
                    body = proxy._rewrite_page(reply.read(MAX_PAGE), number)
                self.send_response(reply.status)
                for name, value in reply.getheaders():
                    if name.lower() in _HOP:
                        continue
                    if name.lower() == "location":
                        value = (
                            proxy.rewrite(value)
                            if "://" in value or value.startswith("//")
                            else (f"/o{number}{value}" if value.startswith("/") else value)
                        )
                    self.send_header(name, value)
                if body is not None:
                    self.send_header("Content-Length", str(len(body)))
                elif reply.getheader("Content-Length"):
                    self.send_header("Content-Length", reply.getheader("Content-Length") or "")
                self.send_header("Connection", "close")
                self.end_headers()
                if self.command == "HEAD":
                    return
                if body is not None:
                    self.wfile.write(body)
                    return
                while chunk := reply.read(CHUNK):
                    self.wfile.write(chunk)

        return Handler


def preferred_port(indexes: PipIndexes) -> int:
    """A port that stays the same for this user and these origins (20000-31999: below Linux's
    ephemeral range), so an unchanged build finds its layers in the builder's cache."""
    key = f"{os.getuid()}|{' '.join(indexes.origins())}".encode()
    return 20000 + int(hashlib.sha256(key).hexdigest(), 16) % 12000


@contextmanager
def index_proxy(indexes: PipIndexes, cafile: Path | None = None) -> Iterator[IndexProxy]:
    """The proxy, running for the ``with`` block; stopped (port closed) however it ends."""
    proxy = IndexProxy(indexes, cafile).start()
    try:
        yield proxy
    finally:
        proxy.stop()
