"""A preset's custom mirrors: checked as URLs when read, never contacted by `plan`."""

from __future__ import annotations

import http.server
import subprocess
import sys
import threading
from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parents[2]


def _preset(tmp_path: Path, pypi: list[str]) -> Path:
    data = yaml.safe_load((ROOT / "presets" / "tiny-cpu.yaml").read_text())
    data["mirrors"] = {"profile": "custom", "custom": {"pypi": pypi}}
    path = tmp_path / "p.yaml"
    path.write_text(yaml.safe_dump(data))
    return path


def _cli(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "tui.cli", *args],
        cwd=ROOT, capture_output=True, text=True, timeout=60, check=False,
    )  # fmt: skip


def test_a_url_with_spaces_is_refused_naming_the_field(tmp_path: Path) -> None:
    for command in (["plan"], ["check", "--only", "git", "--preset"], ["env", "dockerfile"]):
        done = _cli(*command, str(_preset(tmp_path, ["https://mirror example.com/simple"])))
        assert done.returncode == 2, done.stderr
        assert "mirrors.custom.pypi" in done.stderr and "Exception in thread" not in done.stderr


def test_plan_sends_no_request_to_the_presets_mirrors(tmp_path: Path) -> None:
    hits: list[str] = []

    class Handler(http.server.BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            hits.append(self.path)
            self.send_response(404)
            self.end_headers()

        def log_message(self, *_args: object) -> None:
            pass

    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        url = f"http://127.0.0.1:{server.server_address[1]}/simple"
        done = _cli("plan", str(_preset(tmp_path, [url])))
        assert done.returncode == 0, done.stderr
        assert "not probed by plan" in done.stderr
        assert hits == []
    finally:
        server.shutdown()
