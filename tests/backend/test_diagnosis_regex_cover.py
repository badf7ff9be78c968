"""Every match of a signature holds one of its anchors, so the fast scan modes try it wherever the
exhaustive one finds it: the anchors ``regex_cover`` derives from each pattern (the spellings no
hand-written anchor is part of), the table they are kept in, and the gaps left on purpose."""

from __future__ import annotations

import io
import itertools
import re
from dataclasses import asdict
from pathlib import Path

import pytest

from backend.diagnosis import anchor_table, classify_line, regex_cover, scan
from backend.diagnosis.classifier import diagnose_stream
from backend.diagnosis.signatures import SIGNATURES

# The spellings left out on purpose, by signature (``category#n``: its n-th signature in table
# order) or marker, and why. A new gap fails the test: give the signature a hand anchor that every
# match holds, or add it here with its reason.
KNOWN_GAPS = {
    # case-insensitive phrases: hundreds of case spellings, the hand anchors name the usual ones
    "cuda_arch#2": "(?i): 'bf16 requires …', 'compute capability' in any case",
    "driver_mismatch#1": "(?i): 'driver/library version mismatch' in any case",
    "container_permission#1": "(?i): runc's messages in any case",
    # a key that would start with a frequent lowercase letter (a new stop all over the log)
    "shm#1": "'return code -7' / 'returncode: -7' (key 'urn code')",
    "host_oom#1": "'return code -9' / 'returncode: -9' (key 'urn code')",
    "disk_full#1": "Rust's bare 'os error 28' (key 's error 28')",
    # a key every healthy loss dict or traceback frame holds
    "loss_nan#1": "'loss' : nan with other spacing ('loss'), '\"loss\":null' ('learning_rate'), "
    "'Non-Finite loss' in other cases",
    "loss_nan#2": "'grad_norm' : nan with other spacing ('grad_norm')",
    "marker:save": "'line N, in save_…' without 'File \"' (key 'line ')",
}


@pytest.fixture(scope="module")
def derived_and_gaps() -> tuple[dict[str, tuple[str, ...]], dict[str, tuple[str, ...]]]:
    return regex_cover.table()


def _findings(data: bytes, mode: str) -> list[dict]:  # type: ignore[type-arg]
    diagnosis = diagnose_stream(io.BytesIO(data), total=len(data), mode=mode)  # type: ignore[arg-type]
    return [asdict(f) for f in diagnosis.findings]


MODES = ("shapes", "direct", "exhaustive")
# A trainer's progress log of its own making: per-head losses as "name : value", one going NaN.
SPACED_COLON_LOG = "\n".join(
    [
        "2025-03-02 10:00:01 | INFO | trainer | run 7f3a: 2 heads, 8 ranks, lr 4e-4",
        *(
            f"2025-03-02 10:{m:02d}:05 | INFO | trainer | iter {m * 100} | lr 0.0004 | "
            f"mlm_loss : {2.9 - m / 50:.4f} | sop_loss : 0.6931 | tokens/s 51200"
            for m in range(1, 11)
        ),
        "2025-03-02 10:11:05 | INFO | trainer | iter 1100 | lr 0.0004 | mlm_loss : nan | "
        "sop_loss : 0.6930 | tokens/s 51187",
        "2025-03-02 10:12:05 | INFO | trainer | iter 1200 | lr 0.0004 | mlm_loss : nan | "
        "sop_loss : nan | tokens/s 51190",
        "2025-03-02 10:12:09 | INFO | trainer | saving checkpoint to /ckpt/iter_1200",
    ]
).encode()


def test_a_loss_spaced_around_its_colon_is_found_in_every_mode(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """``mlm_loss : nan``: the free-form loss signature allows a space before the colon, the hand
    anchors did not (``loss: nan``, ``loss:nan``), so only the exhaustive scan found it."""
    monkeypatch.setattr(scan, "SHAPE_MIN", 0)  # the shapes even for this small log
    monkeypatch.setattr(scan, "SHAPE_MAX_SHARE", 2.0)
    results = {mode: _findings(SPACED_COLON_LOG, mode) for mode in MODES}
    assert results["shapes"] == results["direct"] == results["exhaustive"]
    found = results["exhaustive"]
    assert [(f["category"], f["line"], f["count"]) for f in found] == [("loss_nan", 12, 2)]
    assert "mlm_loss : nan" in found[0]["text"]


@pytest.mark.parametrize("first", ["l", "L"])
def test_every_spelling_of_a_free_form_loss_is_flagged_live(first: str) -> None:
    """Each separator and value the free-form loss pattern allows, as the live log pane (the
    prefilter, then the anchors, then the pattern) sees it."""
    for sep, value in itertools.product(
        [":", ": ", " :", " : ", "=", "= ", " =", " = ", " "], ["nan", "NaN", "inf", "-inf"]
    ):
        line = f"step 812/4000 | train_{first}oss{sep}{value} | lr 3e-05"
        flag = classify_line(line)
        assert flag is not None and flag.category == "loss_nan", line


def test_the_anchor_table_is_fresh(
    derived_and_gaps: tuple[dict[str, tuple[str, ...]], dict[str, tuple[str, ...]]],
) -> None:
    """``anchor_table.py`` is what ``python -m backend.diagnosis.regex_cover`` writes now."""
    derived = derived_and_gaps[0]
    assert derived == anchor_table.DERIVED, "run: python -m backend.diagnosis.regex_cover"
    assert Path(anchor_table.__file__).read_text(encoding="utf-8") == regex_cover.render(derived)


def test_a_pattern_missing_from_the_table_is_read_at_start(monkeypatch: pytest.MonkeyPatch) -> None:
    """A stale table costs start-up time, never a line: the anchors are derived then."""
    monkeypatch.setattr(scan, "DERIVED", {})
    assert scan.effective_anchors.__wrapped__() == scan.effective_anchors()


def test_only_the_known_gaps_are_left(
    derived_and_gaps: tuple[dict[str, tuple[str, ...]], dict[str, tuple[str, ...]]],
) -> None:
    gaps = derived_and_gaps[1]
    assert sorted(gaps) == sorted(KNOWN_GAPS), {n: gaps[n][:5] for n in set(gaps) - set(KNOWN_GAPS)}
    assert not any("<no literal>" in words for words in gaps.values())


def test_the_loss_forms_are_derived_and_the_loss_dict_keys_are_not(
    derived_and_gaps: tuple[dict[str, tuple[str, ...]], dict[str, tuple[str, ...]]],
) -> None:
    sig_anchors = scan.effective_anchors()[0]
    loss = [a for s, a in zip(SIGNATURES, sig_anchors) if s.category == "loss_nan"]
    assert {"loss : nan", "Loss = NaN", "loss -inf"} <= set(loss[0])
    assert not {"'loss'", "'grad_norm'", '"learning_rate":'} & {a for x in loss for a in x}
    gaps = derived_and_gaps[1]
    assert "'loss'" in gaps["loss_nan#1"] and "'grad_norm'" in gaps["loss_nan#2"]


HEADS = frozenset("l=LE'\"")


@pytest.mark.parametrize(
    ("pattern", "anchors", "missing"),
    [
        # a run of fixed-width pieces through optional and alternative parts
        (r"\b(?:\w+_)?loss(?: ?: ?| )(?:nan|inf)\b", ("loss: nan", "loss:nan", "loss nan"),
         {"loss : nan", "loss :nan", "loss: inf", "loss:inf", "loss : inf", "loss :inf",
          "loss inf"}),
        # an anchor across a named group's edge counts (the groups are opened)
        (r"\d+ errors? for (?P<model>DeepSpeed\w*Config)", ("for DeepSpeed",), set()),
        # every alternative needs its own cover; a covered one adds nothing
        (r"Errno 28|EDQUOT|Disk quota exceeded", ("Errno 28", "EDQUOT"), {"Disk quota exceeded"}),
        # a group repeated at least once covers the sequence through its body
        (r"(?:Error 4[01]\d )+", ("Error 4",), set()),
    ],
)  # fmt: skip
def test_the_cover_names_the_spellings_no_anchor_is_part_of(
    pattern: str, anchors: tuple[str, ...], missing: set[str]
) -> None:
    parts = regex_cover.cover(pattern, 0, anchors, HEADS)
    assert None not in parts
    assert {w for part in parts if part is not None for w in part} == missing


def test_nothing_bounds_a_pattern_of_classes_only() -> None:
    assert regex_cover.cover(r"\w+ = \d+", 0, (), HEADS) != ()  # " = " is a literal
    assert regex_cover.cover(r"\w+\s+\d+", 0, (), HEADS) == (None,)
    assert regex_cover.derive(r"\w+\s+\d+", 0, (), HEADS) == ((), ("<no literal>",))


@pytest.mark.parametrize("letter", ["k", "S", "i", "σ", "7"])
def test_case_insensitive_letters_spell_what_re_folds_to_them(letter: str) -> None:
    """Under (?i) ``k`` also matches the Kelvin sign, ``s`` the long s, ``i`` the dotless i:
    the characters spelled are exactly those ``re`` matches (checked over the BMP)."""
    spelled = regex_cover._chars(ord(letter), re.IGNORECASE)
    pattern = re.compile(re.escape(letter), re.IGNORECASE)
    matched = {chr(c) for c in range(0x10000) if pattern.fullmatch(chr(c))}
    assert {c for c in spelled if ord(c) < 0x10000} == matched
    assert regex_cover._chars(ord(letter), 0) == {letter}


def test_a_cheap_spelling_is_derived_and_a_costly_one_left() -> None:
    """A key starting with a character no hand key starts with, or found in a healthy line,
    is left as a gap; one under an existing first character is added."""
    assert regex_cover.derive(r"Loss is (?:nan|NaN)", 0, ("Loss is nan",), HEADS) == (
        ("Loss is NaN",), ()
    )  # fmt: skip
    assert regex_cover.derive(r"os error 28", 0, (), HEADS) == ((), ("os error 28",))
    assert regex_cover.derive(r"'loss'\s*:", 0, (), HEADS) == ((), ("'loss'",))
