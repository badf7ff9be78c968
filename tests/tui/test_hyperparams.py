"""Pilot tests of the Hyperparameters step: messages as fields change, live derived values,
machine checks against a real NVML snapshot, tune and save-as-preset."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from textual.pilot import Pilot
from textual.widgets import Checkbox, Input, Select, Static

import backend.planner.gpu as planner_gpu
from backend.preset import load_preset
from backend.preset.loader import load_preset as load_path
from backend.preset.schema import Preset
from screens.hyperparams import HyperparamsScreen, field_id
from tests.waiting import pilot_until
from tui.app import TrainwizApp
from widgets.form_field import FormField

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures"


@pytest.fixture(autouse=True)
def _no_local_gpu(monkeypatch: pytest.MonkeyPatch) -> None:
    """This machine has no GPU; tests that need one give a recorded NVML snapshot instead."""
    monkeypatch.setattr(planner_gpu, "detect_local", lambda: None)


def _snapshot_gpu(monkeypatch: pytest.MonkeyPatch, trace: str) -> None:
    machine = json.loads((FIXTURES / "h200" / trace).read_text().splitlines()[0])
    snap = {
        "gpus": [
            {
                "name": g["name"],
                "memory_total": g["mem_total"],
                "compute_capability": f"{g['cc'][0]}.{g['cc'][1]}",
            }
            for g in machine["gpus"]
        ]
    }
    monkeypatch.setattr(planner_gpu, "detect_local", lambda: planner_gpu.spec_from_snapshot(snap))


def _tiny(tmp_path: Path, records: int = 37) -> Preset:
    conv = {
        "id": "a",
        "conversations": [{"from": "human", "value": "hi"}, {"from": "gpt", "value": "yo"}],
    }
    data = tmp_path / "train.json"
    data.write_text(json.dumps([conv] * records))
    preset = load_preset("tiny-cpu").model_copy(deep=True)
    preset.training.data_path = str(data)
    return preset


def _cuda(tmp_path: Path) -> Preset:
    preset = load_preset("vicuna-7b-4xa100-40g").model_copy(deep=True)
    preset.training.eval_data_path = None
    return preset


async def _open(pilot: Pilot[Any], app: TrainwizApp) -> HyperparamsScreen:
    await pilot_until(
        pilot,
        lambda: isinstance(app.screen, HyperparamsScreen) and not app.screen.workers,
        what="the Hyperparameters step with its workers done",
        timeout=20,
        seen=lambda: f"screen {type(app.screen).__name__}, workers {list(app.screen.workers)}",
    )
    screen = app.screen
    assert isinstance(screen, HyperparamsScreen)
    await settle(pilot, screen)
    return screen


def field(screen: HyperparamsScreen, path: str) -> FormField:
    return screen.query_one(f"#{field_id(path)}", FormField)


async def _type(pilot: Pilot[Any], screen: HyperparamsScreen, path: str, text: str) -> None:
    """Set the text as typing would end (one real Input.Changed), then let the screen react."""
    editor = field(screen, path).editor
    assert isinstance(editor, Input)
    before = edits(screen)
    editor.value = text
    await settle(pilot, screen, since=before)


def edits(screen: HyperparamsScreen) -> int:
    """How many edits the screen has heard of (each starts a side-pane computation)."""
    return screen._side_seq


async def settle(pilot: Pilot[Any], screen: HyperparamsScreen, since: int | None = None) -> None:
    """Wait until the side pane (computed off the UI thread) shows the latest edit; with
    ``since`` (``edits`` before the edit) also until the screen has heard of that edit."""
    await pilot_until(
        pilot,
        lambda: screen.settled and (since is None or edits(screen) > since),
        what="the side pane to catch up with the edits",
        timeout=20,
        seen=lambda: f"edits {edits(screen)} (before: {since}), settled {screen.settled}",
    )


def text_of(screen: HyperparamsScreen, widget_id: str) -> str:
    return str(screen.query_one(widget_id, Static).content)


async def test_range_and_type_errors_show_and_never_reach_the_preset(tmp_path: Path) -> None:
    app = TrainwizApp(_tiny(tmp_path), "t", start_step="hyperparams")
    async with app.run_test(size=(160, 50)) as pilot:
        screen = await _open(pilot, app)
        await _type(pilot, screen, "per_device_train_batch_size", "0")
        assert field(screen, "per_device_train_batch_size").message == (
            "Input should be greater than or equal to 1"
        )
        assert app.preset.training.per_device_train_batch_size == 4
        await _type(pilot, screen, "learning_rate", "fast")
        assert "'fast' is not a number" in field(screen, "learning_rate").message
        await _type(pilot, screen, "warmup_ratio", "1.5")
        assert "less than or equal to 1" in field(screen, "warmup_ratio").message
        assert len(screen.problems) == 3
        await pilot.press("f6")  # save refused while fields are red
        await pilot_until(
            pilot,
            lambda: any("Not done" in str(n.title) for n in app._notifications),
            what="the save to be refused with a notification",
            timeout=20,
            seen=lambda: (type(app.screen).__name__, [n.title for n in app._notifications]),
        )
        assert isinstance(app.screen, HyperparamsScreen)
        await _type(pilot, screen, "per_device_train_batch_size", "8")
        assert field(screen, "per_device_train_batch_size").message == ""
        assert app.preset.training.per_device_train_batch_size == 8
        # Loading another preset rebuilds the form from it and forgets the old errors.
        app.set_preset(load_preset("vicuna-7b-4xa100-40g"), "v")
        await pilot_until(
            pilot,
            lambda: (
                getattr(field(screen, "per_device_train_batch_size").editor, "value", None) == "2"
                and screen.settled
                and "x 16 accumulation" in text_of(screen, "#hp-derived")
            ),
            what="the form rebuilt from the loaded preset",
            timeout=20,
            seen=lambda: (screen.problems, text_of(screen, "#hp-derived")),
        )
        editor = field(screen, "per_device_train_batch_size").editor
        assert isinstance(editor, Input) and editor.value == "2"
        assert screen.problems == [] and "x 16 accumulation" in text_of(screen, "#hp-derived")


async def test_derived_values_follow_every_edit(tmp_path: Path) -> None:
    app = TrainwizApp(_tiny(tmp_path, records=37), "t", start_step="hyperparams")
    async with app.run_test(size=(160, 50)) as pilot:
        screen = await _open(pilot, app)
        derived = text_of(screen, "#hp-derived")
        assert "global batch: 4 = 4 x 1 accumulation x 1 GPU(s)" in derived
        assert "37 records" in derived
        assert "steps per epoch: 10" in derived  # ceil(37 / 4)
        assert "total steps: 30" in derived  # 3 epochs
        assert "warmup steps: 1" in derived  # ceil(0.03 * 30)
        await _type(pilot, screen, "gradient_accumulation_steps", "2")
        derived = text_of(screen, "#hp-derived")
        assert "global batch: 8 = 4 x 2 accumulation" in derived
        assert "steps per epoch: 5" in derived
        assert "tokens per step: 2,048" in derived  # 8 x 256
        await _type(pilot, screen, "model_max_length", "128")
        assert "tokens per step: 1,024" in text_of(screen, "#hp-derived")
        assert "--model_max_length 128" in text_of(screen, "#hp-command")
        assert "--gradient_accumulation_steps 2" in text_of(screen, "#hp-command")
        # A bigger dataset file is counted again when data_path changes.
        bigger = tmp_path / "more.json"
        bigger.write_text(json.dumps([{"id": str(i), "conversations": []} for i in range(100)]))
        await _type(pilot, screen, "data_path", str(bigger))
        await pilot_until(
            pilot,
            lambda: screen.settled and "100 records" in text_of(screen, "#hp-derived"),
            what="the bigger dataset to be counted",
            timeout=20,
            seen=lambda: text_of(screen, "#hp-derived"),
        )
        assert "steps per epoch: 12" in text_of(screen, "#hp-derived")  # ceil(100/4)//2


async def test_cross_field_messages(tmp_path: Path) -> None:
    app = TrainwizApp(_tiny(tmp_path), "t", start_step="hyperparams")
    async with app.run_test(size=(160, 50)) as pilot:
        screen = await _open(pilot, app)
        select = field(screen, "eval_strategy").editor
        assert isinstance(select, Select)
        before = edits(screen)
        select.value = "steps"
        await settle(pilot, screen, since=before)
        assert "set eval_data_path" in field(screen, "eval_strategy").message
        # tiny-cpu's model has 512 positions: 1024 needs RoPE scaling.
        await _type(pilot, screen, "model_max_length", "1024")
        message = field(screen, "model_max_length").message
        assert "512 positions" in message and "RoPE scaling" in message and "x2" in message
        box = field(screen, "bf16").editor
        assert isinstance(box, Checkbox)
        before = edits(screen)
        box.value = True
        await settle(pilot, screen, since=before)
        assert "launch.device is cpu" in field(screen, "bf16").message
        assert "CPU" in text_of(screen, "#hp-memory")


async def test_sm80_and_gpu_count_checks(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    _snapshot_gpu(monkeypatch, "nvml-trace-fastchat-1b.jsonl")  # one real H200
    app = TrainwizApp(_cuda(tmp_path), "v", start_step="hyperparams")
    async with app.run_test(size=(160, 50)) as pilot:
        screen = await _open(pilot, app)
        # The preset asks for 4 processes; the recorded machine has one H200.
        assert field(screen, "launch.nproc_per_node").message == (
            "4 processes but 1 GPU(s) visible"
        )
        memory = text_of(screen, "#hp-memory")
        assert "NVIDIA H200" in memory and "FITS" in memory
        await _type(pilot, screen, "launch.nproc_per_node", "1")
        assert field(screen, "launch.nproc_per_node").message == ""
        gpu = screen.query_one("#hp-gpu", Select)
        before = edits(screen)
        gpu.value = "v100"
        await settle(pilot, screen, since=before)
        assert "needs compute capability 8.0+" in field(screen, "bf16").message
        assert "sm70" in field(screen, "tf32").message


async def test_tune_rewrites_the_form_and_save_writes_it(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    preset = load_preset("vicuna-13b-v1.3-8xa100").model_copy(deep=True)
    app = TrainwizApp(preset, "seed", start_step="hyperparams")
    async with app.run_test(size=(160, 50)) as pilot:
        screen = await _open(pilot, app)
        before = edits(screen)
        screen.query_one("#hp-gpu", Select).value = "a100"
        await settle(pilot, screen, since=before)
        assert "CPU offload" in text_of(screen, "#hp-memory")
        await pilot.press("f5")
        await pilot_until(
            pilot,
            lambda: screen.settled and "training.fsdp" in text_of(screen, "#hp-tune-result"),
            what="Tune's result in the side pane",
            timeout=20,
            seen=lambda: text_of(screen, "#hp-tune-result"),
        )
        assert app.preset.training.fsdp == "full_shard auto_wrap"
        fsdp_input = field(screen, "fsdp").editor
        assert isinstance(fsdp_input, Input) and fsdp_input.value == "full_shard auto_wrap"
        result = text_of(screen, "#hp-tune-result")
        assert "training.fsdp" in result and "fits on the GPU without CPU offload" in result
        await pilot.press("f6")
        await pilot_until(
            pilot,
            lambda: app.screen.query("#save-path"),
            what="the save dialog",
            timeout=20,
            seen=lambda: type(app.screen).__name__,
        )
        path = tmp_path / "tuned.yaml"
        dialog_input = app.screen.query_one("#save-path", Input)
        dialog_input.value = str(path)
        await pilot.press("enter")
        await pilot_until(
            pilot,
            lambda: path.exists() and not app.screen.query("#save-path"),
            what=f"the preset saved to {path} and the dialog closed",
            timeout=20,
            seen=lambda: (type(app.screen).__name__, path.exists()),
        )
    saved = load_path(path)
    assert saved.training.fsdp == "full_shard auto_wrap"
    assert (
        saved.training.per_device_train_batch_size
        == app.preset.training.per_device_train_batch_size
    )


async def test_tune_on_a_24g_gpu_switches_a_7b_full_fine_tune_to_lora_and_lists_qlora() -> None:
    # A10 (24 GB): even FSDP with CPU offload does not fit a 7B full fine-tune there
    preset = load_preset("vicuna-7b-4xa100-40g").model_copy(deep=True)
    preset.launch.nproc_per_node = 1
    app = TrainwizApp(preset, "seed", start_step="hyperparams")
    async with app.run_test(size=(160, 50)) as pilot:
        screen = await _open(pilot, app)
        before = edits(screen)
        screen.query_one("#hp-gpu", Select).value = "a10"
        await settle(pilot, screen, since=before)
        await pilot.press("f5")
        await pilot_until(
            pilot,
            lambda: screen.settled and "training.method" in text_of(screen, "#hp-tune-result"),
            what="Tune's result in the side pane",
            timeout=20,
            seen=lambda: text_of(screen, "#hp-tune-result"),
        )
        assert app.preset.training.method == "lora" and not app.preset.training.fsdp
        method = field(screen, "method").editor
        assert getattr(method, "value", None) == "lora"
        result = text_of(screen, "#hp-tune-result")
        assert "training.method: 'full' -> 'lora'" in result and "adapter only" in result
        assert "no full fine-tune fits" in result
        assert "qlora r8" in result and "4-bit nf4 base" in result  # the alternative
