"""Webhook notifications against a loopback https receiver (self-signed certificate made by the
test, trusted only through the explicit CA option): payload shapes, signatures, refusals,
failed deliveries that are logged and harm nothing, and the watcher's live events."""

from __future__ import annotations

import base64
import hashlib
import hmac
import json
import subprocess
import sys
import urllib.parse
from collections.abc import Iterator
from pathlib import Path

import pytest
import yaml

from backend.preset.schema_notify import NotifySettings, Webhook
from backend.rundir import RunStatus, write_status
from backend.runs import notify
from tests.backend.notifyserver import Receiver, make_cert

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def cert(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    return make_cert(tmp_path_factory.mktemp("tls"))


@pytest.fixture
def receiver(cert: tuple[Path, Path], monkeypatch: pytest.MonkeyPatch) -> Iterator[Receiver]:
    server = Receiver(*cert)
    monkeypatch.setenv(notify.CA_ENV, str(cert[0]))
    yield server
    server.close()


def message(event: str = "finished") -> notify.Message:
    return notify.Message(event, "run-1", "trainwiz: run run-1 finished", "done", {"k": 1})


def test_every_kind_posts_its_own_shape(
    receiver: Receiver, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("HOOK_URL", receiver.url + "/hook?access_token=t0ken")
    monkeypatch.setenv("HOOK_SECRET", "s3cret")
    monkeypatch.setenv("HOOK_TOKEN", "bearer-value")
    hooks = [
        Webhook(kind="slack", url_env="HOOK_URL"),
        Webhook(kind="feishu", url_env="HOOK_URL", secret_env="HOOK_SECRET"),
        Webhook(kind="dingtalk", url_env="HOOK_URL", secret_env="HOOK_SECRET"),
        Webhook(kind="generic", url=receiver.url + "/generic", token_env="HOOK_TOKEN"),
    ]
    for hook in hooks:
        assert notify.deliver(hook, message()) == (True, "HTTP 200")
    slack, feishu, ding, generic = receiver.posts
    assert slack["body"] == {"text": "trainwiz: run run-1 finished\ndone"}
    assert feishu["body"]["msg_type"] == "text" and "done" in feishu["body"]["content"]["text"]
    stamp = feishu["body"]["timestamp"]
    key = f"{stamp}\ns3cret".encode()
    assert (
        feishu["body"]["sign"]
        == base64.b64encode(hmac.new(key, b"", hashlib.sha256).digest()).decode()
    )
    assert ding["body"] == {"msgtype": "text", "text": {"content": slack["body"]["text"]}}
    query = urllib.parse.parse_qs(urllib.parse.urlsplit(ding["path"]).query)
    digest = hmac.new(b"s3cret", f"{query['timestamp'][0]}\ns3cret".encode(), hashlib.sha256)
    assert query["sign"][0] == base64.b64encode(digest.digest()).decode()
    assert query["access_token"] == ["t0ken"]
    assert generic["body"] == {"event": "finished", "run_id": "run-1", "k": 1,
                               "title": "trainwiz: run run-1 finished", "text": "done"}  # fmt: skip
    assert generic["headers"]["Authorization"] == "Bearer bearer-value"


def test_verification_stays_on_without_the_ca(
    receiver: Receiver, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv(notify.CA_ENV)
    ok, detail = notify.deliver(Webhook(kind="generic", url=receiver.url), message())
    assert not ok and "CERTIFICATE_VERIFY_FAILED" in detail
    assert receiver.posts == []


def test_http_and_secrets_in_clear_are_refused_at_validation(tmp_path: Path) -> None:
    data = yaml.safe_load((ROOT / "presets" / "tiny-cpu.yaml").read_text())
    cases = [
        ({"kind": "generic", "url": "http://127.0.0.1:9/x"}, "https"),
        ({"kind": "slack", "url": "https://hooks.slack.com/services/T/B/X"}, "url_env"),
        ({"kind": "generic", "url": "https://user:pw@example.com/x"}, "user:password"),
        ({"kind": "feishu", "url_env": "BAD-NAME"}, "environment variable name"),
    ]
    for hook, words in cases:
        data["notify"] = {"webhooks": [hook]}
        preset = tmp_path / "n.yaml"
        preset.write_text(yaml.safe_dump(data))
        proc = subprocess.run([sys.executable, "-m", "tui.cli", "plan", str(preset)], cwd=ROOT,
                              capture_output=True, text=True, timeout=60)  # fmt: skip
        assert proc.returncode == 2, (hook, proc.stdout)
        assert words in proc.stderr and "notify" in proc.stderr, proc.stderr
        assert "hooks.slack.com/services/T/B/X" not in proc.stderr or words == "url_env"


def failed_run(tmp_path: Path, hooks: list[dict], **settings: object) -> Path:
    run_dir = tmp_path / "20261201-000000-n"
    run_dir.mkdir()
    status = RunStatus(run_id=run_dir.name, preset="n", runner="host", state="running")
    write_status(run_dir, status)
    data = yaml.safe_load((ROOT / "presets" / "tiny-cpu.yaml").read_text())
    data["notify"] = {"webhooks": hooks, **settings}
    (run_dir / "preset.yaml").write_text(yaml.safe_dump(data))
    (run_dir / "train.log").write_text(
        "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB. GPU 0 has a "
        "total capacity of 79.15 GiB of which 1.2 GiB is free.\n"
    )
    return run_dir


def test_failed_carries_the_diagnosis_cause_and_fix(receiver: Receiver, tmp_path: Path) -> None:
    run_dir = failed_run(tmp_path, [{"kind": "generic", "url": receiver.url}])
    notify.run_ended(run_dir, "failed", "exit code 1", "exit_code")
    (post,) = receiver.posts
    body = post["body"]
    assert body["event"] == "failed" and body["cause"] == "cuda_oom" and body["fix"]
    assert "cause: cuda_oom" in body["text"] and "fix: " in body["text"]
    assert "failed -> generic via url: delivered (HTTP 200)" in (run_dir / "notify.log").read_text()


def test_a_failed_delivery_is_logged_and_raises_nothing(
    receiver: Receiver, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    receiver.status = 500
    monkeypatch.setenv("GONE_URL", "https://127.0.0.1:9/nothing-listens")
    hooks = [{"kind": "generic", "url": receiver.url}, {"kind": "slack", "url_env": "GONE_URL"},
             {"kind": "feishu", "url_env": "UNSET_URL_VARIABLE"}]  # fmt: skip
    run_dir = failed_run(tmp_path, hooks)
    notify.run_ended(run_dir, "finished", "finished", None)
    log = (run_dir / "notify.log").read_text()
    assert "generic via url: NOT delivered (HTTP 500)" in log
    assert "slack via $GONE_URL: NOT delivered" in log
    assert "feishu via $UNSET_URL_VARIABLE: NOT delivered" in log and "is not set" in log
    assert "127.0.0.1:9" not in log  # the URL from the environment is never written
    assert "notify: finished -> generic" in (run_dir / "train.log").read_text()


def test_live_events_loss_nan_once_and_stalled(receiver: Receiver, tmp_path: Path) -> None:
    run_dir = failed_run(tmp_path, [{"kind": "generic", "url": receiver.url}], stalled_minutes=1)
    settings = NotifySettings.model_validate(
        {"webhooks": [{"kind": "generic", "url": receiver.url}], "stalled_minutes": 1}
    )
    live = notify.LiveWatch(run_dir, settings, started=1000.0)
    metrics = run_dir / "metrics.jsonl"
    with open(metrics, "a") as handle:
        handle.write(json.dumps({"kind": "step", "step": 1, "loss": 2.0}) + "\n")
        handle.write('{"kind": "step", "step": 2, "loss": NaN}\n')  # json.dumps writes NaN so
    live.check(now=1010.0)
    live.check(now=1020.0)
    assert [p["body"]["event"] for p in receiver.posts] == ["loss_nan"]
    assert receiver.posts[0]["body"]["step"] == 2
    live.check(now=1010.0 + 61)  # no new step for over a minute
    live.check(now=1010.0 + 120)  # said once per stall
    events = [p["body"]["event"] for p in receiver.posts]
    assert events == ["loss_nan", "stalled"]
    assert receiver.posts[1]["body"]["last_step"] == 2
    with open(metrics, "a") as handle:
        handle.write(json.dumps({"kind": "step", "step": 3, "loss": 1.0}) + "\n")
    live.check(now=1200.0)  # a step again: re-armed
    live.check(now=1200.0 + 61)
    assert [p["body"]["event"] for p in receiver.posts][-1] == "stalled"
    assert len(receiver.posts) == 3
