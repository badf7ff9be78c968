"""A real detached tiny CPU run with a `notify:` block: its watcher (no wizard, no follower)
posts "finished" to a loopback https receiver; a second webhook that cannot be reached is
logged as not delivered and the run still finishes; the URL (from the environment) is written
nowhere in the run directory."""

from __future__ import annotations

import json
import os
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
import yaml

from backend.runs import notify
from tests.backend.notifyserver import Receiver, make_cert
from tests.integration.test_launch_host import ROOT, cli, home, wait_state  # noqa: F401
from tests.integration.test_resume_host import free_port

pytestmark = [pytest.mark.training, pytest.mark.slow, pytest.mark.usefixtures("home")]


@pytest.fixture
def receiver(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Receiver]:
    cert, key = make_cert(tmp_path)
    server = Receiver(cert, key)
    monkeypatch.setenv(notify.CA_ENV, str(cert))  # the watcher inherits it from the launch
    yield server
    server.close()


def test_the_watcher_notifies_a_finished_run(
    receiver: Receiver, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    secret_url = receiver.url + "/hooks/T0KEN-in-the-path"
    monkeypatch.setenv("TW_TEST_HOOK", secret_url)
    monkeypatch.setenv("TW_TEST_DEAD", "https://127.0.0.1:9/dead")
    data = yaml.safe_load((ROOT / "presets" / "tiny-cpu.yaml").read_text())
    data["training"]["max_steps"] = 3
    data["launch"]["master_port"] = free_port()  # tiny-cpu's fixed port is shared
    data["notify"] = {"webhooks": [
        {"kind": "slack", "url_env": "TW_TEST_HOOK", "events": ["finished", "failed"]},
        {"kind": "generic", "url_env": "TW_TEST_DEAD"},
    ]}  # fmt: skip
    preset = tmp_path / "notify.yaml"
    preset.write_text(yaml.safe_dump(data))
    started = json.loads(cli("launch", str(preset), "--detach", "--json").stdout)
    run_dir = Path(started["run_dir"])
    assert wait_state(started["run_id"], ("finished", "failed"))["state"] == "finished"
    log = run_dir / "notify.log"
    for _ in range(100):  # sent right after the record turns final
        if log.is_file() and log.read_text().count("\n") >= 2:
            break
        time.sleep(0.1)
    (post,) = receiver.posts
    assert post["path"] == "/hooks/T0KEN-in-the-path"
    assert post["body"]["text"].startswith(f"trainwiz: run {run_dir.name} finished")
    text = log.read_text()
    assert "finished -> slack via $TW_TEST_HOOK: delivered (HTTP 200)" in text
    assert "finished -> generic via $TW_TEST_DEAD: NOT delivered" in text
    for path in run_dir.rglob("*"):
        if path.is_file() and path.stat().st_size < 50 << 20:
            content = path.read_bytes()
            assert b"T0KEN-in-the-path" not in content, path
    assert os.environ["TW_TEST_HOOK"] == secret_url
