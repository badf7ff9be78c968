"""The image catalog: shipped entries (presets/images.yaml) plus the images on this machine.

Compatibility needs torch/CUDA/flavor for every image. The catalog gives them for known tags;
local images not in the catalog are described from their tag (Docker Hub's pytorch naming),
from trainwiz's own labels (env images), or left unknown, which the checks say plainly.
"""

from __future__ import annotations

import functools
import re
from pathlib import Path
from typing import Any, Literal

import yaml
from pydantic import BaseModel, ConfigDict, Field

from backend.errors import BadInput, TrainwizError
from backend.i18n import _
from backend.images.cuda_tables import pinned_version
from backend.images.docker_client import docker_client

CATALOG_PATH = Path(__file__).resolve().parents[2] / "presets" / "images.yaml"

Family = Literal["pytorch", "ngc", "local", "trainwiz-env", "unknown"]

_PYTORCH_TAG = re.compile(
    r"^(?:docker\.io/)?(?:library/)?pytorch/pytorch:(?P<torch>\d+\.\d+\.\d+)-cuda(?P<cuda>\d+\.\d+)"
    r"-cudnn(?P<cudnn>\d+)-(?P<flavor>runtime|devel)$"
)


class ImageInfo(BaseModel):
    """What trainwiz knows about one image; ``None`` fields are unknown, not absent."""

    model_config = ConfigDict(extra="forbid")

    ref: str
    family: Family = "unknown"
    torch: str | None = None
    cuda: str | None = None
    cudnn: str | None = None
    python: str | None = None
    flavor: Literal["runtime", "devel"] | None = None
    flash_attn: bool = False
    released: str | None = None
    local: bool = Field(False, description="present on this machine's Docker daemon")
    image_id: str | None = None
    size_bytes: int | None = None


class Catalog(BaseModel):
    model_config = ConfigDict(extra="forbid")

    schema_version: Literal[1] = Field(1, alias="schema")
    images: list[ImageInfo]


def load_catalog(path: Path | None = None) -> list[ImageInfo]:
    """The shipped catalog, validated (a broken file is a BadInput naming the entry)."""
    source = path or CATALOG_PATH
    try:
        stamp = source.stat().st_mtime_ns
    except OSError as exc:
        raise TrainwizError(
            _("cannot read the image catalog {source}: {exc}").format(source=source, exc=exc)
        ) from exc
    return [entry.model_copy() for entry in _load(source, stamp)]


@functools.lru_cache(maxsize=4)
def _load(source: Path, stamp: int) -> tuple[ImageInfo, ...]:
    """Parsed once per file version: the screens and checks ask for it often."""
    try:
        raw = yaml.safe_load(source.read_text(encoding="utf-8"))
    except OSError as exc:
        raise TrainwizError(
            _("cannot read the image catalog {source}: {exc}").format(source=source, exc=exc)
        ) from exc
    try:
        return tuple(Catalog.model_validate(raw).images)
    except ValueError as exc:
        raise BadInput(f"{source}: {exc}") from exc


def describe_ref(ref: str, catalog: list[ImageInfo] | None = None) -> ImageInfo:
    """Catalog entry for ``ref``, else what its tag says, else an unknown image."""
    for entry in catalog if catalog is not None else load_catalog():
        if entry.ref == ref:
            return entry.model_copy()
    match = _PYTORCH_TAG.match(ref)
    if match:
        flavor: Literal["runtime", "devel"] = (
            "devel" if match.group("flavor") == "devel" else "runtime"
        )
        return ImageInfo(
            ref=ref,
            family="pytorch",
            torch=match.group("torch"),
            cuda=match.group("cuda"),
            cudnn=match.group("cudnn"),
            flavor=flavor,
        )
    if ref.startswith("trainwiz-env:"):
        return ImageInfo(ref=ref, family="trainwiz-env")
    return ImageInfo(ref=ref, family="unknown")


def _from_labels(info: ImageInfo, labels: dict[str, str]) -> ImageInfo:
    """trainwiz env images carry their base's facts as labels; use them when the tag says nothing."""
    mapping = {
        "torch": "org.trainwiz.torch",
        "cuda": "org.trainwiz.cuda",
        "python": "org.trainwiz.python",
        "flavor": "org.trainwiz.flavor",
    }
    updates: dict[str, Any] = {}
    for field, label in mapping.items():
        value = labels.get(label)
        if value and getattr(info, field) is None:
            updates[field] = value
    pinned = pinned_version(labels.get("org.trainwiz.torch_spec"))
    if pinned and info.torch is None and "torch" not in updates:
        updates["torch"] = pinned
    if labels.get("org.trainwiz.flash_attn") == "true":
        updates["flash_attn"] = True
    return info.model_copy(update=updates) if updates else info


def local_images(client: Any = None, catalog: list[ImageInfo] | None = None) -> list[ImageInfo]:
    """Every tagged image on the Docker daemon, described as far as trainwiz can."""
    cat = catalog if catalog is not None else load_catalog()
    api = client or docker_client()
    found: list[ImageInfo] = []
    for image in api.images.list():
        labels = (image.attrs.get("Config") or {}).get("Labels") or {}
        for tag in image.tags:
            info = describe_ref(tag, cat)
            info = _from_labels(info, labels)
            found.append(
                info.model_copy(
                    update={
                        "local": True,
                        "image_id": image.short_id,
                        "size_bytes": image.attrs.get("Size"),
                    }
                )
            )
    return sorted(found, key=lambda i: i.ref)


def merged_catalog(client: Any = None, include_local: bool = True) -> list[ImageInfo]:
    """Catalog entries (marked ``local`` when present) followed by local images not in it."""
    cat = load_catalog()
    if not include_local:
        return cat
    local = {i.ref: i for i in local_images(client, cat)}
    merged: list[ImageInfo] = []
    for entry in cat:
        here = local.pop(entry.ref, None)
        if here is not None:
            entry = entry.model_copy(
                update={"local": True, "image_id": here.image_id, "size_bytes": here.size_bytes}
            )
        merged.append(entry)
    merged.extend(local.values())
    return merged
