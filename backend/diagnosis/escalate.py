"""Warnings that the rest of the log shows to be the failure, made errors.

Two messages are warnings by themselves because a run often survives them, and errors when the
log shows it did not:

* A download retried to the end of the log. The Hugging Face Hub client and pip log a
  connection error while they retry (``'(MaxRetryError(… [Errno 101] Network is unreachable
  …))' thrown while requesting HEAD …``, then ``Retrying in 1s [Retry 1/5].``); the Hub falls
  back to its cache and the run often goes on. When the retry loop's own notices follow the last
  such warning and nothing else does, the log ends inside the loop: the download failed.
* slurmstepd's ``*** STEP … CANCELLED AT … ***`` without a reason (scancel, or a preemption
  Slurm reports as one). After another failure it is Slurm tearing down what was left (a
  rank's OOM kill, ``--kill-on-bad-exit``); with no other failure it is why the run ended.

Only when no finding is an error already: a failure the log names outranks both.
"""

from __future__ import annotations

import re

from backend.diagnosis.explain import _then
from backend.diagnosis.model import Finding
from backend.i18n import N_, _

# huggingface_hub's http_backoff ("Retrying in 1s [Retry 1/5]."), pip's "Retrying (Retry(total=3"
_RETRY_NOTICE = re.compile(r"Retrying in \d|\[Retry \d+/\d+\]|Retrying \(Retry\(")
_RETRYING = re.compile(
    r"[Rr]etry|[Rr]etrying|thrown while requesting|Max retries exceeded|Network is unreachable"
    r"|No route to host|Connection timed out"
)
_RETRIED = N_(
    "Only the client's retries follow the last of these warnings: the log ends inside its retry "
    "loop, so it did not fall back to a cached copy and the run did not go on. The unreachable "
    "network is the failure."
)
_CANCELLED = N_("No other failure is in the log, so this cancellation is what ended the run.")


def _ends_retrying(finding: Finding, lines: list[str], first: int) -> bool:
    """Do only retries follow the finding's last line, at least one of them a retry notice?"""
    index = max(finding.lines or [finding.line]) - first
    if index < 0 or index >= len(lines):
        return False
    after = [line for line in lines[index + 1 :] if line.strip()]
    return any(_RETRY_NOTICE.search(line) for line in after) and all(
        _RETRYING.search(line) for line in after
    )


def escalate_warnings(findings: list[Finding], tail: bytes, newlines: int) -> None:
    """Make such a warning an error and put it first (in place). ``tail``: the log's last
    bytes; ``newlines``: the whole log's newline count."""
    if any(f.severity == "error" for f in findings):
        return
    first = newlines - tail.count(b"\n") + 1  # the line number of the tail's first line
    lines: list[str] = []
    for finding in findings:
        if finding.severity != "warning":
            continue
        if finding.category == "slurm_error":
            said = _CANCELLED
        elif finding.category == "network_unreachable":
            lines = lines or tail.decode("utf-8", "replace").split("\n")
            if not _ends_retrying(finding, lines, first):
                continue
            said = _RETRIED
        else:
            continue
        finding.severity = "error"
        finding.explanation = _then(finding.explanation, _(said))
        findings.remove(finding)
        findings.insert(0, finding)
        return
