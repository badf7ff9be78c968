"""Fixes for the multi-node, Slurm, DeepSpeed-config, PEFT, version and chat-template findings.

Same conventions as fixes.py: cheapest first; concrete preset changes only when a preset is
given and the message says which value is wrong; advice (no changes) where the fix lies outside
the preset (DNS, ssh keys, the cluster's limits).
"""

from __future__ import annotations

import re
from typing import TYPE_CHECKING, Any

from backend.diagnosis.model import Fix, PresetChange
from backend.i18n import _

if TYPE_CHECKING:
    from backend.preset.schema import Preset

# Module names LoRA can target, by model family (the names in each family's modeling code).
_LORA_TARGETS: tuple[tuple[str, list[str]], ...] = (
    (r"qwen(?:1\.5|2|3)|llama|vicuna|mistral|mixtral|yi-|deepseek|gemma|internlm2?|olmo",
     ["q_proj", "v_proj"]),
    (r"qwen", ["c_attn"]),  # Qwen-1 (after the qwen1.5/2/3 names above)
    (r"chatglm|glm-4", ["query_key_value"]),
    (r"baichuan", ["W_pack"]),
    (r"bloom|falcon|gpt-neox|pythia|mpt", ["query_key_value"]),
    (r"gpt2|starcoder|santacoder|gpt-bigcode", ["c_attn"]),
    (r"phi-?3", ["qkv_proj"]),
)  # fmt: skip
_IFACE = re.compile(r"(?:eth|en|ib|bond|em|eno|ens|enp|wl|docker|lo)\w*$")


def _change(path: str, value: Any, reason: str) -> PresetChange:
    return PresetChange(path=path, value=value, reason=reason)


def slurm_minutes(limit: str) -> int | None:
    """Minutes of a Slurm time (``90``, ``12:00:00``, ``1-12:00``); None if unreadable."""
    match = re.fullmatch(r"(?:(\d+)-)?(\d+)(?::(\d+))?(?::(\d+))?", limit.strip())
    if not match:
        return None
    days, first, second, third = match.groups()
    if days is not None:  # D-HH[:MM[:SS]]
        hours, minutes = int(first), int(second or 0)
        return int(days) * 1440 + hours * 60 + minutes
    if third is not None:  # HH:MM:SS
        return int(first) * 60 + int(second)
    if second is not None:  # MM:SS
        return int(first)
    return int(first)  # MM


def slurm_time(minutes: int) -> str:
    days, rest = divmod(minutes, 1440)
    return f"{days}-{rest // 60:02d}:{rest % 60:02d}:00"


def _time_limit_fixes(preset: Preset | None) -> list[Fix]:
    fixes = [
        Fix(
            _("Resume from the last checkpoint"),
            _("`trainwiz resume RUN` continues where the job was stopped"),
        )
    ]
    if preset is None:
        return [*fixes, Fix(_("Ask Slurm for more time"), _("launch.slurm.time_limit"))]
    current = preset.launch.slurm.time_limit
    minutes = slurm_minutes(current) if current else None
    wanted = slurm_time(minutes * 2) if minutes else "1-00:00:00"
    fixes.append(
        Fix(
            _("Ask Slurm for {time}").format(time=wanted),
            _("`sinfo -o '%P %l'` shows each partition's maximum"),
            [_change("launch.slurm.time_limit", wanted, _("the job hit its time limit"))],
        )
    )
    if preset.training.save_minutes is None:
        fixes.append(
            Fix(
                _("Save a checkpoint every 30 minutes"),
                _("a job stopped at its limit then loses at most half an hour"),
                [_change("training.save_minutes", 30, _("time-based checkpoints"))],
            )
        )
    return fixes


def _slurm_error_fixes(preset: Preset | None, every: str) -> list[Fix]:
    fixes = [
        Fix(
            _("Compare the request with what the cluster offers"),
            _("`sinfo -N -o '%N %P %G %m %c %l'`: partitions, GPUs (gres), memory, CPUs, limits"),
        )
    ]
    if preset is None:
        return fixes
    slurm = preset.launch.slurm
    # (words in Slurm's message, field of launch.slurm, its value now)
    for words, field, value in (
        ("generic resource", "gpus_per_node", slurm.gpus_per_node),
        ("partition", "partition", slurm.partition),
        ("account", "account", slurm.account),
        ("qos", "qos", slurm.qos),
        ("time limit", "time_limit", slurm.time_limit),
        ("node configuration", "mem", slurm.mem),
    ):
        if words in every.lower() and value is not None:
            fixes.insert(
                0,
                Fix(
                    _("Drop launch.slurm.{field} ({value}): use the cluster's default").format(
                        field=field, value=value
                    ),
                    _("Slurm refused that value for this cluster"),
                    [_change(f"launch.slurm.{field}", None, _("refused by Slurm"))],
                ),
            )
    return fixes


def _resolution_fixes(preset: Preset | None, groups: dict[str, Any]) -> list[Fix]:
    name = str(groups.get("iface") or "")
    fixes: list[Fix] = []
    if name and _IFACE.match(name):
        env = dict(preset.launch.env) if preset else {}
        named = [k for k in ("GLOO_SOCKET_IFNAME", "NCCL_SOCKET_IFNAME") if env.get(k) == name]
        if named:
            fixes.append(
                Fix(
                    _("Stop naming interface {iface}: this host has none by that name").format(
                        iface=name
                    ),
                    _("gloo and NCCL then pick the interface of the host's own address"),
                    [
                        _change(
                            "launch.env",
                            {k: v for k, v in env.items() if k not in named},
                            _("an interface this host lacks"),
                        )
                    ],
                )
            )
        fixes.append(
            Fix(
                _("Name an interface this host has in GLOO_SOCKET_IFNAME/NCCL_SOCKET_IFNAME"),
                _("`ip -br addr` lists them; every node needs the same name"),
            )
        )
        return fixes
    fixes.append(
        Fix(
            _("Make every node's name resolvable on every node"),
            _(
                "`getent hosts NAME` on each node must print its address: add the nodes to "
                "/etc/hosts, or use IP addresses in launch.nodes and launch.master_addr"
            ),
        )
    )
    fixes.append(
        Fix(
            _("Check the nodes from node 0"),
            _("`trainwiz check --preset PRESET`: ssh to each node, the rendezvous port, GPUs"),
        )
    )
    return fixes


def _host_of(node: str) -> str:
    """``host`` of a launch.nodes entry ``[user@]host[:port]``."""
    return node.rsplit("@", 1)[-1].split(":", 1)[0]


def _unreachable_fixes(preset: Preset | None, every: str, groups: dict[str, Any]) -> list[Fix]:
    host = next((str(groups[k]) for k in ("host", "host2", "host3", "host4") if groups.get(k)), "")
    fixes = [
        Fix(
            _("Check ssh from node 0 to {host}").format(host=host or _("the node")),
            _(
                "`ssh -o BatchMode=yes HOST true` must succeed without a password: the host is "
                "up, sshd listens on that port, no firewall drops it, the key is authorised"
            ),
        )
    ]
    if preset is None:
        return fixes
    ssh = preset.launch.ssh
    if "timed out" in every and ssh.connect_timeout < 60:
        longer = min(600, ssh.connect_timeout * 3)
        fixes.append(
            Fix(
                _("Wait {seconds} s for ssh to connect").format(seconds=longer),
                _("when the node is up but slow to answer (a busy login node, a VPN)"),
                [_change("launch.ssh.connect_timeout", longer, _("ssh timed out"))],
            )
        )
    nodes = preset.launch.nodes
    dead = [n for n in nodes if host and _host_of(n) == host]
    if dead and len(nodes) >= 2 and nodes[0] not in dead:
        kept = [n for n in nodes if n not in dead]
        fixes.append(
            Fix(
                _("Run without {host} ({count} nodes)").format(host=host, count=len(kept)),
                _("fewer GPUs: the global batch shrinks unless accumulation grows"),
                [
                    _change("launch.nodes", kept, _("the node does not answer")),
                    _change("launch.nnodes", len(kept), _("one node fewer")),
                ],
            )
        )
    return fixes


def _deepspeed_config_fixes(preset: Preset | None, every: str) -> list[Fix]:
    fixes: list[Fix] = []
    own = preset is not None and preset.training.deepspeed is not None
    if preset is None or own:
        zero = (
            preset.training.zero.model_dump()
            if preset is not None and preset.training.zero is not None
            else {"stage": 3, "offload_optimizer": False, "offload_param": False}
        )
        fixes.append(
            Fix(
                _("Let trainwiz write the DeepSpeed config"),
                _(
                    "the generated config leaves batch sizes, accumulation and clipping 'auto' "
                    "(filled from the preset) and names DeepSpeed's optimizer when it offloads"
                ),
                [
                    _change("training.deepspeed", None, _("no hand-written config")),
                    _change("training.zero", zero, _("ZeRO settings trainwiz turns into JSON")),
                ]
                if preset is not None
                else [],
            )
        )
    if re.search(r"ZeRO[- ]Offload|zero_force_ds_cpu", every) and preset is not None:
        zero_now = preset.training.zero
        if zero_now is not None and zero_now.offload_optimizer and not own:
            fixes.append(
                Fix(
                    _("Keep the optimizer state on the GPU (no ZeRO-Offload)"),
                    _("more GPU memory; no CPU-Adam needed"),
                    [_change("training.zero.offload_optimizer", False, _("no offload"))],
                )
            )
    if "validation error" in every:
        fixes.append(
            Fix(
                _("Match the config's keys to the installed DeepSpeed"),
                _(
                    "DeepSpeed's pydantic config refuses keys it does not know: a newer config "
                    "on an older deepspeed (or fp16 keys under bf16); upgrade deepspeed or drop "
                    "the keys the message lists"
                ),
            )
        )
    return fixes


def _lora_fixes(preset: Preset | None) -> list[Fix]:
    fixes = [
        Fix(
            _("Use the model's own Linear module names"),
            _(
                '`python -c "import transformers as t; m = t.AutoModelForCausalLM.from_pretrained'
                "('MODEL'); print({n.split('.')[-1] for n, _ in m.named_modules()})\"` lists them"
            ),
        )
    ]
    if preset is None:
        return fixes
    ident = " ".join(
        str(v).lower()
        for v in (preset.model.repo, preset.model.dir, preset.training.model_name_or_path)
        if v
    )
    for pattern, names in _LORA_TARGETS:
        if re.search(pattern, ident):
            if preset.training.lora.lora_target_modules != names:
                fixes.insert(
                    0,
                    Fix(
                        _("Target {names} (this model family's attention)").format(
                            names=", ".join(names)
                        ),
                        _("the module names in this family's modeling code"),
                        [
                            _change(
                                "training.lora.lora_target_modules",
                                names,
                                _("modules this model has"),
                            )
                        ],
                    ),
                )
            break
    return fixes


def _version_fixes(preset: Preset | None, groups: dict[str, Any]) -> list[Fix]:
    pkg = str(groups.get("pkg") or groups.get("pkg2") or "").lower()
    op = str(groups.get("op") or groups.get("op2") or ">=")
    ver = str(groups.get("ver") or groups.get("ver2") or "")
    fixes: list[Fix] = []
    missing = str(groups.get("missing") or groups.get("missing2") or "")
    if missing:
        fixes.append(
            Fix(
                _("Install {package} in the training environment").format(package=missing),
                _(
                    "the training code imports it and it is not installed: pip install it with "
                    "the training Python (a ZeRO run needs deepspeed, QLoRA bitsandbytes)"
                ),
            )
        )
    if pkg and ver and preset is not None:
        spec = f"{pkg}{op}{ver}"
        if pkg == "transformers":
            change = _change("environment.transformers", ver, _("the version the code needs"))
        elif pkg == "torch":
            change = _change("environment.torch_spec", spec, _("the version the code needs"))
        else:
            kept = [
                p
                for p in preset.environment.extra_packages
                if re.split(r"[<>=!~\[ ]", p, maxsplit=1)[0].lower() != pkg
            ]
            change = _change("environment.extra_packages", [*kept, spec], _("the needed version"))
        fixes.append(
            Fix(
                _("Install {spec}").format(spec=spec),
                _("the message names the version it needs"),
                [change],
            )
        )
    fixes.append(
        Fix(
            _("Install the versions the training code was written for"),
            _(
                "`pip list` in the image shows what is installed; an ImportError of a name the "
                "code expects means another version of that package"
            ),
        )
    )
    return fixes


def cluster_fixes(
    category: str, preset: Preset | None, every: str, groups: dict[str, Any]
) -> list[Fix] | None:
    """Fixes for the categories of signatures_cluster.py; None for any other category."""
    if category == "slurm_time_limit":
        return _time_limit_fixes(preset)
    if category == "slurm_error":
        return _slurm_error_fixes(preset, every)
    if category == "hostname_resolution":
        return _resolution_fixes(preset, groups)
    if category == "node_unreachable":
        return _unreachable_fixes(preset, every, groups)
    if category == "deepspeed_config":
        return _deepspeed_config_fixes(preset, every)
    if category == "peft_target_modules":
        return _lora_fixes(preset)
    if category == "version_mismatch":
        return _version_fixes(preset, groups)
    if category == "chat_template" and ("tmpl" in groups or "tmpl2" in groups):
        return [
            Fix(
                _("Make the conversations' roles alternate"),
                _(
                    "merge consecutive turns of one role and drop empty ones; for a template "
                    "without a system role, fold the system message into the first user turn"
                ),
            )
        ]
    if category == "chat_template":
        return [
            Fix(
                _("Use the chat (instruct) version of the model, or give a template"),
                _(
                    "base models ship no chat template: pick the -chat/-instruct repo, or set "
                    "tokenizer.chat_template (FastChat's conversation templates do this)"
                ),
            )
        ]
    return None
