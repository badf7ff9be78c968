"""The decisive line(s) of a log that ends on a failure, read from the log's last bytes.

A failure that no signature knows still ends a log in one of a few shapes, each printed by the
component that failed, not by the failing code: Python's traceback, whose last line is
``Type: message`` after its last frame (``File "...", line N, in fn``); libstdc++'s terminate
handler (``terminate called after throwing an instance of 'T'`` / ``what():  message``); torch's
and the kernels' CUDA check (``CUDA error: message``); a compiler (``file.cu(57): error: ...``,
``file.cpp:12:5: error: ...``); torchrun's failure summary (``exitcode : N`` for the rank and
host that failed first, a signal in its ``traceback :`` field). They are tried in that order:
the exception says why, an exit code only that something ended.

Not every traceback is a failure. Libraries print handled ones as warnings and go on, Python
prints the ones it ignores at exit (``Exception ignored in``), and an elastic agent restarts a
failed worker group. So a candidate counts only when the run did not go on after it: no training
progress (a tqdm bar, a loss, a step counter) between it and the next process exit (or the end
of the log), and no sign of a finished training (``train_runtime``, ``model saved``) after it.

Ranks print their tracebacks at once, often interleaved and each line prefixed (``[rank1]: ``,
``[default0]:``, a host, a node tag): a traceback is followed by the prefix its header line has
(or one of its shape, digits aside, so that a timestamp prefix still matches). Launchers' own tracebacks
(``CalledProcessError``, ``ChildFailedError``) only say a worker failed: the worker's exception
wins, and torchrun's summary says which rank's to quote. trainwiz's own lines (``is_own``) mark
progress, success and exits but are never quoted.
"""

from __future__ import annotations

import bisect
import re
from dataclasses import dataclass, field

from backend.diagnosis.bare import ends_traceback, idle_bar
from backend.diagnosis.loglines import ANSI, TQDM_PREFIX, is_own
from backend.diagnosis.nodes import node_of

MAX_CONTEXT = 60  # lines of a traceback kept for `diagnose --json`
MAX_QUOTE = 300  # characters of one quoted line
MAX_FOREIGN = 40  # other lines interleaved into an open traceback before it is given up
RECENT = 12  # lines before a non-Python candidate kept as its context
# Characters of a line looked at (a traceback's lines are short; a message is quoted to
# MAX_QUOTE), and of its start where a tqdm bar or a rich frame is looked for: those patterns
# backtrack on long runs of digits or of non-spaces, so they only ever see a bounded string.
MAX_LINE = 4096
MAX_BAR = 512

_HEADER = re.compile(r"Traceback \(most recent call last\)")
_FRAME = re.compile(r'^\s+File "(?P<file>[^"]+)", line (?P<line>\d+)(?:, in (?P<fn>.+))?$')
_RICH_FRAME = re.compile(r"(?P<file>[^\s│|]+\.py):(?P<line>\d+) in (?P<fn>[\w<>.]+)")
_EXCEPTION = re.compile(r"^(?P<type>(?:[A-Za-z_]\w*\.)*[A-Z]\w*)(?::\s(?P<msg>.*)|:)?$")
_HANDLED = re.compile(r"Exception ignored in|Error in atexit\._run_exitfuncs|--- Logging error ---")
_WRAPPERS = ("CalledProcessError", "ChildFailedError")
_TERMINATE = re.compile(r"terminate called after throwing an instance of '(?P<type>[^']+)'")
_WHAT = re.compile(r"\bwhat\(\):\s+(?P<msg>\S.*)")
_CUDA = re.compile(r"\bCUDA error(?: \([^)]*\))?:\s*(?P<msg>\S.*)")
_COMPILER = re.compile(
    r"^(?:(?:\S+?\.(?:c|cc|cpp|cxx|cu|cuh|h|hh|hpp|hxx|inl)(?:\(\d+\)|:\d+(?::\d+)?)"
    r"|nvcc|cc1plus|cc1|gcc|g\+\+|c\+\+|clang(?:\+\+)?|ld|collect2|ptxas):\s+(?:fatal )?error"
    r"|nvcc fatal\s*)\s*:\s*(?P<msg>\S.*)"
)
# A process killed by a fault signal, without a Python error: the shell's strsignal(SIGSEGV)
# ("Segmentation fault (core dumped)", also in bash's job report "line 1: 4321 Segmentation
# fault"), gdb's "Program received signal SIGSEGV", CPython's faulthandler "Fatal Python error:".
_SIGNAL = re.compile(
    r"^(?:[^\s:]+: (?:line \d+: )?\d+\s+)?(?:Segmentation fault|Bus error|Illegal instruction)\b"
    r"|Program received signal SIG(?:SEGV|BUS|ILL|ABRT)\b"
    r"|Fatal Python error: (?:Segmentation fault|Bus error|Aborted|Illegal instruction)"
)
# A Python exception's last line without its traceback's header (a paste cut above it):
# "KeyError: 'text'" under a frame's lines, or "RuntimeError:" with its message indented below.
_BARE = re.compile(
    r"^[_*`>\s]*(?P<type>(?:[A-Za-z_]\w*\.)*[A-Z]\w*(?:Error|Exception)):(?:\s+(?P<msg>\S.*))?$"
)
_ROOT = re.compile(r"Root Cause \(first observed failure\)")
_FIELD = re.compile(r"^\s*(?P<key>host|rank|exitcode|traceback)\s*:\s*(?P<value>.*?)\s*$")
_ELASTIC = re.compile(r"failed \(exitcode: (?P<code>-?[1-9]\d*)\) local_rank: (?P<rank>\d+)")
_RANK_TAG = re.compile(r"\[(?:rank|default)(\d+)\]")
_RANK_FIELD = re.compile(r"^(\d+)(?: \(local_rank: (\d+)\))?")
# A process that ended badly; training that went on; training that finished.
_EXIT = re.compile(
    r"exitcode\s*:\s*-?[1-9]|returned non-zero exit status|exit(?:ed with)? (?:code|status):? -?[1-9]"
    r"|\bKilled\b|Segmentation fault|core dumped|\brun failed\b|\battempt \d+ failed"
    r"|ChildFailedError"
)
_PROGRESS = re.compile(  # and any tqdm bar ("%|", a substring test)
    r"['\"](?:loss|eval_loss)['\"]\s*:\s*[-\d.]|\b[Ll]oss\s*[:=]\s*-?\d"
    r"|\b(?:[Ss]tep|[Ii]ter(?:ation)?|[Ee]poch)\s*[:=#]?\s*\[?\d+\s*/\s*\d+"
)
_SUCCESS = re.compile(
    r"train_runtime|[Tt]raining completed|[Mm]odel saved|[Ss]aved (?:the )?model|\brun finished\b"
    r"|[Tt]raining (?:is )?(?:finished|done|complete)"
)


# Literal parts one of which each pattern's match holds: a cheap test before the pattern.
_PROGRESS_KEYS = re.compile(r"oss|tep|ter|poch")
_SUCCESS_KEYS = re.compile(r"train_runtime|aved|raining|run finished")
_EXIT_KEYS = re.compile(r"xit|Killed|fault|dumped|failed|Failed")
_CANDIDATE_KEYS = re.compile(
    r"terminate|what\(\)|CUDA error|error|fatal|exitcode|Root Cause|Error|Exception|fault"
    r"|Bus error|Illegal|SIG"
)


def _shape(text: str) -> str:
    return re.sub(r"\d", "0", text)


def _cut(text: str) -> str:
    text = text.strip()
    return text if len(text) <= MAX_QUOTE else text[:MAX_QUOTE] + "…"


@dataclass
class Decisive:
    """What ended the log: its kind, the line to point at, the failure in one line, the lines
    quoted (line number, text), the context for `diagnose --json`, and where it came from."""

    kind: str  # python, what, cuda, compiler, exit, wrapper
    line: int
    error: str
    quote: list[tuple[int, str]]
    context: list[str] = field(default_factory=list)
    frame: tuple[str, str, str] | None = None  # file, line, function of the last frame
    node: str | None = None
    rank: str | None = None
    host: str | None = None
    code: str | None = None
    signal: str | None = None
    group: str = ""  # the prefix shape its lines carried (a rank's)
    handled: bool = False


@dataclass
class _Traceback:
    prefix: str
    rich: bool
    handled: bool
    context: list[str]
    frame: tuple[int, str, str, str, str] | None = None  # line, text, file, line, function
    foreign: int = 0


class _Reader:
    """Reads the tail's lines in order: open tracebacks per prefix, candidates, and the line
    numbers of progress, success and exits that decide whether a candidate was the end."""

    def __init__(self) -> None:
        self.open: dict[str, _Traceback] = {}
        self.found: list[Decisive] = []
        self.progress: list[int] = []
        self.success: list[int] = []
        self.exits: list[int] = []
        self.recent: list[str] = []
        self.terminate: tuple[int, str, str] | None = None
        self.root: Decisive | None = None  # torchrun's root-cause block being read
        self.root_fields = 0
        self.failing: set[str] = set()  # ranks torchrun names as the first failure
        self.bare: tuple[int, str, str] | None = None  # "Type:" whose message is the next line

    def line(self, number: int, raw: str) -> None:
        # Substring tests guard every regex: most lines of a tail are progress, searched once.
        segments = [
            s for s in (ANSI.sub("", raw) if "\x1b" in raw else raw).split("\r") if s.strip()
        ]
        if not segments:
            return
        text = segments[-1][:MAX_LINE].rstrip()
        bar = TQDM_PREFIX.match(text[:MAX_BAR]) if "%|" in text else None
        if bar and bar.end() < len(text):
            text = text[bar.end() :]
        full = " ".join(segments)
        if is_own(text):
            self._markers(number, full, text)
            return
        header = _HEADER.search(text) if "Traceback" in text else None
        if header is not None:
            prefix = text[: header.start()]
            rich = any(c in prefix for c in "╭─")
            prefix = "" if rich else prefix
            handled = bool(self.recent) and _HANDLED.search(self.recent[-1]) is not None
            self.open[prefix] = _Traceback(prefix, rich, handled, [text[len(prefix) :]])
        elif not self._in_traceback(number, text):
            self._markers(number, full, text)
            self._candidates(number, text)
        self.recent = [*self.recent[-RECENT + 1 :], text]

    def _in_traceback(self, number: int, text: str) -> bool:
        """Take the line into the open traceback whose prefix it carries (the longest one)."""
        if not self.open:
            return False
        owners = [key for key in self.open if text.startswith(key)]
        if not owners:  # a prefix with a time in it: the same shape, other digits
            shape = _shape(text)
            owners = [key for key in self.open if shape.startswith(_shape(key))]
        if not owners:
            return False
        key = max(owners, key=len)
        tb = self.open[key]
        rest = text[len(tb.prefix) :]
        if tb.rich:
            frame = _RICH_FRAME.search(rest[:MAX_BAR]) if ".py:" in rest else None
        else:
            frame = _FRAME.match(rest)
        if frame is not None:
            where = rest.strip(" │|")
            tb.frame = (number, where, frame["file"], frame["line"], frame["fn"] or "?")
        exception = _EXCEPTION.match(rest.rstrip())
        if frame is not None or (not exception and (not rest.strip() or rest[0] in " \t│╰|")):
            tb.context = [*tb.context, rest.rstrip()][-MAX_CONTEXT:]
            return True
        if exception is not None and (tb.frame is not None or tb.rich):
            self._exception(number, text, rest.strip(), key, tb, exception["type"])
            return True
        tb.foreign += 1
        if tb.foreign > MAX_FOREIGN:
            del self.open[key]
        return False

    def _exception(
        self, number: int, text: str, error: str, key: str, tb: _Traceback, kind: str
    ) -> None:
        del self.open[key]
        wrapper = kind.rsplit(".", 1)[-1] in _WRAPPERS
        if wrapper:
            self.exits.append(number)
        quote = [(number, _cut(error))]
        frame = None
        if tb.frame is not None:
            quote.insert(0, (tb.frame[0], _cut(tb.frame[1])))
            frame = tb.frame[2:]
        rank = _RANK_TAG.search(tb.prefix)
        self.found.append(
            Decisive(
                "wrapper" if wrapper else "python",
                number,
                _cut(error),
                quote,
                [*tb.context, error][-MAX_CONTEXT:],
                frame,
                node_of(text),
                rank=rank.group(1) if rank else None,
                group=key,
                handled=tb.handled,
            )
        )

    def _markers(self, number: int, full: str, text: str) -> None:
        tail = full[-MAX_LINE:]  # a line of many tqdm redraws: the last ones
        bar = "%|" in full and not idle_bar(text)
        if bar or (_PROGRESS_KEYS.search(tail) and _PROGRESS.search(tail)):
            self.progress.append(number)
        if _SUCCESS_KEYS.search(text) and _SUCCESS.search(text):
            self.success.append(number)
        if _EXIT_KEYS.search(text) and _EXIT.search(text):
            self.exits.append(number)

    def _add(self, kind: str, number: int, text: str, error: str, **more: str | None) -> Decisive:
        found = Decisive(
            kind,
            number,
            _cut(error),
            [(number, _cut(text))],
            [*self.recent, text.strip()],
            node=node_of(text),
            **more,  # type: ignore[arg-type]
        )
        self.found.append(found)
        return found

    def _candidates(self, number: int, text: str) -> None:
        """A C++ terminate, a CUDA error, a compiler error, torchrun's summary of a failure."""
        if self.root is not None:
            self._root_field(number, text)
        if self.bare is not None:  # "RuntimeError:" alone, its message indented below it
            first, line, kind = self.bare
            self.bare = None
            if number - first <= 2:
                found = self._add("bare", number, text, f"{kind}: {text.strip()}")
                found.quote.insert(0, (first, _cut(line)))
                return
        if not _CANDIDATE_KEYS.search(text):
            return
        if (terminate := _TERMINATE.search(text)) is not None:
            self.terminate = (number, text.strip(), terminate["type"])
        if (what := _WHAT.search(text)) is not None:
            error = what["msg"]
            thrown = self.terminate
            if thrown is not None and number - thrown[0] <= 3:
                found = self._add("what", number, text, f"{thrown[2]}: {error}")
                found.quote.insert(0, (thrown[0], _cut(thrown[1])))
            else:
                self._add("what", number, text, error)
        elif (cuda := _CUDA.search(text)) is not None:
            self._add("cuda", number, text, text[cuda.start() :])
        elif _COMPILER.match(text.strip()) is not None:
            self._add("compiler", number, text, text)
        elif (elastic := _ELASTIC.search(text)) is not None:
            self.failing.add(elastic["rank"])
            self._add("exit", number, text, text[elastic.start() :], **elastic.groupdict())
        elif (fault := _SIGNAL.search(text.strip())) is not None:
            self._add("signal", number, text, text.strip()[fault.start() :])
        elif (bare := _BARE.match(text[:MAX_BAR])) is not None and not any(
            w in bare["type"]
            for w in _WRAPPERS  # a launcher's: only says a worker failed
        ):
            if bare["msg"] and (
                any(_FRAME.match(r) or r[:1] in " \t" for r in self.recent[-3:])
                or ends_traceback(bare["type"], bare["msg"], self.recent)
            ):
                # the end of a traceback whose header was cut: frames or their code lines above
                self._add("bare", number, text, text.strip(" _*`>"))
            else:
                self.bare = (number, text.strip(), bare["type"])
        if _ROOT.search(text):
            self.root, self.root_fields = Decisive("exit", 0, "", [], [text.strip()]), 0

    def _root_field(self, number: int, text: str) -> None:
        """One line of torchrun's "Root Cause (first observed failure)" block."""
        root = self.root
        assert root is not None
        found = _FIELD.match(text)
        self.root_fields += 1
        if text.lstrip().startswith("=") or self.root_fields > 12:
            self.root = None
            return
        root.context.append(text.strip())
        if found is None:
            return
        key, value = found["key"], found["value"]
        if key == "host":
            root.host = value
        elif key == "rank":
            ranks = _RANK_FIELD.match(value)
            root.rank = ranks.group(1) if ranks else value
            self.failing |= {r for r in (ranks.groups() if ranks else ()) if r}
        elif key == "exitcode":
            root.code, root.line, root.node = value.split(" ")[0], number, node_of(text)
            root.error = _cut(text)
            self.found.append(root)
        elif key == "traceback" and value.startswith("Signal"):
            root.signal = value
        if key in ("host", "rank") or (root.line and key in ("exitcode", "traceback")):
            root.quote.append((number, _cut(text)))

    def settled(self, number: int) -> bool:
        """Did the run go on after this line (progress before the next exit, or a finish)?"""
        if self.success and self.success[-1] > number:
            return True
        after = bisect.bisect_right(self.exits, number)
        stop = self.exits[after] if after < len(self.exits) else None
        ahead = bisect.bisect_right(self.progress, number)
        return ahead < len(self.progress) and (stop is None or self.progress[ahead] < stop)

    def pick(self) -> Decisive | None:
        live = [f for f in self.found if not f.handled and not self.settled(f.line)]
        python: dict[str, Decisive] = {}
        for found in live:
            if found.kind == "python":
                python[found.group] = found  # each rank's last exception
        if python:
            failing = [f for f in python.values() if f.rank is not None and f.rank in self.failing]
            return failing[0] if failing else min(python.values(), key=lambda f: f.line)
        kinds = (("what", True), ("cuda", False), ("compiler", False), ("signal", True))
        for kind, last in (*kinds, ("bare", True)):
            of_kind = [f for f in live if f.kind == kind]
            if of_kind:
                return of_kind[-1] if last else of_kind[0]
        exits = [f for f in live if f.kind == "exit"]
        if exits:
            return next((f for f in exits if f.host is not None), exits[0])
        wrappers = [f for f in live if f.kind == "wrapper"]
        return wrappers[-1] if wrappers else None


def decisive(tail: bytes, first_line: int, *, whole: bool) -> Decisive | None:
    """The failure that ends the log whose last bytes are ``tail`` (None: it ends on none).

    ``first_line`` is the line number of the tail's first byte; unless the tail is the
    ``whole`` log, its first (partial) line is skipped."""
    text = tail.decode("utf-8", "replace")
    if not whole:
        cut = text.find("\n")
        if cut < 0:
            return None
        text, first_line = text[cut + 1 :], first_line + 1
    reader = _Reader()
    for offset, raw in enumerate(text.split("\n")):
        reader.line(first_line + offset, raw)
    return reader.pick()
