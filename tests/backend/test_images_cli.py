"""`trainwiz images` and `trainwiz env` through the real CLI entry (no daemon needed here)."""

from __future__ import annotations

import json

import pytest

from tui.cli import main


def test_images_json_for_the_seed_server(capsys: pytest.CaptureFixture[str]) -> None:
    code = main(
        [
            "images",
            "--preset",
            "vicuna-13b-v1.3-8xa100",
            "--driver",
            "535.54.03",
            "--gpu",
            "8.0",
            "--no-local",
            "--json",
        ]
    )
    assert code == 0
    data = json.loads(capsys.readouterr().out)
    assert data["host"]["driver_version"] == "535.54.03"
    rows = {r["image"]["ref"]: r["compat"] for r in data["rows"]}
    assert rows["pytorch/pytorch:2.0.1-cuda11.7-cudnn8-devel"]["verdict"] == "compatible"
    assert data["suggestion"] == "pytorch/pytorch:2.7.1-cuda11.8-cudnn9-devel"


def test_images_table_on_h200_hides_incompatible(capsys: pytest.CaptureFixture[str]) -> None:
    args = ["images", "--preset", "vicuna-13b-v1.3-8xa100", "--driver", "580.159.04"]
    assert main([*args, "--cuda", "13.0", "--gpu", "9.0", "--no-local"]) == 0
    out = capsys.readouterr().out
    assert "driver 580.159.04 (CUDA 13.0)" in out
    assert "2.0.1-cuda11.7" not in out and "incompatible images hidden" in out
    assert main([*args, "--cuda", "13.0", "--gpu", "9.0", "--no-local", "--all"]) == 0
    assert "Hopper (sm90) needs CUDA ≥ 11.8; image has 11.7" in capsys.readouterr().out


def test_no_compatible_image_exits_1(capsys: pytest.CaptureFixture[str]) -> None:
    code = main(
        [
            "images",
            "--preset",
            "vicuna-7b-4xa100-40g",
            "--driver",
            "418.67",
            "--gpu",
            "7.0",
            "--no-local",
        ]
    )
    assert code == 1
    assert "no compatible image" in capsys.readouterr().out


def test_env_tag_and_dockerfile_agree(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["env", "tag", "vicuna-7b-4xa100-40g"]) == 0
    tag = capsys.readouterr().out.strip()
    assert tag.startswith("trainwiz-env:")
    assert main(["env", "dockerfile", "vicuna-7b-4xa100-40g"]) == 0
    dockerfile = capsys.readouterr().out
    assert dockerfile.splitlines()[1] == "FROM pytorch/pytorch:2.5.1-cuda12.4-cudnn9-devel"
    assert f'org.trainwiz.inputs="{tag.split(":")[1]}"' in dockerfile


def test_env_build_bad_preset_is_bad_input(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["env", "build", "no-such-preset"]) == 2
