"""In-container setup for ``environment.mode: in_container``: the seed's pip steps, in order.

The seed installs everything inside the running container through a PyPI mirror each time; this
keeps that path available (and exact) for users who want it, while ``mode: image`` builds it once.
"""

from __future__ import annotations

from backend.i18n import _
from backend.images.pipindex import PipIndexes
from backend.images.plan import method_packages
from backend.plan.types import PlanStep
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


def _indexes(env: EnvironmentConfig) -> PipIndexes:
    return PipIndexes.checked(
        env.pip_index_url,
        list(env.pip_extra_index_urls),
        list(env.pip_trusted_hosts),
        env.flash_attn.index_url,
    )


def in_container_setup(preset: Preset) -> list[PlanStep]:
    """The seed's ``pip install ... -i MIRROR`` steps. A mirror URL with credentials goes into
    pip's environment instead (PIP_INDEX_URL...): a pip command line inside the container is
    readable by every user of the host (``/proc/<pid>/cmdline``), its environment only by root
    and the same user; the plan and the run log show the names, not the values."""
    env = preset.environment
    indexes = _indexes(env)
    secret = indexes.needs_proxy
    idx = indexes.host_argv() if secret else pip_index_args(env)
    pip_env = indexes.pip_env() if secret else {}
    steps: list[PlanStep] = []

    def add(
        step_id: str, title: str, argv: list[str], envvars: dict[str, str] | None = None
    ) -> None:
        is_pip = argv[:2] == ["pip", "install"] and step_id != "setup-flash-attn"
        step_env = {**(pip_env if is_pip else {}), **(envvars or {})}
        steps.append(
            PlanStep(
                id=step_id,
                group="setup",
                title=title,
                argv=argv,
                where="container",
                env=step_env,
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
        if secret:  # flash-attn's own index replaces the others, as in the image
            envvars = {**indexes.pip_env(flash_attn=True), **envvars}
            fa_args = indexes.host_argv(flash_attn=True)
        else:
            fa_args = pip_index_args(env, env.flash_attn.index_url)
        add(
            "setup-flash-attn",
            _("Build flash-attn (needs torch installed and nvcc: a -devel image)"),
            argv + fa_args,
            envvars,
        )
    if env.fsdp_state_dict_patch:
        add(
            "setup-fsdp-patch",
            _("Patch torch 2.0.x FSDP to gather the full state dict on the CPU"),
            ["sh", "-c", FSDP_PATCH_SCRIPT],
        )
    return steps
