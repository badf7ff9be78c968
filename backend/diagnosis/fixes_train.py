"""Fixes for failures while fetching or training: Hub access, GPU architecture, NaN loss.

Split from fixes.py to keep modules small; same conventions (cheapest fix first, concrete
preset changes only when a preset is given, advice otherwise).
"""

from __future__ import annotations

import re
from typing import TYPE_CHECKING

from backend.diagnosis.model import Fix, PresetChange
from backend.i18n import _

if TYPE_CHECKING:
    from backend.preset.schema import Preset

OFFICIAL_HUB = "huggingface.co"


def _change(path: str, value: object, reason: str) -> PresetChange:
    return PresetChange(path=path, value=value, reason=reason)


def _repo(match: str, preset: Preset | None) -> str | None:
    """The repo the Hub refused: named in the message, else the preset's."""
    for pattern in (
        r"Access to model (\S+?) is restricted",
        r"Repo model (\S+?) is gated",
        r"https?://[^/\s]+/(?:api/models/)?([\w.-]+/[\w.-]+)/(?:resolve|revision|auth-check)",
    ):
        found = re.search(pattern, match)
        if found:
            return found.group(1).rstrip(".")
    return preset.model.repo if preset is not None else None


def hub_fixes(preset: Preset | None, match: str) -> list[Fix]:
    token_env = preset.model.token_env if preset is not None else "HF_TOKEN"
    repo = _repo(match, preset)
    endpoint = (preset.model.endpoint if preset is not None else None) or ""
    host = re.search(r"https?://([^/\s]+)/", match)
    fixes = [
        Fix(
            _("Set {env} to a Hugging Face token with read access").format(env=token_env),
            _(
                "the preset names {env} (model.token_env); trainwiz passes it to the download "
                "and the run. A `huggingface-cli login` on the host is not seen inside a container"
            ).format(env=token_env),
        ),
        Fix(
            _("Accept the licence at {url}").format(
                url=f"https://{OFFICIAL_HUB}/{repo or '<repo>'}"
            ),
            _(
                "gated models (Llama, Gemma, FLUX…) answer 401/403 until the token's account is "
                "approved on the model page; approval can take a while"
            ),
        ),
    ]
    mirror = (endpoint and OFFICIAL_HUB not in endpoint) or (
        host is not None and OFFICIAL_HUB not in host.group(1)
    )
    if mirror:
        fixes.append(
            Fix(
                _("Download from the official Hub"),
                _(
                    "the request went through a mirror; mirrors refuse gated repos unless they "
                    "forward your token"
                ),
                [_change("model.endpoint", None, _("the official Hub checks the licence"))]
                if preset is not None and endpoint
                else [],
            )
        )
    else:
        fixes.append(
            Fix(
                _("Check the endpoint"),
                _(
                    "HF_ENDPOINT or model.endpoint must point at the Hub (or a mirror that "
                    "forwards your token) for gated repos"
                ),
            )
        )
    if "Not Found" in match or "NotFound" in match:
        fixes.insert(
            0,
            Fix(
                _("Check model.repo (now '{repo}')").format(repo=preset.model.repo)
                if preset is not None
                else _("Check model.repo"),
                _(
                    "the Hub answers 'Repository Not Found' both for a misspelt id and for a "
                    "private or gated repo without a token"
                ),
            ),
        )
    return fixes


def _image_for(sm: int, preset: Preset | None) -> str | None:
    """A catalogued pytorch image whose CUDA compiles for this architecture, in the preset
    image's flavour (devel/runtime): the lowest such CUDA (the least the driver must support),
    with its newest torch."""
    from backend.images.catalog import (  # deferred: pulls the image builder; only this fix
        load_catalog,
    )
    from backend.images.cuda_tables import (  # deferred: `diagnose FILE` skips the image code
        ARCHES,
        version_tuple,
    )

    first = next((f for s, _n, f, _l in reversed(ARCHES) if s <= sm), None)
    if first is None:
        return None
    flavor = "runtime" if preset is not None and "runtime" in preset.environment.image else "devel"
    usable = [
        i
        for i in load_catalog()
        if i.family == "pytorch"
        and i.flavor == flavor
        and version_tuple(i.cuda)[:2] >= first
        and version_tuple(i.torch) >= (2, 0)
    ]
    if not usable:
        return None
    return min(
        usable, key=lambda i: (version_tuple(i.cuda), [-n for n in version_tuple(i.torch)])
    ).ref


def _no_bf16(preset: Preset | None, match: str) -> Fix:
    changes = [
        _change("training.bf16", False, _("no bf16 units before Ampere")),
        _change("training.fp16", True, _("half precision with loss scaling")),
    ]
    if "tf32" in match or (preset is not None and preset.training.tf32):
        changes.append(_change("training.tf32", False, _("TF32 needs Ampere too")))
    return Fix(
        _("Train in fp16 instead of bf16"),
        _(
            "V100, T4 and older GPUs (below sm80) have no bf16 (nor TF32); fp16 with loss scaling "
            "runs there, a little less stable"
        ),
        changes if preset is not None else [],
    )


def _sdpa(preset: Preset | None) -> Fix:
    return Fix(
        _("Use PyTorch SDPA attention, without flash-attn"),
        _("flash-attn 2 needs sm80 or newer; SDPA (or xformers) runs on older GPUs"),
        [
            _change("training.attn_implementation", "sdpa", _("runs below sm80")),
            _change("environment.flash_attn.install", "never", _("its kernels need sm80")),
        ]
        if preset is not None
        else [],
    )


def arch_fixes(preset: Preset | None, match: str) -> list[Fix]:
    if re.search(r"(?i)bf16|bfloat16|tf32", match):
        return [_no_bf16(preset, match), _sdpa(preset)]
    sm_found = re.search(r"sm_(\d+)", match)
    fixes: list[Fix] = []
    if sm_found:
        sm = int(sm_found.group(1))
        image = _image_for(sm, preset)
        fixes.append(
            Fix(
                _("Use an image whose torch has kernels for sm_{sm}").format(sm=sm),
                _(
                    "the image's torch was built without this GPU's architecture; {image} includes it"
                ).format(image=image or _("a newer pytorch image")),
                [_change("environment.image", image, _("torch built for sm_{sm}").format(sm=sm))]
                if preset is not None and image
                else [],
            )
        )
    else:
        fixes.append(
            Fix(
                _("Use an image whose torch supports this GPU's architecture"),
                _(
                    "`nvidia-smi --query-gpu=compute_cap --format=csv` gives the GPU's; "
                    "`torch.cuda.get_arch_list()` in the image lists what its torch was built for "
                    "(new GPUs need new CUDA, old ones were dropped by new torch)"
                ),
            )
        )
    fixes.append(_sdpa(preset))
    return fixes


def nan_fixes(preset: Preset | None, match: str) -> list[Fix]:
    fp16 = "loss scale" in match or (preset is not None and preset.training.fp16)
    fixes: list[Fix] = []
    if preset is None:
        fixes.append(
            Fix(_("Lower the learning rate"), _("the usual cause: a step too large diverges"))
        )
    else:
        lr = preset.training.learning_rate
        fixes.append(
            Fix(
                _("Lower the learning rate {old} -> {new}").format(
                    old=f"{lr:g}", new=f"{lr / 4:g}"
                ),
                _("the usual cause of a loss that blows up: steps too large for this model/batch"),
                [_change("training.learning_rate", lr / 4, _("smaller steps"))],
            )
        )
    if fp16:
        fixes.append(
            Fix(
                _("Train in bf16 instead of fp16 (Ampere or newer)"),
                _("fp16 overflows (the loss scaler kept shrinking); bf16 has fp32's range"),
                [
                    _change("training.fp16", False, _("overflows")),
                    _change("training.bf16", True, _("fp32 range, no loss scaling")),
                ]
                if preset is not None
                else [],
            )
        )
    if preset is None or not 0 < preset.training.max_grad_norm <= 1.0:
        fixes.append(
            Fix(
                _("Clip gradients at norm 1.0"),
                _("one bad batch can no longer throw the weights far"),
                [_change("training.max_grad_norm", 1.0, _("gradient clipping"))]
                if preset is not None
                else [],
            )
        )
    fixes.append(
        Fix(
            _("Check the data"),
            _("`trainwiz data check` finds empty or fully masked samples (a loss of 0/0 is NaN)"),
        )
    )
    return fixes


def template_fixes(preset: Preset | None, category: str) -> list[Fix]:
    """Masking failures: train with the model's own chat template through the trainwiz entry.

    FastChat's train.py masks with Llama-1/2 arithmetic under the vicuna template; the trainwiz
    entry masks any template exactly (docs/chat-templates.md)."""
    check = Fix(
        _("See which text is trained on"),
        _("`trainwiz data check --model DIR` shows the masks and counts unmaskable samples"),
    )
    if preset is None:
        return [
            Fix(
                _("Train with the model's own chat template"),
                _("training.chat_template: auto with launch.entry: trainwiz"),
            ),
            check,
        ]
    changes = []
    if preset.launch.entry != "trainwiz":
        changes.append(_change("launch.entry", "trainwiz", _("masks any chat template exactly")))
    if preset.training.chat_template != "auto":
        changes.append(_change("training.chat_template", "auto", _("the tokenizer's own template")))
    if not changes and category == "tokenization_mismatch":
        return []  # auto already: a Llama/Vicuna model on the vicuna path; the data is the cause
    fixes = [check]
    if changes:
        fixes.insert(
            0,
            Fix(
                _("Train with the model's own chat template"),
                _("a tokenizer that carries a template trains with it, masks computed from it"),
                changes,
            ),
        )
    return fixes
