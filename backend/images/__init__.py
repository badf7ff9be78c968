"""Images and the training environment: catalog, compatibility, pull, env image, host venv."""

from backend.images.build import (
    BuildFinding,
    BuildResult,
    build_env_image,
    env_image_tag,
)
from backend.images.catalog import (
    ImageInfo,
    describe_ref,
    load_catalog,
    local_images,
    merged_catalog,
)
from backend.images.compat import Compatibility, Reason, check_image, suggest
from backend.images.cuda_tables import max_cuda_for_driver
from backend.images.host import Gpu, HostGpus, detect_host_gpus
from backend.images.pull import PullResult, pull_image
from backend.images.venv import VenvResult, build_host_env, ensure_host_env

__all__ = [
    "BuildFinding",
    "BuildResult",
    "Compatibility",
    "Gpu",
    "HostGpus",
    "ImageInfo",
    "PullResult",
    "Reason",
    "VenvResult",
    "build_env_image",
    "build_host_env",
    "check_image",
    "describe_ref",
    "detect_host_gpus",
    "ensure_host_env",
    "env_image_tag",
    "load_catalog",
    "local_images",
    "max_cuda_for_driver",
    "merged_catalog",
    "pull_image",
    "suggest",
]
