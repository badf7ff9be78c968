"""Every node's GPUs for a multi-node run: follows ``<run>/nodes/<node>/gpu.jsonl``.

Each node's sampler (backend/entry/gpusampler.py, started by the SSH launcher or the Slurm
script) writes its readings into the run directory over the shared file system. This source
follows all those files and returns one ``GpuSnapshot`` holding every GPU of every node (each
``GpuSample.node`` says whose) and one ``NodeStatus`` per node, so the panel can say "no GPU on
this node", "sampler stopped" or "no sample for 40 s" instead of leaving a silent gap.
"""

from __future__ import annotations

import json
import os
import re
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from backend.entry.gpusampler import describe
from backend.monitor.gpu import GpuSample, GpuSnapshot, NodeStatus, gpu_samples
from backend.monitor.owner import UnknownOwner
from backend.rundir import NODES, RunDir

NODES_DIR = NODES
GPU_FILE = "gpu.jsonl"
TAIL_BYTES = 64 << 10  # on open, skip to the file's last lines: a day's history is not needed
SOURCE = "nodes"


def node_sort_key(name: str) -> tuple[int, str]:
    match = re.fullmatch(r"node(\d+)", name)
    return (int(match[1]) if match else 1 << 30, name)


class NodeGpuFile:
    """One node's sampler file: its header, its last sample, its end line (if it stopped)."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self.node = path.parent.name
        self.header: dict[str, Any] | None = None
        self.last: dict[str, Any] | None = None
        self.end: dict[str, Any] | None = None
        self._inode: int | None = None
        self._offset = 0
        self._partial = b""

    def poll(self) -> None:
        try:
            stat = self.path.stat()
        except OSError:
            return
        if stat.st_ino != self._inode or stat.st_size < self._offset:  # new or rotated file
            self._open(stat.st_ino, stat.st_size)
        try:
            with open(self.path, "rb") as handle:
                handle.seek(self._offset)
                data = handle.read(max(0, stat.st_size - self._offset))
        except OSError:
            return
        self._offset += len(data)
        *lines, self._partial = (self._partial + data).split(b"\n")
        for line in lines:
            self._record(line)

    def _open(self, inode: int, size: int) -> None:
        self._inode, self.header, self.last, self.end, self._partial = inode, None, None, None, b""
        try:
            with open(self.path, "rb") as handle:
                first = handle.readline()
                start = max(len(first), size - TAIL_BYTES)
                if start > len(first):
                    handle.seek(start - 1)
                    if handle.read(1) != b"\n":
                        start += len(handle.readline())  # the rest of a cut line
        except OSError:
            return
        if first.endswith(b"\n"):
            self._record(first)
            self._offset = start
        else:
            self._offset = 0  # the header is still being written

    def _record(self, line: bytes) -> None:
        try:
            record = json.loads(line)
        except ValueError:
            return
        if not isinstance(record, dict):
            return
        kind = record.get("kind")
        if kind == "header":
            self.header, self.last, self.end = record, None, None
        elif kind == "end":
            self.end = record
        elif "t" in record:
            self.last = record

    def status(self, now: float) -> tuple[NodeStatus, tuple[GpuSample, ...]]:
        state, why = describe(self.header, self.last, self.end, now)
        header = self.header or {}
        seen = (self.end or self.last or header).get("t") or header.get("started")
        gpus: tuple[GpuSample, ...] = ()
        if self.header is not None and self.last is not None:
            gpus = gpu_samples(self.header, self.last, UnknownOwner(), self.node)
        return (
            NodeStatus(
                node=self.node,
                host=str(header.get("host") or ""),
                state=state,
                message=why,
                gpus=len(header.get("gpus") or []),
                source=str(header.get("source") or ""),
                age_s=max(0.0, now - float(seen)) if seen else None,
            ),
            gpus,
        )


class NodeGpuSource:
    """A ``GpuSource`` over every node's sampler file of one run (the monitor's GPU worker
    calls ``read()`` on its cadence, as with NVML)."""

    def __init__(self, run_dir: Path | str, clock: Callable[[], float] = time.time) -> None:
        self.nodes_dir = Path(run_dir) / NODES_DIR
        self.clock = clock
        self.files: dict[str, NodeGpuFile] = {}

    def read(self) -> GpuSnapshot:
        try:
            names = [e.name for e in os.scandir(self.nodes_dir) if e.is_dir()]
        except OSError:
            names = []
        for name in names:
            path = self.nodes_dir / name / GPU_FILE
            if name not in self.files and path.exists():
                self.files[name] = NodeGpuFile(path)
        now = self.clock()
        statuses: list[NodeStatus] = []
        gpus: list[GpuSample] = []
        for name in sorted(self.files, key=node_sort_key):
            node_file = self.files[name]
            node_file.poll()
            status, samples = node_file.status(now)
            statuses.append(status)
            gpus.extend(samples)
        statuses += self._without_file()
        statuses.sort(key=lambda n: node_sort_key(n.node))
        message = "" if statuses else "waiting for the nodes' GPU samplers"
        return GpuSnapshot(now, "ok", tuple(gpus), message, source=SOURCE, nodes=tuple(statuses))

    def _without_file(self) -> list[NodeStatus]:
        """Nodes status.json knows whose sampler never wrote: waiting, or gone when its ssh
        already ended (the reason is in train.log)."""
        status = RunDir(self.nodes_dir.parent).status_dict()
        if status is None:
            return []
        out = []
        for node in status.get("nodes") or []:
            name = f"node{node.get('index')}"
            if name in self.files:
                continue
            sampler = node.get("sampler") or {}
            gone = sampler.get("client") == "exited"
            out.append(
                NodeStatus(
                    node=name,
                    host=str(node.get("host") or ""),
                    state="gone" if gone else "waiting",
                    message="sampler gone: it never wrote (see train.log)" if gone else "",
                )
            )
        return out

    def close(self) -> None:
        return None


def is_node_run(run_dir: Path | str, status: dict[str, Any] | None) -> bool:
    """A run whose GPUs are on its nodes: a multi-node scheduler, or node sampler files."""
    if status and status.get("scheduler") in ("ssh", "slurm"):
        return True
    return any((Path(run_dir) / NODES_DIR).glob(f"*/{GPU_FILE}"))
