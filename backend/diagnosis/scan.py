"""The prefilter: one compiled bytes regex that finds the few lines worth classifying.

Every signature (and phase marker) lists ``anchors``: literal substrings that each of its
matches contains. From each anchor a *scan key* is cut: the anchor's tail starting at its
rarest character (by a fixed estimate of how often characters occur in training logs). All keys
go into one alternation grouped by first byte. CPython's regex engine then skips along the block
with a tight first-character test and tries the alternatives only where a rare character stands
(an uppercase letter, ``<``, ``(``…), instead of trying every alternative at every position.
That single pass replaces the ~40 ``bytes.find`` sweeps the scanner made before, and adding a
signature no longer adds a pass.

A key is a suffix of an anchor, so a line holding an anchor holds its key: the prefilter never
hides a line holding an anchor; lines it lets through are then checked with substring tests and
full patterns. That every *match* holds an anchor is ``regex_cover``'s part: the anchors used here
are the hand-written ones plus those it derives from each pattern (``effective_anchors``), the
spellings a pattern allows that no hand anchor is part of (``loss : nan`` beside ``loss: nan``).

In front of it, ``ShapeFilter`` runs the same prefilter (built from the keys' digit-less images)
over each distinct line shape of a block once, so on a training log the whole-block pass shrinks
to the few lines whose shape holds a key.
"""

from __future__ import annotations

import re
from collections import defaultdict
from functools import lru_cache

from backend.diagnosis.anchor_table import DERIVED
from backend.diagnosis.scankey import RANK, digest, scan_key
from backend.diagnosis.signatures import MARKERS, SIGNATURES


@lru_cache(maxsize=1)
def effective_anchors() -> tuple[tuple[tuple[str, ...], ...], tuple[tuple[str, ...], ...]]:
    """Per signature and per marker, its hand anchors and those ``regex_cover`` derives from its
    pattern (kept in ``anchor_table.py``; a pattern or anchor list changed since is read here,
    so a stale table costs start-up time, never a line)."""
    heads: list[frozenset[str]] = []  # computed once, only for a pattern missing from the table

    def merged(source: str, flags: int, anchors: tuple[str, ...]) -> tuple[str, ...]:
        added = DERIVED.get(digest(source, flags, anchors))
        if added is None:
            from backend.diagnosis.regex_cover import (  # deferred: parses every pattern (~50 ms), only for one missing from the table
                derive,
                hand_heads,
            )

            heads[:] = heads or [hand_heads()]
            added = derive(source, flags, anchors, heads[0])[0]
        return anchors + added

    sigs = tuple(merged(s.source, s.flags, s.anchors) for s in SIGNATURES)
    markers = tuple(merged(m.pattern.pattern, m.pattern.flags, m.anchors) for m in MARKERS)
    return sigs, markers


def _anchors() -> list[str]:
    sigs, markers = effective_anchors()
    return sorted({a for anchors in sigs + markers for a in anchors})


def key_index() -> tuple[list[str], list[frozenset[int]], list[frozenset[int]]]:
    """The scan keys and, per key, the signatures and markers a line holding it may match
    (those with an anchor containing the key)."""
    anchors = _anchors()
    keys = sorted({scan_key(a) for a in anchors})
    # Each distinct anchor is tested once (not once per table entry holding it), and only
    # against the keys starting with one of its characters: this runs at every start of
    # `diagnose`, the tables share many anchors, and the derived ones made the pairs 1.5x.
    by_head: dict[str, list[int]] = defaultdict(list)
    for n, key in enumerate(keys):
        by_head[key[0]].append(n)
    holds = {a: [n for ch in set(a) for n in by_head.get(ch, ()) if keys[n] in a] for a in anchors}

    def per_key(table: tuple[tuple[str, ...], ...]) -> list[frozenset[int]]:
        found: list[set[int]] = [set() for _ in keys]
        for i, entry_anchors in enumerate(table):
            for anchor in entry_anchors:
                for n in holds[anchor]:
                    found[n].add(i)
        return [frozenset(x) for x in found]

    sig_anchors, marker_anchors = effective_anchors()
    return keys, per_key(sig_anchors), per_key(marker_anchors)


def _trie(words: list[str]) -> str:
    """One regex for ``words`` as a trie: shared prefixes are matched once, so a stop costs a
    character test per branch instead of one literal per key. A word that ends where longer
    ones continue makes them redundant here (its line is a candidate either way; the scanner
    then tests every key against the line)."""
    if "" in words:
        return ""
    branches: dict[str, list[str]] = defaultdict(list)
    for word in words:
        branches[word[0]].append(word[1:])
    parts = [re.escape(ch) + _trie(rest) for ch, rest in branches.items()]
    return parts[0] if len(parts) == 1 else "(?:" + "|".join(parts) + ")"


def prefilter_pattern(keys: list[str]) -> str:
    """``A<trie>|B<trie>|…``: alternatives grouped by first character, each group's keys as a
    trie, so each stop of the engine's first-character loop fails after a character or two."""
    groups: dict[str, list[str]] = defaultdict(list)
    for key in keys:
        groups[key[0]].append(key[1:])
    parts = []
    # The most frequent first characters first: at a stop the engine tries the alternatives in
    # order, and on the benchmark's log this order measured ~8 % faster than the reverse.
    for first in sorted(groups, key=lambda ch: -RANK.get(ch, 0)):
        parts.append(re.escape(first) + _trie(sorted(set(groups[first]))))
    return "|".join(parts)


def compile_prefilter(keys: list[str]) -> re.Pattern[bytes]:
    """The prefilter for byte blocks (the scanner)."""
    return re.compile(prefilter_pattern(keys).encode())


def compile_prefilter_str(keys: list[str]) -> re.Pattern[str]:
    """The same for str lines (the live log pane), compiled when a line is first classified."""
    return re.compile(prefilter_pattern(keys))


# Digits become '0' in a line's *shape*: a training log repeats a few shapes (loss dicts, tqdm
# bars, NCCL INFO, rank-prefixed warnings) with other numbers. Any byte-to-byte map keeps
# substrings (a line holding a key holds the key's image), so the shapes are searched with the
# keys' images and only the lines of a shape that holds one are searched as they are.
_SHAPE_BYTES = bytes.maketrans(b"123456789", b"000000000")
# Where '\n'-lines do not repeat, '\r' ends a shape too: a tqdm bar sent to a file redraws
# thousands of times per '\n', each redraw a shape of its own.
_SHAPE_BYTES_CR = bytes.maketrans(b"123456789\r", b"000000000\n")
_SHAPE_STR = str.maketrans("123456789", "000000000")
SHAPE_MAX_SHARE = 0.75  # shapes longer than this share of the block: the search saves nothing
SHAPE_RETRY = 8  # blocks scanned directly before the shapes are tried again
SHAPE_MIN = 64 << 10  # a smaller block (a pasted log, a short run) is searched directly


@lru_cache(maxsize=4)
def _shape_prefilter(keys: tuple[str, ...]) -> re.Pattern[bytes]:
    """The prefilter of the keys' shapes, compiled once per process (a scan per run log)."""
    return compile_prefilter(sorted({k.translate(_SHAPE_STR) for k in keys}))


class ShapeFilter:
    """Finds the lines of a block that may hold a scan key by searching each distinct line
    shape once. Costs a translate, a split and a set (all in C, ~2 ns a byte) instead of the
    prefilter's pass over every byte; where the lines are mostly distinct (the search would not
    shrink) it steps aside for a few blocks."""

    def __init__(self, keys: list[str]) -> None:
        self.keys = tuple(keys)
        self.skip = 0
        self.tables = (_SHAPE_BYTES, _SHAPE_BYTES_CR)  # the one that paid last first

    def hot_lines(self, data: bytes, limit: int) -> tuple[int, list[tuple[int, int]]] | None:
        """(newlines before ``limit``, the byte ranges of the lines that may hold a key), or
        None where the block is better searched directly."""
        if self.skip:
            self.skip -= 1
            return None
        if limit < SHAPE_MIN:
            return None  # no time to save, and its prefilter need not be compiled
        for table in self.tables:
            lines = data[:limit].translate(table).split(b"\n")
            shapes = set(lines)
            if sum(map(len, shapes)) <= SHAPE_MAX_SHARE * limit:
                break
        else:
            self.skip = SHAPE_RETRY
            return None
        if table is not self.tables[0]:
            self.tables = self.tables[::-1]
        joined = b"\n".join(shapes)
        hot: set[bytes] = set()
        search = _shape_prefilter(self.keys).search
        found = search(joined)
        while found is not None:
            start = joined.rfind(b"\n", 0, found.start()) + 1
            end = joined.find(b"\n", found.end())
            end = len(joined) if end < 0 else end
            hot.add(joined[start:end])
            found = search(joined, end + 1)
        ranges: list[tuple[int, int]] = []
        if hot:
            position = 0
            for line in lines:
                if line in hot:
                    ranges.append((position, position + len(line)))
                position += len(line) + 1
        # split at '\r' too: the '\n' are counted apart (memchr tells fast if there is a '\r')
        split_cr = table is _SHAPE_BYTES_CR and data.find(b"\r", 0, limit) >= 0
        newlines = data.count(b"\n", 0, limit) if split_cr else len(lines) - 1
        return newlines, ranges
