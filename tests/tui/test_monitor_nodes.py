"""The monitor of a multi-node run: every GPU of every node, grouped by node.

Two real sampler processes (backend/entry/gpusampler.py, the module every node runs) replay
the recorded H200 NVML trace (tests/fixtures/h200, 2 GPUs) as two nodes, ``gpu-a`` and
``gpu-b`` (fake names: this machine has no GPU), into the run directory, exactly where the
launchers' samplers write. The monitor picks the node source itself from status.json.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest

from backend.monitor.nodegpu import NodeGpuSource
from screens.monitor import MonitorScreen
from tests.tui.test_monitor import TRACE_2G, MonitorHarness
from tests.waiting import pilot_until, wait_until
from widgets.gpu_panel import GpuPanel, render_snapshot
from widgets.log_pane import LogPane

ROOT = Path(__file__).resolve().parents[2]
SAMPLER = ROOT / "backend" / "entry" / "gpusampler.py"
# Recorded rows (0-based after the header): the 2-GPU run at its peak, and mid-run.
ROWS = {"node0": ("gpu-a", 360), "node1": ("gpu-b", 303)}
LOG_LINES = [
    "[trainwiz 2026-12-01 12:00:00] node 0 (gpu-a): ssh ... torchrun --nnodes=2 ...",
    "[node0 gpu-a] INFO:torch.distributed.elastic.agent.server.api:[default] Rendezvous complete",
    "[node1 gpu-b] INFO:torch.distributed.elastic.agent.server.api:[default] Rendezvous complete",
    "[node0 gpu-a] ***** Running training *****",
    "[node1 gpu-b] [rank1]:[W1201 12:00:05] warning from node 1's rank",
]


def make_node_run(root: Path) -> Path:
    run = root / "runs" / "20261201-120000-tiny-ssh"
    (run / "nodes").mkdir(parents=True)
    (run / "train.log").write_text("\n".join(LOG_LINES) + "\n")
    nodes = [{"index": i, "host": ROWS[f"node{i}"][0], "state": "running"} for i in (0, 1)]
    status = {"run_id": run.name, "runner": "host", "state": "running", "scheduler": "ssh"}
    (run / "status.json").write_text(json.dumps({**status, "nodes": nodes}))
    return run


def start_samplers(run: Path, interval: float = 60.0) -> dict[str, subprocess.Popen[bytes]]:
    """One replaying sampler per fake node; waits until each has written a sample."""
    procs = {}
    for node, (host, row) in ROWS.items():
        argv = [sys.executable, str(SAMPLER), f"--node={node}", f"--host={host}"]
        argv += [f"--out-dir={run / 'nodes'}", f"--interval={interval}", f"--replay={TRACE_2G}"]
        procs[node] = subprocess.Popen([*argv, f"--replay-start={row}"])
    for node in ROWS:
        wrote_a_sample(run / "nodes" / node / "gpu.jsonl", node)
    return procs


def wrote_a_sample(path: Path, node: str) -> None:
    """Wait until a sampler's file has its header line and a sample."""
    wait_until(
        lambda: len(path.read_text().splitlines()) >= 2,
        what=f"{node}'s sampler to write its header and a sample",
        timeout=30,
        seen=lambda: path.read_text() if path.exists() else "no file",
    )


@contextmanager
def replayed_nodes(root: Path) -> Iterator[tuple[Path, dict[str, subprocess.Popen[bytes]]]]:
    """A two-node run dir with both nodes' samplers replaying; they are ended afterwards."""
    run = make_node_run(root)
    procs = start_samplers(run)
    try:
        yield run, procs
    finally:
        for proc in procs.values():
            if proc.poll() is None:
                proc.terminate()
            proc.wait(timeout=10)


@pytest.fixture
def node_run(tmp_path: Path) -> Iterator[tuple[Path, dict[str, subprocess.Popen[bytes]]]]:
    with replayed_nodes(tmp_path) as replayed:
        yield replayed


def last_sample_time(run: Path) -> float:
    times = []
    for node in ROWS:
        lines = (run / "nodes" / node / "gpu.jsonl").read_text().splitlines()
        times.append(max(json.loads(x).get("t", 0) for x in lines[1:]))
    return max(times)


def pinned(run: Path, after: float = 0.5) -> NodeGpuSource:
    """The node source with its clock pinned just after the last sample (snapshot-stable)."""
    at = last_sample_time(run) + after
    return NodeGpuSource(run, clock=lambda: at)


async def test_panel_shows_every_gpu_of_every_node(node_run: tuple[Path, dict]) -> None:
    run, _procs = node_run
    app = MonitorHarness(MonitorScreen(run, gpu_interval=0.05))  # the source picked for the run
    async with app.run_test(size=(120, 40)) as pilot:
        panel = app.screen.query_one(GpuPanel)
        await pilot_until(
            pilot,
            lambda: panel.snapshot is not None and len(panel.snapshot.gpus) == 4,
            what="the GPU panel to show both nodes' 4 GPUs",
            timeout=20,
            seen=lambda: str(panel.render()),
        )
        snap = panel.snapshot
        assert snap is not None and snap.source == "nodes"
        assert [(n.node, n.host, n.state, n.gpus) for n in snap.nodes] == [
            ("node0", "gpu-a", "ok", 2),
            ("node1", "gpu-b", "ok", 2),
        ]
        assert [(g.node, g.index, g.mem_used) for g in snap.gpus] == [
            ("node0", 0, 39256522752),
            ("node0", 1, 40141520896),
            ("node1", 0, 23890690048),
            ("node1", 1, 23993450496),
        ]
        text = str(panel.render())
        lines = text.splitlines()
        assert lines[0].startswith("node0 gpu-a · 2× H200") and "node1 gpu-b · 2× H200" in text
        assert " 100%  51°C  569/700W" in text and "  52%  58°C  560/700W" in text  # node 0
        node1 = lines[next(i for i, x in enumerate(lines) if x.startswith("node1")) :]
        assert node1[1].startswith("GPU0 H200") and " 22.2/140G 100%  57°C  615/700W" in node1[1]
        # Logs from every node, each line naming its node.
        pane = app.screen.query_one(LogPane)
        await pilot_until(
            pilot,
            lambda: pane.model.total >= len(LOG_LINES),
            what=f"the log pane to show all {len(LOG_LINES)} lines",
            timeout=20,
            seen=lambda: [line.text for line in pane.model.lines],
        )
        shown = [line.text for line in pane.model.lines]
        assert any(x.startswith("[node0 gpu-a] ") for x in shown)
        assert any(x.startswith("[node1 gpu-b] ") for x in shown)


def test_a_dead_or_stopped_sampler_is_a_visible_state(node_run: tuple[Path, dict]) -> None:
    run, procs = node_run
    procs["node1"].send_signal(signal.SIGKILL)  # dies without a word
    procs["node1"].wait(timeout=10)
    procs["node0"].send_signal(signal.SIGTERM)  # stops on purpose: writes its end line
    procs["node0"].wait(timeout=10)
    # 60 s interval: a sampler is "gone" after 5 intervals without a line and no end line.
    snap = pinned(run, after=400).read()
    states = {n.node: (n.state, n.message) for n in snap.nodes}
    assert states["node0"] == ("stopped", "sampler stopped: signal SIGTERM")
    assert states["node1"][0] == "gone" and "no sample for 40" in states["node1"][1]
    text = render_snapshot(snap, 118).plain
    assert "node0 gpu-a · 2× H200 · sampler stopped (signal SIGTERM)" in text
    assert "node1 gpu-b · 2× H200 · sampler gone: no sample for 40" in text
    assert text.count("GPU0 H200") == 2  # the last readings stay on screen, marked


def test_no_gpu_node_and_a_node_that_never_wrote(tmp_path: Path) -> None:
    run = make_node_run(tmp_path)
    proc = subprocess.run(  # this CPU machine's own reading: the no-GPU record
        [
            sys.executable,
            str(SAMPLER),
            "--node=node0",
            "--host=cpu-box",
            "--max-samples=1",
            f"--out-dir={run / 'nodes'}",
        ],
        capture_output=True,
        timeout=60,
        env={**os.environ, "PATH": "/usr/bin:/bin"},  # no nvidia-smi here either way
    )
    assert proc.returncode == 0, proc.stderr
    header = json.loads((run / "nodes" / "node0" / "gpu.jsonl").read_text().splitlines()[0])
    snap = NodeGpuSource(run, clock=lambda: header["started"] + 0.1).read()
    # node0 stopped after its one sample; node1 is known from status.json, never wrote.
    assert [(n.node, n.state) for n in snap.nodes] == [("node0", "stopped"), ("node1", "waiting")]
    assert header["state"] == "no_gpu" and header["source"] == "none"
    text = render_snapshot(snap, 100).plain
    assert "node1 gpu-b · waiting for its sampler" in text
