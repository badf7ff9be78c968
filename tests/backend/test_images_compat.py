"""Compatibility against real driver/CUDA pairs: the seed's server and the H200 we measured on."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from backend.images.catalog import describe_ref, load_catalog
from backend.images.compat import check_image, suggest
from backend.images.cuda_tables import max_cuda_for_driver, version_tuple
from backend.images.host import Gpu, HostGpus
from backend.preset.loader import load_preset
from backend.preset.schema import Preset

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures"
SEED_IMAGE = "pytorch/pytorch:2.0.1-cuda11.7-cudnn8-devel"


def host_from_nvidia_smi(text: str, cc: tuple[int, int]) -> HostGpus:
    """Driver and CUDA exactly as nvidia-smi printed them on the machine."""
    match = re.search(r"Driver Version: (\S+)\s+CUDA Version: (\S+)", text)
    assert match, "fixture is not nvidia-smi output"
    names = re.findall(r"\|\s+\d+\s+(NVIDIA [A-Za-z0-9 ]+?)\s{2,}", text)
    return HostGpus(match[1], match[2], [Gpu(n, cc) for n in names], 24 << 30, 2)


@pytest.fixture()
def h200() -> HostGpus:
    text = (FIXTURES / "h200" / "nvidia-smi.txt").read_text()
    return host_from_nvidia_smi(text, (9, 0))


@pytest.fixture()
def seed_host() -> HostGpus:
    # The seed installs cuda-repo 12-2 with driver 535.54.03 on 8×A100 (sm80); CUDA 12.2.
    return HostGpus("535.54.03", "12.2", [Gpu("NVIDIA A100-SXM4-80GB", (8, 0))] * 8, 1 << 40, 128)


@pytest.fixture()
def seed() -> Preset:
    return load_preset("vicuna-13b-v1.3-8xa100")


@pytest.fixture()
def vicuna7b() -> Preset:
    return load_preset("vicuna-7b-4xa100-40g")


def test_driver_table_matches_nvidia_minimums() -> None:
    assert max_cuda_for_driver("535.54.03") == "12.2"
    assert max_cuda_for_driver("580.159.04") == "13.0"
    assert max_cuda_for_driver("580.65.06") == "13.0"
    assert max_cuda_for_driver("550.54.15") == "12.4"
    assert max_cuda_for_driver("525.60.13") == "12.0"
    assert max_cuda_for_driver("470.57.02") == "11.4"
    assert max_cuda_for_driver("515.43.03") == "11.6"  # one patch below 11.7's minimum
    assert max_cuda_for_driver("418.67") is None


def test_h200_fixture_reads_driver_580_cuda_13(h200: HostGpus) -> None:
    assert h200.driver_version == "580.159.04"
    assert h200.cuda_driver == "13.0"
    assert [g.name for g in h200.gpus] == ["NVIDIA H200"]


def test_seed_image_on_seed_server_is_compatible(seed_host: HostGpus, seed: Preset) -> None:
    result = check_image(describe_ref(SEED_IMAGE), seed_host, seed)
    assert result.verdict == "compatible", result.reasons
    texts = " | ".join(r.text for r in result.reasons)
    assert "driver 535.54.03" in texts and "runs CUDA 11.7" in texts
    assert "Ampere (sm80)" in texts
    assert result.flash_attn_install  # the seed pip-installs flash-attn; devel image has nvcc


def test_seed_image_on_h200_is_incompatible_for_hopper(h200: HostGpus, seed: Preset) -> None:
    result = check_image(describe_ref(SEED_IMAGE), h200, seed)
    assert result.verdict == "incompatible"
    bad = [r for r in result.reasons if r.level == "incompatible"]
    assert [r.check for r in bad] == ["arch"]
    assert bad[0].text == "Hopper (sm90) needs CUDA ≥ 11.8; image has 11.7"


def test_h200_suggestion_is_newest_compatible(h200: HostGpus, vicuna7b: Preset) -> None:
    images = load_catalog()
    results = [check_image(i, h200, vicuna7b) for i in images]
    pick = suggest(images, results)
    assert pick is not None
    chosen = describe_ref(pick)
    assert chosen.flavor == "devel"  # flash-attn (auto on sm90) must be built
    assert (11, 8) <= version_tuple(chosen.cuda)[:2] <= (13, 0)
    newest = max(
        version_tuple(i.torch)
        for i, r in zip(images, results, strict=True)
        if r.verdict == "compatible"
    )
    assert version_tuple(chosen.torch) == newest


def test_newer_minor_cuda_on_535_is_a_warning(seed_host: HostGpus, vicuna7b: Preset) -> None:
    image = describe_ref("pytorch/pytorch:2.5.1-cuda12.4-cudnn9-devel")
    result = check_image(image, seed_host, vicuna7b)
    assert result.verdict == "warning"
    assert "minor-version compatibility" in result.reasons[0].text
    assert "driver ≥ 550.54.14" in result.reasons[0].text


def test_newer_major_cuda_is_incompatible_with_the_driver_to_install(vicuna7b: Preset) -> None:
    host = HostGpus("470.57.02", "11.4", [Gpu("NVIDIA A100", (8, 0))])
    result = check_image(
        describe_ref("pytorch/pytorch:2.5.1-cuda12.1-cudnn9-devel"), host, vicuna7b
    )
    assert result.verdict == "incompatible"
    assert "upgrade the driver to ≥ 530.30.02" in result.reasons[0].text


def test_suggestion_on_seed_server_stays_within_cuda_12_2(
    seed_host: HostGpus, vicuna7b: Preset
) -> None:
    images = load_catalog()
    pick = suggest(images, [check_image(i, seed_host, vicuna7b) for i in images])
    assert pick is not None
    assert version_tuple(describe_ref(pick).cuda)[:2] <= (12, 2)


@pytest.mark.parametrize(
    ("cc", "ref", "fragment"),
    [
        (
            (12, 0),
            "pytorch/pytorch:2.6.0-cuda12.6-cudnn9-devel",
            "Blackwell (sm120) needs CUDA ≥ 12.8",
        ),
        ((7, 0), "pytorch/pytorch:2.9.0-cuda13.0-cudnn9-devel", "CUDA 13.0 dropped Volta (sm70)"),
        ((8, 9), "pytorch/pytorch:2.0.1-cuda11.7-cudnn8-devel", "Ada (sm89) needs CUDA ≥ 11.8"),
    ],
)
def test_architecture_limits(
    cc: tuple[int, int], ref: str, fragment: str, vicuna7b: Preset
) -> None:
    host = HostGpus("580.65.06", "13.0", [Gpu("gpu", cc)])
    result = check_image(describe_ref(ref), host, vicuna7b)
    assert result.verdict == "incompatible"
    assert any(fragment in r.text for r in result.reasons)


def test_flash_attn_always_needs_devel(seed_host: HostGpus, seed: Preset) -> None:
    result = check_image(
        describe_ref("pytorch/pytorch:2.0.1-cuda11.7-cudnn8-runtime"), seed_host, seed
    )
    assert result.verdict == "incompatible"
    assert any(r.check == "flash_attn" and "-devel" in r.text for r in result.reasons)


def test_flash_attn_auto_on_runtime_image_is_skipped_with_warning(
    seed_host: HostGpus, vicuna7b: Preset
) -> None:
    image = describe_ref("pytorch/pytorch:2.5.1-cuda12.1-cudnn9-runtime")
    result = check_image(image, seed_host, vicuna7b)
    assert result.verdict == "warning"
    assert not result.flash_attn_install
    assert any("SDPA" in r.text for r in result.reasons)


def test_flash_attn_always_on_turing_is_incompatible(seed: Preset) -> None:
    host = HostGpus("535.54.03", "12.2", [Gpu("Tesla T4", (7, 5))])
    result = check_image(describe_ref(SEED_IMAGE), host, seed)
    assert any(r.text == "flash-attn 2 needs sm80+; GPUs are sm75" for r in result.reasons)


def test_transformers_pin_needs_newer_torch(seed_host: HostGpus, vicuna7b: Preset) -> None:
    # vicuna-7b pins transformers 4.57.6, whose wheel requires torch>=2.2.
    result = check_image(describe_ref(SEED_IMAGE), seed_host, vicuna7b)
    assert result.verdict == "incompatible"
    bad = [r for r in result.reasons if r.check == "torch"]
    assert "transformers 4.57.6 needs torch ≥ 2.2; the image has 2.0.1" in bad[0].text


def test_torch_spec_overrides_image_torch(vicuna7b: Preset) -> None:
    env = vicuna7b.environment.model_copy(update={"torch_spec": "torch==2.13.0"})
    preset = vicuna7b.model_copy(update={"environment": env})
    result = check_image(describe_ref("trainwiz-base:bookworm"), HostGpus(), preset)
    torch = [r for r in result.reasons if r.check == "torch"]
    assert torch[0].level == "ok" and "torch_spec torch==2.13.0" in torch[0].text


def test_cpu_preset_prefers_an_image_without_cuda() -> None:
    preset = load_preset("tiny-cpu")
    env = preset.environment.model_copy(update={"torch_spec": "torch==2.13.0"})
    preset = preset.model_copy(update={"environment": env})
    images = load_catalog()
    results = [check_image(i, HostGpus(), preset) for i in images]
    assert suggest(images, results, cpu_only=True) == "trainwiz-base:bookworm"
