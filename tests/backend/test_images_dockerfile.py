"""The generated environment: requirement list, exec-form Dockerfile, hashed tag, build context."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
from pydantic import ValidationError

from backend.errors import BadInput
from backend.images.catalog import describe_ref
from backend.images.dockerfile import env_tag_for, render_dockerfile, write_context
from backend.images.host import Gpu, HostGpus
from backend.images.plan import max_jobs_for, plan_environment, project_name
from backend.preset.loader import load_preset
from backend.preset.schema import EnvironmentConfig, Preset

A100 = HostGpus("535.54.03", "12.2", [Gpu("NVIDIA A100", (8, 0))] * 4, 64 << 30, 32)
NO_GPU = HostGpus(ram_bytes=24 << 30, cpu_count=2)


def with_env(preset: Preset, **changes: object) -> Preset:
    env = EnvironmentConfig.model_validate({**preset.environment.model_dump(), **changes})
    return preset.model_copy(update={"environment": env})


def run_lines(text: str) -> list[list[str]]:
    """Every RUN must be exec form: a JSON argv, never a shell string."""
    runs = [line[4:] for line in text.splitlines() if line.startswith("RUN ")]
    return [json.loads(r) for r in runs]


def test_seed_dockerfile_follows_the_seed_steps(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("PIP_CERT", raising=False)
    monkeypatch.setenv("HOME", "/nonexistent")
    seed = load_preset("vicuna-13b-v1.3-8xa100")
    plan = plan_environment(seed, A100)
    text = render_dockerfile(plan)
    assert text.splitlines()[1] == "FROM pytorch/pytorch:2.0.1-cuda11.7-cudnn8-devel"
    argvs = run_lines(text)
    mirror = ["--index-url", "https://pypi.tuna.tsinghua.edu.cn/simple"]
    assert argvs[0] == ["python3", "/opt/trainwiz/apt_install.py", "git"]
    assert argvs[1] == [
        "python3",
        "-m",
        "pip",
        "install",
        *mirror,
        "--upgrade",
        "pip",
        "setuptools",
        "wheel",
    ]
    assert [
        "git",
        "clone",
        "--depth",
        "1",
        "--",  # a URL can never be read as a git option
        "https://github.com/lm-sys/FastChat.git",
        "/app/FastChat",
    ] in argvs
    main = next(a for a in argvs if "transformers==4.31.0" in a)
    assert {"einops", "deepspeed", "peft", "accelerate", "sentencepiece"} <= set(main)
    flash = next(a for a in argvs if a[1].endswith("flash_attn.py"))
    assert flash[2] == str(max_jobs_for(A100, None)) == "10"  # 64 GiB / 6 GiB per nvcc job
    assert flash[3:5] == mirror
    assert ["python3", "/opt/trainwiz/fsdp_patch.py"] in argvs
    assert argvs[-1] == ["python3", "/opt/trainwiz/verify.py"]


def test_flash_attn_skipped_without_sm80(monkeypatch: pytest.MonkeyPatch) -> None:
    preset = load_preset("vicuna-7b-4xa100-40g")  # install: auto
    assert plan_environment(preset, A100).flash_attn
    assert not plan_environment(
        preset, HostGpus("535.54.03", "12.2", [Gpu("V100", (7, 0))])
    ).flash_attn
    assert not plan_environment(preset, NO_GPU).flash_attn
    has_it = describe_ref(preset.environment.image).model_copy(update={"flash_attn": True})
    assert not plan_environment(preset, A100, has_it).flash_attn


def test_tag_is_stable_and_changes_with_inputs() -> None:
    preset = load_preset("vicuna-7b-4xa100-40g")
    tag = env_tag_for(plan_environment(preset, A100))
    assert tag == env_tag_for(plan_environment(preset, A100))
    assert tag.startswith("trainwiz-env:") and len(tag.split(":")[1]) == 16
    other = with_env(preset, transformers="4.56.2")
    assert env_tag_for(plan_environment(other, A100)) != tag
    assert env_tag_for(plan_environment(preset, NO_GPU)) != tag  # flash-attn dropped


def test_requirement_specs_cannot_inject_options() -> None:
    preset = load_preset("vicuna-7b-4xa100-40g")
    # The schema refuses them first now (ValidationError); the image plan still checks too.
    with pytest.raises((BadInput, ValidationError), match="extra_packages"):
        plan_environment(with_env(preset, extra_packages=["-r/etc/passwd"]), A100)
    with pytest.raises((BadInput, ValidationError), match="apt_packages"):
        plan_environment(with_env(preset, apt_packages=["git; rm -rf /"]), A100)


def test_preset_spelling_of_a_base_package_wins() -> None:
    preset = with_env(
        load_preset("vicuna-7b-4xa100-40g"), extra_packages=["accelerate>=0.26", "einops"]
    )
    reqs = plan_environment(preset, A100).requirements
    assert "accelerate>=0.26" in reqs and "accelerate" not in reqs
    assert project_name("Flash_Attn>=2.5") == "flash-attn"


def test_context_carries_only_the_wheels_it_installs(tmp_path: Path) -> None:
    wheels = tmp_path / "wheels"
    wheels.mkdir()
    (wheels / "torch-2.13.0+cpu-cp311-cp311-manylinux_2_28_x86_64.whl").write_bytes(b"x" * 10)
    (wheels / "numpy-2.0.0-cp311-cp311-linux_x86_64.whl").write_bytes(b"y")
    cert = tmp_path / "ca.crt"
    cert.write_text("-----BEGIN CERTIFICATE-----\n")
    preset = with_env(
        load_preset("tiny-cpu"),
        torch_spec="torch==2.13.0",
        find_links=[str(wheels), str(tmp_path / "missing")],
        pip_cert=str(cert),
    )
    plan = plan_environment(preset, NO_GPU)
    assert plan.notes == [f"find_links {tmp_path / 'missing'} is not a directory here: ignored"]
    context = write_context(plan, tmp_path / "ctx")
    assert sorted(p.name for p in (context / "trainwiz" / "wheels").iterdir()) == [
        "torch-2.13.0+cpu-cp311-cp311-manylinux_2_28_x86_64.whl"
    ]
    assert (context / "trainwiz" / "pip-ca.crt").read_text() == cert.read_text()
    text = (context / "Dockerfile").read_text()
    assert "ENV PIP_CERT=/opt/trainwiz/pip-ca.crt" in text
    torch_run = next(a for a in run_lines(text) if "torch==2.13.0" in a)
    assert torch_run[-3:] == ["--find-links", "/opt/trainwiz/wheels", "torch==2.13.0"]
    for script in (
        "apt_install.py",
        "constraints.py",
        "flash_attn.py",
        "fsdp_patch.py",
        "verify.py",
    ):
        assert (context / "trainwiz" / script).is_file()
    before = env_tag_for(plan)
    cert.write_text("another CA\n")
    assert env_tag_for(plan_environment(preset, NO_GPU)) != before


def _fake_torch(root: Path, version: str) -> Path:
    """A package named torch with real dist-info metadata and the seed's FSDP line."""
    site = root / "site"
    fsdp = site / "torch" / "distributed" / "fsdp"
    fsdp.mkdir(parents=True)
    for pkg in (site / "torch", site / "torch" / "distributed", fsdp):
        (pkg / "__init__.py").write_text("")
    (fsdp / "_state_dict_utils.py").write_text(
        "def hook(state_dict, fqn):\n    state_dict[fqn] = state_dict[fqn].clone().detach()\n"
    )
    info = site / f"torch-{version}.dist-info"
    info.mkdir()
    (info / "METADATA").write_text(f"Metadata-Version: 2.1\nName: torch\nVersion: {version}\n")
    return site


def _script(name: str) -> str:
    return str(Path(__file__).resolve().parents[2] / "backend" / "images" / "context" / name)


def test_fsdp_patch_edits_torch_2_0_only(tmp_path: Path) -> None:
    old = _fake_torch(tmp_path / "a", "2.0.1")
    done = subprocess.run(
        [sys.executable, "-S", _script("fsdp_patch.py")],
        env={"PYTHONPATH": str(old)},
        capture_output=True,
        text=True,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    patched = (old / "torch/distributed/fsdp/_state_dict_utils.py").read_text()
    assert "state_dict[fqn].cpu().clone().detach()" in patched
    new = _fake_torch(tmp_path / "b", "2.1.0")
    done = subprocess.run(
        [sys.executable, "-S", _script("fsdp_patch.py")],
        env={"PYTHONPATH": str(new)},
        capture_output=True,
        text=True,
    )
    assert "skipped: torch 2.1.0 is not 2.0.x" in done.stdout
    assert ".cpu()" not in (new / "torch/distributed/fsdp/_state_dict_utils.py").read_text()


def test_constraints_pin_the_installed_torch(tmp_path: Path) -> None:
    site = _fake_torch(tmp_path, "2.0.1")
    out = tmp_path / "constraints.txt"
    subprocess.run(
        [sys.executable, "-S", _script("constraints.py"), str(out)],
        env={"PYTHONPATH": str(site)},
        check=True,
        capture_output=True,
    )
    assert out.read_text() == "torch==2.0.1\n"
