"""What a log line holds besides its message: terminal escapes, a tqdm bar glued in front, and
the prefixes of trainwiz's own lines.

Both readers of a log need these: the signature scanner (``classifier``) and the reader of the
log's last failure (``lastfailure``), which cannot import the scanner (the scanner calls it).
"""

from __future__ import annotations

import re

ANSI = re.compile(r"\x1b\[[0-9;?]*[ -/]*[@-~]")
# A tqdm bar glued in front of a message: "train:  2%|##   | 1/46 [00:01<01:10, 1.5s/it, ...]".
TQDM_PREFIX = re.compile(r"^.*?\d+%\|[^|]*\|\s*\d+/\d+\s*\[[^\]]*\]")


def clean(text: str) -> str:
    """A matched text as a finding quotes it: no escapes, no bar in front, at most 600 chars."""
    text = ANSI.sub("", text).strip()
    bar = TQDM_PREFIX.match(text)
    if bar and bar.end() < len(text):
        text = text[bar.end() :].strip()
    return text if len(text) <= 600 else text[:600] + "…"


# The training entry's own lines ("[trainwiz-entry] flash_attn unusable (...); using sdpa") say
# what it chose; the launcher's, watcher's and node agents' ("[trainwiz 2026-12-01 12:00:00]
# attempt 1 failed (...)", docker's "[trainwiz] removing ...") say what they did. Both quote
# library messages, paths and earlier failures that signatures match elsewhere as failures, and
# a failure they quote was already read where the failing process printed it. Only their
# deliberate failure reports count as findings: the entry's stop on a non-finite loss and its
# refusal of data it cannot mask, and the launcher's "sbatch refused the job: <Slurm's words>"
# (Slurm's refusal reaches the log through that line only).
OWN_PREFIX = "[trainwiz-entry]"
OWN_REPORTS = frozenset({"loss_nan", "chat_template_mask", "slurm_error"})
_OWN = re.compile(r"\[trainwiz(?:-entry| \d{4}-\d\d-\d\d \d\d:\d\d:\d\d)?\] ?")


def is_own(segment: str) -> bool:
    """A line trainwiz itself wrote (entry, launcher, watcher, node agents, notifications)."""
    return "[trainwiz" in segment and _OWN.search(segment) is not None


def own_allows(segment: str, category: str) -> bool:
    """May a match of ``category`` on this line become a finding? Always on a line of the
    training; on trainwiz's own line only when it is one of its deliberate failure reports."""
    return category in OWN_REPORTS or not is_own(segment)
