"""Acceptance on a second, separately collected corpus (tests/fixtures/logcorpus2).

Each failure log was copied from a public issue thread and labelled by its root cause (not by
the loudest line): the top finding must name exactly that category. The benign logs are noisy
healthy runs (fp16 overflow warnings, NCCL WARN/INFO chatter, deprecation warnings, config
dumps) and must give nothing at error level, neither in `diagnose` nor as a live line flag.
"""

from __future__ import annotations

from collections import Counter
from pathlib import Path

from backend.diagnosis import diagnose_file
from tests.backend.logcorpora import (
    assert_no_misses,
    no_error,
    sources,
    table_misses,
    top_in,
)

CORPUS = Path(__file__).resolve().parents[1] / "fixtures" / "logcorpus2"
TARGET = 0.95  # right top category, per the definition of done


def _rows() -> list[dict[str, str]]:
    return sources(CORPUS)


FAILURES = [(r["file"], r["label"]) for r in _rows() if r["label"] != "benign"]
BENIGN = [r["file"] for r in _rows() if r["label"] == "benign"]


def test_sources_list_every_file_with_a_url_and_its_folder_as_label() -> None:
    rows = _rows()
    assert {r["file"] for r in rows} == {str(p.relative_to(CORPUS)) for p in CORPUS.glob("*/*.log")}
    for row in rows:
        assert row["url"].startswith("https://github.com/"), row
        assert row["file"].split("/")[0] == row["label"], row
        assert row["note"], row


def test_corpus_covers_every_category_and_the_new_ones_widely() -> None:
    labels = Counter(label for _, label in FAILURES)
    for category in ("hub_auth", "cuda_arch", "loss_nan", "shm", "host_oom"):
        assert labels[category] >= 5, labels
    assert len(FAILURES) >= 60 and len(BENIGN) >= 8


def test_every_log_gets_its_root_cause_as_top_category_and_benign_ones_no_error() -> None:
    """Failure logs: exactly their label on top (warning level counts here), with its line,
    text, explanation and fixes. Benign logs: no error-level finding and no red live line."""
    table = {name: top_in({label}, error_only=False) for name, label in FAILURES}
    table |= {name: no_error(live_lines=True) for name in BENIGN}
    assert_no_misses("logcorpus2", table_misses(CORPUS, table))


def test_rate_of_right_top_categories_meets_the_target() -> None:
    right = 0
    for name, label in FAILURES:
        top = diagnose_file(CORPUS / name).top
        right += top is not None and top.category == label
    assert right / len(FAILURES) >= TARGET


def test_enospc_from_a_semaphore_is_shm_and_not_disk_full() -> None:
    categories = [
        f.category
        for f in diagnose_file(CORPUS / "shm/megatron-878-semlock-errno-28-dataloader.log").findings
    ]
    assert categories == ["shm"]


def test_oom_on_one_rank_comes_before_the_nccl_timeouts_it_causes() -> None:
    name = "cuda_oom/funasr-2006-oom-rank2-then-watchdog-timeouts.log"
    categories = [f.category for f in diagnose_file(CORPUS / name).findings]
    assert categories[0] == "cuda_oom" and "nccl" in categories
