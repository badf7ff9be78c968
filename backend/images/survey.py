"""The Images step's data in one call: every image with its verdict, and the suggestion."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from backend.errors import TrainwizError
from backend.images.catalog import ImageInfo, load_catalog, merged_catalog
from backend.images.compat import Compatibility, check_image, newest_key, suggest
from backend.images.docker_client import docker_client, registry_mirrors
from backend.images.dockerfile import TAG_REPO
from backend.images.host import Gpu, HostGpus, detect_host_gpus
from backend.preset.schema import ModelSource, Preset, TrainingArgs


@dataclass
class ImageRow:
    image: ImageInfo
    compat: Compatibility


@dataclass
class ImagesSurvey:
    preset: str
    host: HostGpus
    rows: list[ImageRow]
    suggestion: str | None
    docker_error: str | None = None
    mirrors: list[str] = field(default_factory=list)


def default_preset() -> Preset:
    """Schema defaults (CUDA training, flash-attn auto, the tested transformers pin)."""
    return Preset(
        name="schema-defaults",
        model=ModelSource(source="local", dir="/nonexistent"),
        training=TrainingArgs(data_path="-", output_dir="-"),
    )


def host_override(
    base: HostGpus, driver: str | None, cuda: str | None, gpus: list[str] | None
) -> HostGpus:
    """Replace detected facts for a what-if ('--driver 535.54.03 --gpu 8.0')."""
    if driver is None and cuda is None and not gpus:
        return base
    parsed: list[Gpu] = []
    for text in gpus or []:
        major, _, minor = text.partition(".")
        parsed.append(
            Gpu(name=f"sm{major}{minor or 0}", compute_capability=(int(major), int(minor or 0)))
        )
    return HostGpus(
        driver_version=driver or base.driver_version,
        cuda_driver=cuda if (cuda or driver) else base.cuda_driver,
        gpus=parsed or base.gpus,
        ram_bytes=base.ram_bytes,
        cpu_count=base.cpu_count,
    )


def survey_images(
    preset: Preset | None = None,
    host: HostGpus | None = None,
    include_local: bool = True,
    client: Any = None,
) -> ImagesSurvey:
    """Catalog + local images checked against this host and preset, newest first.

    A daemon that does not answer is not fatal here: the catalog is still judged and the
    survey says why local images are missing.
    """
    chosen = preset or default_preset()
    facts = host if host is not None else detect_host_gpus()
    docker_error = None
    mirrors: list[str] = []
    images: list[ImageInfo]
    if include_local:
        try:
            api = client or docker_client(timeout=10)
            images = merged_catalog(api)
            mirrors = registry_mirrors(api)
        except TrainwizError as exc:
            docker_error = str(exc)
            images = load_catalog()
    else:
        images = load_catalog()
    images.sort(key=newest_key, reverse=True)
    results = [check_image(i, facts, chosen) for i in images]
    rows = [ImageRow(i, c) for i, c in zip(images, results, strict=True)]
    return ImagesSurvey(
        chosen.name,
        facts,
        rows,
        suggest(images, results, chosen.launch.device == "cpu"),
        docker_error,
        mirrors,
    )


ENV_PREFIX = f"{TAG_REPO}:"  # the images trainwiz builds (one per preset and inputs)


def own_suggestion(survey: ImagesSurvey, own_tag: str | None) -> str | None:
    """The survey's suggestion, but never another preset's (or user's) built env image: of the
    ``trainwiz-env:`` images only the one this preset builds is this user's to suggest."""

    def mine(ref: str) -> bool:
        return not ref.startswith(ENV_PREFIX) or ref == own_tag

    if survey.suggestion is None or mine(survey.suggestion):
        return survey.suggestion
    ok = [
        r.image.ref for r in survey.rows if r.compat.verdict == "compatible" and mine(r.image.ref)
    ]
    return ok[0] if ok else None
