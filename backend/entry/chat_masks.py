"""Conversations rendered with the run's chat template, the loss on the assistant turns only.

A sibling of ``train_entry.py`` (no torch at import: ``trainwiz data check`` runs it with the
training python too). FastChat's ``train.py`` masks with Llama-1/2 sentencepiece arithmetic
under the vicuna template; any other tokenizer lands on other lengths and every sample becomes
"tokenization mismatch". Here the masks come from the template itself, for any template:

1. the ShareGPT record (``from: system|human|gpt``) becomes chat messages;
2. the whole conversation is rendered and tokenized once;
3. for each assistant turn, the conversation *before* it (with the generation prompt) and
   *through* it are rendered and tokenized; the tokens between the two are that turn's reply
   (its end-of-turn token included, the role header excluded), trailing whitespace-only
   tokens dropped;
4. both prefixes must be exact prefixes of the whole conversation's tokens. When they are not
   (BPE merged across a turn boundary, or the template renders earlier turns differently once
   later ones exist) the sample cannot be masked exactly: it is named, counted and skipped.

BOS: a template that writes ``bos_token`` itself is tokenized without special tokens; one that
does not gets the BOS the tokenizer would add, once. Padding: the attention mask comes from the
lengths, never from the pad id (a pad that is also the end-of-text token stays safe).
"""

from __future__ import annotations

import json
import os
import re
from dataclasses import dataclass, field
from typing import Any

IGNORE_INDEX = -100  # FastChat's IGNORE_TOKEN_ID (LabelSmoother.ignore_index)
ROLES = {"human": "user", "user": "user", "gpt": "assistant", "assistant": "assistant",
         "chatgpt": "assistant", "bard": "assistant", "system": "system"}  # fmt: skip
MOST_UNMASKABLE = 0.5  # above this share of unmaskable conversations the run is refused
LISTED = 10  # unmaskable conversations named in the log line (the count stays exact)
PAD_NAMES = re.compile(r"pad|reserved|unused", re.IGNORECASE)


class Unmaskable(ValueError):
    """A conversation whose assistant text cannot be located exactly in its tokens."""


class MostlyUnmaskable(SystemExit):
    pass


def log(*args: Any) -> None:
    if int(os.environ.get("RANK", "0")) == 0:
        print("[trainwiz-entry]", *args, flush=True)


# ---------------------------------------------------------------- records -> messages


def to_messages(record: Any) -> list[dict[str, str]]:
    """ShareGPT turns as chat messages; a leading assistant turn is dropped (as FastChat does).

    Any malformed record is Unmaskable (named and skipped), never a crash of the run."""
    if not isinstance(record, dict):
        raise Unmaskable("the record is not an object")
    messages: list[dict[str, str]] = []
    system = record.get("system")
    if isinstance(system, str) and system.strip():
        messages.append({"role": "system", "content": system})
    turns = record.get("conversations")
    if not isinstance(turns, list):
        raise Unmaskable("'conversations' is not a list")
    for turn in turns:
        if not isinstance(turn, dict):
            raise Unmaskable("a turn is not an object")
        role = ROLES.get(str(turn.get("from", "")).lower())
        if role is None:
            raise Unmaskable(f"unknown role {turn.get('from')!r}")
        value = turn.get("value")
        if not isinstance(value, str):
            raise Unmaskable(f"a {role} turn has no text")
        if role == "assistant" and not any(m["role"] == "user" for m in messages):
            continue
        messages.append({"role": role, "content": value})
    return messages


def fold_system(messages: list[dict[str, str]]) -> list[dict[str, str]]:
    """The system text prepended to the first user turn (for templates without a system role)."""
    system = [m["content"] for m in messages if m["role"] == "system"]
    rest = [dict(m) for m in messages if m["role"] != "system"]
    if system and rest and rest[0]["role"] == "user":
        rest[0]["content"] = "\n\n".join([*system, rest[0]["content"]])
    return rest


# ---------------------------------------------------------------- renderers


class ModelTemplate:
    """The tokenizer's own Jinja template (``apply_chat_template``)."""

    name = "model"

    def __init__(self, tokenizer: Any) -> None:
        self.tokenizer = tokenizer

    def render(self, messages: list[dict[str, str]], generation: bool) -> str:
        return str(
            self.tokenizer.apply_chat_template(
                messages, tokenize=False, add_generation_prompt=generation
            )
        )


class FastChatTemplate:
    """A FastChat conversation template by name (``fastchat.conversation``)."""

    def __init__(self, name: str) -> None:
        from fastchat.conversation import get_conv_template

        self.name = name
        self._get = get_conv_template
        get_conv_template(name)  # an unknown name fails here, before any data is read

    def render(self, messages: list[dict[str, str]], generation: bool) -> str:
        conv = self._get(self.name)
        for message in messages:
            if message["role"] == "system":
                conv.set_system_message(message["content"])
            else:
                conv.append_message(conv.roles[message["role"] == "assistant"], message["content"])
        if generation:
            conv.append_message(conv.roles[1], None)
        return str(conv.get_prompt())


def renderer_for(template: str, tokenizer: Any) -> ModelTemplate | FastChatTemplate:
    return ModelTemplate(tokenizer) if template == "model" else FastChatTemplate(template)


# ---------------------------------------------------------------- pad and BOS


def ensure_pad_token(tokenizer: Any) -> str:
    """Give a tokenizer without a pad token one, never growing the vocabulary; say which.

    A reserved/unused/pad special token already in the vocabulary when there is one, else the
    end-of-text token (safe: the attention mask and the labels come from the lengths).
    """
    if tokenizer.pad_token is not None:
        return f"{tokenizer.pad_token} (the tokenizer's own)"
    named = {tokenizer.bos_token, tokenizer.eos_token, tokenizer.unk_token}
    template = str(getattr(tokenizer, "chat_template", None) or "")
    added = getattr(tokenizer, "added_tokens_decoder", {}) or {}
    reserved = sorted((int(i), str(t)) for i, t in added.items() if PAD_NAMES.search(str(t)))
    for _, token in reserved:
        if token not in named and token not in template:  # never a token the template writes
            tokenizer.pad_token = token
            return f"{token} (a reserved token of the vocabulary)"
    if tokenizer.eos_token is not None:
        tokenizer.pad_token = tokenizer.eos_token
        return f"{tokenizer.eos_token} (the end-of-text token; masked by length)"
    raise SystemExit("the tokenizer has no pad, reserved or end-of-text token to pad with")


class Encoder:
    """Text -> ids with the BOS the tokenizer would add, exactly once."""

    def __init__(self, tokenizer: Any, sample_text: str) -> None:
        self.tokenizer = tokenizer
        bos = tokenizer.bos_token
        adds_bos = False
        if bos is not None and tokenizer.bos_token_id is not None:
            probe = tokenizer("a", add_special_tokens=True).input_ids
            adds_bos = bool(probe) and probe[0] == tokenizer.bos_token_id
        self.prefix = (
            [tokenizer.bos_token_id] if adds_bos and not sample_text.startswith(bos) else []
        )

    def __call__(self, text: str) -> list[int]:
        return self.prefix + list(self.tokenizer(text, add_special_tokens=False).input_ids)


# ---------------------------------------------------------------- masking


def _trim_whitespace(tokenizer: Any, ids: list[int], start: int, end: int) -> int:
    """The span's end with trailing whitespace-only tokens (a newline after end-of-turn) dropped."""
    while end > start and not tokenizer.decode([ids[end - 1]]).strip():
        end -= 1
    return end


def mask_conversation(
    messages: list[dict[str, str]], renderer: Any, tokenizer: Any
) -> tuple[list[int], list[int]]:
    """(input_ids, labels) with labels only on the assistant replies; raises Unmaskable."""
    if not any(m["role"] == "assistant" for m in messages):
        raise Unmaskable("no assistant turn after a user turn")
    try:
        text = renderer.render(messages, False)
    except Exception as exc:  # a template's own refusal (e.g. no system role)
        if not any(m["role"] == "system" for m in messages):
            raise Unmaskable(f"the template refused it: {exc}") from None
        messages = fold_system(messages)
        try:
            text = renderer.render(messages, False)
        except Exception as again:
            raise Unmaskable(f"the template refused it: {again}") from None
    encode = Encoder(tokenizer, text)
    ids = encode(text)
    labels = [IGNORE_INDEX] * len(ids)
    for i, message in enumerate(messages):
        if message["role"] != "assistant":
            continue
        try:
            before = encode(renderer.render(messages[:i], True))
            through = encode(renderer.render(messages[: i + 1], False))
        except Exception as exc:  # a template refusing a partial conversation
            raise Unmaskable(
                f"turn {i}: the template refused the conversation up to it: {exc}"
            ) from None
        if ids[: len(before)] != before or ids[: len(through)] != through:
            raise Unmaskable(
                f"turn {i}: the tokens before/through this reply are not a prefix of the whole "
                "conversation's (the template renders earlier turns differently, or tokens "
                "merge across the turn boundary)"
            )
        end = _trim_whitespace(tokenizer, ids, len(before), len(through))
        if end <= len(before):
            raise Unmaskable(f"turn {i}: the reply renders as no tokens")
        labels[len(before) : end] = ids[len(before) : end]
    return ids, labels


@dataclass
class Masked:
    examples: list[tuple[list[int], list[int]]] = field(default_factory=list)
    kept: list[int] = field(default_factory=list)  # record indexes trained on
    unmaskable: list[tuple[int, str | None, str]] = field(default_factory=list)
    truncated_away: list[int] = field(default_factory=list)  # no reply left within max length
    total: int = 0

    def summary(self) -> str:
        named = ", ".join(
            f"#{i}" + (f" (id {ident})" if ident else "")
            for i, ident, _ in self.unmaskable[:LISTED]
        )
        more = (
            "" if len(self.unmaskable) <= LISTED else f" and {len(self.unmaskable) - LISTED} more"
        )
        first = f"; first: {self.unmaskable[0][2]}" if self.unmaskable else ""
        return (
            f"{len(self.examples)} of {self.total} conversations trained; "
            f"{len(self.unmaskable)} unmaskable (skipped){': ' + named + more if named else ''}"
            f"{first}; {len(self.truncated_away)} with no reply within model_max_length (skipped)"
        )


def mask_records(
    records: list[dict[str, Any]], renderer: Any, tokenizer: Any, max_length: int
) -> Masked:
    """Every record masked and truncated at ``max_length``; the unmaskable named and skipped."""
    out = Masked(total=len(records))
    for index, record in enumerate(records):
        ident = record.get("id") if isinstance(record, dict) else None
        try:
            ids, labels = mask_conversation(to_messages(record), renderer, tokenizer)
        except Unmaskable as exc:
            out.unmaskable.append((index, None if ident is None else str(ident), str(exc)))
            continue
        ids, labels = ids[:max_length], labels[:max_length]
        if all(label == IGNORE_INDEX for label in labels):
            out.truncated_away.append(index)
            continue
        out.examples.append((ids, labels))
        out.kept.append(index)
    return out


def refuse_if_mostly_unmaskable(masked: Masked, template: str) -> None:
    if masked.total and len(masked.unmaskable) > MOST_UNMASKABLE * masked.total:
        raise MostlyUnmaskable(
            f"chat template {template}: {len(masked.unmaskable)} of {masked.total} conversations "
            f"cannot be masked exactly ({masked.unmaskable[0][2]}); nothing was trained. Check "
            "training.chat_template (trainwiz data check --model DIR shows the masks)"
        )


# ---------------------------------------------------------------- the data module (torch)


class ChatDataset:
    """Masked conversations, unpadded; the collator pads them as FastChat does."""

    def __init__(self, examples: list[tuple[list[int], list[int]]]) -> None:
        self.examples = examples
        self.lengths = [len(ids) for ids, _ in examples]

    def __len__(self) -> int:
        return len(self.examples)

    def __getitem__(self, i: int) -> dict[str, Any]:
        import torch

        ids, labels = self.examples[i]
        return {"input_ids": torch.tensor(ids), "labels": torch.tensor(labels)}


def make_collator(pad_id: int, max_length: int) -> Any:
    """Rows padded to ``model_max_length``, as FastChat's data code pads them: the planner's
    padding and real-token arithmetic (planner/realdata.py) is the same for every template.
    Packing (``--packing``) is the way to train without the padding."""

    def collate(features: list[dict[str, Any]]) -> dict[str, Any]:
        import torch

        longest = max_length
        ids = torch.full((len(features), longest), pad_id, dtype=torch.long)
        labels = torch.full((len(features), longest), IGNORE_INDEX, dtype=torch.long)
        mask = torch.zeros((len(features), longest), dtype=torch.long)
        for row, feature in enumerate(features):
            n = int(feature["input_ids"].numel())
            ids[row, :n] = feature["input_ids"]
            labels[row, :n] = feature["labels"]
            mask[row, :n] = 1  # from the length, never from the pad id
        return {"input_ids": ids, "labels": labels, "attention_mask": mask}

    return collate


def load_records(path: str) -> list[dict[str, Any]]:
    with open(path, encoding="utf-8") as handle:
        data = json.load(handle)
    if not isinstance(data, list):
        raise SystemExit(f"{path}: expected a JSON list of conversations")
    return data


def masked_file(path: str, renderer: Any, tokenizer: Any, max_length: int) -> Masked:
    masked = mask_records(load_records(path), renderer, tokenizer, max_length)
    log(f"chat template {renderer.name}: {path}: {masked.summary()}")
    refuse_if_mostly_unmaskable(masked, renderer.name)
    return masked


def make_data_module(
    tokenizer: Any, data_args: Any, training_args: Any, template: str
) -> dict[str, Any]:
    """What FastChat's make_supervised_data_module returns, masked by ``template``."""
    renderer = renderer_for(template, tokenizer)
    max_length = int(training_args.model_max_length)
    train = masked_file(data_args.data_path, renderer, tokenizer, max_length)
    evaluation = None
    if getattr(data_args, "eval_data_path", None):
        evaluation = ChatDataset(
            masked_file(data_args.eval_data_path, renderer, tokenizer, max_length).examples
        )
    return {
        "train_dataset": ChatDataset(train.examples),
        "eval_dataset": evaluation,
        "data_collator": make_collator(int(tokenizer.pad_token_id), max_length),
    }
