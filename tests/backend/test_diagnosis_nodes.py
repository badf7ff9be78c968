"""Diagnosis of a multi-node run's log: every node's lines are read, each finding names its
node, and a collective timeout on one node points at the root cause on another.

The logs are real failure logs from the corpus (tests/fixtures/logcorpus, sources in its
SOURCES.tsv) copied into one ``train.log`` by the real ``NodeLog`` the SSH and Slurm launchers
use, exactly as a two-node run writes it: node 1's ranks fail first, then node 0's NCCL
watchdog times out waiting for them.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from textual.widgets import OptionList, Static

from backend.diagnosis import diagnose_file
from backend.runs.multinode.agents import NodeLog, NodeState
from screens.troubleshoot import TroubleshootScreen
from tests.waiting import pilot_until

CORPUS = Path(__file__).resolve().parents[1] / "fixtures" / "logcorpus"
ROOT = Path(__file__).resolve().parents[2]
NCCL = CORPUS / "nccl" / "llamafactory-6269-watchdog-reduce-scatter-timeout.log"
OOM = CORPUS / "cuda_oom" / "fastchat-1781-vicuna7b-a100-40g.log"
KILLED = CORPUS / "host_oom_killed" / "cppo-6-childfailed-sigkill-root-cause.log"
RUN_ID = "20261201-120000-tiny-ssh"


def _status(screen: object) -> str:
    """Troubleshoot's status line (empty on another screen)."""
    found = screen.query("#ts-status")  # type: ignore[attr-defined]
    return str(found.first().render()) if found else ""


def two_node_log(path: Path, node1_log: Path) -> Path:
    """node 1 (gpu-b) fails with ``node1_log``; node 0 (gpu-a) then hits the NCCL timeout."""
    nodes = [NodeState(0, "gpu-a", "running"), NodeState(1, "gpu-b", "running")]
    with open(path, "wb") as handle:
        log = NodeLog(handle, nodes)
        log.note("node 0 (gpu-a): ssh ... torchrun --nnodes=2 ...")
        for index in (0, 1):
            log.line(
                nodes[index],
                "INFO:torch.distributed.elastic.agent.server.api:[default] "
                "Rendezvous complete for workers. Result:",
            )
        for line in node1_log.read_text().splitlines():
            log.line(nodes[1], line)
        for line in NCCL.read_text().splitlines():
            log.line(nodes[0], line)
    return path


@pytest.mark.parametrize(
    ("node1_log", "cause"), [(OOM, "cuda_oom"), (KILLED, "host_oom")], ids=["oom", "sigkill"]
)
def test_nccl_timeout_on_node0_names_the_root_cause_on_node1(
    tmp_path: Path, node1_log: Path, cause: str
) -> None:
    log = two_node_log(tmp_path / "train.log", node1_log)
    proc = subprocess.run(
        [sys.executable, "-m", "tui.cli", "diagnose", str(log), "--json"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert proc.returncode == 1, proc.stderr  # an error was found
    findings = json.loads(proc.stdout)["findings"]
    top = findings[0]
    assert (top["category"], top["node"], top["nodes"]) == (cause, "node1 gpu-b", ["node1 gpu-b"])
    nccl = next(f for f in findings if f["category"] == "nccl")
    assert nccl["node"] == "node0 gpu-a" and nccl["nodes"] == ["node0 gpu-a"]
    assert "the root cause is on node1 gpu-b" in nccl["explanation"]
    assert f"({cause}, line {top['line']}" in nccl["explanation"]
    human = subprocess.run(
        [sys.executable, "-m", "tui.cli", "diagnose", str(log)],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=60,
    ).stdout
    assert "  on node1 gpu-b\n" in human and "  on node0 gpu-a\n" in human


def test_a_slurm_node_log_names_its_node(tmp_path: Path) -> None:
    # srun --output=<run>/nodes/node%n-%N.log: one node's own, untagged lines.
    (tmp_path / "nodes").mkdir()
    log = tmp_path / "nodes" / "node1-gpu-b.log"
    log.write_bytes(OOM.read_bytes())
    top = diagnose_file(log).top
    assert top is not None and (top.category, top.node, top.nodes) == (
        "cuda_oom",
        "node1 gpu-b",
        ["node1 gpu-b"],
    )


def test_a_single_node_log_names_no_node(tmp_path: Path) -> None:
    diagnosis = diagnose_file(OOM)
    assert diagnosis.top is not None and diagnosis.top.node is None
    assert diagnosis.top.nodes == []
    assert "root cause is on" not in diagnosis.top.explanation


async def test_troubleshoot_names_the_node(tmp_path: Path) -> None:
    from backend.preset import load_preset
    from tui.app import TrainwizApp

    run = Path(os.environ["TRAINWIZ_HOME"]) / "runs" / RUN_ID
    run.mkdir(parents=True)
    two_node_log(run / "train.log", OOM)
    (run / "status.json").write_text(json.dumps({"run_id": RUN_ID, "state": "failed"}))
    app = TrainwizApp(load_preset("tiny-cpu"), "tiny-cpu")
    async with app.run_test(size=(140, 45)) as pilot:
        await pilot.pause()
        app.push_screen(TroubleshootScreen(run_id=RUN_ID))
        await pilot_until(
            pilot,
            lambda: getattr(app.screen, "diagnosis", None) is not None,
            what="the run's diagnosis on the Troubleshoot screen",
            timeout=30,
            seen=lambda: f"{type(app.screen).__name__}: {_status(app.screen)}",
        )
        await pilot.pause()  # the first finding's highlight (a message) shows its fixes again
        screen = app.screen
        assert isinstance(screen, TroubleshootScreen) and screen.diagnosis is not None
        found = screen.query_one("#ts-findings", OptionList)
        labels = [str(found.get_option_at_index(i).prompt) for i in range(found.option_count)]
        assert "cuda_oom  node1  line" in labels[0]
        assert any("nccl  node0  line" in label for label in labels)
        shown = str(screen.query_one("#ts-explain", Static).render())
        assert shown.startswith("on node1 gpu-b, line ")


def _slurm_run(tmp_path: Path, with_train_log: bool) -> Path:
    """A Slurm run whose node 1 was killed by the time limit and whose node 0 timed out."""
    run = tmp_path / "runs" / "20261201-130000-slurm"
    (run / "nodes").mkdir(parents=True)
    (run / "status.json").write_text(json.dumps({"run_id": run.name, "state": "failed"}))
    (run / "nodes" / "node0-gpu-a.log").write_bytes(NCCL.read_bytes())
    (run / "nodes" / "node1-gpu-b.log").write_text(
        "{'loss': 1.21, 'grad_norm': 0.8, 'learning_rate': 2e-05, 'epoch': 0.5}\n"
        "slurmstepd: error: *** STEP 77.0 ON gpu-b CANCELLED AT 2026-12-01T13:00:00 DUE TO TIME"
        " LIMIT ***\n"
    )
    if with_train_log:  # the watcher copied only the batch log's start before it stopped
        (run / "train.log").write_text("Submitted batch job 77\n")
    return run


@pytest.mark.parametrize("with_train_log", [True, False], ids=["train-log", "no-train-log"])
def test_a_run_reads_every_nodes_own_log_and_names_the_node(
    tmp_path: Path, with_train_log: bool
) -> None:
    from backend.runs.diagnose_run import diagnose_run

    run = _slurm_run(tmp_path, with_train_log)
    findings = diagnose_run(run).diagnosis.findings
    top = findings[0]
    assert (top.category, top.node, top.nodes) == (
        "slurm_time_limit",
        "node1 gpu-b",
        ["node1 gpu-b"],
    )
    assert top.text.startswith("nodes/node1-gpu-b.log line 2: ")
    nccl = next(f for f in findings if f.category == "nccl")
    assert nccl.node == "node0 gpu-a"
    assert nccl.explanation.count("the root cause is on node1 gpu-b") == 1


def test_a_node_log_already_copied_into_train_log_is_not_counted_twice(tmp_path: Path) -> None:
    from backend.runs.diagnose_run import diagnose_run

    run = _slurm_run(tmp_path, with_train_log=False)
    two_node_log(run / "train.log", OOM)  # the watcher's tagged copy holds node 1's OOM
    (run / "nodes" / "node1-gpu-b.log").write_bytes(OOM.read_bytes())
    findings = diagnose_run(run).diagnosis.findings
    oom = [f for f in findings if f.category == "cuda_oom"]
    assert len(oom) == 1 and oom[0].nodes == ["node1 gpu-b"]
    assert not oom[0].text.startswith("nodes/")  # train.log's line, as before


def test_diagnose_cli_reads_a_node_only_run_and_exits_1(tmp_path: Path) -> None:
    run = _slurm_run(tmp_path, with_train_log=False)
    proc = subprocess.run(
        [sys.executable, "-m", "tui.cli", "diagnose", str(run), "--json"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert proc.returncode == 1, proc.stderr
    top = json.loads(proc.stdout)["findings"][0]
    assert (top["category"], top["node"]) == ("slurm_time_limit", "node1 gpu-b")
