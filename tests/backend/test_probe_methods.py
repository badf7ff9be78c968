"""tune --probe for methods: candidates that cannot run on this machine are skipped with the
reason and never launched (QLoRA on a CPU preset; ZeRO where deepspeed is not installed)."""

from __future__ import annotations

import importlib.util
from pathlib import Path

from backend.planner.gpu import GIB, gpu_spec
from backend.planner.method_search import search_methods
from backend.planner.shape import shape_from_config
from backend.preset.loader import load_preset
from backend.runs.probe import cannot_run_here, probe_methods

ROOT = Path(__file__).resolve().parents[2]
TINY = {  # presets/tiny-cpu-lora.yaml's model.tiny as a config.json
    "model_type": "llama", "hidden_size": 64, "intermediate_size": 176, "num_hidden_layers": 2,
    "num_attention_heads": 4, "num_key_value_heads": 4, "vocab_size": 512,
    "max_position_embeddings": 512,
}  # fmt: skip


def test_skipped_candidates_carry_their_reason_and_launch_nothing() -> None:
    preset = load_preset(ROOT / "presets" / "tiny-cpu-lora.yaml")
    ranked, _notes = search_methods(
        preset, gpu_spec("4090"), shape_from_config(TINY), host_ram=64 * GIB
    )
    methods = {c.method.method for c in ranked}
    assert {"lora", "qlora"} <= methods and any(c.method.zero_stage for c in ranked)
    deepspeed_here = importlib.util.find_spec("deepspeed") is not None
    unrunnable = [
        c
        for c in ranked
        if c.method.method == "qlora" or (c.method.zero_stage and not deepspeed_here)
    ]
    result = probe_methods(preset, unrunnable, top=len(unrunnable), steps=2)
    assert [r.label for r in result.rows] == [c.label for c in unrunnable]
    for row in result.rows:
        assert row.source == "skipped" and row.state == "skipped" and not row.run_id
        assert (
            ("CUDA" in row.skipped) if row.label.startswith("qlora") else "deepspeed" in row.skipped
        )
    assert result.winner is None and "nothing measured" in result.notes[-1]


def test_a_cuda_preset_may_probe_qlora() -> None:
    preset = load_preset(ROOT / "presets" / "vicuna-7b-lora-1x24g.yaml")
    from backend.planner.methods import MethodSettings

    assert cannot_run_here(preset, MethodSettings("qlora")) == ""


def _lora_7b_on_h200() -> tuple[object, list[object], object]:
    from backend.planner.perfrows import row_shape

    preset = load_preset(ROOT / "presets" / "vicuna-7b-lora-1x24g.yaml")
    shape = row_shape({"model": "6.74b"})
    ranked, _notes = search_methods(preset, gpu_spec("h200"), shape, host_ram=128 * GIB)
    return preset, ranked, shape


def test_method_probe_rows_join_the_calibration_file_under_their_method(tmp_path: Path) -> None:
    from backend.planner.learned import load_rows
    from tests.backend.test_tune_probe import DIST, FakeLauncher

    preset, ranked, shape = _lora_7b_on_h200()
    lora = [c for c in ranked if c.method.method == "lora"][:1]
    fake = FakeLauncher(tmp_path, ["ok 5000 40"])
    out = probe_methods(preset, lora, top=1, steps=4, warmup=1, launcher=fake.api,
                        learn=("NVIDIA H200", shape, DIST))  # fmt: skip
    assert out.winner is not None and out.winner.measured_real_tokens_per_s == 5000
    rows = load_rows("NVIDIA H200")
    assert len(rows) == 1 and rows[0]["method"] == "lora"
    assert rows[0]["measured_real_tokens_per_s"] == 5000
    # the base model's prediction of the configuration probed (the method's best predicted,
    # a packed compiled one here: the probe measures those first), so the ratio that corrects
    # the next prediction stays honest
    from backend.planner.method_search import probe_order

    probed = probe_order(preset, lora)[0]
    assert probed.estimate.settings.packing and probed.estimate.settings.compile_layers
    assert out.winner.label == probed.label and rows[0]["settings"]["compile_layers"] is True
    base = probed.estimate.uncalibrated.throughput.real_tokens_per_s
    assert rows[0]["predicted_real_tokens_per_s"] == round(base, 1)


def test_method_rows_correct_their_own_method_and_no_other() -> None:
    from backend.planner.learned import record
    from backend.planner.tune import tune
    from tests.backend.test_tune_probe import DIST, base_preset

    preset, ranked, shape = _lora_7b_on_h200()
    lora = next(c for c in ranked if c.method.method == "lora")
    predicted = lora.estimate.throughput.real_tokens_per_s
    measured = 0.7 * predicted  # the machine is slower than the model says
    record("NVIDIA H200", shape, lora.estimate.settings, method="lora",
           predicted_real_tokens_per_s=predicted, predicted_peak_gib=30.0,
           measured_real_tokens_per_s=measured, measured_peak_gib=30.0, startup_s=10.0,
           lengths={})  # fmt: skip
    from backend.planner.learned import load_rows

    rows = load_rows("NVIDIA H200")
    again, _notes = search_methods(preset, gpu_spec("h200"), shape, host_ram=128 * GIB,
                                   calibration=rows)  # fmt: skip
    corrected = next(c for c in again if c.method == lora.method)
    assert corrected.estimate.base is not None  # read back: corrected from the probe row
    got = corrected.estimate.throughput.real_tokens_per_s
    assert measured < got < predicted  # toward the measurement, shrunk by the prior
    qlora = next(c for c in again if c.method.method == "qlora")
    assert qlora.estimate.base is None  # a LoRA row says nothing about QLoRA's 4-bit base
    # tune reads the file itself: FSDP's full fine-tune is not corrected by a LoRA row
    result = tune(base_preset(), gpu_spec("h200"), shape, dist=DIST, host_ram=128 * GIB)
    assert result.after.base is None
    assert any(c.estimate.base is not None for c in result.methods if c.method.method == "lora")


def test_a_probe_in_place_of_a_failed_one_says_so(tmp_path: Path) -> None:
    """On an H100 a first LoRA probe failed and the next read 'probe 2/1': a count gone wrong
    to the reader. The extra probe now says it replaces a failed one."""
    from tests.backend.test_tune_probe import FakeLauncher

    preset, ranked, _shape = _lora_7b_on_h200()
    lora = [c for c in ranked if c.method.method == "lora"][:2]
    fake = FakeLauncher(tmp_path, ["nolaunch", "ok 5000 40"])
    said: list[str] = []
    out = probe_methods(preset, lora, top=1, steps=4, warmup=1, launcher=fake.api,
                        progress=said.append)  # fmt: skip
    assert out.winner is not None and out.winner.measured_real_tokens_per_s == 5000
    heads = [line for line in said if line.startswith("probe ")]
    assert heads[0].startswith("probe 1/1: ")
    assert heads[1].startswith("probe 2 (in place of a failed one): ")
    assert not [line for line in said if "2/1" in line]
