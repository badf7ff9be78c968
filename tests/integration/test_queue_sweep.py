"""A real 3-variant sweep of tiny-cpu (3 steps each, --max-parallel 2) through the queue: the
scheduler is killed with SIGKILL as soon as it has claimed the first two variants (their
launchers may still be at work), `trainwiz queue resume` starts a new one, and every variant
runs exactly once (run directories counted by the item's token). One variant fails at run
time for real (the Trainer's bitsandbytes optimizer where bitsandbytes is not installed): the
queue goes on, the item keeps the run's top diagnosis, `sweep show` ranks the two that ran,
and the sweep_finished webhook carries the ranking."""

from __future__ import annotations

import importlib.util
import json
import os
import signal
from collections.abc import Iterator
from pathlib import Path

import pytest
import yaml

from backend.queue import db
from backend.queue.service import holder
from backend.rundir import RunDir
from backend.runs import notify
from tests.backend.notifyserver import Receiver, make_cert
from tests.trainwiz_cli import cli
from tests.waiting import wait_until

ROOT = Path(__file__).resolve().parents[2]
pytestmark = [
    pytest.mark.training,
    pytest.mark.slow,
    pytest.mark.skipif(
        importlib.util.find_spec("bitsandbytes") is not None,
        reason="the failing variant needs a Python without bitsandbytes",
    ),
]


@pytest.fixture
def receiver(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Receiver]:
    cert, key = make_cert(tmp_path)
    server = Receiver(cert, key)
    monkeypatch.setenv(notify.CA_ENV, str(cert))  # the scheduler inherits it from `sweep`
    yield server
    server.close()


def items() -> list[db.Item]:
    conn = db.connect()
    try:
        return db.items(conn)
    finally:
        conn.close()


def runs_of(token: str) -> list[str]:
    """Run directories whose preset name carries the item's token."""
    return [
        r.run_id
        for r in RunDir.all()
        if str((r.status_dict() or {}).get("preset", "")).endswith(f"-{token}")
    ]


def test_a_sweep_survives_kill_9_of_its_scheduler_and_runs_each_variant_once(
    receiver: Receiver, tmp_path: Path
) -> None:
    data = yaml.safe_load((ROOT / "presets" / "tiny-cpu.yaml").read_text())
    data["training"]["max_steps"] = 3
    data["notify"] = {"webhooks": [{"kind": "generic", "url": receiver.url,
                                    "events": ["sweep_finished"]}]}  # fmt: skip
    base = tmp_path / "base.yaml"
    base.write_text(yaml.safe_dump(data))
    done = cli("sweep", str(base), "--set", "training.optim=adamw_torch,sgd,adamw_bnb_8bit",
               "--max-parallel", "2", "--json")  # fmt: skip
    sweep = json.loads(done.stdout)
    assert [label for label, _i, _f in sweep["queued"]] == [
        "optim=adamw_torch", "optim=sgd", "optim=adamw_bnb_8bit"]  # fmt: skip
    first = holder()
    assert first is not None and first > 0

    def two_claimed() -> bool:
        return all(i.state != "queued" for i in items()[:2])

    wait_until(two_claimed, what="the first two variants claimed", timeout=120,
               seen=lambda: [(i.id, i.state) for i in items()])  # fmt: skip
    os.kill(first, signal.SIGKILL)
    wait_until(lambda: holder() is None, what="the killed scheduler's lock to go", timeout=30)
    assert [i.state for i in items()][2] == "queued"
    resumed = json.loads(cli("queue", "resume", "--json").stdout)
    assert resumed["scheduler"] not in (None, first)

    wait_until(lambda: all(i.final for i in items()), what="every variant to end", timeout=480,
               interval=1.0, seen=lambda: [(i.id, i.state, i.run_id) for i in items()])  # fmt: skip
    ended = items()
    for item in ended:  # exactly one run each, the one the item names
        assert runs_of(item.token) == [item.run_id], (item.id, runs_of(item.token))
    states = {i.label: i for i in ended}
    assert states["optim=adamw_torch"].state == "finished"
    assert states["optim=sgd"].state == "finished"
    failed = states["optim=adamw_bnb_8bit"]
    assert failed.state == "failed" and failed.diagnosis_category, failed
    assert "bitsandbytes" in f"{failed.diagnosis_title} {failed.message}"

    shown = json.loads(cli("sweep", "show", sweep["id"], "--json").stdout)
    ranked = [v for v in shown["variants"] if v["rank"] is not None]
    assert sorted(v["label"] for v in ranked) == ["optim=adamw_torch", "optim=sgd"]
    assert shown["variants"][-1]["label"] == "optim=adamw_bnb_8bit"
    wait_until(lambda: receiver.posts, what="the sweep_finished webhook", timeout=60)
    (post,) = receiver.posts
    assert post["body"]["event"] == "sweep_finished"
    assert [t["label"] for t in post["body"]["top"]] == [v["label"] for v in ranked]
    wait_until(lambda: holder() is None, what="the scheduler to exit", timeout=60)
    log = (Path(os.environ["TRAINWIZ_HOME"]) / "queue.log").read_text()
    assert log.count("ends: nothing left to start or watch") == 1, log
