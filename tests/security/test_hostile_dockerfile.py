"""Hostile values never add a Dockerfile line: every accepted case renders the same structure."""

from __future__ import annotations

import json

import pytest
from pydantic import ValidationError

from backend.errors import BadInput
from backend.images.catalog import describe_ref
from backend.images.dockerfile import render_dockerfile
from backend.images.host import HostGpus
from backend.images.plan import plan_environment
from backend.preset.grammar import IMAGE_REF
from backend.preset.schema import Preset
from tests.security.hostile import BASES, PAYLOADS, place, slots

HOST = HostGpus(ram_bytes=24 << 30, cpu_count=2)
INSTRUCTIONS = ("#", "FROM ", "ENV ", "COPY ", "RUN ", "LABEL ")


def _shape(text: str) -> list[str]:
    """The instruction of each line; RUN/LABEL payloads must parse as JSON."""
    shape = []
    for line in text.splitlines():
        assert line.startswith(INSTRUCTIONS), line[:200]
        if line.startswith("RUN "):
            argv = json.loads(line[4:])
            assert isinstance(argv, list) and all(isinstance(a, str) for a in argv)
        if line.startswith("FROM "):
            assert IMAGE_REF.fullmatch(line[5:]), line
        shape.append(line.split(" ", 1)[0])
    return shape


@pytest.mark.parametrize("base_name", ["hf-docker-image", "lfs-docker-in-container"])
def test_accepted_hostile_values_keep_the_dockerfile_shape(base_name: str) -> None:
    base = BASES[base_name]
    baseline = _shape(render_dockerfile(plan_environment(Preset.model_validate(base), HOST)))
    rendered = 0
    for slot in slots():
        if slot.kind == "number" or slot.path[0] != "environment":
            continue
        for name, payload in PAYLOADS.items():
            if name == "ten_mb":
                continue
            data = place(base, slot, payload)
            if data is None:
                continue
            try:
                preset = Preset.model_validate(data)
                text = render_dockerfile(plan_environment(preset, HOST))
            except (ValidationError, BadInput):
                continue
            assert _shape(text) == baseline, (slot.dotted(), name)
            rendered += 1
    assert rendered > 20


def test_from_refuses_a_reference_that_bypassed_the_schema() -> None:
    preset = Preset.model_validate(BASES["hf-docker-image"])
    plan = plan_environment(preset, HOST)
    plan.base = describe_ref("ubuntu:22.04\nRUN echo pwned")
    with pytest.raises(BadInput, match=r"environment\.image"):
        render_dockerfile(plan)


@pytest.mark.parametrize(
    "image",
    [
        "pytorch/pytorch:2.5.1-cuda12.4-cudnn9-devel",
        "registry.example.com:5000/team/img:tag",
        "nvcr.io/nvidia/pytorch:24.01-py3",
        "trainwiz-base:bookworm",
        "img@sha256:" + "a" * 64,
    ],
)
def test_real_image_references_are_accepted(image: str) -> None:
    assert IMAGE_REF.fullmatch(image)
