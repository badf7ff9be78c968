"""Samples a GpuSource on a fixed cadence without ever overlapping two samples.

Each sample is one-shot: the next one is armed only after the previous returned, at
``max(previous start + interval, now)``. A slow NVML call (a hung GPU can take seconds) therefore
delays the next sample instead of stacking calls or bursting to catch up.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable

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
        next_at = time.monotonic()
        while not cancel.is_set():
            started = time.monotonic()
            snap = self.sample_once()
            if snap.final or (self.max_samples is not None and self.samples >= self.max_samples):
                return
            next_at = max(next_at + self.interval, time.monotonic())
            if started + self.interval > next_at:  # pragma: no cover - clock went backwards
                next_at = started + self.interval
            cancel.wait(max(0.0, next_at - time.monotonic()))

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
