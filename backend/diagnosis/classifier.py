"""Streaming log classifier: signatures in, findings out, in bounded memory.

The file is read in fixed-size binary blocks. One compiled prefilter (``scan.py``: every
signature anchor's rare-character tail in one alternation) is searched over the whole block, so
only the rare lines holding a key are decoded and matched against the signatures whose anchors
they contain. Lines are split on
``\\n`` and ``\\r`` (tqdm redraws with ``\\r``) but numbered by ``\\n`` as an editor shows them.
Per category the scanner keeps a count and at most ``MAX_LINES`` line numbers, so memory does
not grow with the log.
"""

from __future__ import annotations

import io
import re
import threading
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, TYPE_CHECKING, Any

from backend.diagnosis.explain import explain
from backend.diagnosis.fixes import fixes_for
from backend.diagnosis.model import SEVERITY_RANK, Diagnosis, Finding, LineFlag, Severity
from backend.diagnosis.nodes import cross_node, node_of, node_of_path
from backend.diagnosis.scan import compile_prefilter, key_index
from backend.diagnosis.signatures import MARKERS, SIGNATURES, TIERS, Signature
from backend.errors import BadInput
from backend.i18n import N_, _

if TYPE_CHECKING:
    from backend.preset.schema import Preset

BLOCK = 4 << 20
MAX_CARRY = 16 << 20  # a "line" longer than this is cut rather than buffered
MAX_LINES = 50
MAX_TEXTS = 8
MAX_SEGMENT = 8192  # bytes of one line looked at around an anchor
WINDOW_BYTES = 2048
SAVE_LOOKBACK = 60  # traceback frames of a save precede its OOM message by a few dozen lines
ESCALATE_MISMATCH = 5  # repeated mismatches mean the template/tokenizer, not one odd sample
RUN_LOG, METRICS_FILE = "train.log", "metrics.jsonl"  # a run directory's log and metrics
ESCALATE_GRAD_NAN = 3  # one NaN gradient norm is a skipped fp16 step; every step is a dead run

_KEYS, _KEY_SIGS, _KEY_MARKERS = key_index()
_PREFILTER, _PREFILTER_STR = compile_prefilter(_KEYS)
_EOL_B = re.compile(b"[\r\n]")
_ANSI = re.compile(r"\x1b\[[0-9;?]*[ -/]*[@-~]")
# A tqdm bar glued in front of a message: "train:  2%|##   | 1/46 [00:01<01:10, 1.5s/it, ...]".
_TQDM_PREFIX = re.compile(r"^.*?\d+%\|[^|]*\|\s*\d+/\d+\s*\[[^\]]*\]")


def _clean(text: str) -> str:
    text = _ANSI.sub("", text).strip()
    bar = _TQDM_PREFIX.match(text)
    if bar and bar.end() < len(text):
        text = text[bar.end() :].strip()
    return text if len(text) <= 600 else text[:600] + "…"


def _match(
    segment: str,
    window: str | None,
    recent: Callable[[str, int], bool] | None,
    candidates: set[int],
) -> tuple[Signature, re.Match[str], str] | None:
    """First signature (in priority order) matching this line or the wrapped message starting
    on it; only ``candidates``, the signatures whose anchors the line holds, are tried."""
    for index in sorted(candidates):
        sig = SIGNATURES[index]
        if not any(anchor in segment for anchor in sig.anchors):
            continue  # a substring test is far cheaper than a failing regex search
        if sig.needs is not None and (recent is None or not recent(*sig.needs)):
            continue
        found = sig.pattern.search(segment)
        if found:
            return sig, found, segment
        if sig.window and window is not None:
            found = sig.pattern.search(window)
            if found and found.start() < len(segment):
                return sig, found, window[: found.end()]
    return None


def classify_line(line: str) -> LineFlag | None:
    """Classify one line without context (for colouring a live log): one prefilter search for
    the usual line, the signatures only when a key is present."""
    if _PREFILTER_STR.search(line) is None:
        return None
    for segment in reversed(line.split("\r")):
        candidates: set[int] = set()
        for number, key in enumerate(_KEYS):
            if key in segment:
                candidates |= _KEY_SIGS[number]
        if not candidates:
            continue
        hit = _match(_ANSI.sub("", segment), None, None, candidates)
        if hit is not None:
            sig = hit[0]
            return LineFlag(sig.category, sig.severity, _(sig.title))
    return None


def classify_lines(lines: list[str]) -> list[LineFlag | None]:
    return [classify_line(line) for line in lines]


@dataclass
class _Acc:
    category: str
    severity: Severity
    line: int
    text: str
    title: str
    groups: dict[str, Any]
    count: int = 0
    lines: list[int] = field(default_factory=list)
    texts: list[str] = field(default_factory=list)  # distinct matched texts, capped
    node: str | None = None
    nodes: list[str] = field(default_factory=list)


class _Scanner:
    """Holds the running state of one scan: line number, phase markers, per-category hits."""

    def __init__(self) -> None:
        self.line = 1  # line number at self.pos of the current block
        self.pos = 0
        self.markers: dict[str, int] = {}
        self.acc: dict[str, _Acc] = {}

    def recent(self, context: str, within: int) -> bool:
        seen = self.markers.get(context)
        return seen is not None and self.line - seen <= within

    def _window(self, data: bytes, end: int) -> str:
        parts: list[bytes] = []
        pos = end
        while len(parts) < 3 and pos < len(data) and pos - end < WINDOW_BYTES:
            nxt = _EOL_B.search(data, pos + 1, min(len(data), pos + 1 + WINDOW_BYTES))
            stop = nxt.start() if nxt else len(data)
            chunk = data[pos + 1 : stop].strip()
            if chunk:
                parts.append(chunk)
            pos = stop
        return b" ".join(parts).decode("utf-8", "replace")

    def scan(self, data: bytes, limit: int) -> None:
        """Look at every line holding a scan key and starting before ``limit``; data past it is
        lookahead only. One prefilter search per candidate line: the regex engine skips along
        the block in C on a first-character test, and a hit's line is read whole, so the next
        search starts after it."""
        self.pos = 0
        search = _PREFILTER.search
        found = search(data, 0, limit)
        while found is not None:
            pos = found.start()
            floor = max(0, pos - MAX_SEGMENT // 2)
            start = max(data.rfind(b"\n", floor, pos), data.rfind(b"\r", floor, pos)) + 1 or floor
            eol = _EOL_B.search(data, pos, min(len(data), pos + MAX_SEGMENT // 2))
            end = eol.start() if eol else min(len(data), pos + MAX_SEGMENT // 2)
            self.line += data.count(b"\n", self.pos, start)
            self.pos = start
            segment = _ANSI.sub("", data[start:end].decode("utf-8", "replace"))
            self._line(segment, data, end)
            found = search(data, max(end, pos + 1), limit)
        self.line += data.count(b"\n", self.pos, limit)
        self.pos = limit

    def _line(self, segment: str, data: bytes, end: int) -> None:
        sigs: set[int] = set()
        markers: set[int] = set()
        for number, key in enumerate(_KEYS):
            if key in segment:
                sigs |= _KEY_SIGS[number]
                markers |= _KEY_MARKERS[number]
        for index in markers:
            marker = MARKERS[index]
            if any(a in segment for a in marker.anchors) and marker.pattern.search(segment):
                self.markers[marker.context] = self.line
        window = None
        if any(SIGNATURES[index].window for index in sigs):
            window = segment + " " + self._window(data, end)
        hit = _match(segment, window, self.recent, sigs)
        if hit is None:
            return
        sig, found, text = hit
        category = sig.category
        title = sig.title
        if category == "cuda_oom" and (
            "state_dict" in segment  # e.g. FSDP's "clone ... state_dict entry ... out of memory"
            or self.recent("save", SAVE_LOOKBACK)
            or "train_done" in self.markers
        ):
            category = "fsdp_save_oom"
            title = N_("Out of GPU memory while gathering the checkpoint")
        groups = {k: v for k, v in found.groupdict().items() if v}
        groups["match"] = text
        node = node_of(segment)
        acc = self.acc.get(category)
        if acc is None:
            acc = self.acc[category] = _Acc(
                category, sig.severity, self.line, _clean(text), title, groups, node=node
            )
        elif SEVERITY_RANK[sig.severity] < SEVERITY_RANK[acc.severity]:
            acc.severity, acc.line, acc.text, acc.title, acc.groups, acc.node = (
                sig.severity,
                self.line,
                _clean(text),
                title,
                groups,
                node,
            )
        if node is not None and node not in acc.nodes:
            acc.nodes.append(node)
        acc.count += 1
        if len(acc.texts) < MAX_TEXTS and text not in acc.texts:
            acc.texts.append(text)
            acc.groups["all"] = "\n".join(acc.texts)
            for key, value in groups.items():
                acc.groups.setdefault(key, value)
        if len(acc.lines) < MAX_LINES and (not acc.lines or acc.lines[-1] != self.line):
            acc.lines.append(self.line)


def _sort_key(finding: Finding) -> tuple[int, int, int]:
    return (SEVERITY_RANK[finding.severity], TIERS.get(finding.category, 0), finding.line)


def diagnose_stream(
    stream: IO[bytes],
    *,
    preset: Preset | None = None,
    total: int | None = None,
    cancel: threading.Event | None = None,
    progress: Callable[..., None] | None = None,
) -> Diagnosis:
    """Scan a binary stream block by block; ``progress(done_bytes, total_bytes)`` per block."""
    scanner = _Scanner()
    carry = b""
    done = 0
    last = b""
    while True:
        if cancel is not None and cancel.is_set():
            break
        block = stream.read(BLOCK)
        done += len(block)
        if block:
            last = block[-1:]
        data = carry + block
        if not block:
            limit = len(data)
        else:
            # Hold back the last 3 complete lines (window lookahead) and the unfinished one.
            cut = len(data)
            for _attempt in range(4):
                idx = max(data.rfind(b"\n", 0, cut), data.rfind(b"\r", 0, cut))
                if idx < 0:
                    break
                cut = idx
            if cut == len(data) or cut <= 0:
                if len(data) <= MAX_CARRY:
                    carry = data
                    continue
                limit = len(data)
            else:
                limit = cut + 1
        scanner.scan(data, limit)
        carry = data[limit:]
        if progress is not None:
            progress(done, total)
        if not block:
            break
    findings = []
    for acc in scanner.acc.values():
        severity = acc.severity
        if acc.category == "tokenization_mismatch" and acc.count >= ESCALATE_MISMATCH:
            severity = "error"
        if acc.category == "loss_nan" and acc.count >= ESCALATE_GRAD_NAN:
            severity = "error"
        findings.append(
            Finding(
                category=acc.category,
                severity=severity,
                line=acc.line,
                lines=acc.lines,
                text=acc.text,
                title=_(acc.title),  # the tables hold English (N_); shown in the user's language
                explanation=explain(acc.category, acc.groups, acc.count),
                fixes=fixes_for(acc.category, acc.groups, preset),
                count=acc.count,
                node=acc.node,
                nodes=acc.nodes,
            )
        )
    findings.sort(key=_sort_key)
    cross_node(findings)
    return Diagnosis(
        findings=findings,
        lines_read=scanner.line - 1 + (1 if last not in (b"", b"\n") else 0),
        bytes_read=done,
    )


def diagnose_file(
    path: str | Path,
    cancel: threading.Event | None = None,
    progress: Callable[..., None] | None = None,
    preset: Preset | None = None,
) -> Diagnosis:
    """Diagnose a log file of any size. A run's ``train.log`` is read with the run's
    ``metrics.jsonl`` beside it: a NaN loss recorded there (bare ``NaN`` in old runs, ``null``
    next to a logged learning rate in new ones) is a finding even when the log says nothing."""
    target = Path(path).expanduser()
    diagnosis = _diagnose_path(target, cancel, progress, preset)
    node = node_of_path(target)
    if node is not None:
        for finding in diagnosis.findings:
            finding.node = finding.node or node
            finding.nodes = finding.nodes or [node]
    metrics = target.with_name(METRICS_FILE)
    if target.name == RUN_LOG and metrics.is_file():
        _merge_metrics(diagnosis, _diagnose_path(metrics, cancel, None, preset))
    return diagnosis


def _diagnose_path(
    target: Path,
    cancel: threading.Event | None,
    progress: Callable[..., None] | None,
    preset: Preset | None,
) -> Diagnosis:
    try:
        size = target.stat().st_size
        handle = target.open("rb")
    except FileNotFoundError as exc:
        raise BadInput(
            _("log '{target}': no such file: give a log file path or a run id").format(
                target=target
            )
        ) from exc
    except OSError as exc:
        raise BadInput(
            _("log '{target}': cannot read: {strerror}").format(
                target=target, strerror=exc.strerror
            )
        ) from exc
    with handle:
        return diagnose_stream(handle, preset=preset, total=size, cancel=cancel, progress=progress)


def _merge_metrics(diagnosis: Diagnosis, from_metrics: Diagnosis) -> None:
    """Add the metrics file's loss_nan finding when the log has none (its lines are
    metrics.jsonl lines, and its text says so)."""
    if any(f.category == "loss_nan" for f in diagnosis.findings):
        return
    for finding in from_metrics.findings:
        if finding.category == "loss_nan":
            finding.text = f"{METRICS_FILE} line {finding.line}: {finding.text}"
            diagnosis.findings.append(finding)
    diagnosis.findings.sort(key=_sort_key)


def diagnose_text(text: str, preset: Preset | None = None) -> Diagnosis:
    """Diagnose a pasted log."""
    data = text.encode("utf-8", "replace")
    return diagnose_stream(io.BytesIO(data), preset=preset, total=len(data))
