"""In-container setup for ``environment.mode: in_container``: the seed's pip steps, in order.

The seed installs everything inside the running container through a PyPI mirror each time; this
keeps that path available (and exact) for users who want it, while ``mode: image`` builds it once.
"""

from __future__ import annotations

from backend.i18n import _
from backend.plan.commands import PlanStep
from backend.plan.deepspeed import method_packages
from backend.preset.schema import EnvironmentConfig, Preset

# The seed's fix for OOM while saving the FSDP full state dict on torch 2.0.x: move each
# gathered tensor to the CPU before cloning. A constant, never built from user input.
FSDP_PATCH_SCRIPT = (
    "f=$(python -c 'import torch.distributed.fsdp._state_dict_utils as m; print(m.__file__)') && "
    "sed -i 's/state_dict\\[fqn\\] = state_dict\\[fqn\\].clone().detach()/"
    'state_dict[fqn] = state_dict[fqn].cpu().clone().detach()/\' "$f"'
)


def pip_index_args(env: EnvironmentConfig, index_url: str | None = None) -> list[str]:
    args: list[str] = []
    index = index_url or env.pip_index_url
    if index:
        args += ["-i", index]
    for extra in env.pip_extra_index_urls:
        args += ["--extra-index-url", extra]
    for host in env.pip_trusted_hosts:
        args += ["--trusted-host", host]
    return args


def in_container_setup(preset: Preset) -> list[PlanStep]:
    env = preset.environment
    idx = pip_index_args(env)
    steps: list[PlanStep] = []

    def add(
        step_id: str, title: str, argv: list[str], envvars: dict[str, str] | None = None
    ) -> None:
        steps.append(
            PlanStep(
                id=step_id,
                group="setup",
                title=title,
                argv=argv,
                where="container",
                env=envvars or {},
            )
        )

    if env.apt_packages:
        add("setup-apt-update", _("Refresh apt"), ["apt", "update"])
        add("setup-apt", _("Install system packages"), ["apt", "install", "-y", *env.apt_packages])
    if env.upgrade_pip:
        add(
            "setup-pip",
            _("Upgrade pip"),
            ["pip", "install", "--upgrade", "pip", "setuptools", "wheel", *idx],
        )
    if env.fastchat.source == "editable":
        add(
            "setup-fastchat",
            _("Install FastChat from the clone"),
            ["pip", "install", "-e", ".", *idx],
        )
    else:
        add("setup-fastchat", _("Install FastChat"), ["pip", "install", env.fastchat.spec, *idx])
    add(
        "setup-transformers",
        _("Pin transformers to the version the flags target"),
        ["pip", "install", f"transformers=={env.transformers}", *idx],
    )
    extras = list(env.extra_packages)
    extras += [p for p in method_packages(preset) if p not in extras]  # deepspeed, bitsandbytes
    if extras:
        add("setup-extras", _("Install extra packages"), ["pip", "install", *extras, *idx])
    if env.flash_attn.install != "never":
        argv = ["pip", "install", "flash-attn"]
        if env.flash_attn.no_build_isolation:
            argv.append("--no-build-isolation")
        envvars = {"MAX_JOBS": str(env.flash_attn.max_jobs)} if env.flash_attn.max_jobs else {}
        add(
            "setup-flash-attn",
            _("Build flash-attn (needs torch installed and nvcc: a -devel image)"),
            argv + pip_index_args(env, env.flash_attn.index_url),
            envvars,
        )
    if env.fsdp_state_dict_patch:
        add(
            "setup-fsdp-patch",
            _("Patch torch 2.0.x FSDP to gather the full state dict on the CPU"),
            ["sh", "-c", FSDP_PATCH_SCRIPT],
        )
    return steps
