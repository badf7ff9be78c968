"""bitsandbytes CUDA setup and DeepSpeed op build failures (docs/lora.md): classified from real log
excerpts (tests/fixtures/logcorpus2/{bitsandbytes_cuda,deepspeed_op_build}, sources in its
SOURCES.tsv), each with fixes that name the preset change, applicable as they stand."""

from __future__ import annotations

from pathlib import Path

import pytest

from backend.diagnosis import classify_line, diagnose_file, diagnose_text
from backend.diagnosis.apply import apply_fixes
from backend.preset import parse_preset_text

CORPUS = Path(__file__).resolve().parents[1] / "fixtures" / "logcorpus2"
BNB = CORPUS / "bitsandbytes_cuda"
DS = CORPUS / "deepspeed_op_build"


def preset(training: str, image: str = "pytorch/pytorch:2.5.1-cuda12.4-cudnn9-runtime"):
    return parse_preset_text(f"""\
schema: 1
name: m
model: {{source: local, dir: /data/m}}
environment: {{mode: image, image: "{image}", extra_packages: [peft, bitsandbytes==0.39.0]}}
launch: {{runner: host}}
training:
  data_path: /data/d.json
  output_dir: /data/out
  bf16: true
{training}""")


QLORA = "  method: qlora\n"
ZERO_OFFLOAD = "  zero: {stage: 3, offload_optimizer: true}\n"


def top(path: Path, p=None):
    finding = diagnose_file(path, preset=p).top
    assert finding is not None, path.name
    return finding


def fixes_by_title(finding) -> dict:
    return {f.title: f for f in finding.fixes}


@pytest.mark.parametrize(
    ("name", "title"),
    [
        ("bitsandbytes-828-setup-failed-runtimeerror.log", "bitsandbytes' CUDA setup failed"),
        ("bitsandbytes-1522-setup-failed-inspect-outputs.log", "bitsandbytes' CUDA setup failed"),
        ("bitsandbytes-487-no-binary-for-cuda118.log", "no CUDA binary here"),
        ("bitsandbytes-892-runtime-library-not-detected.log", "cannot find the CUDA runtime"),
        ("bitsandbytes-778-libcudart-not-found.log", "did not find libcudart.so"),
    ],
)
def test_bitsandbytes_logs_are_bitsandbytes_cuda(name: str, title: str) -> None:
    finding = top(BNB / name)
    assert finding.category == "bitsandbytes_cuda" and title in finding.title
    assert "bitsandbytes" in finding.explanation


def test_qlora_preset_gets_a_current_bitsandbytes_then_lora_and_both_apply() -> None:
    p = preset(QLORA)
    finding = top(BNB / "bitsandbytes-828-setup-failed-runtimeerror.log", p)
    titles = [f.title for f in finding.fixes]
    assert titles[0].startswith("Install a current bitsandbytes") and "LoRA" in titles[-1]
    upgraded = apply_fixes(p, finding.fixes[0])
    assert upgraded.environment.extra_packages == ["peft", "bitsandbytes>=0.43"]
    lora = apply_fixes(p, finding.fixes[-1])
    assert lora.training.method == "lora"


def test_libcudart_not_found_puts_the_cuda_runtime_on_the_library_path() -> None:
    p = preset(QLORA)
    finding = top(BNB / "bitsandbytes-892-runtime-library-not-detected.log", p)
    fix = fixes_by_title(finding)["Put the CUDA runtime on LD_LIBRARY_PATH"]
    assert apply_fixes(p, fix).launch.env["LD_LIBRARY_PATH"] == "/usr/local/cuda/lib64"


@pytest.mark.parametrize(
    ("name", "title"),
    [
        ("knn-cuda-14-ninja-required.log", "ninja is not installed"),
        ("vixtts-12-missing-cuda-home.log", "CUDA_HOME is not set"),
        ("deepspeed-889-cuda-profiler-api-header.log", "A DeepSpeed op failed to compile"),
        ("deepspeed-6912-fused-adam-ninja-stopped.log", "A DeepSpeed op failed to compile"),
        ("rtl-coder-13-cpu-adam-object-failed.log", "A DeepSpeed op failed to compile"),
        ("lmflow-471-ds-opt-adam-missing.log", "CPU-Adam op was never built"),
        ("autopoison-6-cpu-adam-so-missing.log", "CPU-Adam op was never built"),
    ],
)
def test_deepspeed_logs_are_deepspeed_op_build(name: str, title: str) -> None:
    finding = top(DS / name)
    assert finding.category == "deepspeed_op_build" and title in finding.title
    assert any(f.title == "Prebuild DeepSpeed's ops when installing it" for f in finding.fixes)


def test_ninja_missing_installs_ninja() -> None:
    p = preset(ZERO_OFFLOAD)
    finding = top(DS / "knn-cuda-14-ninja-required.log", p)
    assert finding.fixes[0].title == "Install ninja in the training environment"
    assert "ninja" in apply_fixes(p, finding.fixes[0]).environment.extra_packages


def test_missing_cuda_home_on_a_runtime_image_moves_to_devel_and_sets_cuda_home() -> None:
    p = preset(ZERO_OFFLOAD)
    finding = top(DS / "vixtts-12-missing-cuda-home.log", p)
    fixed = apply_fixes(
        p, fixes_by_title(finding)["Use a -devel image (nvcc, CUDA headers and CUDA_HOME)"]
    )
    assert fixed.environment.image == "pytorch/pytorch:2.5.1-cuda12.4-cudnn9-devel"
    assert fixed.launch.env["CUDA_HOME"] == "/usr/local/cuda"


def test_cpu_adam_that_never_built_turns_optimizer_offload_off() -> None:
    p = preset(ZERO_OFFLOAD)
    finding = top(DS / "lmflow-471-ds-opt-adam-missing.log", p)
    fix = fixes_by_title(finding)["Turn ZeRO optimizer offload off (no CPU-Adam to build)"]
    fixed = apply_fixes(p, fix)
    assert fixed.training.zero is not None and fixed.training.zero.stage == 3
    assert fixed.training.zero.offload_optimizer is False
    # a devel image already has the toolkit: no image change is proposed
    devel = preset(ZERO_OFFLOAD, image="pytorch/pytorch:2.5.1-cuda12.4-cudnn9-devel")
    titles = [f.title for f in top(DS / "deepspeed-889-cuda-profiler-api-header.log", devel).fixes]
    assert not any("-devel image" in t for t in titles)


def test_a_compiler_error_outside_a_deepspeed_build_stays_flash_attns() -> None:
    build = CORPUS.parent / "logcorpus" / "flash_attn_build"
    finding = top(build / "flash-attention-279-error-compiling-objects.log")
    assert finding.category == "flash_attn_build"
    plain = diagnose_text("ninja: build stopped: subcommand failed.\n")
    assert plain.top is not None and plain.top.category == "flash_attn_build"


def test_live_line_flags_for_the_method_failures() -> None:
    ninja = classify_line("RuntimeError: Ninja is required to load C++ extensions")
    assert ninja is not None and ninja.category == "deepspeed_op_build"
    assert ninja.severity == "error"
    bnb = classify_line("CUDA_SETUP: WARNING! libcudart.so not found in any environmental path.")
    assert bnb is not None and (bnb.category, bnb.severity) == ("bitsandbytes_cuda", "warning")
