"""Diagnosis explanations in Chinese (issue 20): the cause of a real CUDA OOM line, with the
figures taken from the log, reads in the user's language; English stays the default."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from backend.diagnosis import diagnose_text
from backend.i18n import set_language

OOM = (
    "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB. GPU 0 has a total "
    "capacity of 39.39 GiB of which 1.12 GiB is free.\n"
)


@pytest.fixture
def chinese() -> Iterator[None]:
    set_language("zh_CN")
    yield
    set_language("en")


def _oom_explanation() -> str:
    found = [f for f in diagnose_text(OOM).findings if f.category == "cuda_oom"]
    assert found, "the OOM line is not classified as cuda_oom"
    return found[0].explanation


def test_oom_explanation_in_chinese_keeps_the_figures(chinese: None) -> None:
    text = _oom_explanation()
    assert text.startswith("GPU 显存不足"), text
    assert "2.00 GiB" in text and "39.4 GiB" in text, text


def test_oom_explanation_in_english_by_default() -> None:
    text = _oom_explanation()
    assert text.startswith("A GPU ran out of memory"), text
    assert "It asked for 2.00 GiB more on a 39.4 GiB GPU." in text, text
