"""GPU sampling: the real no-driver path, the recorded H200 traces, ownership, no overlap."""

from __future__ import annotations

import os
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from backend.errors import BadInput
from backend.monitor import (
    ContainerOwner,
    GpuSnapshot,
    NvmlSampler,
    NvmlSource,
    ProcessTreeOwner,
    StaticOwner,
    TraceReplaySource,
    UnknownOwner,
    owner_for_status,
)
from backend.monitor.owner import container_ids_in_cgroup

H200 = Path(__file__).resolve().parents[1] / "fixtures" / "h200"
TRACE_2GPU = H200 / "nvml-trace-fastchat-1b-2gpu.jsonl"
TRACE_1GPU = H200 / "nvml-trace-fastchat-1b.jsonl"


def _has_nvml_driver() -> bool:
    try:
        import pynvml

        pynvml.nvmlInit()
        pynvml.nvmlShutdown()
        return True
    except Exception:
        return False


@pytest.mark.skipif(_has_nvml_driver(), reason="this machine has an NVIDIA driver")
def test_no_driver_is_reported_and_sampler_stops() -> None:
    got: list[GpuSnapshot] = []
    sampler = NvmlSampler(NvmlSource(), got.append, interval=0.01)
    sampler.run(threading.Event())  # returns by itself: a no-driver answer is final
    assert len(got) == 1
    snap = got[0]
    assert snap.state == "no_driver"
    assert snap.final
    assert snap.gpus == ()
    assert "no NVIDIA driver" in snap.message


def test_replay_two_gpu_trace_values_and_ownership() -> None:
    src = TraceReplaySource(TRACE_2GPU, owner=StaticOwner(frozenset({941, 942})))
    snaps = list(src.snapshots())
    assert len(snaps) == 369 == len(src)
    first = snaps[0]
    assert first.state == "ok" and first.driver == "580.159.04"
    assert [g.name for g in first.gpus] == ["NVIDIA H200", "NVIDIA H200"]
    g0 = first.gpus[0]
    assert g0.mem_used == 644939776 and g0.mem_total == 150754820096
    assert g0.power_w == pytest.approx(79.393) and g0.power_limit_w == 700.0
    assert g0.temp_c == 33 and g0.util == 0 and g0.processes == ()
    assert max(s.gpus[1].mem_used for s in snaps) == 40141520896
    owners = {(p.pid, p.owner) for s in snaps for g in s.gpus for p in g.processes}
    assert (941, "this run") in owners and (942, "this run") in owners
    assert (743, "other") in owners and (856, "other") in owners
    # The run's own memory per GPU is the sum of its processes there.
    busy = next(s for s in snaps if any(p.pid == 942 for p in s.gpus[1].processes))
    assert busy.gpus[1].run_mem_bytes == sum(p.used_bytes or 0 for p in busy.gpus[1].processes)


def test_replay_read_stops_at_end_or_loops() -> None:
    src = TraceReplaySource(TRACE_1GPU)
    n = len(src)
    times = [src.read().time for _ in range(n + 3)]
    assert src.exhausted and times[-1] == times[n - 1]
    looping = TraceReplaySource(TRACE_1GPU, loop=True)
    t = [looping.read().time for _ in range(n + 1)]
    assert t[n] == t[0] and not looping.exhausted


def test_replay_rejects_a_non_trace(tmp_path: Path) -> None:
    bad = tmp_path / "x.jsonl"
    bad.write_text("not json\n")
    with pytest.raises(BadInput, match="not an NVML trace"):
        TraceReplaySource(bad)


class _SlowSource:
    """Takes longer than the interval, recording when each read ran."""

    def __init__(self) -> None:
        self.spans: list[tuple[float, float]] = []
        self.inner = TraceReplaySource(TRACE_1GPU)

    def read(self) -> GpuSnapshot:
        start = time.monotonic()
        time.sleep(0.03)  # the slowness under test (the scenario itself), not a wait
        snap = self.inner.read()
        self.spans.append((start, time.monotonic()))
        return snap

    def close(self) -> None:
        return None


def test_sampler_never_overlaps_a_slow_source() -> None:
    src = _SlowSource()
    got: list[GpuSnapshot] = []
    sampler = NvmlSampler(src, got.append, interval=0.005, max_samples=6)
    sampler.start()
    assert sampler._thread is not None
    sampler._thread.join(10)
    sampler.stop()
    assert len(got) == 6 and sampler.overlaps == 0
    for (_, end), (start, _) in zip(src.spans, src.spans[1:], strict=False):
        assert start >= end


def test_sampler_cancel_event_stops_run() -> None:
    cancel = threading.Event()
    got: list[GpuSnapshot] = []

    def on_sample(s: GpuSnapshot) -> None:
        got.append(s)
        if len(got) == 3:
            cancel.set()

    NvmlSampler(TraceReplaySource(TRACE_1GPU), on_sample, interval=0.001).run(cancel)
    assert len(got) == 3


@pytest.mark.parametrize("with_psutil", [True, False], ids=["psutil", "proc-fallback"])
def test_process_tree_owner_with_real_processes(
    with_psutil: bool, monkeypatch: pytest.MonkeyPatch
) -> None:
    if not with_psutil:  # the probe's path on a GPU box without psutil: /proc is read directly
        import backend.monitor.owner as owner_mod

        monkeypatch.setattr(owner_mod, "psutil", None)
    code = (
        "import subprocess, sys, time\n"
        "c = subprocess.Popen([sys.executable, '-c', 'import time; time.sleep(60)'])\n"
        "print(c.pid, flush=True)\n"
        "time.sleep(60)\n"
    )
    parent = subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE, text=True)
    try:
        assert parent.stdout is not None
        child = int(parent.stdout.readline())
        owner = ProcessTreeOwner(parent.pid)
        assert owner.owner(parent.pid) == "this run"
        assert owner.owner(child) == "this run"
        assert owner.owner(os.getpid()) == "other"
        assert owner.owner(2**22 + 12345) == "unknown"
        assert owner.name(child).startswith("python")
    finally:
        for p in _children(parent.pid):
            p.kill()
        parent.kill()
        parent.wait()


def _children(pid: int) -> list:  # type: ignore[type-arg]
    import psutil

    try:
        return list(psutil.Process(pid).children(recursive=True))
    except psutil.Error:
        return []


CID = "3f4e9a1b2c3d4e5f60718293a4b5c6d7e8f90112233445566778899aabbccddee"[:64]


def test_container_owner_reads_cgroup_files(tmp_path: Path) -> None:
    other = "b" * 64
    (tmp_path / "100").mkdir()
    (tmp_path / "100" / "cgroup").write_text(f"0::/system.slice/docker-{CID}.scope\n")
    (tmp_path / "100" / "comm").write_text("python\n")
    (tmp_path / "200").mkdir()
    (tmp_path / "200" / "cgroup").write_text(
        f"12:memory:/docker/{other}\n11:cpu,cpuacct:/docker/{other}\n"
    )
    (tmp_path / "300").mkdir()
    (tmp_path / "300" / "cgroup").write_text("0::/user.slice/user-1000.slice/session-2.scope\n")
    owner = ContainerOwner(CID[:12], proc_root=tmp_path)  # status.json may hold the short id
    assert owner.owner(100) == "this run" and owner.name(100) == "python"
    assert owner.owner(200) == "other"
    assert owner.owner(300) == "other"
    assert owner.owner(400) == "unknown"
    assert container_ids_in_cgroup(f"1:name=systemd:/docker/{CID}") == [CID]


def test_owner_for_status_picks_by_runner(tmp_path: Path) -> None:
    assert isinstance(owner_for_status(None), UnknownOwner)
    docker = owner_for_status({"runner": "docker", "container_id": CID}, proc_root=tmp_path)
    assert isinstance(docker, ContainerOwner)
    host = owner_for_status({"runner": "host", "pid": os.getpid(), "pgid": os.getpgid(0)})
    assert isinstance(host, ProcessTreeOwner)
    assert host.owner(os.getpid()) == "this run"
