"""Which literals every match of a signature's pattern holds: the anchors its hand list lacks.

The fast scan modes (``shapes``, ``direct``) try a signature only on a line holding one of its
``anchors``; the ``exhaustive`` mode, the reference, tries it on every line. They agree only if
every match of the pattern holds an anchor, and a hand-written list easily misses a spelling the
pattern allows: ``\\b(?:\\w+_)?[Ll]oss(?: ?[:=] ?| )(?:nan|NaN|-?inf)\\b`` matches
``loss : nan``, while the list had ``loss: nan``, ``loss:nan``, ``= nan``…

``cover`` reads the pattern with ``re``'s own parser. In each sequence a match goes through, a
run of fixed-width pieces (``[Ll]``, ``oss``, ``(?: ?[:=] ?| )``, ``(?:nan|NaN|-?inf)``) spells a
finite set of strings, one of which every match holds; an alternation needs a cover for each
alternative, a group repeated at least once its body's. Of the runs (and windows of a run) that
cover a sequence, one whose every spelling already holds a hand anchor wins; else the one whose
missing spellings cost the prefilter least (``_Cover.cost``). Case-insensitive letters spell every
character ``re`` folds to them, so the cover is exact for the pattern as ``re`` compiles it.

``derive`` turns the missing spellings into anchors when the prefilter can take them without
slowing down: every scan key cut from them (``scan.scan_key``) at least ``MIN_KEY`` long and
starting with a character that already starts a hand anchor's key (a new first character is a
new stop of the engine all over the log), found in none of ``COMMON_LINES`` (the healthy lines
that fill a log), at most ``MAX_DERIVED`` of them. Other gaps (a case-insensitive phrase:
hundreds of spellings; ``'loss'`` where ``\\s*`` may follow it) are returned as such, and a test
lists them by name: a new one fails it.

Parsing every pattern takes tens of milliseconds, more than ``diagnose`` may spend on start-up,
so the derived anchors are kept in ``anchor_table.py`` (``python -m backend.diagnosis.regex_cover``
writes it; a test checks it is fresh); ``scan.py`` parses only a pattern that changed since.
"""

from __future__ import annotations

import _sre
import itertools
import sys
from collections.abc import Iterable, Sequence
from functools import lru_cache
from typing import Any

from backend.diagnosis.scankey import MIN_KEY, digest, scan_key
from backend.diagnosis.signatures import MARKERS, SIGNATURES

if sys.version_info >= (3, 11):
    from re import _constants as _c
    from re import _parser
else:  # pragma: no cover - Python 3.10
    import sre_constants as _c
    import sre_parse as _parser

LIMIT = 256  # spellings of one run at most (the loss forms: 2 x 9 x 4 = 72)
MAX_DERIVED = 64  # anchors added to one pattern at most
_IGNORECASE = _c.SRE_FLAG_IGNORECASE
_ASCII = _c.SRE_FLAG_ASCII
_REPEATS = {_c.MAX_REPEAT, _c.MIN_REPEAT, getattr(_c, "POSSESSIVE_REPEAT", _c.MAX_REPEAT)}
_ATOMIC = getattr(_c, "ATOMIC_GROUP", None)
Item = tuple[Any, Any]
Words = frozenset[str]


class Unbounded(ValueError):
    """Some match of the pattern may hold no literal this analysis can name."""


@lru_cache(maxsize=1)
def _folds() -> dict[int, frozenset[int]]:
    """Lowercase code point -> every code point ``re`` lowercases to it (built once, ~0.3 s;
    only a case-insensitive pattern needs it)."""
    by_lower: dict[int, set[int]] = {}
    for code in range(sys.maxunicode + 1):
        lower = _sre.unicode_tolower(code)
        if lower != code:
            by_lower.setdefault(lower, {lower}).add(code)
    return {lower: frozenset(codes) for lower, codes in by_lower.items()}


def _extra_cases(lower: int) -> tuple[int, ...]:
    if sys.version_info >= (3, 11):
        from re._casefix import _EXTRA_CASES  # deferred: Python 3.11+ only

        return tuple(_EXTRA_CASES.get(lower, ()))
    from sre_compile import (  # type: ignore[attr-defined]  # pragma: no cover  # deferred: Python 3.10 only
        _ignorecase_fixes,
    )

    return tuple(_ignorecase_fixes.get(lower, ()))  # pragma: no cover


def _chars(code: int, flags: int) -> Words:
    """The characters a literal matches under ``flags``: itself, or under IGNORECASE every
    character whose lowercase (re's simple mapping) is its lowercase or one of the extra
    equivalents ``re`` adds (``i`` ~ ``ı``, ``s`` ~ ``ſ``, ``k`` ~ ``K``…)."""
    char = chr(code)
    if not flags & _IGNORECASE:
        return frozenset(char)
    if flags & _ASCII:
        return frozenset({char, char.lower(), char.upper()}) if char.isascii() else frozenset(char)
    folds = _folds()
    found = {char}
    lower = _sre.unicode_tolower(code)
    for low in (lower, *_extra_cases(lower)):
        found.update(chr(c) for c in folds.get(low, (low,)))
    return frozenset(found)


def _class(items: Sequence[Item], flags: int) -> Words | None:
    """The characters of ``[...]``, or None for a negated, categorical or wide class."""
    chars: set[str] = set()
    for op, av in items:
        if op is _c.LITERAL:
            chars |= _chars(av, flags)
        elif op is _c.RANGE and av[1] - av[0] < LIMIT:
            for code in range(av[0], av[1] + 1):
                chars |= _chars(code, flags)
        else:  # NEGATE, CATEGORY (\d, \s, \w), a wide range
            return None
    return frozenset(chars) if len(chars) <= LIMIT else None


def _product(parts: Sequence[Words]) -> Words | None:
    size = 1
    for part in parts:
        size *= len(part)
        if size > LIMIT:
            return None
    return frozenset("".join(p) for p in itertools.product(*parts))


def _flat(seq: Iterable[Item], flags: int) -> list[tuple[Item, int]]:
    """The items of a sequence with their flags, groups opened (``(?P<x>…)``, ``(?i:…)``), so
    that a run of literals goes on through them."""
    out: list[tuple[Item, int]] = []
    for op, av in seq:
        if op is _c.SUBPATTERN:
            out.extend(_flat(av[3], (flags | av[1]) & ~av[2]))
        elif op is _ATOMIC and _ATOMIC is not None:
            out.extend(_flat(av, flags))
        else:
            out.append(((op, av), flags))
    return out


def exact(item: Item, flags: int) -> Words | None:
    """Every string ``item`` can match, or None where they are many or unbounded."""
    op, av = item
    if op is _c.LITERAL:
        return _chars(av, flags)
    if op is _c.IN:
        return _class(av, flags)
    if op is _c.AT:  # ^, $, \b: zero width
        return frozenset({""})
    if op is _c.BRANCH:
        found: set[str] = set()
        for alternative in av[1]:
            spelled = exact_seq(_flat(alternative, flags))
            if spelled is None:
                return None
            found |= spelled
        return frozenset(found) if len(found) <= LIMIT else None
    if op in _REPEATS:
        low, high, body = av
        if high is _c.MAXREPEAT or high > 16:
            return None
        once = exact_seq(_flat(body, flags))
        if once is None:
            return None
        found = set()
        for times in range(low, high + 1):
            spelled = _product([once] * times)
            if spelled is None:
                return None
            found |= spelled
        return frozenset(found) if len(found) <= LIMIT else None
    return None  # ANY, NOT_LITERAL, CATEGORY, lookarounds, back references


def exact_seq(items: Sequence[tuple[Item, int]]) -> Words | None:
    parts = []
    for item, flags in items:
        spelled = exact(item, flags)
        if spelled is None:
            return None
        parts.append(spelled)
    return _product(parts)


class _Cover:
    """One pattern's analysis against its hand anchors; ``heads``: the first characters of all
    hand keys (for the cost)."""

    def __init__(self, anchors: Sequence[str], heads: frozenset[str]) -> None:
        self.anchors = tuple(anchors)
        self.heads = heads

    def cost(self, parts: tuple[Words | None, ...]) -> tuple[int, ...]:
        """Nothing to add first; then no unbounded part, no key shorter than MIN_KEY, no key
        starting with a character no hand key starts with, the longest shortest key, the
        longest shortest spelling, the fewest spellings."""
        if None in parts:
            return (9, sum(p is None for p in parts))
        words = frozenset(w for part in parts if part is not None for w in part)
        if not words:
            return (0,)
        keys = {scan_key(w) for w in words}
        short = sum(len(k) < MIN_KEY for k in keys)
        new = len({k[0] for k in keys} - self.heads)
        longest = (-min(len(k) for k in keys), -min(len(w) for w in words))
        return (1 + short, new, *longest, len(words))

    def held(self, word: str) -> bool:
        return any(anchor in word for anchor in self.anchors)

    def seq(self, items: list[tuple[Item, int]]) -> tuple[Words | None, ...]:
        """Per alternative inside ``items``, the spellings to add so that every match holds an
        anchor (empty parts dropped; ``(None,)``: no literal bounds a match)."""
        spelled = [exact(item, flags) for item, flags in items]
        options: list[tuple[Words | None, ...]] = [(None,)]
        start = 0
        while start < len(items):  # runs of fixed-width pieces, and windows of a long run
            if spelled[start] is None:
                start += 1
                continue
            end = start
            while end < len(items) and spelled[end] is not None:
                end += 1
            run: list[Words] = [s for s in spelled[start:end] if s is not None]
            for i in range(len(run)):
                for j in range(len(run), i, -1):
                    words = _product(run[i:j])
                    if words is not None:
                        if "" not in words:  # else a match may hold nothing of it
                            missing = frozenset(w for w in words if not self.held(w))
                            options.append((missing,) if missing else ())
                        break
            start = end
        for (item, flags), words in zip(items, spelled):
            if words is None:
                options.append(self.item(item, flags))
        return min(options, key=lambda o: (self.cost(o), sorted(map(sorted, filter(None, o)))))

    def item(self, item: Item, flags: int) -> tuple[Words | None, ...]:
        op, av = item
        if op is _c.BRANCH:  # every alternative needs its cover
            parts: list[Words | None] = []
            for alternative in av[1]:
                parts.extend(self.seq(_flat(alternative, flags)))
            return tuple(parts)
        if op in _REPEATS and av[0] >= 1:
            return self.seq(_flat(av[2], flags))
        return (None,)


def cover(
    source: str, flags: int, anchors: Sequence[str], heads: frozenset[str]
) -> tuple[Words | None, ...]:
    """Per alternative of ``source`` whose matches need not hold one of ``anchors``: the
    spellings, one of which each of its matches holds, that no anchor is part of (None: no
    literal bounds its matches). Empty: every match holds an anchor."""
    parsed = _parser.parse(source, flags)
    return _Cover(anchors, heads).seq(_flat(parsed.data, parsed.state.flags))


# The lines that fill a healthy training log (the benchmark's kinds: HF Trainer's dict, a JSON
# metrics line, tqdm, NCCL INFO, a FutureWarning, a rank warning, DeepSpeed's INFO, a traceback
# frame of a warning's stack): a derived key found in one would make that line a candidate
# all over the log.
COMMON_LINES = (
    "{'loss': 1.3491, 'grad_norm': 0.83, 'learning_rate': 1.2e-05, 'eval_loss': 1.2, "
    "'train_loss': 1.1, 'epoch': 0.98}",
    '{"loss": 1.3491, "grad_norm": 0.83, "learning_rate": 1.2e-05, "eval_loss": 1.2, '
    '"train_loss": 1.1, "epoch": 0.98, "step": 10}',
    " 45%|████▌     | 450/1000 [10:01<12:13,  1.33s/it, loss=1.35, lr=1.2e-05]",
    "node1:97:183 [0] NCCL INFO Channel 00/02 :    0   1   2   3",
    "/opt/conda/lib/python3.10/site-packages/torch/distributed/fsdp/fully_sharded_data_parallel.py"
    ":689: FutureWarning: FSDP.state_dict_type() is being deprecated.",
    "[rank0]:[W1130 03:32:28.242422870 ProcessGroupNCCL.cpp:1575] Warning: WARNING: "
    "destroy_process_group() was not called before program exit, which can leak resources.",
    "[2024-06-26 19:51:15,295] [INFO] [logging.py:96:log_dist] [Rank 0] step=10, skipped=0, "
    "lr=[1.2e-05], mom=[(0.9, 0.95)]",
    "Epoch 1, Step 312, Loss: 0.9670:  31%|███       | 312/1000 [07:01<15:32,  1.36s/it]",
    '  File "/opt/conda/lib/python3.10/site-packages/torch/utils/checkpoint.py", line 61, in save',
)


def derive(
    source: str, flags: int, anchors: Sequence[str], heads: frozenset[str]
) -> tuple[tuple[str, ...], tuple[str, ...]]:
    """(anchors to add, spellings left uncovered). An alternative's missing spellings become
    anchors when the prefilter takes them at no cost: at most MAX_DERIVED, each one's scan key
    at least MIN_KEY long, starting with a character a hand key starts with, and found in none
    of COMMON_LINES. Else they are the gap (``<no literal>`` where none bounds a match)."""
    added: set[str] = set()
    missed: set[str] = set()
    for part in cover(source, flags, anchors, heads):
        if part is None:
            missed.add("<no literal>")
            continue
        keys = {scan_key(w) for w in part}
        cheap = (
            len(part) <= MAX_DERIVED
            and all(len(k) >= MIN_KEY for k in keys)
            and {k[0] for k in keys} <= heads
            and not any(k in line for k in keys for line in COMMON_LINES)
        )
        (added if cheap else missed).update(part)
    if len(added) > MAX_DERIVED:
        added, missed = set(), missed | added
    return tuple(sorted(added)), tuple(sorted(missed))


def hand_heads() -> frozenset[str]:
    """The first characters of the hand anchors' scan keys."""
    anchors = {a for s in SIGNATURES for a in s.anchors} | {a for m in MARKERS for a in m.anchors}
    return frozenset(scan_key(a)[0] for a in anchors)


def entries() -> list[tuple[str, str, int, tuple[str, ...]]]:
    """(name, pattern, flags, hand anchors) of every signature and marker, named as the gap
    list of the tests names them: ``category#n`` (its n-th signature) or ``marker:context``."""
    seen: dict[str, int] = {}
    out = []
    for s in SIGNATURES:
        seen[s.category] = seen.get(s.category, 0) + 1
        out.append((f"{s.category}#{seen[s.category]}", s.source, s.flags, s.anchors))
    for m in MARKERS:
        out.append((f"marker:{m.context}", m.pattern.pattern, m.pattern.flags, m.anchors))
    return out


def table() -> tuple[dict[str, tuple[str, ...]], dict[str, tuple[str, ...]]]:
    """(digest -> anchors to add, empty where none, for every signature and marker;
    name -> spellings left uncovered)."""
    heads = hand_heads()
    derived: dict[str, tuple[str, ...]] = {}
    gaps: dict[str, tuple[str, ...]] = {}
    for name, source, flags, anchors in entries():
        added, missed = derive(source, flags, anchors, heads)
        derived[digest(source, flags, anchors)] = added
        if missed:
            gaps[name] = missed
    return derived, gaps


def _quoted(word: str) -> str:
    """A literal as ``ruff format`` writes it: double quotes unless single ones escape less."""
    text = repr(word)[1:-1].replace("\\'", "'")
    if word.count('"') > word.count("'"):
        return "'" + text.replace("'", "\\'") + "'"
    return '"' + text.replace('"', '\\"') + '"'


def render(derived: dict[str, tuple[str, ...]]) -> str:
    lines = [
        '"""Written by ``python -m backend.diagnosis.regex_cover``; do not edit.',
        "",
        "Per signature and marker: the digest of (pattern, flags, hand anchors) -> the anchors",
        "``regex_cover.derive`` adds (the spellings its pattern matches that no hand anchor is",
        "part of). A pattern changed since is read at start instead (``scan.effective_anchors``).",
        '"""',
        "",
        "DERIVED: dict[str, tuple[str, ...]] = {",
    ]
    for key, words in sorted(derived.items()):
        one = f'    "{key}": ({", ".join(map(_quoted, words))}{"," if len(words) == 1 else ""}),'
        if len(one) <= 100:
            lines.append(one)
            continue
        lines.append(f'    "{key}": (')
        lines.extend(f"        {_quoted(word)}," for word in words)
        lines.append("    ),")
    lines.append("}")
    return "\n".join(lines) + "\n"


if __name__ == "__main__":  # pragma: no cover
    from pathlib import Path

    found, left = table()
    Path(__file__).with_name("anchor_table.py").write_text(render(found), encoding="utf-8")
    for name, words in sorted(left.items()):
        print(f"uncovered {name}: {len(words)} spellings, e.g. {list(words[:4])}")
