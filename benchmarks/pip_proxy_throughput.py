#!/usr/bin/env python3
"""Does the build-time pip proxy (backend/images/pipproxy.py) slow a wheel download down?

Serves one random file of ``--mib`` MiB from the tests' loopback TLS index that requires basic
auth (tests/backend/authindex.py), fetches it directly (with the header) and through the proxy
(which adds the header), and prints MiB/s for each, best of ``--repeat``. Results: docs/images.md.

Usage: PYTHONPATH=. python benchmarks/pip_proxy_throughput.py [--mib 200] [--repeat 3]
"""

from __future__ import annotations

import argparse
import base64
import os
import ssl
import sys
import tempfile
import time
import urllib.request
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from backend.images.pipindex import PipIndexes
from backend.images.pipproxy import index_proxy
from tests.backend.authindex import TLS_DIR, AuthIndex


def _rate(opener: urllib.request.OpenerDirector, request: urllib.request.Request) -> float:
    started = time.monotonic()
    with opener.open(request, timeout=120) as reply:
        size = 0
        while chunk := reply.read(1 << 20):
            size += len(chunk)
    return size / (1 << 20) / (time.monotonic() - started)


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--mib", type=int, default=200)
    parser.add_argument("--repeat", type=int, default=3)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        wheels = Path(tmp)
        name = "big-1.0-py3-none-any.whl"
        (wheels / name).write_bytes(os.urandom(args.mib << 20))
        index = AuthIndex(wheels, "bob", "benchpass")
        context = ssl.create_default_context(cafile=str(TLS_DIR / "ca.crt"))
        opener = urllib.request.build_opener(
            urllib.request.ProxyHandler({}), urllib.request.HTTPSHandler(context=context)
        )
        header = {"Authorization": "Basic " + base64.b64encode(b"bob:benchpass").decode()}
        direct = urllib.request.Request(f"{index.origin}/files/{name}", headers=header)
        best_direct = max(_rate(opener, direct) for _ in range(args.repeat))
        indexes = PipIndexes.checked(index.url("bob", "benchpass"), [], [], None)
        with index_proxy(indexes, TLS_DIR / "ca.crt") as proxy:
            proxied = urllib.request.Request(f"{proxy.base}/o0/files/{name}")
            best_proxy = max(_rate(opener, proxied) for _ in range(args.repeat))
        index.stop()
    print(f"{args.mib} MiB file, best of {args.repeat}:")
    print(f"  direct (https + basic auth): {best_direct:.0f} MiB/s")
    print(f"  through the build proxy:     {best_proxy:.0f} MiB/s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
