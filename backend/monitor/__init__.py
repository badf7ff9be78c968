"""Live monitor backend: GPU sampling, metrics/log following, throughput and loss series.

No Textual here: the monitor screen runs these in thread workers and receives dataclasses.
"""

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
