"""Acceptance: every labelled real log gets an accepted top category; benign logs get no error."""

from __future__ import annotations

from pathlib import Path

from backend.diagnosis import diagnose_file
from tests.backend.logcorpora import (
    assert_no_misses,
    no_error,
    sources,
    table_misses,
    top_in,
)

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures"
CORPUS = FIXTURES / "logcorpus"
H200 = FIXTURES / "h200"

ACCEPTED = {
    "cuda_oom": {"cuda_oom", "fsdp_save_oom"},
    "flash_attn_build": {"flash_attn_build", "flash_attn_runtime"},
    "nccl": {"nccl", "shm"},
    "shm_bus_error": {"shm"},
    "port_in_use": {"port_in_use"},
    "host_oom_killed": {"host_oom"},
    "docker_gpu": {"docker_gpu", "driver_mismatch"},
    "tokenization_mismatch": {"tokenization_mismatch"},
    "disk_full": {"disk_full"},
    "container_permission": {"container_permission"},
}


def _labelled() -> list[tuple[str, str]]:
    return [(row["file"], row["category"]) for row in sources(CORPUS)]


def test_sources_cover_every_corpus_file() -> None:
    listed = {name for name, _ in _labelled()}
    on_disk = {str(p.relative_to(CORPUS)) for p in CORPUS.glob("*/*.log")}
    assert listed == on_disk


def test_every_labelled_log_gets_an_accepted_top_category_and_benign_ones_no_error() -> None:
    """Failure logs: an accepted top category with its line, text, explanation and fixes (a
    top at warning level counts here, as it always has: an interleaved tokenization mismatch
    is one). Benign logs: no error-level finding, and no line the monitor would colour red."""
    table = {
        name: no_error(live_lines=True, decode_errors="replace")
        if label == "benign"
        else top_in(ACCEPTED[label], error_only=False)
        for name, label in _labelled()
    }
    assert_no_misses("logcorpus", table_misses(CORPUS, table))


def test_recorded_h200_training_logs_have_no_error_and_no_red_live_line() -> None:
    """The healthy runs recorded on the H200s: read whole, nothing at error level, no red line."""
    table = {
        path.name: no_error(live_lines=True, decode_errors="replace", min_lines=10)
        for path in sorted(H200.glob("train-log-*.txt"))
    }
    assert len(table) >= 6, sorted(table)
    assert_no_misses("the recorded H200 logs", table_misses(H200, table))


def test_nccl_caused_by_full_shm_reports_shm_first() -> None:
    name = "nccl/transformers-11658-deepspeed-nccl-shm-unhandled-system-error.log"
    categories = [f.category for f in diagnose_file(CORPUS / name).findings]
    assert categories[0] == "shm" and "nccl" in categories


def test_oom_after_training_summary_is_a_save_oom() -> None:
    name = "cuda_oom/fastchat-256-fsdp-save-state-dict-clone-oom-after-training.log"
    top = diagnose_file(CORPUS / name).top
    assert top is not None and top.category == "fsdp_save_oom"
