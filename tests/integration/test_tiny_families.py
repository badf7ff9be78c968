"""The tiny model source makes today's chat-model families, not only the Llama 2 of the default.

Each family (llama3, qwen2, mistral, gemma2) is made once per module by the product's own
``make_tiny`` (its subprocess with the training python); one more subprocess of the training
python then loads every one of them the way a user's script would (AutoTokenizer,
AutoModelForCausalLM), renders a conversation with its chat template, tokenizes, runs a forward
and backward with both attention implementations, and reports what it saw as JSON: the tests
below read those facts. Nothing is mocked.
"""

from __future__ import annotations

import json
import math
import os
import shutil
import subprocess
from pathlib import Path
from typing import Any

import pytest

from backend.model.tiny import MARKER, TINY_FILES, make_tiny, tiny_is_current, training_python
from backend.model.validate import validate_model_dir
from backend.preset.schema import TinyModelSpec

pytestmark = [pytest.mark.training, pytest.mark.xdist_group("tiny-families")]

FAMILIES = ("llama3", "qwen2", "mistral", "gemma2")
TEXT = "The assistant gives helpful, detailed, and polite answers. Café ☃ 2024"

# What each family's tokenizer must hold, and how its template writes the conversation below.
EXPECTED: dict[str, dict[str, Any]] = {
    "llama3": {
        "bos": "<|begin_of_text|>",
        "eos": "<|end_of_text|>",
        "unk": None,
        "pad": None,
        "special": [
            "<|begin_of_text|>",
            "<|end_of_text|>",
            "<|start_header_id|>",
            "<|end_header_id|>",
            "<|eot_id|>",
            "<|reserved_special_token_0|>",
        ],
        "chat": (
            "<|begin_of_text|><|start_header_id|>system<|end_header_id|>\n\nBe brief.<|eot_id|>"
            "<|start_header_id|>user<|end_header_id|>\n\nWhat is 43 minus 21?<|eot_id|>"
            "<|start_header_id|>assistant<|end_header_id|>\n\n43 minus 21 is 22.<|eot_id|>"
            "<|start_header_id|>user<|end_header_id|>\n\nAnd plus?<|eot_id|>"
            "<|start_header_id|>assistant<|end_header_id|>\n\n64.<|eot_id|>"
        ),
        "prompt_end": "<|eot_id|><|start_header_id|>assistant<|end_header_id|>\n\n",
        "model": "LlamaForCausalLM",
    },
    "qwen2": {
        "bos": None,
        "eos": "<|im_end|>",
        "unk": None,
        "pad": "<|endoftext|>",
        "special": ["<|endoftext|>", "<|im_start|>", "<|im_end|>"],
        "chat": (
            "<|im_start|>system\nBe brief.<|im_end|>\n"
            "<|im_start|>user\nWhat is 43 minus 21?<|im_end|>\n"
            "<|im_start|>assistant\n43 minus 21 is 22.<|im_end|>\n"
            "<|im_start|>user\nAnd plus?<|im_end|>\n"
            "<|im_start|>assistant\n64.<|im_end|>\n"
        ),
        "prompt_end": "<|im_end|>\n<|im_start|>assistant\n",
        "no_system_start": "<|im_start|>system\nYou are a helpful assistant.<|im_end|>\n",
        "model": "Qwen2ForCausalLM",
    },
    "mistral": {
        "bos": "<s>",
        "eos": "</s>",
        "unk": "<unk>",
        "pad": None,
        "special": ["<s>", "</s>", "<unk>", "[INST]", "[/INST]"],
        "chat": (
            "<s>[INST] Be brief.\n\nWhat is 43 minus 21?[/INST] 43 minus 21 is 22.</s>"
            "[INST] And plus?[/INST] 64.</s>"
        ),
        "prompt_end": "[INST] Be brief.\n\nWhat is 43 minus 21?[/INST]",
        "model": "MistralForCausalLM",
    },
    "gemma2": {
        "bos": "<bos>",
        "eos": "<eos>",
        "unk": "<unk>",
        "pad": "<pad>",
        "special": ["<bos>", "<eos>", "<pad>", "<unk>", "<start_of_turn>", "<end_of_turn>"],
        "chat": (
            "<bos><start_of_turn>user\nBe brief.\n\nWhat is 43 minus 21?<end_of_turn>\n"
            "<start_of_turn>model\n43 minus 21 is 22.<end_of_turn>\n"
            "<start_of_turn>user\nAnd plus?<end_of_turn>\n"
            "<start_of_turn>model\n64.<end_of_turn>\n"
        ),
        "prompt_end": "<end_of_turn>\n<start_of_turn>model\n",
        "model": "Gemma2ForCausalLM",
    },
}

# Run by the training python: everything a user's script would do with each model, as JSON.
PROBE = r"""
import json, math, sys
import torch
from transformers import AutoModelForCausalLM, AutoTokenizer

job = json.loads(sys.argv[1])
chat = [
    {"role": "system", "content": "Be brief."},
    {"role": "user", "content": "What is 43 minus 21?"},
    {"role": "assistant", "content": "43 minus 21 is 22."},
    {"role": "user", "content": "And plus?"},
    {"role": "assistant", "content": "64."},
]
text = job["text"]
facts = {}
for family, folder in job["dirs"].items():
    tok = AutoTokenizer.from_pretrained(folder)
    f = {
        "class": type(tok).__name__,
        "len": len(tok),
        "bos": tok.bos_token, "bos_id": tok.bos_token_id,
        "eos": tok.eos_token, "eos_id": tok.eos_token_id,
        "unk": tok.unk_token, "unk_id": tok.unk_token_id,
        "pad": tok.pad_token, "pad_id": tok.pad_token_id,
        "chat": tok.apply_chat_template(chat, tokenize=False),
        "prompt": tok.apply_chat_template(chat[:2], tokenize=False, add_generation_prompt=True),
        "no_system": tok.apply_chat_template(chat[1:3], tokenize=False),
        "with_special": tok(text).input_ids,
        "without_special": tok(text, add_special_tokens=False).input_ids,
        "decoded": tok.decode(tok(text, add_special_tokens=False).input_ids),
        "words": {w: tok.tokenize(" " + w) for w in ("understanding", "politely", "assistant")},
        "special": {
            t: {
                "alone": tok(t, add_special_tokens=False).input_ids,
                "inside": tok("x" + t + "y", add_special_tokens=False).input_ids,
                "id": tok.convert_tokens_to_ids(t),
            }
            for t in job["special"][family]
        },
    }
    chat_ids = tok.apply_chat_template(chat, tokenize=True)
    if isinstance(chat_ids, dict):
        chat_ids = chat_ids["input_ids"]
    f["chat_ids"] = list(chat_ids)
    f["config"] = json.load(open(folder + "/config.json"))
    f["runs"] = {}
    for impl in ("eager", "sdpa"):
        torch.manual_seed(0)
        model = AutoModelForCausalLM.from_pretrained(folder, attn_implementation=impl)
        ids = torch.tensor([f["chat_ids"]])
        out = model(input_ids=ids, labels=ids)
        out.loss.backward()
        grads = [p.grad for p in model.parameters() if p.requires_grad]
        f["runs"][impl] = {
            "class": type(model).__name__,
            "loss": float(out.loss.detach()),
            "vocab_rows": model.get_input_embeddings().weight.shape[0],
            "grads_finite": all(g is not None and bool(torch.isfinite(g).all()) for g in grads),
            "tied": model.get_output_embeddings().weight.data_ptr()
            == model.get_input_embeddings().weight.data_ptr(),
        }
    facts[family] = f
print(json.dumps(facts))
"""


@pytest.fixture(scope="module")
def made(
    tiny_families: dict[str, Path], tmp_path_factory: pytest.TempPathFactory
) -> dict[str, Path]:
    """Every family as the product's make_tiny made it (once per test run, default sizes:
    vocab 512), copied here so that a test may remake it."""
    root = tmp_path_factory.mktemp("tiny-families")
    dirs = {}
    for family in FAMILIES:
        dirs[family] = Path(shutil.copytree(tiny_families[family], root / family))
        report = validate_model_dir(dirs[family])
        assert report.ok, report.problems
    return dirs


@pytest.fixture(scope="module")
def facts(made: dict[str, Path]) -> dict[str, dict[str, Any]]:
    """What the training python saw loading each family (one subprocess for all of them)."""
    job = {
        "dirs": {family: str(path) for family, path in made.items()},
        "special": {family: EXPECTED[family]["special"] for family in FAMILIES},
        "text": TEXT,
    }
    proc = subprocess.run(
        [training_python(), "-c", PROBE, json.dumps(job)],
        capture_output=True,
        text=True,
        timeout=600,
        env={**os.environ, "TOKENIZERS_PARALLELISM": "false"},
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    return json.loads(proc.stdout.strip().splitlines()[-1])


@pytest.mark.parametrize("family", FAMILIES)
def test_chat_template_renders_the_familys_markers(
    facts: dict[str, dict[str, Any]], family: str
) -> None:
    seen, want = facts[family], EXPECTED[family]
    assert seen["class"] == "PreTrainedTokenizerFast"
    assert seen["chat"] == want["chat"]
    assert seen["prompt"].endswith(want["prompt_end"])
    if family == "qwen2":  # ChatML writes its default system message when none is given
        assert seen["no_system"].startswith(want["no_system_start"])


@pytest.mark.parametrize("family", FAMILIES)
def test_special_tokens_and_bos_behave_like_the_familys(
    facts: dict[str, dict[str, Any]], family: str
) -> None:
    seen, want = facts[family], EXPECTED[family]
    for role in ("bos", "eos", "unk", "pad"):
        assert seen[role] == want[role], role
    if want["bos"] is None:  # qwen2: no BOS, special tokens or not
        assert seen["with_special"] == seen["without_special"]
    else:  # llama3, mistral, gemma2: BOS added once, and the chat template's own BOS not doubled
        assert seen["with_special"] == [seen["bos_id"], *seen["without_special"]]
        assert seen["chat_ids"][0] == seen["bos_id"] != seen["chat_ids"][1]
    if family == "llama3":
        assert seen["pad"] is None and seen["pad_id"] is None
        assert seen["unk"] is None and seen["unk_id"] is None
    for token, enc in seen["special"].items():  # never split, never merged with a neighbour
        assert enc["alone"] == [enc["id"]], token
        assert enc["id"] in enc["inside"] and len(enc["inside"]) >= 3, token
    assert seen["len"] <= 512


@pytest.mark.parametrize("family", FAMILIES)
def test_ordinary_words_are_several_tokens_and_nothing_is_unknown(
    facts: dict[str, dict[str, Any]], family: str
) -> None:
    seen = facts[family]
    assert len(seen["words"]["understanding"]) > 1  # a small vocabulary, as a tiny model has
    assert len(seen["without_special"]) > len(TEXT.split())
    assert seen["unk_id"] is None or seen["unk_id"] not in seen["without_special"]  # bytes
    assert seen["decoded"].strip() == TEXT


@pytest.mark.parametrize("family", FAMILIES)
def test_model_loads_and_trains_a_step(facts: dict[str, dict[str, Any]], family: str) -> None:
    seen = facts[family]
    for impl, run in seen["runs"].items():
        assert run["class"] == EXPECTED[family]["model"], impl
        assert math.isfinite(run["loss"]) and 0 < run["loss"] < 20, impl
        assert run["grads_finite"], impl
        assert run["vocab_rows"] == 512 >= seen["len"], impl
    config = seen["config"]
    assert config["num_key_value_heads"] == 2  # grouped-query attention: 4 heads, 2 kv heads
    assert config["eos_token_id"] == seen["eos_id"]
    if family in ("qwen2", "gemma2"):
        # transformers leaves out a value equal to PretrainedConfig's default (True)
        assert config.get("tie_word_embeddings", True) is True and seen["runs"]["eager"]["tied"]
    if family == "qwen2":
        assert config["use_sliding_window"] is False and config["sliding_window"]
    if family in ("mistral", "gemma2"):
        assert config["sliding_window"] == 256
    if family == "gemma2":
        assert config["final_logit_softcapping"] and config["attn_logit_softcapping"]


def test_marker_lists_what_was_written_and_remaking_keeps_it(made: dict[str, Path]) -> None:
    for family, path in made.items():
        marker = json.loads((path / MARKER).read_text(encoding="utf-8"))
        assert marker["spec"]["family"] == family
        assert set(marker["files"]) == set(p.name for p in path.iterdir())
        assert set(marker["files"]) <= TINY_FILES  # an old marker's fallback covers them too
        assert "chat_template.jinja" in marker["files"] or "chat_template" in (
            path / "tokenizer_config.json"
        ).read_text(encoding="utf-8")
        assert validate_model_dir(path).ok
    qwen = made["qwen2"]
    before = (qwen / "model.safetensors").stat().st_mtime_ns
    assert not make_tiny(qwen, TinyModelSpec(family="qwen2")).created  # idempotent
    assert (qwen / "model.safetensors").stat().st_mtime_ns == before
    # another family is another spec: the folder is not current for it
    assert not tiny_is_current(qwen, TinyModelSpec(family="gemma2"))


def test_a_llama2_tiny_made_before_families_is_still_current(
    tiny_model: Path, tmp_path: Path
) -> None:
    """Its marker's spec has no family: it is the llama2 of today's default, kept, not remade."""
    copy = tmp_path / "tiny-llama"
    shutil.copytree(tiny_model, copy)
    marker = json.loads((copy / MARKER).read_text(encoding="utf-8"))
    marker["spec"].pop("family", None)
    (copy / MARKER).write_text(json.dumps(marker), encoding="utf-8")
    spec = TinyModelSpec(**marker["spec"])
    assert spec.family == "llama2"
    assert tiny_is_current(copy, spec)
    assert not tiny_is_current(copy, TinyModelSpec(**marker["spec"], family="llama3"))


def test_a_family_needs_room_for_its_bytes_and_special_tokens() -> None:
    TinyModelSpec(vocab_size=64)  # llama2 as before
    TinyModelSpec(family="qwen2", vocab_size=384)
    with pytest.raises(ValueError, match="vocab_size >= 384"):
        TinyModelSpec(family="llama3", vocab_size=256)
