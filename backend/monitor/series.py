"""Loss / learning-rate / grad-norm history that stays small and fast however long the run is.

``MinMaxSeries`` keeps at most ``cap`` buckets: when full, neighbouring buckets merge and each
later bucket covers twice as many steps. Every bucket keeps its min and max (with their steps), so
a one-step spike survives any amount of downsampling. Appends are O(1) amortised; reading is
O(cap), independent of the number of points (100k steps cost the same to draw as 1k).
"""

from __future__ import annotations

import bisect
import math
from collections import deque
from dataclasses import dataclass, field


@dataclass(slots=True)
class _Bucket:
    x0: float
    x1: float
    xmin: float
    ymin: float
    xmax: float
    ymax: float
    n: int

    def merge(self, other: _Bucket) -> None:
        self.x1 = other.x1
        if other.ymin < self.ymin:
            self.xmin, self.ymin = other.xmin, other.ymin
        if other.ymax > self.ymax:
            self.xmax, self.ymax = other.xmax, other.ymax
        self.n += other.n


@dataclass
class MinMaxSeries:
    cap: int = 512
    count: int = field(default=0, init=False)
    last: tuple[float, float] | None = field(default=None, init=False)
    _buckets: list[_Bucket] = field(default_factory=list, init=False, repr=False)
    _per_bucket: int = field(default=1, init=False, repr=False)

    def append(self, x: float, y: float) -> None:
        if not math.isfinite(y):
            return
        self.count += 1
        self.last = (x, y)
        if self._buckets:
            tail = self._buckets[-1]
            if tail.n < self._per_bucket:  # hot path: update in place, allocate nothing
                tail.x1 = x
                if y < tail.ymin:
                    tail.xmin, tail.ymin = x, y
                if y > tail.ymax:
                    tail.xmax, tail.ymax = x, y
                tail.n += 1
                return
        self._buckets.append(_Bucket(x, x, x, y, x, y, 1))
        if len(self._buckets) > self.cap:
            merged = []
            for i in range(0, len(self._buckets), 2):
                b = self._buckets[i]
                if i + 1 < len(self._buckets):
                    b.merge(self._buckets[i + 1])
                merged.append(b)
            self._buckets = merged
            self._per_bucket *= 2

    def points(self, width: int | None = None) -> tuple[list[float], list[float]]:
        """(xs, ys) for a line plot: each bucket contributes its min and max in step order."""
        buckets = self._buckets
        if width and width > 0 and len(buckets) > width:
            buckets = _regroup(buckets, width)
        xs: list[float] = []
        ys: list[float] = []
        for b in buckets:
            if b.xmin == b.xmax:
                xs.append(b.xmin)
                ys.append(b.ymin)
            elif b.xmin < b.xmax:
                xs += [b.xmin, b.xmax]
                ys += [b.ymin, b.ymax]
            else:
                xs += [b.xmax, b.xmin]
                ys += [b.ymax, b.ymin]
        return xs, ys

    def truncate(self, x: float) -> None:
        """Forget the points after ``x`` (a resumed attempt replaces the steps after its
        checkpoint). A bucket that also holds later points is kept only when both its extremes
        lie at or before ``x`` (then it ends at the later one); else it goes, so a long chart may
        lose a few points at the cut but never shows a replaced one."""
        buckets = [b for b in self._buckets if b.x0 <= x]
        if buckets and buckets[-1].x1 > x:
            tail = buckets[-1]
            if max(tail.xmin, tail.xmax) <= x:
                tail.x1 = max(tail.xmin, tail.xmax)
            else:
                buckets.pop()
        self._buckets = buckets
        self.count = sum(b.n for b in buckets)
        one = buckets[-1] if buckets and buckets[-1].n == 1 else None
        self.last = (one.x1, one.ymin) if one is not None else None

    @property
    def ymax(self) -> float | None:
        return max((b.ymax for b in self._buckets), default=None)

    @property
    def ymin(self) -> float | None:
        return min((b.ymin for b in self._buckets), default=None)


def _regroup(buckets: list[_Bucket], width: int) -> list[_Bucket]:
    out: list[_Bucket] = []
    per = math.ceil(len(buckets) / width)
    for i in range(0, len(buckets), per):
        group = buckets[i : i + per]
        g = group[0]
        b = _Bucket(g.x0, g.x1, g.xmin, g.ymin, g.xmax, g.ymax, g.n)
        for other in group[1:]:
            b.merge(other)
        out.append(b)
    return out


@dataclass(frozen=True)
class Spike:
    step: int
    grad_norm: float
    median: float


@dataclass
class SpikeDetector:
    """Flags a grad norm far above the recent median (robust to the early, large norms).

    A spike is ``> factor × median`` of the last ``window`` norms, once ``min_history`` norms
    exist; non-finite norms always count (they precede a NaN loss).
    """

    window: int = 50
    factor: float = 5.0
    min_history: int = 8
    max_kept: int = 200
    spikes: deque[Spike] = field(default_factory=deque, init=False)
    total: int = field(default=0, init=False)
    _recent: deque[float] = field(default_factory=deque, init=False, repr=False)

    def __post_init__(self) -> None:
        self._recent = deque(maxlen=self.window)
        self._sorted: list[float] = []  # the same window, sorted: a median without sorting
        self.spikes = deque(maxlen=self.max_kept)

    def _median(self) -> float:
        w = self._sorted
        n = len(w)
        return w[n // 2] if n % 2 else (w[n // 2 - 1] + w[n // 2]) / 2

    def forget_after(self, step: int) -> None:
        """Drop the spikes after ``step`` (steps a resumed attempt replaces)."""
        kept = [s for s in self.spikes if s.step <= step]
        self.total -= len(self.spikes) - len(kept)
        self.spikes = deque(kept, maxlen=self.max_kept)

    def add(self, step: int, grad_norm: float) -> Spike | None:
        spike = None
        if not math.isfinite(grad_norm):
            spike = Spike(step, grad_norm, self._median() if self._sorted else math.nan)
        elif len(self._recent) >= self.min_history:
            med = self._median()
            if med > 0 and grad_norm > self.factor * med:
                spike = Spike(step, grad_norm, med)
        if spike is not None:
            self.spikes.append(spike)
            self.total += 1
        if math.isfinite(grad_norm):
            if len(self._recent) == self.window:
                old = self._recent[0]
                del self._sorted[bisect.bisect_left(self._sorted, old)]
            self._recent.append(grad_norm)
            bisect.insort(self._sorted, grad_norm)
        return spike
