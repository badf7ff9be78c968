"""Which chat template chat and serve use for a run: the one its metrics ``start`` line names
(the latest attempt's), vicuna for a run from before that field; and what serve derives from it
(FastChat's ``--conv-template``, the API server's environment, the tokenizer folder)."""

from __future__ import annotations

import json
from pathlib import Path

from backend.results.serve_template import (
    TEMPLATE_ENV,
    TOKENIZER_ENV,
    api_env,
    run_template,
    tokenizer_dir,
    worker_conv_template,
)
from backend.results.weights import Weights
from tests.run_records import make_ended_run


def run_with(tmp_path: Path, *starts: dict) -> Path:
    run_dir = make_ended_run(tmp_path, "finished", None, preset="t", log="done\n")
    lines = [{"kind": "start", **s} for s in starts] + [{"kind": "end", "ok": True}]
    (run_dir / "metrics.jsonl").write_text("".join(json.dumps(x) + "\n" for x in lines))
    return run_dir


def test_a_run_from_before_the_field_is_vicuna(tmp_path: Path) -> None:
    assert run_template(run_with(tmp_path, {"attempt": 1, "world_size": 1})) == "vicuna"


def test_a_run_without_metrics_is_vicuna(tmp_path: Path) -> None:
    run_dir = make_ended_run(tmp_path, "failed", None, preset="t", log="")
    assert run_template(run_dir) == "vicuna"


def test_the_latest_attempts_template_is_the_runs(tmp_path: Path) -> None:
    run_dir = run_with(
        tmp_path,
        {"attempt": 1, "chat_template": "vicuna"},
        {"attempt": 2, "chat_template": "model", "chat_template_reason": "auto: ..."},
    )
    assert run_template(run_dir) == "model"


def test_a_fastchat_name_is_kept(tmp_path: Path) -> None:
    assert run_template(run_with(tmp_path, {"chat_template": "qwen-7b-chat"})) == "qwen-7b-chat"
    assert run_template(run_with(tmp_path / "b", {"chat_template": ""})) == "vicuna"


def test_the_model_workers_conversation_template() -> None:
    assert worker_conv_template("vicuna") == "vicuna_v1.1"  # as serve always passed
    assert worker_conv_template("model") == "raw"  # the API server renders the prompt
    assert worker_conv_template("llama-2") == "llama-2"


def test_the_api_servers_environment(tmp_path: Path) -> None:
    assert api_env("vicuna", tmp_path) == {}
    assert api_env("model", tmp_path) == {TOKENIZER_ENV: str(tmp_path), TEMPLATE_ENV: "model"}


def test_the_tokenizer_folder(tmp_path: Path) -> None:
    served = tmp_path / "served"
    assert tokenizer_dir(Weights(tmp_path / "full"), served) == served
    assert tokenizer_dir(None, served) == served
    assert tokenizer_dir(Weights(tmp_path / "ckpt", tmp_path / "base"), served) == tmp_path / "base"
    adapter = tmp_path / "adapter"
    adapter.mkdir()
    lora = Weights(adapter, adapter_base=tmp_path / "base")
    assert tokenizer_dir(lora, served) == tmp_path / "base"
    (adapter / "tokenizer_config.json").write_text("{}")
    assert tokenizer_dir(lora, served) == adapter
