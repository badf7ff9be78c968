"""Live monitor backend: GPU sampling, metrics/log following, throughput and loss series.

No Textual here: the monitor screen runs these in thread workers and receives dataclasses.

Each name loads its module on first use: `trainwiz runs` needs only ``world`` and ``run`` of
this package, not the GPU sampler, the log classifier and the tracker the Monitor screen uses.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from backend.lazyattrs import lazy_getattr

if TYPE_CHECKING:
    from backend.monitor.gpu import (
        NO_DRIVER_MESSAGE,
        GpuProcess,
        GpuSample,
        GpuSnapshot,
        GpuSource,
        NvmlSource,
        TraceReplaySource,
    )
    from backend.monitor.logfollow import LogBatch, LogFollower, is_progress, split_segments
    from backend.monitor.logmodel import ClassifiedBatch, LogLine, LogModel, classify_batch
    from backend.monitor.metrics import HfLogParser, MetricsFollower, RunEnd, RunStart, StepRecord
    from backend.monitor.owner import (
        ContainerOwner,
        ProcessTreeOwner,
        StaticOwner,
        UnknownOwner,
        owner_for_status,
    )
    from backend.monitor.run import RunFiles, open_run
    from backend.monitor.sampler import NvmlSampler
    from backend.monitor.series import MinMaxSeries, SpikeDetector
    from backend.monitor.tracker import MetricsView, RunTracker, ThroughputSummary

__all__ = [
    "NO_DRIVER_MESSAGE",
    "ClassifiedBatch",
    "ContainerOwner",
    "GpuProcess",
    "GpuSample",
    "GpuSnapshot",
    "GpuSource",
    "HfLogParser",
    "LogBatch",
    "LogFollower",
    "LogLine",
    "LogModel",
    "MetricsFollower",
    "MetricsView",
    "MinMaxSeries",
    "NvmlSampler",
    "NvmlSource",
    "ProcessTreeOwner",
    "RunEnd",
    "RunFiles",
    "RunStart",
    "RunTracker",
    "SpikeDetector",
    "StaticOwner",
    "StepRecord",
    "ThroughputSummary",
    "TraceReplaySource",
    "UnknownOwner",
    "classify_batch",
    "is_progress",
    "open_run",
    "owner_for_status",
    "split_segments",
]

# Which module defines each name: the package imports it on first use (PEP 562).
_WHERE = {
    "NO_DRIVER_MESSAGE": "backend.monitor.gpu",
    "GpuProcess": "backend.monitor.gpu",
    "GpuSample": "backend.monitor.gpu",
    "GpuSnapshot": "backend.monitor.gpu",
    "GpuSource": "backend.monitor.gpu",
    "NvmlSource": "backend.monitor.gpu",
    "TraceReplaySource": "backend.monitor.gpu",
    "LogBatch": "backend.monitor.logfollow",
    "LogFollower": "backend.monitor.logfollow",
    "is_progress": "backend.monitor.logfollow",
    "split_segments": "backend.monitor.logfollow",
    "ClassifiedBatch": "backend.monitor.logmodel",
    "LogLine": "backend.monitor.logmodel",
    "LogModel": "backend.monitor.logmodel",
    "classify_batch": "backend.monitor.logmodel",
    "HfLogParser": "backend.monitor.metrics",
    "MetricsFollower": "backend.monitor.metrics",
    "RunEnd": "backend.monitor.metrics",
    "RunStart": "backend.monitor.metrics",
    "StepRecord": "backend.monitor.metrics",
    "ContainerOwner": "backend.monitor.owner",
    "ProcessTreeOwner": "backend.monitor.owner",
    "StaticOwner": "backend.monitor.owner",
    "UnknownOwner": "backend.monitor.owner",
    "owner_for_status": "backend.monitor.owner",
    "RunFiles": "backend.monitor.run",
    "open_run": "backend.monitor.run",
    "NvmlSampler": "backend.monitor.sampler",
    "MinMaxSeries": "backend.monitor.series",
    "SpikeDetector": "backend.monitor.series",
    "MetricsView": "backend.monitor.tracker",
    "RunTracker": "backend.monitor.tracker",
    "ThroughputSummary": "backend.monitor.tracker",
}


__getattr__ = lazy_getattr(__name__, _WHERE)
