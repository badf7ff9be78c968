"""Acceptance: every labelled real log gets an accepted top category; benign logs get no error."""

from __future__ import annotations

import csv
from pathlib import Path

import pytest

from backend.diagnosis import classify_line, diagnose_file

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures"
CORPUS = FIXTURES / "logcorpus"

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
    with (CORPUS / "SOURCES.tsv").open(encoding="utf-8") as handle:
        return [(row["file"], row["category"]) for row in csv.DictReader(handle, delimiter="\t")]


def test_sources_cover_every_corpus_file() -> None:
    listed = {name for name, _ in _labelled()}
    on_disk = {str(p.relative_to(CORPUS)) for p in CORPUS.glob("*/*.log")}
    assert listed == on_disk


@pytest.mark.parametrize(("name", "label"), [r for r in _labelled() if r[1] != "benign"])
def test_failure_log_top_category(name: str, label: str) -> None:
    diagnosis = diagnose_file(CORPUS / name)
    top = diagnosis.top
    assert top is not None, f"{name}: nothing found"
    assert top.category in ACCEPTED[label], f"{name}: top is {top.category}"
    assert top.line >= 1 and top.text and top.explanation and top.fixes


@pytest.mark.parametrize("name", [r[0] for r in _labelled() if r[1] == "benign"])
def test_benign_log_has_no_error(name: str) -> None:
    diagnosis = diagnose_file(CORPUS / name)
    assert not diagnosis.has_error, [(f.category, f.text) for f in diagnosis.findings]


@pytest.mark.parametrize(
    "path", sorted((FIXTURES / "h200").glob("train-log-*.txt")), ids=lambda p: p.name
)
def test_recorded_h200_training_logs_have_no_error(path: Path) -> None:
    diagnosis = diagnose_file(path)
    assert diagnosis.lines_read > 10
    assert not diagnosis.has_error, [(f.category, f.text) for f in diagnosis.findings]


def test_nccl_caused_by_full_shm_reports_shm_first() -> None:
    name = "nccl/transformers-11658-deepspeed-nccl-shm-unhandled-system-error.log"
    categories = [f.category for f in diagnose_file(CORPUS / name).findings]
    assert categories[0] == "shm" and "nccl" in categories


def test_oom_after_training_summary_is_a_save_oom() -> None:
    name = "cuda_oom/fastchat-256-fsdp-save-state-dict-clone-oom-after-training.log"
    top = diagnose_file(CORPUS / name).top
    assert top is not None and top.category == "fsdp_save_oom"


@pytest.mark.parametrize(
    "path",
    sorted((FIXTURES / "h200").glob("train-log-*.txt")) + sorted((CORPUS / "benign").glob("*.log")),
    ids=lambda p: p.name,
)
def test_live_line_flags_on_clean_logs_are_never_errors(path: Path) -> None:
    """The monitor colours each line with classify_line: clean logs must show no red line."""
    for line in path.read_text(encoding="utf-8", errors="replace").splitlines():
        flag = classify_line(line)
        assert flag is None or flag.severity != "error", (line, flag)
