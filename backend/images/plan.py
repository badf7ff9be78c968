"""What goes into a training environment, decided once for both the image and the host venv.

The same requirement list feeds the Dockerfile and the host venv, so "built the same way" holds.
Every value that changes the result (base image, pins, index, wheels, certificate, flash-attn
decision, MAX_JOBS) is part of the plan, and the plan's hash names the environment, which is how a
second build of unchanged inputs becomes a lookup instead of a build.
"""

from __future__ import annotations

import configparser
import hashlib
import json
import os
import re
from dataclasses import dataclass, field
from pathlib import Path

from backend.errors import BadInput
from backend.i18n import _
from backend.images.catalog import ImageInfo, describe_ref
from backend.images.compat import wants_flash_attn
from backend.images.host import HostGpus, detect_host_gpus
from backend.images.methods import method_packages
from backend.images.pipindex import PipIndexes
from backend.preset.grammar import check_apt_package, check_pip_requirement
from backend.preset.schema import Preset
from backend.units import GIB

BASE_PACKAGES = ["accelerate", "peft", "sentencepiece", "protobuf", "einops"]
FLASH_ATTN_GIB_PER_JOB = 6  # one nvcc job of flash-attn's kernels peaks around 4-6 GiB


def project_name(spec: str) -> str:
    """PEP 503 name of a requirement: 'Flash_Attn>=2' -> 'flash-attn'."""
    match = re.match(r"[A-Za-z0-9][A-Za-z0-9._\-]*", spec)
    name = match.group(0) if match else spec
    return re.sub(r"[-_.]+", "-", name).lower()


def _check_spec(spec: str, field_name: str) -> str:
    """The schema's own rule (backend.preset.grammar), again at the point of use: a preset built
    in code or edited in the form reaches here without passing the YAML loader."""
    try:
        return check_pip_requirement(spec)
    except ValueError as exc:
        raise BadInput(f"environment.{field_name}: {exc}") from None


@dataclass
class EnvPlan:
    """Everything that decides an environment; ``inputs_hash`` names it."""

    preset_name: str
    base: ImageInfo
    torch_spec: str | None
    fastchat_spec: str | None
    fastchat_editable: tuple[str, str] | None  # (git_url, path)
    requirements: list[str]
    indexes: PipIndexes  # the URLs as written, secrets included: see pipindex.py for their forms
    find_links: list[Path]
    pip_cert: Path | None
    apt_packages: list[str]
    upgrade_pip: bool
    flash_attn: bool
    max_jobs: int
    fsdp_patch: bool
    notes: list[str] = field(default_factory=list)

    def wheel_names(self) -> set[str]:
        """Projects whose local wheels a build may need (torch, the pins, flash-attn)."""
        names = {project_name(s) for s in self.requirements}
        if self.torch_spec:
            names.add(project_name(self.torch_spec))
        if self.fastchat_spec:
            names.add(project_name(self.fastchat_spec))
        if self.flash_attn:
            names.add("flash-attn")
        return names

    def local_wheels(self) -> list[Path]:
        """Wheels in the find-links directories that this plan installs (name match)."""
        wanted = self.wheel_names()
        found: list[Path] = []
        for folder in self.find_links:
            for wheel in sorted(folder.glob("*.whl")):
                if project_name(wheel.name.split("-")[0]) in wanted:
                    found.append(wheel)
        return found

    @property
    def pip_args(self) -> list[str]:
        """pip options every install step of the image takes: never a credential (a proxied
        build names only the loopback proxy as a trusted host; its URLs arrive as ARGs)."""
        if self.indexes.needs_proxy:
            return self.indexes.proxy_argv()
        return self.indexes.argv()

    @property
    def flash_attn_pip_args(self) -> list[str]:
        if self.indexes.needs_proxy:
            return self.indexes.proxy_argv()
        return self.indexes.flash_attn_argv()

    def inputs_hash(self) -> str:
        payload: dict[str, object] = {
            "base": self.base.ref,
            "torch": self.torch_spec,
            "fastchat": self.fastchat_spec,
            "fastchat_editable": self.fastchat_editable,
            "requirements": self.requirements,
            "pip_args": self.pip_args,
            "wheels": [(w.name, w.stat().st_size) for w in self.local_wheels()],
            "cert": _file_digest(self.pip_cert) if self.pip_cert else None,
            "apt": self.apt_packages,
            "upgrade_pip": self.upgrade_pip,
            "flash_attn": self.flash_attn,
            "flash_attn_pip_args": self.flash_attn_pip_args,
            "max_jobs": self.max_jobs if self.flash_attn else None,
            "fsdp_patch": self.fsdp_patch,
            "scripts": _scripts_digest(),
            "format": 1,
        }
        if self.indexes.needs_proxy:
            # Passwords hidden (a hash of a secret is one too) and no proxy port (a rebuild of
            # unchanged inputs stays a lookup); a plan without secrets hashes as it always did.
            payload["pip_proxy"] = self.indexes.for_hash()
        blob = json.dumps(payload, sort_keys=True, default=str).encode()
        return hashlib.sha256(blob).hexdigest()[:16]


def _scripts_digest() -> str:
    """The helper scripts are build inputs too: editing one must change the tag."""
    digest = hashlib.sha256()
    for script in sorted((Path(__file__).resolve().parent / "context").glob("*.py")):
        digest.update(script.name.encode() + script.read_bytes())
    return digest.hexdigest()


def _file_digest(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def host_pip_cert() -> Path | None:
    """The CA bundle the host's pip uses (PIP_CERT, then pip config files), if any.

    Builds copy it in so pip inside the build trusts what the host's pip trusts (a proxy CA).
    """
    explicit = os.environ.get("PIP_CERT")
    if explicit and Path(explicit).is_file():
        return Path(explicit)
    files = [
        os.environ.get("PIP_CONFIG_FILE", ""),
        "/etc/pip.conf",
        "/etc/xdg/pip/pip.conf",
        str(Path.home() / ".config" / "pip" / "pip.conf"),
        str(Path.home() / ".pip" / "pip.conf"),
    ]
    found: Path | None = None
    for name in files:
        if not name or not Path(name).is_file():
            continue
        parser = configparser.ConfigParser()
        try:
            parser.read(name)
        except configparser.Error:
            continue
        value = parser.get("global", "cert", fallback=None) or parser.get(
            "install", "cert", fallback=None
        )
        if value and Path(value).is_file():
            found = Path(value)  # later files override earlier ones, as pip does
    return found


def max_jobs_for(host: HostGpus, explicit: int | None) -> int:
    """MAX_JOBS for nvcc: one job per ~6 GiB of RAM, at most one per core, at least one."""
    if explicit:
        return explicit
    ram_jobs = (host.ram_bytes or 8 * GIB) // (FLASH_ATTN_GIB_PER_JOB * GIB)
    return max(1, min(host.cpu_count or 1, int(ram_jobs)))


def pip_indexes(preset: Preset, flash_attn: bool) -> PipIndexes:
    """The preset's indexes, checked again here (a preset built in code skips the loader), with
    flash-attn's own index only when this plan builds flash-attn."""
    env = preset.environment
    fa_url = env.flash_attn.index_url if flash_attn else None
    return PipIndexes.checked(
        _check_spec(env.pip_index_url, "pip_index_url") if env.pip_index_url else None,
        [_check_spec(url, "pip_extra_index_urls") for url in env.pip_extra_index_urls],
        [_check_spec(host, "pip_trusted_hosts") for host in env.pip_trusted_hosts],
        _check_spec(fa_url, "flash_attn.index_url") if fa_url else None,
    )


def requirement_list(preset: Preset) -> list[str]:
    """transformers pin, the base training set, the preset's extras, what the method needs."""
    env = preset.environment
    specs = [f"transformers=={env.transformers}", *BASE_PACKAGES]
    for extra in env.extra_packages:
        specs.append(_check_spec(extra, "extra_packages"))
    specs += method_packages(preset)  # deepspeed (ZeRO), bitsandbytes (QLoRA)
    merged: dict[str, str] = {}
    for spec in specs:
        name = project_name(spec)
        # The preset's own spelling wins over a bare base name (e.g. 'accelerate>=0.26').
        if name not in merged or merged[name] == name:
            merged[name] = spec
    return list(merged.values())


def plan_environment(
    preset: Preset, host: HostGpus | None = None, base: ImageInfo | None = None
) -> EnvPlan:
    """The environment a preset asks for on this host (host facts read when not given)."""
    env = preset.environment
    facts = host if host is not None else detect_host_gpus()
    image = base or describe_ref(env.image)
    notes: list[str] = []
    for pkg in env.apt_packages:
        try:
            check_apt_package(pkg)
        except ValueError as exc:
            raise BadInput(f"environment.apt_packages: {exc}") from None
    find_links: list[Path] = []
    for entry in env.find_links:
        folder = Path(entry).expanduser()
        if folder.is_dir():
            find_links.append(folder)
        else:
            notes.append(f"find_links {entry} is not a directory here: ignored")
    cert = Path(env.pip_cert).expanduser() if env.pip_cert else host_pip_cert()
    if cert is not None and not cert.is_file():
        raise BadInput(_("environment.pip_cert: {cert} is not a file").format(cert=cert))
    flash = wants_flash_attn(image, facts, preset)
    indexes = pip_indexes(preset, flash)
    fastchat = env.fastchat
    editable = None
    spec: str | None = None
    if fastchat.source == "editable":
        editable = (fastchat.git_url, fastchat.path or "/opt/FastChat")
    else:
        spec = _check_spec(fastchat.spec, "fastchat.spec")
    return EnvPlan(
        preset_name=preset.name,
        base=image,
        torch_spec=_check_spec(env.torch_spec, "torch_spec") if env.torch_spec else None,
        fastchat_spec=spec,
        fastchat_editable=editable,
        requirements=requirement_list(preset),
        indexes=indexes,
        find_links=find_links,
        pip_cert=cert,
        apt_packages=list(env.apt_packages),
        upgrade_pip=env.upgrade_pip,
        flash_attn=flash,
        max_jobs=max_jobs_for(facts, env.flash_attn.max_jobs),
        fsdp_patch=env.fsdp_state_dict_patch,
        notes=notes,
    )
