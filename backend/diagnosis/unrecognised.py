"""Never silent: a log that ends on a failure no category knows gets a finding that quotes it.

Without it, a run that died on a user's ``KeyError`` (or a library's bug, a segfault, a failed
compile) was diagnosed as "no known failure", and the run record said only "exit code 1": the
one line that says what happened was in the log, and nobody was shown it. The finding
``unrecognised_failure`` names no cause (trainwiz has no category for it, so it changes nothing
in the preset): it quotes the decisive line(s) that ``lastfailure`` reads from the log's last
bytes, says which frame raised it, and gives the generic next steps.

It never outranks a known failure: it is made only when no error-level finding of a known
category exists, sorts after every one (``TIERS``), and is dropped when another source adds one
later (a node's own log, metrics.jsonl: ``settle_unrecognised``). It never quotes a line a
known finding already names at a lower severity.
"""

from __future__ import annotations

import re

from backend.diagnosis.escalate import escalate_warnings
from backend.diagnosis.explain import _then
from backend.diagnosis.lastfailure import Decisive, decisive
from backend.diagnosis.model import Finding, Fix
from backend.i18n import N_, _

UNRECOGNISED = "unrecognised_failure"
TAIL_BYTES = 256 << 10  # the log's last bytes searched: a traceback and the launcher's summary
# A frame in an installed package (site-packages, the standard library) is a library's code.
_LIBRARY = re.compile(r"(?:site|dist)-packages/(?P<package>[^/]+)|/lib/python\d[\d.]*/|<frozen ")

_SAW: dict[str, str] = {
    "python": N_("The log ends with a Python exception at line {line}: {error}."),
    "wrapper": N_(
        "The log ends with a launcher's exception at line {line}: {error}. It only says that a "
        "worker process failed; the worker's own error is not in the log's last part."
    ),
    "what": N_(
        "A C++ exception ended the process at line {line} (std::terminate, no Python "
        "traceback): {error}."
    ),
    "cuda": N_(
        "A CUDA error stopped the run at line {line}: {error}. CUDA reports a kernel's error "
        "at a later call, so the code running then may not be the code that failed; "
        "CUDA_LAUNCH_BLOCKING=1 makes it report the failing kernel."
    ),
    "compiler": N_(
        "A compiler error failed the build at line {line}: {error}. The errors after the "
        "first one of a build often follow from it."
    ),
    "signal": N_(
        "A process was killed by a fault signal at line {line} ({error}): native code (a C or "
        "CUDA extension, a driver library) crashed, with no Python exception to say where. "
        "`gdb -ex run --args python ...` or `python -X faulthandler` shows the crashing frame."
    ),
    "bare": N_(
        "The log ends with a Python exception at line {line}: {error}. Its traceback is not in "
        "the log, so the code that raised it is not named."
    ),
    "exit": N_(
        "A training process ended badly at line {line} ({error}), and the log has no error "
        "message before it that trainwiz recognises."
    ),
}
_NO_CATEGORY = N_(
    "trainwiz has no category for this failure, so it cannot say why it happened and changes "
    "nothing in the preset for it."
)
_NEXT = N_(
    "Next: read the code the quoted lines point at; search for the message (without your own "
    "paths and numbers) in the issues of the library it names; `trainwiz diagnose --json` gives "
    "the quoted lines' whole context (the traceback) with their line numbers."
)


def keep_tail(tail: bytes, block: bytes) -> bytes:
    """The last ``TAIL_BYTES`` of what was read, after one more ``block`` (bounded memory)."""
    if len(block) >= TAIL_BYTES:
        return block[-TAIL_BYTES:]
    return (tail + block)[-TAIL_BYTES:]


def known_error(findings: list[Finding]) -> bool:
    """Is there an error-level finding of a category trainwiz knows?"""
    return any(f.severity == "error" and f.category != UNRECOGNISED for f in findings)


def add_unrecognised(findings: list[Finding], tail: bytes, newlines: int, *, whole: bool) -> None:
    """Put the unrecognised failure first when the log ends on one and nothing known is an
    error. ``tail``: the log's last bytes; ``newlines``: the whole log's newline count. A
    warning the rest of the log shows to be the failure is one (``escalate.py``)."""
    escalate_warnings(findings, tail, newlines)
    if known_error(findings):
        return
    found = decisive(tail, newlines - tail.count(b"\n") + 1, whole=whole)
    if found is None or any(found.line == f.line or found.line in f.lines for f in findings):
        return
    findings.insert(0, finding_of(found))


def settle_unrecognised(findings: list[Finding]) -> None:
    """Drop the unrecognised failure once a known error joined the findings (in place)."""
    if known_error(findings):
        findings[:] = [f for f in findings if f.category != UNRECOGNISED]


def decisive_text(finding: Finding) -> str:
    """The quoted line the finding points at (the exception, not its frame), whitespace folded:
    what a run record's message shows of it."""
    texts = finding.text.split("\n")
    index = finding.lines.index(finding.line) if finding.line in finding.lines else -1
    text = texts[index] if len(texts) == len(finding.lines) else texts[-1]
    return " ".join(text.split())


def _owner(path: str) -> str:
    library = _LIBRARY.search(path)
    if library is None:
        return _("the run's own code, not an installed library")
    package = library.group("package")
    if package:
        return _("a library's code ({package})").format(package=package)
    return _("a library's code (Python's standard library)")


def _error(found: Decisive) -> str:
    """The failure in one line; torchrun's summary made readable (rank, host, exit, signal)."""
    if found.kind != "exit" or found.code is None:
        return found.error
    where = ""
    if found.rank is not None:  # the summary's global rank; the agent's line has the local one
        rank = _("rank {rank}") if found.host else _("local rank {rank}")
        where = rank.format(rank=found.rank)
    if found.host:
        where = _("{where} on {host}").format(where=where or _("a rank"), host=found.host)
    said = _("exitcode {code}").format(code=found.code)
    if found.signal:
        said = f"{said}, {found.signal}"
    return f"{where}: {said}" if where else said


def _fixes(found: Decisive) -> list[Fix]:
    """Generic next steps, advice only. Their words hold nothing of the log (the quote is in the
    finding's text): the wizard shows a fix's words where square brackets are markup."""
    fixes = []
    if found.frame is not None:
        fixes.append(
            Fix(
                _("Read the code at the quoted frame"),
                _("the traceback's last frame: where the exception was raised"),
            )
        )
    if found.kind == "cuda":
        fixes.append(
            Fix(
                _("Rerun with CUDA_LAUNCH_BLOCKING=1 in launch.env"),
                _("CUDA then reports the kernel that failed, not a later call (slower)"),
            )
        )
    fixes.append(
        Fix(
            _("Search for the quoted message"),
            _(
                "without your own paths and numbers: the issues of the library it names often "
                "have it"
            ),
        )
    )
    fixes.append(
        Fix(
            _("See the whole context: trainwiz diagnose --json"),
            _("the finding's context holds the traceback (or the lines before the error)"),
        )
    )
    return fixes


def finding_of(found: Decisive) -> Finding:
    """The error-level finding for the failure that ends a log."""
    error = _error(found)
    saw = _(_SAW[found.kind]).format(line=found.line, error=error)
    if found.frame is not None:
        path, number, function = found.frame
        raised = _("It was raised in {function} ({path}, line {number}): {owner}.")
        saw = _then(
            saw, raised.format(function=function, path=path, number=number, owner=_owner(path))
        )
    return Finding(
        category=UNRECOGNISED,
        severity="error",
        line=found.line,
        lines=sorted({number for number, _text in found.quote}),
        text="\n".join(text for _number, text in found.quote),
        title=_("A failure trainwiz has no category for: {error}").format(error=error),
        explanation=_then(_then(saw, _(_NO_CATEGORY)), _(_NEXT)),
        fixes=_fixes(found),
        count=1,
        node=found.node,
        nodes=[found.node] if found.node else [],
        context=found.context,
    )
