"""The runner (concurrency, per-check deadlines, cancel, callbacks), sizing, blocked steps, CLI."""

from __future__ import annotations

import json
import subprocess
import sys
import threading
from pathlib import Path

import pytest

from backend.checks import CheckResult, blocked_steps, check_ids, run_checks, runner
from backend.checks.context import CheckContext, registry_for
from backend.checks.gpu import image_cuda
from backend.checks.model import finding, worst
from backend.checks.sizing import params_from_name, parse_size, tiny_params
from backend.preset.loader import load_preset
from backend.preset.schema import TinyModelSpec

ROOT = Path(__file__).resolve().parents[2]


def test_full_run_covers_every_check_in_order_and_calls_back_each_once() -> None:
    seen: list[str] = []
    results = run_checks(load_preset("tiny-cpu"), on_result=lambda r: seen.append(r.id))
    assert [r.id for r in results] == check_ids()
    assert sorted(seen) == sorted(check_ids())
    assert all(r.title and r.summary for r in results)
    by_id = {r.id: r for r in results}
    # tiny-cpu runs on the host: Docker and NVIDIA do not apply.
    for skipped in ("docker_daemon", "nvidia_runtime", "gpu_probe", "registry", "hf_endpoint"):
        assert by_id[skipped].status == "skip", skipped


def _hang_spec(release: threading.Event, timeout_status: str = "fail") -> runner.CheckSpec:
    def hang(ctx: CheckContext) -> CheckResult:
        release.wait(30)
        return finding("ok", "late")

    return runner.CheckSpec(
        "hang",
        "Hanging check",
        hang,
        timeout_s=0.3,
        timeout_status=timeout_status,  # type: ignore[arg-type]
        blocks_on_timeout=["model"],
    )


def test_a_hung_check_is_reported_at_its_deadline_and_others_still_land(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    release = threading.Event()
    fast = runner.CheckSpec("fast", "Fast", lambda ctx: finding("ok", "quick"))
    monkeypatch.setattr(runner, "CHECKS", [_hang_spec(release), fast])
    order: list[str] = []
    try:
        results = run_checks(load_preset("tiny-cpu"), on_result=lambda r: order.append(r.id))
    finally:
        release.set()
    assert order == ["fast", "hang"]
    hang, quick = results
    assert hang.status == "fail" and "no answer within" in hang.summary and hang.blocks == ["model"]
    assert quick.summary == "quick"
    # With no preset a timeout is only a warning.
    release.clear()
    monkeypatch.setattr(runner, "CHECKS", [_hang_spec(release)])
    try:
        (unjudged,) = run_checks(None)
    finally:
        release.set()
    assert unjudged.status == "warn" and unjudged.blocks == []


def test_cancel_marks_the_rest_skipped(monkeypatch: pytest.MonkeyPatch) -> None:
    release = threading.Event()
    spec = _hang_spec(release)
    monkeypatch.setattr(runner, "CHECKS", [runner.CheckSpec(**{**spec.__dict__, "timeout_s": 60})])
    cancel = threading.Event()
    cancel.set()
    try:
        (result,) = run_checks(None, cancel=cancel)
    finally:
        release.set()
    assert result.status == "skip" and result.summary == "cancelled"


def test_a_crashing_check_reports_itself(monkeypatch: pytest.MonkeyPatch) -> None:
    def boom(ctx: CheckContext) -> CheckResult:
        raise RuntimeError("kaput")

    monkeypatch.setattr(runner, "CHECKS", [runner.CheckSpec("boom", "Boom", boom)])
    (result,) = run_checks(None)
    assert result.status == "warn" and "kaput" in result.summary and "RuntimeError" in result.detail


def test_blocked_steps_only_from_failures() -> None:
    results = [
        CheckResult(id="a", status="fail", summary="", blocks=["launch"]),
        CheckResult(id="b", status="warn", summary="", blocks=["model"]),
        CheckResult(id="c", status="fail", summary="", blocks=["image", "launch"]),
        CheckResult(id="d", status="ok", summary=""),
    ]
    assert blocked_steps(results) == {"image": ["c"], "launch": ["a", "c"]}
    assert worst(results) == "fail"
    assert worst(results[1:2]) == "warn"
    assert worst([CheckResult(id="s", status="skip", summary="")]) == "ok"


@pytest.mark.training  # imports torch + transformers (seconds): deselect with -m "not training"
def test_tiny_params_equals_transformers_count() -> None:
    import torch
    from transformers import LlamaConfig, LlamaForCausalLM

    spec = TinyModelSpec(num_key_value_heads=2)
    config = LlamaConfig(
        hidden_size=spec.hidden_size,
        intermediate_size=spec.intermediate_size,
        num_hidden_layers=spec.num_hidden_layers,
        num_attention_heads=spec.num_attention_heads,
        num_key_value_heads=spec.num_key_value_heads,
        vocab_size=spec.vocab_size,
        max_position_embeddings=spec.max_position_embeddings,
        tie_word_embeddings=False,
    )
    with torch.device("meta"):
        model = LlamaForCausalLM(config)
    assert tiny_params(spec) == sum(p.numel() for p in model.parameters())


@pytest.mark.parametrize(
    ("name", "params"),
    [
        ("lmsys/vicuna-13b-v1.3", 13 * 10**9),
        ("lmsys/vicuna-7b-v1.5", 7 * 10**9),
        ("TinyLlama/TinyLlama-1.1B-Chat-v1.0", 1_100_000_000),
        ("facebook/opt-350m", 350 * 10**6),
        ("/data/models/my-model", None),
    ],
)
def test_params_from_name(name: str, params: int | None) -> None:
    assert params_from_name(name) == params


def test_small_parsers() -> None:
    assert parse_size("16g") == 16 * 1024**3 and parse_size("64m") == 64 * 1024**2
    assert parse_size("lots") is None
    assert image_cuda("pytorch/pytorch:2.5.1-cuda12.4-cudnn9-devel") == (12, 4)
    assert image_cuda("nvidia/cuda:11.8.0-base-ubuntu22.04") == (11, 8)
    assert image_cuda("trainwiz-base:bookworm") is None
    assert registry_for("pytorch/pytorch:2.5.1") == "https://registry-1.docker.io/v2/"
    assert registry_for("nvcr.io/nvidia/pytorch:24.05-py3") == "https://nvcr.io/v2/"


def _cli(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "tui.cli", "check", *args],
        capture_output=True,
        text=True,
        cwd=ROOT,
        check=False,
        timeout=120,
    )


def test_cli_json_and_exit_codes(tmp_path: Path) -> None:
    done = _cli("--preset", "tiny-cpu", "--json", "--only", "shm", "--only", "memlock")
    assert done.returncode == 0, done.stderr
    payload = json.loads(done.stdout)
    assert [c["id"] for c in payload["checks"]] == ["shm", "memlock"]
    assert {"id", "status", "summary", "detail", "fix"} <= set(payload["checks"][0])
    # A failing check -> exit 1, in the table as in JSON.
    import socket

    holder = socket.socket()
    holder.bind(("0.0.0.0", 0))
    holder.listen(1)
    port = holder.getsockname()[1]
    text = load_preset("tiny-cpu").model_dump(mode="json", by_alias=True, exclude_unset=True)
    text["launch"].update(master_port=port, nnodes=2, node_rank=0)  # nodes started by hand
    preset_file = tmp_path / "p.json"
    import yaml

    preset_file.with_suffix(".yaml").write_text(yaml.safe_dump(text))
    try:
        table = _cli("--preset", str(preset_file.with_suffix(".yaml")), "--only", "master_port")
    finally:
        holder.close()
    assert table.returncode == 1
    assert (
        "master_port" in table.stdout
        and "fail" in table.stdout
        and "blocks step 'launch'" in table.stdout
    )
    bad = _cli("--only", "nonsense")
    assert bad.returncode == 2 and "unknown check" in bad.stderr
