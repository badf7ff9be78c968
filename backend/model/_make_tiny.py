"""Create a tiny random-weight chat model (run by the training python).

The spec's ``family`` picks whose tokenizer, chat template and config it copies: llama2 (the
default: a sentencepiece LlamaTokenizer, no chat template), llama3, qwen2, mistral or gemma2 (a
``tokenizers`` tokenizer trained here on the sample conversations, saved as a
PreTrainedTokenizerFast that behaves like the family's: its special tokens, BOS or none, unk and
pad or none, its chat template written into the tokenizer).

Self-contained on purpose: the wizard never imports torch/transformers, so trainwiz runs this file
with the training environment's interpreter. Usage: python _make_tiny.py SPEC_JSON
where SPEC_JSON = {"dir", "data", "spec": TinyModelSpec fields}. Prints one JSON line at the end.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import sys
import tempfile
from collections.abc import Iterator
from typing import Any

MARKER = "trainwiz-tiny.json"  # written into every model this script makes
SYSTEM = (
    "A chat between a curious user and an artificial intelligence assistant. "
    "The assistant gives helpful, detailed, and polite answers to the user's questions."
)


def _texts(data_path: str) -> Iterator[str]:
    """Each conversation as FastChat's vicuna_v1.1 prompt, so the template's words get pieces."""
    with open(data_path, encoding="utf-8") as fh:
        records = json.load(fh)
    for record in records:
        parts = [SYSTEM]
        for turn in record.get("conversations", []):
            value = turn.get("value")
            if isinstance(value, str) and value.strip():
                role = "USER" if turn.get("from") == "human" else "ASSISTANT"
                parts.append(role + ": " + value.replace("\n", " "))
        yield " ".join(parts)


def _make_llama2(job: dict, work: str, out: str) -> tuple[Any, int]:
    """Today's tiny Llama, unchanged: a sentencepiece LlamaTokenizer and no chat template."""
    spec = job["spec"]
    import sentencepiece as spm
    import torch
    from transformers import LlamaConfig, LlamaForCausalLM, LlamaTokenizer

    corpus = os.path.join(work, "corpus.txt")
    with open(corpus, "w", encoding="utf-8") as fh:
        for text in _texts(job["data"]):
            fh.write(text + "\n")
    prefix = os.path.join(work, "sp")
    spm.SentencePieceTrainer.train(
        input=corpus,
        model_prefix=prefix,
        vocab_size=spec["vocab_size"],
        model_type="bpe",
        character_coverage=1.0,
        hard_vocab_limit=False,
        byte_fallback=True,  # as Llama: no <unk>, which FastChat's pad=unk would miscount
        split_digits=True,
        normalization_rule_name="identity",
        remove_extra_whitespaces=False,
        allow_whitespace_only_pieces=True,
        unk_id=0,
        bos_id=1,
        eos_id=2,
        pad_id=-1,
        num_threads=1,
        minloglevel=2,
    )
    tokenizer = LlamaTokenizer(vocab_file=prefix + ".model", legacy=True)
    tokenizer.model_max_length = spec["max_position_embeddings"]
    tokenizer.save_pretrained(out)
    torch.manual_seed(spec["seed"])
    config = LlamaConfig(
        vocab_size=spec["vocab_size"],
        hidden_size=spec["hidden_size"],
        intermediate_size=spec["intermediate_size"],
        num_hidden_layers=spec["num_hidden_layers"],
        num_attention_heads=spec["num_attention_heads"],
        num_key_value_heads=spec.get("num_key_value_heads") or spec["num_attention_heads"],
        max_position_embeddings=spec["max_position_embeddings"],
        bos_token_id=1,
        eos_token_id=2,
        tie_word_embeddings=False,
        torch_dtype="float32",
    )
    model = LlamaForCausalLM(config)
    model.save_pretrained(out, safe_serialization=True)
    return model, tokenizer.sp_model.get_piece_size()


# ---- the other families: a `tokenizers` tokenizer trained here, saved as PreTrainedTokenizerFast

# Llama 3's split pattern (digits in runs of up to three); Qwen2 splits every digit.
LLAMA3_SPLIT = (
    r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*"
    r"|\s*[\r\n]+|\s+(?!\S)|\s+"
)
QWEN2_SPLIT = (
    r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*"
    r"|\s*[\r\n]+|\s+(?!\S)|\s+"
)

# Llama 3.1's template without its tool and date parts: a header per message, <|eot_id|> after.
LLAMA3_TEMPLATE = (
    "{{- bos_token }}"
    "{%- for message in messages %}"
    "{{- '<|start_header_id|>' + message['role'] + '<|end_header_id|>\\n\\n' "
    "+ message['content'] | trim + '<|eot_id|>' }}"
    "{%- endfor %}"
    "{%- if add_generation_prompt %}"
    "{{- '<|start_header_id|>assistant<|end_header_id|>\\n\\n' }}"
    "{%- endif %}"
)

# Qwen2's ChatML, with its default system message when the conversation has none.
QWEN2_TEMPLATE = (
    "{%- if messages[0]['role'] == 'system' %}"
    "{{- '<|im_start|>system\\n' + messages[0]['content'] + '<|im_end|>\\n' }}"
    "{%- else %}"
    "{{- '<|im_start|>system\\nYou are a helpful assistant.<|im_end|>\\n' }}"
    "{%- endif %}"
    "{%- for message in messages %}"
    "{%- if not (loop.first and message['role'] == 'system') %}"
    "{{- '<|im_start|>' + message['role'] + '\\n' + message['content'] + '<|im_end|>\\n' }}"
    "{%- endif %}"
    "{%- endfor %}"
    "{%- if add_generation_prompt %}"
    "{{- '<|im_start|>assistant\\n' }}"
    "{%- endif %}"
)

# Mistral-7B-Instruct v0.3's [INST] template; the system message goes before the first user turn.
MISTRAL_TEMPLATE = (
    "{%- if messages[0]['role'] == 'system' %}"
    "{%- set system_message = messages[0]['content'] %}"
    "{%- set loop_messages = messages[1:] %}"
    "{%- else %}"
    "{%- set loop_messages = messages %}"
    "{%- endif %}"
    "{{- bos_token }}"
    "{%- for message in loop_messages %}"
    "{%- if (message['role'] == 'user') != (loop.index0 % 2 == 0) %}"
    "{{- raise_exception('After the optional system message, conversation roles must alternate "
    "user/assistant/user/assistant/...') }}"
    "{%- endif %}"
    "{%- if message['role'] == 'user' %}"
    "{%- if loop.first and system_message is defined %}"
    "{{- '[INST] ' + system_message + '\\n\\n' + message['content'] + '[/INST]' }}"
    "{%- else %}"
    "{{- '[INST] ' + message['content'] + '[/INST]' }}"
    "{%- endif %}"
    "{%- elif message['role'] == 'assistant' %}"
    "{{- ' ' + message['content'] | trim + eos_token }}"
    "{%- else %}"
    "{{- raise_exception('Only user and assistant roles are supported, with the exception of an "
    "initial optional system message!') }}"
    "{%- endif %}"
    "{%- endfor %}"
)

# Gemma's turns (assistant is 'model'); the system message is folded into the first user turn.
GEMMA2_TEMPLATE = (
    "{{- bos_token }}"
    "{%- if messages[0]['role'] == 'system' %}"
    "{%- set first_user_prefix = messages[0]['content'] + '\\n\\n' %}"
    "{%- set loop_messages = messages[1:] %}"
    "{%- else %}"
    "{%- set first_user_prefix = '' %}"
    "{%- set loop_messages = messages %}"
    "{%- endif %}"
    "{%- for message in loop_messages %}"
    "{%- if (message['role'] == 'user') != (loop.index0 % 2 == 0) %}"
    "{{- raise_exception('Conversation roles must alternate user/assistant/user/assistant/...') }}"
    "{%- endif %}"
    "{%- if message['role'] == 'assistant' %}{%- set role = 'model' %}"
    "{%- else %}{%- set role = message['role'] %}{%- endif %}"
    "{{- '<start_of_turn>' + role + '\\n' + (first_user_prefix if loop.first else '') "
    "+ message['content'] | trim + '<end_of_turn>\\n' }}"
    "{%- endfor %}"
    "{%- if add_generation_prompt %}"
    "{{- '<start_of_turn>model\\n' }}"
    "{%- endif %}"
)

LLAMA3_SPECIAL = [
    "<|begin_of_text|>",
    "<|end_of_text|>",
    *(f"<|reserved_special_token_{n}|>" for n in range(4)),
    "<|start_header_id|>",
    "<|end_header_id|>",
    "<|reserved_special_token_4|>",
    "<|eot_id|>",
    *(f"<|reserved_special_token_{n}|>" for n in range(5, 8)),
]

# Per family: how its tokenizer is made and which tokens play which part. "special" tokens come
# after the trained vocabulary (byte-level, as Llama 3 and Qwen2 number them) or before it
# (sentencepiece-like, as Mistral and Gemma do, followed there by the 256 byte-fallback pieces).
FAMILIES: dict[str, dict] = {
    "llama3": {
        "kind": "byte_level",
        "split": LLAMA3_SPLIT,
        "nfc": False,
        "special": LLAMA3_SPECIAL,
        "bos": "<|begin_of_text|>",
        "eos": "<|end_of_text|>",
        "unk": None,
        "pad": None,
        "extra": [],
        "stop": ["<|end_of_text|>", "<|eot_id|>"],
        "template": LLAMA3_TEMPLATE,
    },
    "qwen2": {
        "kind": "byte_level",
        "split": QWEN2_SPLIT,
        "nfc": True,
        "special": ["<|endoftext|>", "<|im_start|>", "<|im_end|>"],
        "bos": None,
        "eos": "<|im_end|>",
        "unk": None,
        "pad": "<|endoftext|>",
        "config_bos": "<|endoftext|>",  # config.json names one, as Qwen2.5's, the tokenizer none
        "extra": ["<|im_start|>", "<|im_end|>"],
        "stop": ["<|im_end|>", "<|endoftext|>"],
        "template": QWEN2_TEMPLATE,
    },
    "mistral": {
        "kind": "sentencepiece",
        "prepend": "first",
        "special": ["<unk>", "<s>", "</s>", "[INST]", "[/INST]"],
        "bos": "<s>",
        "eos": "</s>",
        "unk": "<unk>",
        "pad": None,
        "extra": [],
        "stop": ["</s>"],
        "template": MISTRAL_TEMPLATE,
    },
    "gemma2": {
        "kind": "sentencepiece",
        "prepend": "never",
        "special": [
            "<pad>",
            "<eos>",
            "<bos>",
            "<unk>",
            "<mask>",
            "<start_of_turn>",
            "<end_of_turn>",
        ],
        "bos": "<bos>",
        "eos": "<eos>",
        "unk": "<unk>",
        "pad": "<pad>",
        "extra": ["<start_of_turn>", "<end_of_turn>"],
        "stop": ["<eos>", "<end_of_turn>"],
        "template": GEMMA2_TEMPLATE,
    },
}


def _family_texts(data_path: str, f: dict) -> Iterator[str]:
    """The vicuna prompts FastChat trains on, then each conversation as the family's chat
    template writes it, cut at its special tokens (what the tokenizer's BPE sees between them),
    so the template's words (role names, a default system message) get pieces too."""
    yield from _texts(data_path)
    with open(data_path, encoding="utf-8") as fh:
        records = json.load(fh)
    render = _renderer(f)
    cut = re.compile("|".join(re.escape(token) for token in f["special"]))
    for n, record in enumerate(records):
        messages = [
            {"role": "user" if turn.get("from") == "human" else "assistant", "content": value}
            for turn in record.get("conversations", [])
            if isinstance(value := turn.get("value"), str) and value.strip()
        ]
        if n % 2 == 0:  # half with a system message, half with the template's own (or none)
            messages.insert(0, {"role": "system", "content": SYSTEM})
        try:
            text = render(messages)
        except Exception:  # a record the template refuses (roles not alternating)
            continue
        yield from (part for part in cut.split(text) if part)


def _renderer(f: dict) -> Any:
    """The family's template as transformers renders it (jinja2 is what it uses), or without
    jinja2 the turns as role lines."""
    try:
        from jinja2.sandbox import ImmutableSandboxedEnvironment  # deferred: training python's
    except ImportError:
        return lambda messages: "\n".join(m["role"] + "\n\n" + m["content"] for m in messages)

    def raise_exception(message: str) -> None:
        raise ValueError(message)

    env = ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True)
    env.globals["raise_exception"] = raise_exception
    template = env.from_string(f["template"])
    tokens = {"bos_token": f["bos"] or "", "eos_token": f["eos"]}
    return lambda messages: template.render(
        messages=messages, add_generation_prompt=False, **tokens
    )


def _merges(trained: dict) -> list[tuple[str, str]]:
    """The merges of a trained BPE model's JSON (["a", "b"] pairs, or "a b" in older files)."""
    return [tuple(m) if isinstance(m, list) else tuple(m.split(" ", 1)) for m in trained["merges"]]


def _byte_level_tokenizer(f: dict, texts: list[str], vocab_size: int) -> Any:
    """Byte-level BPE as Llama 3 and Qwen2 ship it: the family's split regex, every byte in the
    alphabet (so no unk), special tokens numbered after the trained vocabulary."""
    from tokenizers import (  # deferred: the training python's tokenizers
        AddedToken,
        Regex,
        Tokenizer,
        decoders,
        models,
        normalizers,
        pre_tokenizers,
        processors,
        trainers,
    )

    def components(tok: Tokenizer) -> None:
        if f["nfc"]:
            tok.normalizer = normalizers.NFC()
        tok.pre_tokenizer = pre_tokenizers.Sequence(
            [
                pre_tokenizers.Split(Regex(f["split"]), behavior="isolated", invert=False),
                pre_tokenizers.ByteLevel(
                    add_prefix_space=False, trim_offsets=True, use_regex=False
                ),
            ]
        )
        tok.decoder = decoders.ByteLevel(add_prefix_space=True, trim_offsets=True, use_regex=True)

    trainer_tok = Tokenizer(models.BPE())
    components(trainer_tok)
    trainer = trainers.BpeTrainer(
        vocab_size=vocab_size - len(f["special"]),
        min_frequency=2,
        show_progress=False,
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        special_tokens=[],
    )
    trainer_tok.train_from_iterator(texts, trainer)
    trained = json.loads(trainer_tok.to_str())["model"]
    tok = Tokenizer(
        models.BPE(vocab=trained["vocab"], merges=_merges(trained), ignore_merges=False)
    )
    components(tok)
    tok.add_special_tokens([AddedToken(t, special=True, normalized=False) for t in f["special"]])
    byte_level = processors.ByteLevel(add_prefix_space=True, trim_offsets=False, use_regex=True)
    if f["bos"] is None:
        tok.post_processor = byte_level
    else:
        bos = (f["bos"], tok.token_to_id(f["bos"]))
        tok.post_processor = processors.Sequence(
            [
                byte_level,
                processors.TemplateProcessing(
                    single=f"{bos[0]}:0 $A:0",
                    pair=f"{bos[0]}:0 $A:0 {bos[0]}:1 $B:1",
                    special_tokens=[bos],
                ),
            ]
        )
    return tok


def _sentencepiece_tokenizer(f: dict, texts: list[str], vocab_size: int) -> Any:
    """What Mistral's and Gemma's sentencepiece models are, as a `tokenizers` BPE: words carry a
    leading ▁ (Mistral also before the first word, Gemma not), digits are one piece each,
    newlines are pieces of their own, and a character outside the vocabulary falls back to its
    <0xNN> byte pieces. Special tokens come first, then the 256 byte pieces, then the trained
    vocabulary."""
    from tokenizers import (  # deferred: the training python's tokenizers
        AddedToken,
        Regex,
        Tokenizer,
        decoders,
        models,
        pre_tokenizers,
        processors,
        trainers,
    )

    fixed = [*f["special"], *(f"<0x{b:02X}>" for b in range(256))]

    def components(tok: Tokenizer) -> None:
        tok.pre_tokenizer = pre_tokenizers.Sequence(
            [
                pre_tokenizers.Metaspace(replacement="▁", prepend_scheme=f["prepend"], split=True),
                pre_tokenizers.Split(Regex(r"\n+"), behavior="isolated"),  # "user", "\n"
                pre_tokenizers.Digits(individual_digits=True),
            ]
        )
        steps = [decoders.Replace("▁", " "), decoders.ByteFallback(), decoders.Fuse()]
        if f["prepend"] == "first":
            steps.append(decoders.Strip(" ", 1, 0))  # the ▁ put before the first word
        tok.decoder = decoders.Sequence(steps)

    budget = vocab_size - len(fixed)
    trainer_tok = Tokenizer(models.BPE(unk_token=f["unk"], byte_fallback=True, fuse_unk=True))
    components(trainer_tok)
    trainer = trainers.BpeTrainer(
        vocab_size=budget,
        min_frequency=2,
        show_progress=False,
        limit_alphabet=max(1, budget // 2),  # a rarer character falls back to its bytes
        special_tokens=[],
    )
    trainer_tok.train_from_iterator(texts, trainer)
    trained = json.loads(trainer_tok.to_str())["model"]
    vocab = {token: n for n, token in enumerate(fixed)}
    for token, _ in sorted(trained["vocab"].items(), key=lambda item: item[1]):
        vocab.setdefault(token, len(vocab))
    model = models.BPE(
        vocab=vocab, merges=_merges(trained), unk_token=f["unk"], byte_fallback=True, fuse_unk=True
    )
    tok = Tokenizer(model)
    components(tok)
    tok.add_special_tokens([AddedToken(t, special=True, normalized=False) for t in f["special"]])
    bos = (f["bos"], vocab[f["bos"]])
    tok.post_processor = processors.TemplateProcessing(
        single=f"{bos[0]}:0 $A:0", pair=f"{bos[0]}:0 $A:0 {bos[0]}:1 $B:1", special_tokens=[bos]
    )
    return tok


def _kv_heads(spec: dict) -> int:
    """The spec's key/value heads, else grouped-query attention: the largest divisor of the heads
    that is at most half of them (4 heads -> 2), as today's chat models group them."""
    heads = spec["num_attention_heads"]
    if spec.get("num_key_value_heads"):
        return spec["num_key_value_heads"]
    return max(n for n in range(1, max(1, heads // 2) + 1) if heads % n == 0)


def _family_config(family: str, spec: dict, ids: dict) -> Any:
    """The family's config class with the spec's sizes and the tokenizer's special ids."""
    import transformers

    common = {
        "vocab_size": spec["vocab_size"],
        "hidden_size": spec["hidden_size"],
        "intermediate_size": spec["intermediate_size"],
        "num_hidden_layers": spec["num_hidden_layers"],
        "num_attention_heads": spec["num_attention_heads"],
        "num_key_value_heads": _kv_heads(spec),
        "max_position_embeddings": spec["max_position_embeddings"],
        "bos_token_id": ids["bos"],
        "eos_token_id": ids["eos"],
        "pad_token_id": ids["pad"],
        "torch_dtype": "float32",
    }
    window = max(1, spec["max_position_embeddings"] // 2)
    if family == "llama3":
        return transformers.LlamaConfig(**common, rope_theta=500000.0, tie_word_embeddings=False)
    if family == "qwen2":
        config = transformers.Qwen2Config(
            **common, rope_theta=1000000.0, tie_word_embeddings=True, use_sliding_window=False
        )
        # As Qwen2.5's config.json: a window is named but not used (Qwen2Config drops it when
        # use_sliding_window is off, so it is set after).
        config.sliding_window = spec["max_position_embeddings"]
        return config
    if family == "mistral":
        head_dim = spec["hidden_size"] // spec["num_attention_heads"]
        return transformers.MistralConfig(
            **common,
            head_dim=head_dim,
            rope_theta=1000000.0,
            sliding_window=window,
            tie_word_embeddings=False,
        )
    head_dim = spec["hidden_size"] // spec["num_attention_heads"]
    return transformers.Gemma2Config(
        **common,
        head_dim=head_dim,
        query_pre_attn_scalar=head_dim,
        sliding_window=window,
        final_logit_softcapping=30.0,
        attn_logit_softcapping=50.0,
        hidden_activation="gelu_pytorch_tanh",
        tie_word_embeddings=True,
    )


def save_family_tokenizer(
    tok: Any, f: dict[str, Any], max_length: int, out: str
) -> tuple[dict[str, Any], list[int]]:
    """Save ``tok`` as the family's PreTrainedTokenizerFast (its special tokens and chat
    template) into ``out``; return the bos/eos/pad ids its model config takes and the ids that
    end generation (also used by benchmarks/family_make_model.py for GPU-sized models)."""
    from transformers import PreTrainedTokenizerFast  # deferred: training python's

    tokenizer = PreTrainedTokenizerFast(
        tokenizer_object=tok,
        bos_token=f["bos"],
        eos_token=f["eos"],
        unk_token=f["unk"],
        pad_token=f["pad"],
        additional_special_tokens=f["extra"] or None,
        model_max_length=max_length,
        clean_up_tokenization_spaces=False,
    )
    tokenizer.chat_template = f["template"]
    tokenizer.save_pretrained(out)

    def ids(token: str | None) -> int | None:
        return None if token is None else tok.token_to_id(token)

    special = {
        "bos": ids(f.get("config_bos", f["bos"])),
        "eos": ids(f["eos"]),
        "pad": ids(f["pad"]),
    }
    return special, [i for i in (ids(t) for t in f["stop"]) if i is not None]


def _make_family(job: dict, family: str, out: str) -> tuple[Any, int]:
    """A tiny model of ``family``: its tokenizer trained on the sample conversations, its chat
    template in the tokenizer, random weights of its architecture."""
    spec = job["spec"]
    import torch
    from transformers import AutoModelForCausalLM

    f = FAMILIES[family]
    texts = list(_family_texts(job["data"], f))
    if f["kind"] == "byte_level":
        tok = _byte_level_tokenizer(f, texts, spec["vocab_size"])
    else:
        tok = _sentencepiece_tokenizer(f, texts, spec["vocab_size"])
    pieces = tok.get_vocab_size(with_added_tokens=True)
    if pieces > spec["vocab_size"]:
        raise SystemExit(
            f"the {family} tokenizer has {pieces} tokens, more than vocab_size "
            f"{spec['vocab_size']}: raise vocab_size"
        )
    special, stops = save_family_tokenizer(tok, f, spec["max_position_embeddings"], out)
    torch.manual_seed(spec["seed"])
    config = _family_config(family, spec, special)
    model = AutoModelForCausalLM.from_config(config)
    model.generation_config.eos_token_id = stops if len(stops) > 1 else stops[0]
    model.save_pretrained(out, safe_serialization=True)
    return model, pieces


def main() -> None:
    job = json.loads(sys.argv[1])
    spec, target = job["spec"], job["dir"]
    family = spec.get("family", "llama2")
    if family != "llama2" and family not in FAMILIES:
        raise SystemExit(
            f"unknown tiny model family {family!r}: one of llama2, {', '.join(FAMILIES)}"
        )

    parent = os.path.dirname(os.path.abspath(target))
    os.makedirs(parent, exist_ok=True)
    work = tempfile.mkdtemp(prefix=".tiny-", dir=parent)
    try:
        out = os.path.join(work, "model")
        if family == "llama2":
            model, pieces = _make_llama2(job, work, out)
        else:
            model, pieces = _make_family(job, family, out)
        with open(os.path.join(out, MARKER), "w", encoding="utf-8") as fh:
            files = sorted({*os.listdir(out), MARKER})
            json.dump(
                {
                    "spec": spec,
                    "tokenizer_pieces": pieces,
                    "files": files,
                },
                fh,
            )
        if os.path.islink(target):
            raise SystemExit(f"{target}: is a symlink: refusing to replace it")
        if os.path.isdir(target):
            # Only what trainwiz made (its marker inside) or an empty dir is ever replaced.
            if os.listdir(target) and not os.path.isfile(os.path.join(target, MARKER)):
                raise SystemExit(f"{target}: not empty and not made by trainwiz: refusing")
            allowed = job.get("replaceable")
            extra = [] if allowed is None else sorted(set(os.listdir(target)) - set(allowed))
            if os.listdir(target) and extra:
                raise SystemExit(f"{target}: holds files trainwiz did not make ({extra}): refusing")
            shutil.rmtree(target)
        os.replace(out, target)
        n_params = sum(p.numel() for p in model.parameters())
        print(json.dumps({"ok": True, "dir": target, "n_params": n_params}))
    finally:
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
