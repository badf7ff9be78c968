"""Samples a GpuSource on a fixed cadence without ever overlapping two samples.

The cadence is the per-node sampler's (``backend.entry.gpusampler.ticks``): each sample is
one-shot, the next armed only after the previous returned, at ``max(previous + interval, now)``.
A slow NVML call (a hung GPU can take seconds) therefore delays the next sample instead of
stacking calls or bursting to catch up.
"""

from __future__ import annotations

import threading
from collections.abc import Callable

from backend.entry.gpusampler import ticks
from backend.monitor.gpu import GpuSnapshot, GpuSource


class NvmlSampler:
    """Runs ``source.read()`` every ``interval`` seconds and hands each snapshot to ``on_sample``.

    Use ``run()`` inside a worker thread you already have (the TUI's thread worker), or
    ``start()``/``stop()`` to let the sampler own a daemon thread (scripts, benchmarks).
    """

    def __init__(
        self,
        source: GpuSource,
        on_sample: Callable[[GpuSnapshot], None],
        interval: float = 1.0,
        max_samples: int | None = None,
    ) -> None:
        if interval <= 0:
            raise ValueError("interval must be > 0 seconds")
        self.source = source
        self.on_sample = on_sample
        self.interval = interval
        self.max_samples = max_samples
        self.samples = 0
        self.overlaps = 0  # stays 0: counted to prove the one-shot design in tests
        self._busy = False
        self._cancel = threading.Event()
        self._thread: threading.Thread | None = None

    def sample_once(self) -> GpuSnapshot:
        if self._busy:
            self.overlaps += 1
        self._busy = True
        try:
            snap = self.source.read()
        finally:
            self._busy = False
        self.samples += 1
        self.on_sample(snap)
        return snap

    def run(self, cancel: threading.Event | None = None) -> None:
        """Blocking loop until cancelled, ``max_samples`` reached, or the source is final."""
        cancel = cancel or self._cancel
        for _tick in ticks(self.interval, cancel.is_set, cancel.wait):
            snap = self.sample_once()
            if snap.final or (self.max_samples is not None and self.samples >= self.max_samples):
                return

    def start(self) -> None:
        self._cancel.clear()
        self._thread = threading.Thread(target=self.run, name="nvml-sampler", daemon=True)
        self._thread.start()

    def stop(self, timeout: float = 5.0) -> None:
        self._cancel.set()
        if self._thread is not None:
            self._thread.join(timeout)
            self._thread = None
        self.source.close()
