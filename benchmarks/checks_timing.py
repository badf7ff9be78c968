"""How long the whole check set takes: on this machine as it is, and with every network target
and the Docker socket replaced by listeners that accept and never answer (the worst case: a
black-holed network and a hung daemon). Writes a Markdown table to stdout; see docs/checks.md.

    .venv/bin/python benchmarks/checks_timing.py
"""

from __future__ import annotations

import os
import socket
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from backend.checks import run_checks, targets_for
from backend.preset.loader import load_preset


def main() -> None:
    os.environ.setdefault("TRAINWIZ_HOME", tempfile.mkdtemp(prefix="twbench-"))
    silent_tcp = socket.socket()
    silent_tcp.bind(("127.0.0.1", 0))
    silent_tcp.listen(64)
    dead_url = f"http://127.0.0.1:{silent_tcp.getsockname()[1]}"
    sock_path = Path(tempfile.mkdtemp()) / "hung.sock"
    silent_unix = socket.socket(socket.AF_UNIX)
    silent_unix.bind(str(sock_path))
    silent_unix.listen(64)
    print("| preset | targets | wall s | slowest check (s) | statuses |")
    print("|---|---|---|---|---|")
    for name in (None, "tiny-cpu", "vicuna-7b-4xa100-40g", "vicuna-13b-v1.3-8xa100"):
        preset = load_preset(name) if name else None
        for label in ("this machine", "black-holed"):
            targets = targets_for(preset)
            if label == "black-holed":
                targets.hf_endpoint = dead_url
                targets.pip_index = dead_url + "/simple"
                targets.registry_url = dead_url + "/v2/"
                targets.docker_host = f"unix://{sock_path}"
            started = time.monotonic()
            results = run_checks(preset, targets=targets)
            wall = time.monotonic() - started
            slowest = max(results, key=lambda r: r.duration_s)
            counts: dict[str, int] = {}
            for r in results:
                counts[r.status] = counts.get(r.status, 0) + 1
            summary = " ".join(f"{k} {v}" for k, v in sorted(counts.items()))
            print(
                f"| {name or '(none)'} | {label} | {wall:.2f} | {slowest.id} {slowest.duration_s:.2f} | {summary} |"
            )


if __name__ == "__main__":
    main()
