"""`trainwiz data check --model DIR` for a model with its own chat template: the entry's template
decision and masks, the unmaskable records named, a few samples' trained text shown.

The model is a ChatML tokenizer built here (a tiny byte-level BPE, Qwen2's special tokens, no
BOS); its ``config.json`` says qwen2, so ``auto`` picks the tokenizer's own template.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from backend.data.check import DataReport, TokenStats
from tests.backend.test_model_validate import shared_tiny
from tui.cli import main

CHATML = (
    "{% for message in messages %}"
    "{{ '<|im_start|>' + message['role'] + '\n' + message['content'] + '<|im_end|>' + '\n' }}"
    "{% endfor %}"
    "{% if add_generation_prompt %}{{ '<|im_start|>assistant\n' }}{% endif %}"
)
SPECIAL = ["<|endoftext|>", "<|im_start|>", "<|im_end|>"]
CORPUS = [
    "What is two plus two? Two plus two is four.",
    "You are a helpful assistant. And three? Five.",
    "user assistant system hello there",
]
ESCAPE = "\x1b]0;owned\x07\x1b[2J"  # a window retitle and a screen clear, inside the data

# one worker makes the module-scoped fixture once (tests/conftest.py)
pytestmark = pytest.mark.xdist_group("data-check-templates")


def turn(role: str, value: str) -> dict[str, str]:
    return {"from": role, "value": value}


RECORDS: list[dict[str, Any]] = [
    {
        "id": "multi",
        "system": "You are a helpful assistant.",
        "conversations": [
            turn("human", "What is two plus two?"),
            turn("gpt", "Two plus two is four."),
            turn("human", "And three?"),
            turn("gpt", "Five."),
        ],
    },
    {
        "id": "one",
        "conversations": [turn("human", f"hello {ESCAPE}there"), turn("gpt", "Hello there.")],
    },
    # Unmaskable under any template: nothing to learn (structurally only warnings).
    {"id": "unanswered", "conversations": [turn("human", "What is two plus two?")]},
    {"id": "gpt-first", "conversations": [turn("gpt", "Five."), turn("human", "And three?")]},
]
REPLIES = {0: ["Two plus two is four.", "Five."], 1: ["Hello there."]}
UNMASKABLE = [(2, "unanswered"), (3, "gpt-first")]


def build_chatml(target: Path, with_template: bool = True) -> Path:
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
    from transformers import PreTrainedTokenizerFast

    bpe = Tokenizer(models.BPE())
    bpe.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    bpe.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=400,
        special_tokens=SPECIAL,
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    bpe.train_from_iterator(CORPUS * 5, trainer)
    tokenizer = PreTrainedTokenizerFast(
        tokenizer_object=bpe, eos_token="<|im_end|>", pad_token="<|endoftext|>"
    )
    if with_template:
        tokenizer.chat_template = CHATML
    tokenizer.save_pretrained(target)
    (target / "config.json").write_text(json.dumps({"model_type": "qwen2"}))
    return target


@pytest.fixture(scope="module")
def chatml(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return build_chatml(tmp_path_factory.mktemp("chatml"))


@pytest.fixture(scope="module")
def data(tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("data") / "chat.json"
    path.write_text(json.dumps(RECORDS))
    return path


def run_json(capsys: pytest.CaptureFixture[str], *args: str) -> tuple[int, dict[str, Any]]:
    code = main(["data", "check", *args, "--json"])
    return code, json.loads(capsys.readouterr().out)


def trained(sample: dict[str, Any]) -> list[str]:
    return [s["text"] for s in sample["segments"] if s["trained"]]


def test_model_template_masks_only_the_replies(
    chatml: Path, data: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    code, report = run_json(capsys, str(data), "--model", str(chatml))
    tokens = report["tokens"]
    assert tokens["chat_template"] == "model"
    assert tokens["chat_template_reason"] == "auto: the tokenizer carries a chat template"
    assert tokens["template_source"] == "tokenizer" and tokens["mismatched"] == 0
    # Two of four unmaskable is not more than half: the launch would train on the other two.
    assert code == 0 and report["ok"]
    assert tokens["n"] == 2 and len(tokens["lengths"]) == 2
    assert tokens["unmaskable"] == 2
    named = [(r["index"], r["id"]) for r in tokens["unmaskable_records"]]
    assert named == UNMASKABLE
    assert all(
        r["reason"] == "no assistant turn after a user turn" for r in tokens["unmaskable_records"]
    )
    assert [s["index"] for s in tokens["samples"]] == [0, 1]
    for sample in tokens["samples"]:
        # Exactly each reply and its end-of-turn token: no header, no user or system text.
        assert trained(sample) == [reply + "<|im_end|>" for reply in REPLIES[sample["index"]]]
        text = "".join(s["text"] for s in sample["segments"])
        assert text.startswith("<|im_start|>") and text.endswith("<|im_end|>\n")
    first = "".join(s["text"] for s in tokens["samples"][0]["segments"] if not s["trained"])
    assert "You are a helpful assistant." in first and "<|im_start|>assistant\n" in first


def test_text_output_shows_template_unmaskable_and_marked_samples(
    chatml: Path, data: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["data", "check", str(data), "--model", str(chatml), "--max-length", "256"]) == 0
    out = capsys.readouterr().out
    lines = out.splitlines()
    assert "template    model (auto: the tokenizer carries a chat template)" in lines
    assert "unmaskable  2 of 4 conversations cannot be masked exactly" in out
    assert "  record 2 (id unanswered): no assistant turn after a user turn" in lines
    assert "  record 3 (id gpt-first): no assistant turn after a user turn" in lines
    assert "sample      record 0 (id multi): «trained on», the rest masked" in lines
    assert "    «Two plus two is four.<|im_end|>»" in lines
    assert "    «Five.<|im_end|>»" in lines
    assert "    <|im_start|>assistant" in lines
    assert "    What is two plus two?<|im_end|>" in lines  # the user's text, unmarked
    assert "    «Hello there.<|im_end|>»" in lines
    assert "\x1b" not in out and "\x07" not in out and "there<|im_end|>" in out
    assert lines[-1] == "ok"


def test_fastchat_template_by_name(
    chatml: Path, data: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    _, report = run_json(
        capsys, str(data), "--model", str(chatml), "--chat-template", "qwen-7b-chat"
    )
    tokens = report["tokens"]
    assert tokens["chat_template"] == "qwen-7b-chat" and tokens["template_source"] == "fastchat"
    assert [(r["index"], r["id"]) for r in tokens["unmaskable_records"]] == UNMASKABLE
    for sample in tokens["samples"]:
        assert trained(sample) == [reply + "<|im_end|>" for reply in REPLIES[sample["index"]]]


def test_bad_chat_template_settings_exit_2_naming_the_option(
    chatml: Path, data: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert (
        main(["data", "check", str(data), "--model", str(chatml), "--chat-template", "llama2"]) == 2
    )
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "--chat-template llama2" in err[0]
    assert "auto, vicuna, model or a FastChat template name" in err[0] and "llama-2?" in err[0]
    # Without --model the setting is still checked (what a preset would be refused for).
    assert main(["data", "check", str(data), "--chat-template", "nope"]) == 2
    assert "--chat-template nope" in capsys.readouterr().err
    # `model` on a tokenizer without a template: refused before the tokenizer loads.
    bare = build_chatml(tmp_path / "bare", with_template=False)
    assert main(["data", "check", str(data), "--model", str(bare), "--chat-template", "model"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("trainwiz: --chat-template model: ")
    assert "has no chat template" in err[0]


def test_more_than_half_unmaskable_is_not_ok() -> None:
    def report(unmaskable: int, n: int) -> DataReport:
        stats = TokenStats(
            model_max_length=64, tokenizer_class="T", template_source="tokenizer",
            chat_template="model", n=n, mean=1.0, p50=1, p90=1, p99=1, max=1, truncated=0,
            truncated_share=0.0, unmaskable=unmaskable,
        )  # fmt: skip
        return DataReport(path="x", tokens=stats)

    assert report(2, 2).ok and not report(3, 2).ok and report(0, 0).ok
    assert not report(1, 0).ok  # nothing maskable at all


def test_vicuna_model_reports_its_template_and_shows_no_masks(
    tmp_path_factory: pytest.TempPathFactory, capsys: pytest.CaptureFixture[str]
) -> None:
    tiny = shared_tiny(tmp_path_factory)  # Llama without a chat template: FastChat's vicuna
    code, report = run_json(capsys, "@sample", "--model", str(tiny), "--max-length", "256")
    tokens = report["tokens"]
    assert code == 0 and tokens["chat_template"] == "vicuna"
    assert tokens["chat_template_reason"].startswith("auto: a Llama/Vicuna model")
    assert tokens["template_source"] == "fastchat" and tokens["tokenizer_class"] == "LlamaTokenizer"
    assert tokens["samples"] == [] and tokens["unmaskable"] == 0 and tokens["n"] == 200
