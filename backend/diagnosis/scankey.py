"""Scan keys: the part of an anchor the prefilter looks for, and a pattern's key in the anchor
table. A leaf that the scanner (``scan``) and the anchor derivation (``regex_cover``) both use,
so neither imports the other's module for them (the scanner reads ``regex_cover`` only when a
pattern is missing from the generated table).
"""

from __future__ import annotations

import hashlib

# Characters from most to least frequent in training logs (loss dicts, tqdm bars, NCCL INFO,
# tracebacks), measured on both corpora, the H200 logs and the benchmark's benign lines.
# ':' is ranked before 'l' (measured: a ':' group cost 17 % of the prefilter on the benchmark's
# dict-heavy log, where ': ' ends every key), so "loss: nan" is keyed from its 'l'.
_BY_FREQUENCY = " eatirnos0c:ld1p.2/_3hgu5m4,8'y9-67][bfwkNCF(|LI)WSPzOv<\"RGD%AT=xE{}*BMU`>^q\\HV!?jK#;Y+XJQZ~@$"
RANK = {ch: len(_BY_FREQUENCY) - i for i, ch in enumerate(_BY_FREQUENCY)}
MIN_KEY = 5  # a shorter key lets too many lines through


def scan_key(anchor: str) -> str:
    """The anchor's tail from its rarest character, keeping at least MIN_KEY characters."""
    last = max(0, len(anchor) - min(MIN_KEY, len(anchor)))
    best = min(range(last + 1), key=lambda i: (RANK.get(anchor[i], 0), i))
    return anchor[best:]


def digest(source: str, flags: int, anchors: tuple[str, ...]) -> str:
    """A pattern's key in ``anchor_table.py``: its text, flags and hand anchors."""
    return hashlib.blake2b(repr((source, flags, anchors)).encode(), digest_size=10).hexdigest()
