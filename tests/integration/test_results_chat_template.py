"""Chat, export and serve answer in the format the run trained with (its metrics ``start`` line's
``chat_template``), on a tiny Qwen2-like model with a ChatML template of its own: the results
worker renders with ``apply_chat_template`` and keeps the conversation, the export keeps the
template, and ``trainwiz serve`` (FastChat's real stack) answers a chat whose prompt the run's
tokenizer rendered. A vicuna run (the tiny Llama, no template) exports as before."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
import urllib.request
from pathlib import Path

import pytest

from backend.results.chat import ChatSession
from backend.results.weights import WORKER
from tests.integration.test_resume_host import free_port
from tests.integration.test_serve import cmdlines, nothing_left
from tests.run_records import make_ended_run
from tests.trainwiz_cli import cli

pytestmark = [
    pytest.mark.training,
    pytest.mark.slow,
    pytest.mark.xdist_group("results-chat-template"),
]

SERVE_API = WORKER.with_name("serve_api.py")
CHATML = (
    "{% for message in messages %}"
    "{{ '<|im_start|>' + message['role'] + '\n' + message['content'] + '<|im_end|>' + '\n' }}"
    "{% endfor %}"
    "{% if add_generation_prompt %}{{ '<|im_start|>assistant\n' }}{% endif %}"
)
TEXTS = [
    "Hello, how are you today?",
    "I am fine, thank you.",
    "What is the capital of France?",
    "The capital of France is Paris.",
    "You are a terse assistant. user assistant system",
]


def chatml_tokenizer(bos: bool = False):  # type: ignore[no-untyped-def]
    """A byte-level BPE trained here with Qwen2's special tokens, as a PreTrainedTokenizerFast
    with a ChatML template; ``bos``: one that adds ``<s>`` itself and whose template writes it."""
    import transformers
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, processors, trainers

    specials = ["<|endoftext|>", "<|im_start|>", "<|im_end|>"] + (["<s>"] if bos else [])
    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=300,
        special_tokens=specials,
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    tok.train_from_iterator(TEXTS * 4, trainer=trainer)
    extra = {}
    if bos:
        bos_id = tok.token_to_id("<s>")
        tok.post_processor = processors.TemplateProcessing(
            single="<s> $A", pair="<s> $A <s> $B", special_tokens=[("<s>", bos_id)]
        )
        extra["bos_token"] = "<s>"
    tokenizer = transformers.PreTrainedTokenizerFast(
        tokenizer_object=tok, eos_token="<|im_end|>", pad_token="<|endoftext|>", **extra
    )
    tokenizer.chat_template = ("{{ bos_token }}" if bos else "") + CHATML
    return tokenizer


def make_chatml_model(target: Path) -> Path:
    import torch
    import transformers

    tokenizer = chatml_tokenizer()
    tokenizer.save_pretrained(str(target))
    torch.manual_seed(0)
    config = transformers.Qwen2Config(
        vocab_size=len(tokenizer),
        hidden_size=32,
        intermediate_size=64,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=2,
        max_position_embeddings=256,
        tie_word_embeddings=True,
        eos_token_id=tokenizer.eos_token_id,
        pad_token_id=tokenizer.pad_token_id,
    )
    transformers.Qwen2ForCausalLM(config).save_pretrained(str(target))
    return target


@pytest.fixture(scope="module")
def chatml_model(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return make_chatml_model(tmp_path_factory.mktemp("chatml") / "model")


def model_run(tmp_path: Path, model: Path, template: str | None = "model") -> Path:
    """A finished full fine-tune whose output_dir holds ``model`` and whose metrics start line
    names ``template`` (None: a run from before the field)."""
    run_dir = make_ended_run(tmp_path, "finished", None, preset="chatml", log="done\n")
    shutil.copytree(model, tmp_path / "out")
    start = {"kind": "start", "attempt": 1, "world_size": 1}
    if template is not None:
        start.update(chat_template=template, chat_template_reason="chosen in the preset")
    lines = [start, {"kind": "end", "ok": True, "attempt": 1}]
    (run_dir / "metrics.jsonl").write_text("".join(json.dumps(x) + "\n" for x in lines))
    return run_dir


def worker(*args: str, stdin: str = "") -> list[dict]:
    proc = subprocess.run(
        [sys.executable, str(WORKER), *args],
        input=stdin,
        capture_output=True,
        text=True,
        timeout=180,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    return [json.loads(line) for line in proc.stdout.splitlines()]


def test_the_worker_chats_in_the_models_own_template(chatml_model: Path) -> None:
    import transformers

    prompts = "".join(json.dumps({"prompt": p}) + "\n" for p in ("Hello", "What is the capital?"))
    ready, first, second = worker(
        "chat", "--model", str(chatml_model), "--template", "model", "--device", "cpu",
        "--max-new-tokens", "8", "--show-prompt", stdin=prompts,
    )  # fmt: skip
    assert ready["ready"] is True and ready["template"] == "model"
    assert isinstance(first["reply"], str) and isinstance(second["reply"], str)
    assert 1 <= first["new_tokens"] <= 8 and 1 <= second["new_tokens"] <= 8
    tokenizer = transformers.AutoTokenizer.from_pretrained(str(chatml_model))
    turns = [{"role": "user", "content": "Hello"}]
    assert first["prompt"] == tokenizer.apply_chat_template(
        turns, tokenize=False, add_generation_prompt=True
    )
    turns += [{"role": "assistant", "content": first["reply"]},
              {"role": "user", "content": "What is the capital?"}]  # fmt: skip
    expected = tokenizer.apply_chat_template(turns, tokenize=False, add_generation_prompt=True)
    assert second["prompt"] == expected  # the first turn, reply included, then the second
    assert second["prompt"].startswith(first["prompt"])
    assert second["prompt_tokens"] == len(tokenizer(expected).input_ids)  # no BOS added


def test_a_chat_session_uses_the_runs_template(tmp_path: Path, chatml_model: Path) -> None:
    run_dir = model_run(tmp_path, chatml_model, "model")
    with ChatSession(run_dir, device="cpu", max_new_tokens=4) as session:
        assert session.template == "model"
        assert isinstance(session.ask("Hello"), str)
        assert isinstance(session.ask("And then?"), str)


def test_export_keeps_the_chat_template(tmp_path: Path, chatml_model: Path) -> None:
    import transformers

    (report,) = worker("export", "--model", str(chatml_model), "--to", str(tmp_path / "export"))
    assert report["ok"] is True and report["chat_template"] is True
    files = set(report["files"])
    config = json.loads((tmp_path / "export" / "tokenizer_config.json").read_text())
    assert "chat_template.jinja" in files or config.get("chat_template") == CHATML
    again = transformers.AutoTokenizer.from_pretrained(str(tmp_path / "export"))
    assert again.chat_template == CHATML


def test_the_export_of_a_vicuna_run_is_as_before(tmp_path: Path, tiny_model: Path) -> None:
    """No chat template: the slow Llama tokenizer as FastChat loads it, saved as it was."""
    (report,) = worker("export", "--model", str(tiny_model), "--to", str(tmp_path / "export"))
    assert report["ok"] is True and report["chat_template"] is False
    assert report["files"] == [
        "config.json", "generation_config.json", "model.safetensors",
        "special_tokens_map.json", "tokenizer.model", "tokenizer_config.json",
    ]  # fmt: skip
    config = json.loads((tmp_path / "export" / "tokenizer_config.json").read_text())
    assert config["tokenizer_class"] == "LlamaTokenizer" and "chat_template" not in config


RENDER = """
import json, sys
sys.path.insert(0, sys.argv[1])
import serve_api
rendering = serve_api.Rendering(sys.argv[2], "model")
messages = [{"role": "user", "content": "Hello"}]
params = rendering.apply({"prompt": "ignored", "stop_token_ids": None}, messages)
ids = rendering.tokenizer(params["prompt"]).input_ids
import worker
masks = worker.entry_module("chat_masks")
full = rendering.renderer.render(messages, True)
print(json.dumps({"params": params, "ids": ids, "trained": masks.Encoder(rendering.tokenizer, full)(full),
                  "eot": rendering.tokenizer.convert_tokens_to_ids("<|im_end|>"),
                  "bos": rendering.tokenizer.bos_token_id,
                  "string": rendering.apply({"prompt": "raw"}, "raw")}))
"""


def test_the_api_server_renders_with_training_bos_once(tmp_path: Path) -> None:
    """A tokenizer that adds BOS and a template that writes it: the prompt FastChat's worker
    tokenizes (with special tokens) has one BOS, the ids training's encoder gives."""
    chatml_tokenizer(bos=True).save_pretrained(str(tmp_path / "tok"))
    proc = subprocess.run(
        [sys.executable, "-c", RENDER, str(SERVE_API.parent), str(tmp_path / "tok")],
        capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr[-3000:]
    out = json.loads(proc.stdout.strip().splitlines()[-1])
    assert out["params"]["prompt"] == "<|im_start|>user\nHello<|im_end|>\n<|im_start|>assistant\n"
    assert out["ids"] == out["trained"]
    assert out["ids"][0] == out["bos"] and out["ids"].count(out["bos"]) == 1
    assert out["params"]["stop_token_ids"] == [out["eot"]]
    assert out["string"] == {"prompt": "raw"}  # /v1/completions: the caller's prompt as it is


def ask(port: int, model: str, messages: list[dict]) -> dict:
    body = {"model": model, "messages": messages, "max_tokens": 8, "temperature": 0}
    request = urllib.request.Request(
        f"http://127.0.0.1:{port}/v1/chat/completions",
        data=json.dumps(body).encode(),
        headers={"Content-Type": "application/json"},
        method="POST",
    )
    with urllib.request.urlopen(request, timeout=120) as answer:
        return dict(json.loads(answer.read()))


def test_serve_answers_in_the_runs_own_template(tmp_path: Path, chatml_model: Path) -> None:
    # (FastChat picks a model adapter by substrings of the model path: this test's name, in
    # tmp_path, must not contain one, e.g. "mpt" as in "prompts" loads the model as MPT.)
    import transformers
    from fastchat.conversation import get_conv_template

    run_dir = model_run(tmp_path, chatml_model, "model")
    port = free_port()
    cli("serve", str(run_dir), "--detach", "--port", str(port), "--device", "cpu")
    try:
        messages = [{"role": "system", "content": "You are terse."},
                    {"role": "user", "content": "Hello!"}]  # fmt: skip
        answer = ask(port, run_dir.name, messages)
        assert isinstance(answer["choices"][0]["message"]["content"], str)
        assert 1 <= answer["usage"]["completion_tokens"] <= 8
        workers = [c for c in cmdlines() if b"fastchat.serve.model_worker" in c]
        assert any(b"--conv-template\0raw\0" in c for c in workers), workers
        log = (run_dir / "serve" / "api.log").read_text()
        assert "chat prompts rendered with template model" in log
    finally:
        cli("stop", str(run_dir))
    nothing_left(run_dir)
    # The prompt the worker tokenized is the tokenizer's rendering, not FastChat's raw one.
    tokenizer = transformers.AutoTokenizer.from_pretrained(str(chatml_model))
    rendered = tokenizer.apply_chat_template(messages, tokenize=False, add_generation_prompt=True)
    assert answer["usage"]["prompt_tokens"] == len(tokenizer(rendered).input_ids)
    raw = get_conv_template("raw")
    raw.set_system_message(messages[0]["content"])
    raw.append_message(raw.roles[0], messages[1]["content"])
    raw.append_message(raw.roles[1], None)
    assert answer["usage"]["prompt_tokens"] != len(tokenizer(raw.get_prompt()).input_ids)
