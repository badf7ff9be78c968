"""Follows a growing log file from its start, in bounded memory, in time-batched chunks.

Lines end at ``\\n`` or ``\\r``: tqdm redraws with ``\\r`` only, so a long training would otherwise
be one endless "line". Batches are cut every ``batch_interval`` seconds (or ``max_batch`` lines),
so the UI gets a few messages per second however fast the log grows. A file that shrinks
(truncated) or is replaced (rotated: new inode) is re-read from the start.
"""

from __future__ import annotations

import os
import re
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

from backend.termsafe import terminal_safe

# A whole segment that is one tqdm redraw; a bar with a log line glued after it is kept as text.
_TQDM_BAR = re.compile(r"^\s*\d{1,3}%\|.*\| *\d+/\d+ \[[^\]]*\]\s*$")


def is_progress(segment: str) -> bool:
    """A tqdm progress redraw (shown as progress, not kept as a log line)."""
    return bool(_TQDM_BAR.match(segment))


# Cursor movement and erasing (CSI A-H, J, K, f): tqdm's nested bars go up a row with ESC[A
# and write over it, so what comes before such a sequence is not the text after it.
_CURSOR = re.compile(r"\x1b\[[0-9;?]*[A-HJKfsu]")


def screen_pieces(segment: str) -> Iterator[str]:
    """The pieces of one \\r/\\n-delimited segment as a terminal would show them: split where
    the cursor moves, other escape sequences (colours, titles) dropped, blank pieces (tqdm's
    clearing spaces) left out. The pane then never shows an ``ESC[A`` fragment or a cleared
    bar, and a bar with its cursor-up is recognised as progress."""
    if "\x1b" not in segment and "\x9b" not in segment:
        if segment.strip():
            yield segment
        return
    for piece in _CURSOR.split(segment):
        shown = terminal_safe(piece)
        if shown.strip():
            yield shown


def split_segments(text: str) -> Iterator[str]:
    """Splits on \\n and \\r, dropping blank pieces (tqdm pads with spaces between redraws)."""
    for line in text.split("\n"):
        for seg in line.split("\r"):
            yield from screen_pieces(seg)


@dataclass(frozen=True)
class LogBatch:
    lines: list[str]
    numbers: list[int]  # 1-based physical line number of each entry (tqdm redraws share one)
    reset: bool = False  # the file was truncated/replaced: what was shown before is stale
    eof: bool = False  # caught up with the file at the time of this batch

    @property
    def first_line_no(self) -> int:
        return self.numbers[0] if self.numbers else 0


class LogFollower:
    def __init__(
        self,
        path: Path,
        on_batch: Callable[[LogBatch], None],
        *,
        batch_interval: float = 0.2,
        max_batch: int = 5000,
        poll_interval: float = 0.1,
        chunk_size: int = 1 << 16,
        max_line: int = 16 << 10,
    ) -> None:
        self.path = Path(path)
        self.on_batch = on_batch
        self.batch_interval = batch_interval
        self.max_batch = max_batch
        self.poll_interval = poll_interval
        self.chunk_size = chunk_size
        self.max_line = max_line
        self.lines_seen = 0
        self.resets = 0
        self._pending = ""
        self._batch: list[str] = []
        self._numbers: list[int] = []
        self._line_no = 1  # physical (\n-counted) line number, as an editor and the diagnosis show
        self._batch_start = 0.0
        self._reset_flag = False

    def run(self, cancel: threading.Event, follow: bool = True) -> None:
        """Blocking: reads until cancelled (or until EOF when ``follow`` is False)."""
        fh = None
        inode = None
        offset = 0
        try:
            while not cancel.is_set():
                if fh is None:
                    try:
                        fh = open(self.path, "rb")  # noqa: SIM115 - held across iterations
                    except OSError:
                        if not follow:
                            return
                        cancel.wait(self.poll_interval)
                        continue
                    inode = os.fstat(fh.fileno()).st_ino
                    offset = 0
                data = fh.read(self.chunk_size)
                if data:
                    offset += len(data)
                    self._consume(data.decode("utf-8", errors="replace"))
                    if len(self._batch) >= self.max_batch or (
                        time.monotonic() - self._batch_start >= self.batch_interval
                    ):
                        self._flush(eof=False)
                    continue
                # At EOF: deliver what we have, then check for truncation / rotation.
                self._flush(eof=True)
                if not follow:
                    if self._pending.strip():
                        self._emit(self._pending)
                        self._pending = ""
                        self._flush(eof=True)
                    return
                cancel.wait(self.poll_interval)
                try:
                    st = os.stat(self.path)
                except OSError:
                    continue
                if st.st_ino != inode or st.st_size < offset:
                    fh.close()
                    fh = None
                    self._pending = ""
                    self._line_no = 1
                    self._reset_flag = True
                    self.resets += 1
        finally:
            if fh is not None:
                fh.close()

    def _consume(self, text: str) -> None:
        pieces = (self._pending + text).split("\n")
        for i, piece in enumerate(pieces):
            segs = piece.split("\r")
            if i == len(pieces) - 1:
                # The unfinished physical line: its \r-ended redraws are complete segments
                # (shown now); only the tail waits for more bytes.
                self._pending = segs.pop()
                for seg in segs:
                    self._emit(seg)
            else:
                for seg in segs:
                    self._emit(seg)
                self._line_no += 1
        # A line without an end is cut into max_line pieces rather than grown without bound.
        while len(self._pending) > self.max_line:
            self._emit(self._pending[: self.max_line])
            self._pending = self._pending[self.max_line :]

    def _emit(self, segment: str) -> None:
        for seg in screen_pieces(segment):
            if not self._batch:
                self._batch_start = time.monotonic()
            for i in range(0, len(seg), self.max_line):
                self._batch.append(seg[i : i + self.max_line])
                self._numbers.append(self._line_no)

    def _flush(self, eof: bool) -> None:
        if not self._batch and not self._reset_flag:
            return
        if self._reset_flag:
            self.lines_seen = 0
        self.lines_seen += len(self._batch)
        batch = LogBatch(self._batch, self._numbers, reset=self._reset_flag, eof=eof)
        self._batch = []
        self._numbers = []
        self._reset_flag = False
        self.on_batch(batch)
