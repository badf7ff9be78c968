"""Streaming log classifier: signatures in, findings out, in bounded memory.

The file is read in fixed-size binary blocks. Each block's distinct line *shapes* (digits as
``0``, ``scan.ShapeFilter``) are searched once with the prefilter (``scan.py``: every signature
anchor's rare-character tail in one alternation); only the lines of a shape holding a key are
searched as they are, and only the lines holding a key are decoded and matched against the
signatures whose anchors they contain. Lines are split on
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
from typing import IO, TYPE_CHECKING, Any, Literal

from backend.diagnosis.explain import explain
from backend.diagnosis.fixes import fixes_for
from backend.diagnosis.loglines import ANSI as _ANSI
from backend.diagnosis.loglines import clean as _clean
from backend.diagnosis.loglines import own_allows
from backend.diagnosis.model import SEVERITY_RANK, Diagnosis, Finding, LineFlag, Severity
from backend.diagnosis.nodes import cross_node, node_of
from backend.diagnosis.scan import (
    ShapeFilter,
    compile_prefilter,
    compile_prefilter_str,
    effective_anchors,
    key_index,
)
from backend.diagnosis.signatures import MARKERS, SIGNATURES, TIERS, Signature
from backend.diagnosis.signatures_cluster import YIELDS_TO, import_wrapper_only
from backend.diagnosis.signatures_hw import HW_YIELDS_TO
from backend.diagnosis.unrecognised import add_unrecognised, keep_tail
from backend.i18n import N_, _

if TYPE_CHECKING:
    from backend.preset.schema import Preset

ScanMode = Literal["shapes", "direct", "exhaustive"]
BLOCK = 4 << 20
MAX_CARRY = 16 << 20  # a "line" longer than this is cut rather than buffered
MAX_LINES = 50
MAX_TEXTS = 8
MAX_PENDING = 16  # matches waiting for a context that may follow (Signature.near)
MAX_SEGMENT = 8192  # bytes of one line looked at around an anchor
WINDOW_BYTES = 2048
SAVE_LOOKBACK = 60  # traceback frames of a save precede its OOM message by a few dozen lines
ESCALATE_MISMATCH = 5  # repeated mismatches mean the template/tokenizer, not one odd sample
ESCALATE_GRAD_NAN = 3  # one NaN gradient norm is a skipped fp16 step; every step is a dead run

_KEYS, _KEY_SIGS, _KEY_MARKERS = key_index()
_SIG_ANCHORS, _MARKER_ANCHORS = effective_anchors()  # hand-written and derived (regex_cover)
_PREFILTER = compile_prefilter(_KEYS)
_PREFILTER_STR: list[re.Pattern[str]] = []  # compiled by the first classify_line
_EOL_B = re.compile(b"[\r\n]")


def _match(
    segment: str,
    window: str | None,
    recent: Callable[[str, int], bool] | None,
    candidates: set[int],
    defer: Callable[[Signature, re.Match[str], str], None] | None = None,
    exhaustive: bool = False,
) -> tuple[Signature, re.Match[str], str] | None:
    """First signature (in priority order) matching this line or the wrapped message starting
    on it; only ``candidates``, the signatures whose anchors the line holds, are tried. A match
    of a ``near`` signature whose context has not been seen yet goes to ``defer`` instead."""
    for index in sorted(candidates):
        sig = SIGNATURES[index]
        if not exhaustive and not any(anchor in segment for anchor in _SIG_ANCHORS[index]):
            continue  # a substring test is far cheaper than a failing regex search
        if sig.needs is not None and (recent is None or not recent(*sig.needs)):
            continue
        if sig.near is not None and (recent is None or not recent(*sig.near)):
            if defer is not None and (found := sig.pattern.search(segment)):
                defer(sig, found, segment)
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
    if not _PREFILTER_STR:
        _PREFILTER_STR.append(compile_prefilter_str(_KEYS))
    if _PREFILTER_STR[0].search(line) is None:
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

    def __init__(self, mode: ScanMode = "shapes") -> None:
        self.mode = mode
        self.shapes = ShapeFilter(_KEYS) if mode == "shapes" else None
        self.line = 1  # line number at self.pos of the current block
        self.pos = 0
        self.markers: dict[str, int] = {}
        self.acc: dict[str, _Acc] = {}
        # (line, signature, match, text, node): near-signature matches awaiting their context
        self.pending: list[tuple[int, Signature, re.Match[str], str, str | None]] = []
        self.quiet = False  # markers only: the context read before a part of a split file
        self.tail = b""  # the log's last bytes: where an unrecognised failure is looked for

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
        lookahead only. The line shapes (``ShapeFilter``) name the few lines that may hold a
        key; only those are searched with the prefilter (the whole block where the shapes do
        not pay). Both find the same lines: the ``direct`` mode skips the shapes, and the
        ``exhaustive`` mode (the reference the tests compare with) tries every signature on
        every line."""
        self.pos = 0
        line0 = self.line
        hot = self.shapes.hot_lines(data, limit) if self.shapes is not None else None
        if self.mode == "exhaustive":
            self._scan_all(data, limit)
        elif hot is None:
            self._scan_range(data, 0, limit)
        else:
            cursor = 0
            for start, end in hot[1]:
                cursor = self._scan_range(data, max(start, cursor), end)
            self.line, self.pos = line0 + hot[0], limit
            return
        self.line += data.count(b"\n", self.pos, limit)
        self.pos = limit

    def _scan_range(self, data: bytes, begin: int, limit: int) -> int:
        """The prefilter over ``data[begin:limit]``: one search per candidate line (the regex
        engine skips along in C on a first-character test), a hit's line read whole so the next
        search starts after it. Returns where the next search would start."""
        search = _PREFILTER.search
        found = search(data, begin, limit)
        after = begin
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
            after = max(end, pos + 1)
            found = search(data, after, limit)
        return after

    def _scan_all(self, data: bytes, limit: int) -> None:
        """Every segment (between ``\\r``/``\\n``) before ``limit`` against every signature and
        marker, anchors not consulted: slow, the reference for the prefilter and the shapes."""
        start = 0
        while start < limit:
            eol = _EOL_B.search(data, start)
            end = eol.start() if eol else len(data)
            stop = min(end, start + MAX_SEGMENT)
            if stop > start:
                self.line += data.count(b"\n", self.pos, start)
                self.pos = start
                self._line(_ANSI.sub("", data[start:stop].decode("utf-8", "replace")), data, stop)
            start = end + 1

    def _line(self, segment: str, data: bytes, end: int) -> None:
        sigs: set[int] = set()
        markers: set[int] = set()
        exhaustive = self.mode == "exhaustive"
        if exhaustive:
            sigs, markers = set(range(len(SIGNATURES))), set(range(len(MARKERS)))
        else:
            for number, key in enumerate(_KEYS):
                if key in segment:
                    sigs |= _KEY_SIGS[number]
                    markers |= _KEY_MARKERS[number]
        for index in markers:
            marker = MARKERS[index]
            anchored = exhaustive or any(a in segment for a in _MARKER_ANCHORS[index])
            if anchored and marker.pattern.search(segment):
                self.markers[marker.context] = self.line
                self._resolve(marker.context)
        if self.quiet:
            return
        window = None
        if any(SIGNATURES[index].window for index in sigs):
            window = segment + " " + self._window(data, end)
        hit = _match(segment, window, self.recent, sigs, self._defer, exhaustive)
        if hit is None:
            return
        sig, found, text = hit
        if not own_allows(segment, sig.category):
            return  # trainwiz's own informational line: never a finding, never above a failure
        self._record(sig, found, text, segment)

    def _defer(self, sig: Signature, found: re.Match[str], text: str) -> None:
        if len(self.pending) < MAX_PENDING and own_allows(text, sig.category):
            self.pending.append((self.line, sig, found, text, node_of(text)))

    def _resolve(self, context: str) -> None:
        """A context just seen confirms the deferred matches within reach of it."""
        kept = []
        for line, sig, found, text, node in self.pending:
            assert sig.near is not None
            if self.line - line > sig.near[1]:
                continue  # out of reach for good
            if sig.near[0] != context:
                kept.append((line, sig, found, text, node))
                continue
            here = self.line
            self.line = line  # the finding is where the message was
            self._record(sig, found, text, text)
            self.line = here
        self.pending = kept

    def _record(self, sig: Signature, found: re.Match[str], text: str, segment: str) -> None:
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


def sort_findings(findings: list[Finding]) -> None:
    """Most severe first, root causes before symptoms, then by line (in place)."""
    findings.sort(key=_sort_key)


def feed(
    stream: IO[bytes],
    scanner: _Scanner,
    total: int | None = None,
    cancel: threading.Event | None = None,
    progress: Callable[..., None] | None = None,
) -> tuple[int, bytes]:
    """Scan a binary stream block by block into ``scanner``; (bytes read, the last byte)."""
    carry = b""
    done = 0
    last = b""
    while True:
        if cancel is not None and cancel.is_set():
            break
        block = stream.read(BLOCK)
        done += len(block)
        scanner.tail = keep_tail(scanner.tail, block)
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
    return done, last


def findings_of(accs: dict[str, _Acc], preset: Preset | None) -> list[Finding]:
    """The findings of a scan's per-category state, sorted, timeouts pointed at causes."""
    findings = []
    other_error = {a.category for a in accs.values() if a.severity == "error"} - {
        "version_mismatch"
    }
    for acc in accs.values():
        severity = acc.severity
        if acc.category == "version_mismatch" and other_error and import_wrapper_only(acc.groups):
            severity = "warning"  # the wrapper of an import error: the error under it is the cause
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
    for consequence, cause in (*YIELDS_TO, *HW_YIELDS_TO):
        found = {f.category: f for f in findings}
        if consequence in found and cause in found and found[cause].severity == "error":
            findings.remove(found[consequence])
            findings.insert(findings.index(found[cause]) + 1, found[consequence])
    cross_node(findings)
    return findings


def diagnose_stream(
    stream: IO[bytes],
    *,
    preset: Preset | None = None,
    total: int | None = None,
    cancel: threading.Event | None = None,
    progress: Callable[..., None] | None = None,
    mode: ScanMode = "shapes",
) -> Diagnosis:
    """Scan a binary stream block by block; ``progress(done_bytes, total_bytes)`` per block.
    ``mode`` picks how candidate lines are found (see ``_Scanner.scan``): the findings are the
    same in every mode, only the time differs."""
    scanner = _Scanner(mode)
    done, last = feed(stream, scanner, total, cancel, progress)
    findings = findings_of(scanner.acc, preset)
    if cancel is None or not cancel.is_set():  # never silent about a fatal error (unrecognised)
        add_unrecognised(findings, scanner.tail, scanner.line - 1, whole=done == len(scanner.tail))
    return Diagnosis(
        findings=findings,
        lines_read=scanner.line - 1 + (1 if last not in (b"", b"\n") else 0),
        bytes_read=done,
    )


def diagnose_text(text: str, preset: Preset | None = None) -> Diagnosis:
    """Diagnose a pasted log."""
    data = text.encode("utf-8", "replace")
    return diagnose_stream(io.BytesIO(data), preset=preset, total=len(data))
