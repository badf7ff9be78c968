"""A sweep's ranking and its sweep_finished webhook, from recorded runs (no training): the
variants ranked by the runs' best loss (compare's figures), a failed one last with its
diagnosis, the message sent once through notify's delivery to a loopback https receiver."""

from __future__ import annotations

import functools
import json
import os
from collections.abc import Iterator
from pathlib import Path

import pytest
import yaml

from backend.queue import db
from backend.queue.ranking import notify_finished_sweeps
from backend.rundir import RunStatus, write_status
from backend.runs import notify
from tests.backend.notifyserver import Receiver, make_cert
from tests.trainwiz_cli import cli as run_cli

ROOT = Path(__file__).resolve().parents[2]
cli = functools.partial(run_cli, check=False)


@pytest.fixture
def receiver(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Receiver]:
    cert, key = make_cert(tmp_path)
    server = Receiver(cert, key)
    monkeypatch.setenv(notify.CA_ENV, str(cert))
    yield server
    server.close()


def recorded_run(name: str, state: str, losses: list[float]) -> Path:
    run_dir = Path(os.environ["TRAINWIZ_HOME"]) / "runs" / f"20261201-000000-{name}"
    run_dir.mkdir(parents=True)
    write_status(run_dir, RunStatus(run_id=run_dir.name, preset=name, runner="host", state=state))
    write_step_metrics(run_dir, losses)
    return run_dir


def write_step_metrics(run_dir: Path, losses: list[float]) -> None:
    """metrics.jsonl of a 1-rank run that logged these losses at steps 1, 2, ..."""
    lines = [{"kind": "start", "world_size": 1}] + [
        {"kind": "step", "step": n, "max_steps": 3, "loss": loss, "step_time_s": 1.0,
         "tokens_nonpad": 100, "time": 1000.0 + n}
        for n, loss in enumerate(losses, 1)
    ]  # fmt: skip
    (run_dir / "metrics.jsonl").write_text("".join(json.dumps(x) + "\n" for x in lines))


def test_show_ranks_by_best_loss_and_the_webhook_gets_the_top_three(
    receiver: Receiver, tmp_path: Path
) -> None:
    data = yaml.safe_load((ROOT / "presets" / "tiny-cpu.yaml").read_text())
    data["notify"] = {"webhooks": [{"kind": "generic", "url": receiver.url + "/sweeps",
                                    "events": ["sweep_finished"]}]}  # fmt: skip
    base = tmp_path / "base.yaml"
    base.write_text(yaml.safe_dump(data))
    assert cli("queue", "pause").returncode == 0
    done = cli("sweep", str(base), "--set", "training.learning_rate=1e-3,2e-3,3e-3,4e-3",
               "--json")  # fmt: skip
    assert done.returncode == 0, done.stderr
    sweep = json.loads(done.stdout)
    ids = [item_id for _label, item_id, _file in sweep["queued"]]
    outcomes = [("finished", [5.0, 3.0, 3.5]), ("finished", [5.0, 2.0, 2.5]),
                ("finished", [5.0, 4.0]), ("failed", [])]  # fmt: skip
    conn = db.connect()
    for item_id, (state, losses) in zip(ids, outcomes):
        run_dir = recorded_run(f"v{item_id}", state, losses)
        extra = {"diagnosis_category": "cuda_oom", "diagnosis_title": "CUDA out of memory"}
        with db.transaction(conn):
            db.update_item(conn, item_id, state=state, run_id=run_dir.name,
                           **(extra if state == "failed" else {}))  # fmt: skip
    shown = json.loads(cli("sweep", "show", sweep["id"], "--json").stdout)
    assert [(v["rank"], v["label"], v["value"]) for v in shown["variants"]] == [
        (1, "learning_rate=2e-3", 2.0),
        (2, "learning_rate=1e-3", 3.0),
        (3, "learning_rate=3e-3", 4.0),
        (None, "learning_rate=4e-3", None),
    ]  # the failed one logged no step: last, unranked
    text = cli("sweep", "show", sweep["id"]).stdout
    assert "#1" in text and "best loss" in text and "cuda_oom: CUDA out of memory" in text
    said: list[str] = []
    assert notify_finished_sweeps(conn, said.append)
    (post,) = receiver.posts
    body = post["body"]
    assert post["path"] == "/sweeps" and body["event"] == "sweep_finished"
    assert [(t["rank"], t["label"], t["value"]) for t in body["top"]] == [
        (1, "learning_rate=2e-3", 2.0), (2, "learning_rate=1e-3", 3.0),
        (3, "learning_rate=3e-3", 4.0)]  # fmt: skip
    assert "failed: learning_rate=4e-3 (cuda_oom: CUDA out of memory)" in body["text"]
    assert not notify_finished_sweeps(conn, said.append)  # sent once
    assert len(receiver.posts) == 1
    log = (Path(sweep["dir"]) / "notify.log").read_text()
    assert "sweep_finished -> generic via url: delivered (HTTP 200)" in log
    assert not (Path(sweep["dir"]) / "train.log").exists()
    conn.close()
