"""Packing is exact: a packed batch has the summed loss and gradients of the same conversations
padded the FastChat way (several length mixes, one conversation longer than the row).

Real parts: a tiny Llama with a sentencepiece tokenizer made by trainwiz's own tiny-model code,
FastChat's ``preprocess`` (template + masking), transformers' Llama and loss. The packed side runs
``packing``'s own code path (preprocess_each -> build_rows -> collate -> the attention that
``choose_attention`` picks on this machine). On the CPU that is SDPA with transformers' packed
(block-diagonal) mask, because flex_attention has no CPU backward in torch 2.13; flex itself is
checked here forward-only (same loss), which is the same mask code the GPU runs.

Truncation semantics: FastChat truncates each conversation at model_max_length; packing keeps
that (it runs FastChat's preprocess) and requires pack_tokens >= model_max_length, so a
conversation longer than the row is truncated to model_max_length, never split across rows.

Tolerance: fp32 on CPU; summed loss relative 1e-5, gradients atol 1e-5 + rtol 1e-4 (the order
of the conversations and the reduction order differ, nothing else).
"""

from __future__ import annotations

import importlib.util
import random
import sys
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest

from backend.entry import ENTRY_DIR
from tests.backend.test_model_validate import shared_tiny
from tests.training_side import on_first_use

# Real torch + FastChat models built per module: the full tier (docs/testing.md), not --quick.
pytestmark = [pytest.mark.slow, pytest.mark.xdist_group("packing")]

torch = on_first_use("torch")
transformers = on_first_use("transformers")
fastchat_train = on_first_use("fastchat.train.train")

MAX_LEN = 128
ROW = 192


@pytest.fixture(scope="module")
def packing() -> ModuleType:
    spec = importlib.util.spec_from_file_location("packing", ENTRY_DIR / "packing.py")
    assert spec and spec.loader
    module = importlib.util.module_from_spec(spec)
    sys.modules.setdefault("packing", module)
    spec.loader.exec_module(module)
    return module


@pytest.fixture(scope="module")
def model_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The embedded default's tiny Llama (head size 16, as flex attention needs), shared with
    the rest of the run rather than built again."""
    return shared_tiny(tmp_path_factory)


@pytest.fixture(scope="module")
def tokenizer(model_dir: Path) -> Any:
    tok = transformers.AutoTokenizer.from_pretrained(
        model_dir, use_fast=False, model_max_length=MAX_LEN, padding_side="right"
    )
    tok.pad_token = tok.unk_token
    return tok


WORDS = [
    "the",
    "answer",
    "is",
    "a",
    "short",
    "list",
    "of",
    "steps",
    "to",
    "follow",
    "when",
    "you",
    "plan",
    "your",
    "day",
    "well",
]


def conversation(rng: random.Random, words: int, turns: int = 2) -> list[dict[str, str]]:
    """Short questions, answers of ``words / turns`` words (a long one is cut inside an answer)."""
    out = []
    for t in range(turns):
        n = max(1, words // turns)
        out.append({"from": "human", "value": " ".join(rng.choices(WORDS, k=3 + t)) + "?"})
        out.append({"from": "gpt", "value": " ".join(rng.choices(WORDS, k=n)) + "."})
    return out


MIXES = {
    "three-mixed": [10, 40, 70],
    "many-short": [4, 6, 8, 5, 7, 9, 3, 6],
    "one-longer-than-the-row": [300, 12, 30, 20],  # 300 words: > ROW tokens, truncated to MAX_LEN
}


def load_model(model_dir: Path, attn: str) -> Any:
    torch.manual_seed(0)
    model = transformers.AutoModelForCausalLM.from_pretrained(
        model_dir, attn_implementation=attn, torch_dtype=torch.float32
    )
    model.config.use_cache = False
    return model


def summed_loss_and_grads(model: Any, batch: dict[str, Any]) -> tuple[float, dict[str, Any]]:
    """HF's own loss with num_items_in_batch=1: the sum over trained tokens (no mean)."""
    model.zero_grad(set_to_none=True)
    out = model(**batch, num_items_in_batch=1)
    out.loss.backward()
    loss = float(out.loss.detach())
    grads = {n: p.grad.detach().clone() for n, p in model.named_parameters() if p.grad is not None}
    return loss, grads


def padded_batch(sources: list[Any], tokenizer: Any) -> dict[str, Any]:
    """FastChat's way: preprocess pads every conversation to model_max_length."""
    data = fastchat_train.preprocess(sources, tokenizer)
    return {k: data[k] for k in ("input_ids", "labels", "attention_mask")}


@pytest.mark.parametrize("mix", sorted(MIXES))
def test_packed_batch_equals_padded_loss_and_gradients(
    mix: str, packing: ModuleType, tokenizer: Any, model_dir: Path
) -> None:
    rng = random.Random(mix)
    sources = [conversation(rng, n) for n in MIXES[mix]]
    examples = packing.preprocess_each(sources, tokenizer)
    assert len(examples) == len(sources)  # none mismatched, none dropped
    assert max(int(ids.numel()) for ids, _ in examples) <= MAX_LEN
    rows = packing.build_rows(examples, ROW, tokenizer.pad_token_id)
    assert all(int(r["input_ids"].numel()) == ROW for r in rows)
    batch = packing.collate(
        [{k: r[k] for k in ("input_ids", "labels", "position_ids")} for r in rows]
    )
    assert batch["input_ids"].shape == (1, ROW * len(rows))
    if mix == "many-short":
        assert len(rows) < len(sources)  # several conversations share a row

    attn = packing.choose_attention("auto", cuda=False, flash_usable=False, torch_version=(2, 13))
    packed_loss, packed_grads = summed_loss_and_grads(load_model(model_dir, attn), batch)
    padded_loss, padded_grads = summed_loss_and_grads(
        load_model(model_dir, "sdpa"), padded_batch(sources, tokenizer)
    )
    assert packed_loss == pytest.approx(padded_loss, rel=1e-5)
    assert packed_grads.keys() == padded_grads.keys()
    for name, grad in padded_grads.items():
        torch.testing.assert_close(packed_grads[name], grad, atol=1e-5, rtol=1e-4, msg=name)


@pytest.mark.slow
def test_flex_attention_forward_gives_the_padded_loss(
    packing: ModuleType, tokenizer: Any, model_dir: Path
) -> None:
    """flex_attention (the GPU path without flash-attn) with the document mask, forward only."""
    rng = random.Random(7)
    sources = [conversation(rng, n) for n in MIXES["one-longer-than-the-row"]]
    rows = packing.build_rows(
        packing.preprocess_each(sources, tokenizer), ROW, tokenizer.pad_token_id
    )
    batch = packing.collate(
        [{k: r[k] for k in ("input_ids", "labels", "position_ids")} for r in rows]
    )
    with torch.no_grad():
        flex = load_model(model_dir, "flex_attention")(**batch, num_items_in_batch=1).loss
        padded = load_model(model_dir, "sdpa")(
            **padded_batch(sources, tokenizer), num_items_in_batch=1
        ).loss
    assert float(flex) == pytest.approx(float(padded), rel=1e-5)


def test_without_document_mask_the_loss_differs(
    packing: ModuleType, tokenizer: Any, model_dir: Path
) -> None:
    """The equivalence is not vacuous: one causal mask over the row (no restart) changes the loss."""
    rng = random.Random(3)
    sources = [conversation(rng, n) for n in MIXES["many-short"]]
    rows = packing.build_rows(
        packing.preprocess_each(sources, tokenizer), ROW, tokenizer.pad_token_id
    )
    batch = packing.collate(
        [{k: r[k] for k in ("input_ids", "labels", "position_ids")} for r in rows]
    )
    model = load_model(model_dir, "sdpa")
    with torch.no_grad():
        packed = float(model(**batch, num_items_in_batch=1).loss)
        batch["position_ids"] = torch.arange(batch["input_ids"].shape[1]).unsqueeze(0)
        leaky = float(model(**batch, num_items_in_batch=1).loss)
    assert abs(packed - leaky) > 10 * 1e-5 * abs(packed)  # 10x the equivalence tolerance


def test_count_real_tokens_skips_the_row_filler(packing: ModuleType, tokenizer: Any) -> None:
    rng = random.Random(5)
    examples = packing.preprocess_each([conversation(rng, n) for n in (10, 20)], tokenizer)
    rows = packing.build_rows(examples, ROW, tokenizer.pad_token_id)
    batch = packing.collate(
        [{k: r[k] for k in ("input_ids", "labels", "position_ids")} for r in rows]
    )
    real = sum(int(ids.numel()) for ids, _ in examples)
    assert real < ROW
    assert packing.count_real_tokens(batch, tokenizer.pad_token_id) == real


def test_pack_lengths_places_every_conversation_once_within_the_budget(packing: ModuleType) -> None:
    rng = random.Random(0)
    lengths = [rng.randint(1, 2048) for _ in range(3000)]
    rows = packing.pack_lengths(lengths, 8192)
    placed = sorted(i for row in rows for i in row)
    assert placed == list(range(len(lengths)))
    assert all(sum(lengths[i] for i in row) <= 8192 for row in rows)
    count, fill = packing.row_fill(lengths, 8192)
    assert count == len(rows) and fill > 0.97  # best-fit decreasing on many items
    with pytest.raises(ValueError, match="more than the row"):
        packing.pack_lengths([10, 9000], 8192)


@pytest.mark.parametrize(
    ("cuda", "flash", "torch_version", "requested", "expected"),
    [
        (True, True, (2, 11), "auto", "flash_attention_2"),
        (True, False, (2, 11), "auto", "flex_attention"),
        (True, False, (2, 11), "sdpa", "flex_attention"),  # never the dense masked path
        (True, True, (2, 11), "flex_attention", "flex_attention"),
        (True, False, (2, 4), "auto", "sdpa"),  # no flex document mask before torch 2.6
        (False, False, (2, 13), "auto", "sdpa"),  # CPU: flex has no backward
    ],
)
def test_packed_attention_choice(
    packing: ModuleType,
    cuda: bool,
    flash: bool,
    torch_version: tuple[int, int],
    requested: str,
    expected: str,
) -> None:
    assert packing.choose_attention(requested, cuda, flash, torch_version) == expected
