"""Checks of a Slurm preset against the cluster itself (``launch.scheduler: slurm``).

A job that asks for what the partition cannot give stays PENDING for ever (Reason
PartitionConfig) while the user waits; a time limit under the run's length ends it at TIMEOUT.
These read the cluster the way the job will meet it:

- ``slurm_partition``: ``sinfo`` (the partition exists, is up, has >= nnodes nodes) and
  ``sbatch --test-only`` with the job's own options (Slurm's own verdict on the request:
  nodes, tasks, GPUs, time, account, QoS);
- ``slurm_gpus``: the partition's gres GPUs per node against launch.slurm.gpus_per_node and
  the processes each node starts (ntasks_per_node x nproc_per_node);
- ``slurm_time``: launch.slurm.time_limit against the partition's limit and the planner's
  ETA (GPU presets; a CPU preset has no GPU plan to compare with);
- ``slurm_account``: launch.slurm.account / qos against the partition's AllowAccounts/AllowQos
  and, where the cluster keeps accounting, the user's associations (``sacctmgr``).

Each answer is read once per check run (memoized) and every failing one says the fix.
"""

from __future__ import annotations

import getpass
import re
from collections.abc import Callable
from typing import Any

from backend import subproc
from backend.checks.context import CheckContext
from backend.checks.model import CheckResult, finding
from backend.i18n import _
from backend.plan.slurm_argv import sbatch_options
from backend.planner.report import planner_report


def _slurm(ctx: CheckContext) -> bool:
    return ctx.preset is not None and ctx.preset.launch.scheduler == "slurm"


def _skip() -> CheckResult:
    return finding("skip", _("not a Slurm preset (launch.scheduler is not 'slurm')"))


def _run(argv: list[str]) -> tuple[int, str, str]:
    done = subproc.probe(argv, 20)
    if isinstance(done.error, FileNotFoundError):
        return 127, "", f"{argv[0]}: not found"
    if done.error is not None and not done.timed_out:
        raise done.error  # another OSError (permission): raised, as it always was
    if done.timed_out:
        return 124, "", f"{argv[0]}: no answer within 20 s"
    assert done.code is not None
    return done.code, done.stdout.strip(), done.stderr.strip()


def minutes(text: str) -> float | None:
    """A Slurm time (``30``, ``12:00:00``, ``1-12:00:00``, ``infinite``) in minutes."""
    text = text.strip().lower()
    if text in ("infinite", "unlimited", ""):
        return None
    days, _, rest = text.rpartition("-")
    parts = [int(p) for p in rest.split(":")] if rest else [0]
    if days:  # D-H, D-H:M, D-H:M:S
        parts = parts + [0] * (3 - len(parts))
        hours, mins, secs = parts
        return int(days) * 1440 + hours * 60 + mins + secs / 60
    if len(parts) == 1:
        return float(parts[0])  # minutes
    if len(parts) == 2:
        return parts[0] + parts[1] / 60  # M:S
    return parts[0] * 60 + parts[1] + parts[2] / 60  # H:M:S


def gres_gpus(gres: str) -> int:
    """GPUs per node in a gres string like ``gpu:a100:8(S:0-1),shard:4``."""
    total = 0
    for item in gres.split(","):
        match = re.match(r"gpu(?::[A-Za-z0-9_.-]+)?:(\d+)", item.strip())
        if match:
            total += int(match[1])
    return total


def cluster(ctx: CheckContext) -> dict[str, Any]:
    """The partition as sinfo and scontrol show it (memoized for the run of checks)."""

    def compute() -> dict[str, Any]:
        assert ctx.preset is not None
        wanted = ctx.preset.launch.slurm.partition
        code, out, err = _run(["sinfo", "-h", "-o", "%P|%D|%G|%l|%a"])
        if code != 0:
            return {"error": err or f"sinfo exit code {code}"}
        rows = [r.split("|") for r in out.splitlines() if r.count("|") == 4]
        names = sorted({r[0].rstrip("*") for r in rows})
        chosen = [r for r in rows if (r[0].rstrip("*") == wanted if wanted else r[0].endswith("*"))]
        if not chosen:
            return {"names": names, "missing": wanted or ""}
        name = chosen[0][0].rstrip("*")
        info: dict[str, Any] = {
            "names": names,
            "name": name,
            "nodes": sum(int(r[1]) for r in chosen if r[1].isdigit()),
            "gpus_per_node": min(gres_gpus(r[2]) for r in chosen),
            "time_limit": chosen[0][3],
            "up": all(r[4] == "up" for r in chosen),
        }
        code, shown, _err = _run(["scontrol", "-o", "show", "partition", name])
        fields = dict(re.findall(r"(\w+)=(\S*)", shown)) if code == 0 else {}
        info["allow_accounts"] = fields.get("AllowAccounts", "ALL")
        info["allow_qos"] = fields.get("AllowQos", "ALL")
        return info

    return ctx.memo("slurm-cluster", compute)  # type: ignore[no-any-return]


def _no_cluster(info: dict[str, Any]) -> CheckResult | None:
    if "error" in info:
        return finding(
            "fail",
            _("cannot ask Slurm about the cluster: {error}").format(error=info["error"]),
            fix=_("run trainwiz on a login node of the cluster (sinfo must work there)"),
            blocks=["launch"],
        )
    if info.get("missing") is not None:
        return finding(
            "fail",
            _("partition '{name}' does not exist (partitions: {names})").format(
                name=info["missing"] or _("default"), names=", ".join(info["names"]) or "-"
            ),
            fix=_("set launch.slurm.partition to one of: {names}").format(
                names=", ".join(info["names"]) or "-"
            ),
            blocks=["launch"],
        )
    return None


def _cluster_or_result(
    ctx: CheckContext, early: Callable[[Any], CheckResult | None] | None = None
) -> dict[str, Any] | CheckResult:
    """What every Slurm check starts with: the partition's info, or the result that ends the
    check before it (not a Slurm preset: skip; ``early(preset)``: nothing to ask the cluster;
    no cluster or no such partition: that failure)."""
    if not _slurm(ctx):
        return _skip()
    assert ctx.preset is not None
    if early is not None:
        result = early(ctx.preset)
        if result is not None:
            return result
    info = cluster(ctx)
    return _no_cluster(info) or info


def test_only(ctx: CheckContext) -> tuple[bool, str]:
    """Slurm's own verdict on the job's options (sbatch --test-only): (ok, its words)."""
    assert ctx.preset is not None
    argv = ["sbatch", "--test-only", *sbatch_options(ctx.preset), "--wrap", "true"]
    code, out, err = _run(argv)
    words = " ".join(x.removeprefix("sbatch: ") for x in (out + "\n" + err).split("\n") if x)
    return code == 0, words.strip()


def check_slurm_partition(ctx: CheckContext) -> CheckResult:
    info = _cluster_or_result(ctx)
    if isinstance(info, CheckResult):
        return info
    assert ctx.preset is not None
    want = ctx.preset.launch.nnodes
    data = {k: v for k, v in info.items() if k != "names"}
    if not info["up"]:
        return finding(
            "fail",
            _("partition {name} is not up").format(name=info["name"]),
            fix=_("ask the cluster's admins, or set another launch.slurm.partition"),
            blocks=["launch"],
            data=data,
        )
    if info["nodes"] < want:
        return finding(
            "fail",
            _("the partition has {have} node(s), the preset asks {want}").format(
                have=info["nodes"], want=want
            ),
            why=_("the job would stay PENDING for ever (Reason PartitionConfig)"),
            fix=_("set launch.nnodes: {have}, or a partition with {want} nodes").format(
                have=info["nodes"], want=want
            ),
            blocks=["launch"],
            data=data,
        )
    ok, words = test_only(ctx)
    if not ok:
        return finding(
            "fail",
            _("Slurm refuses the job as asked: {words}").format(words=words),
            fix=_("change launch.slurm (nodes, GPUs, time, account, QoS) to what it allows"),
            blocks=["launch"],
            data=data,
        )
    return finding(
        "ok",
        _("partition {name}: {have} node(s) for {want}; {words}").format(
            name=info["name"], have=info["nodes"], want=want, words=words
        ),
        data=data,
    )


def check_slurm_gpus(ctx: CheckContext) -> CheckResult:
    info = _cluster_or_result(ctx)
    if isinstance(info, CheckResult):
        return info
    assert ctx.preset is not None
    launch = ctx.preset.launch
    have = info["gpus_per_node"]
    asked = launch.slurm.gpus_per_node
    procs = launch.slurm.ntasks_per_node * launch.nproc_per_node
    if asked and asked > have:
        return finding(
            "fail",
            _("launch.slurm.gpus_per_node is {asked} but the partition's nodes have {have}").format(
                asked=asked, have=have
            ),
            fix=_("set launch.slurm.gpus_per_node: {have}").format(have=have),
            blocks=["launch"],
        )
    if launch.device == "cpu":
        return finding(
            "ok",
            _("CPU preset: {procs} process(es) per node, no GPUs asked ({have} per node)").format(
                procs=procs, have=have
            ),
        )
    gpus = asked or have
    if procs > gpus:
        return finding(
            "fail",
            _("{procs} process(es) per node but {gpus} GPU(s) per node").format(
                procs=procs, gpus=gpus
            ),
            why=_("each process trains on its own GPU; two on one GPU run out of memory"),
            fix=_(
                "set launch.nproc_per_node: {gpus} and launch.slurm.gpus_per_node: {gpus}"
            ).format(gpus=gpus),
            blocks=["launch"],
        )
    if not asked:
        return finding(
            "warn",
            _("launch.slurm.gpus_per_node is not set: the job gets no GPUs on most clusters"),
            fix=_("set launch.slurm.gpus_per_node: {procs}").format(procs=procs),
        )
    return finding(
        "ok",
        _("{gpus} GPU(s) per node for {procs} process(es)").format(gpus=gpus, procs=procs),
    )


def planner_eta_minutes(ctx: CheckContext, gpu_name: str | None) -> float | None:
    """The planner's run length in minutes (None: no GPU plan for this preset)."""
    try:
        assert ctx.preset is not None
        _lines, data = planner_report(ctx.preset, gpu_name, None)
        epoch = ((data.get("estimate") or {}).get("throughput") or {}).get("epoch_time_s")
        if not epoch:
            return None
        return float(epoch) * float(ctx.preset.training.num_train_epochs) / 60
    except Exception:  # an unknown GPU or model shape: nothing to compare the limit with
        return None


def check_slurm_time(ctx: CheckContext) -> CheckResult:
    info = _cluster_or_result(ctx)
    if isinstance(info, CheckResult):
        return info
    assert ctx.preset is not None
    asked_text = ctx.preset.launch.slurm.time_limit
    asked = minutes(asked_text) if asked_text else None
    limit = minutes(info["time_limit"])
    if asked is not None and limit is not None and asked > limit:
        return finding(
            "fail",
            _("launch.slurm.time_limit {asked} is above the partition's {limit}").format(
                asked=asked_text, limit=info["time_limit"]
            ),
            why=_("the job would stay PENDING (Reason PartitionTimeLimit)"),
            fix=_("set launch.slurm.time_limit at most {limit}").format(limit=info["time_limit"]),
            blocks=["launch"],
        )
    effective = asked if asked is not None else limit
    eta = None if ctx.preset.launch.device == "cpu" else planner_eta_minutes(ctx, None)
    if eta is not None and effective is not None and eta > effective:
        return finding(
            "warn",
            _("the planner's ETA is {eta:.0f} min but the job may run {limit:.0f} min").format(
                eta=eta, limit=effective
            ),
            why=_("Slurm ends the job at its time limit (TIMEOUT)"),
            fix=_(
                "raise launch.slurm.time_limit, or save checkpoints (training.save_minutes) "
                "and resume after the limit"
            ),
        )
    shown = asked_text or _("the partition's {limit}").format(limit=info["time_limit"])
    if eta is None:
        return finding(
            "ok",
            _("time limit {limit}; no planner ETA to compare (no GPU plan)").format(limit=shown),
        )
    return finding(
        "ok", _("time limit {limit} covers the ETA of {eta:.0f} min").format(limit=shown, eta=eta)
    )


def _no_account_asked(preset: Any) -> CheckResult | None:
    config = preset.launch.slurm
    if not config.account and not config.qos:
        return finding("ok", _("no account or QoS set: Slurm's defaults apply"))
    return None


def check_slurm_account(ctx: CheckContext) -> CheckResult:
    info = _cluster_or_result(ctx, early=_no_account_asked)
    if isinstance(info, CheckResult):
        return info
    assert ctx.preset is not None
    config = ctx.preset.launch.slurm
    for what, value, allowed in (
        ("account", config.account, info["allow_accounts"]),
        ("qos", config.qos, info["allow_qos"]),
    ):
        if value and allowed != "ALL" and value not in allowed.split(","):
            return finding(
                "fail",
                _("partition {name} does not allow {what} {value} (allowed: {allowed})").format(
                    name=info["name"], what=what, value=value, allowed=allowed
                ),
                fix=_("set launch.slurm.{what} to one of: {allowed}").format(
                    what=what, allowed=allowed
                ),
                blocks=["launch"],
            )
    code, out, err = _run(
        ["sacctmgr", "-n", "-P", "show", "assoc", f"user={getpass.getuser()}", "format=account,qos"]
    )
    if code != 0:
        return finding(
            "warn",
            _("the cluster keeps no accounting here ({error}): account/QoS not verified").format(
                error=(err.splitlines() or ["sacctmgr failed"])[0]
            ),
            fix=_("check with 'sacctmgr show assoc user=$USER' on the cluster"),
        )
    rows = [r.split("|") for r in out.splitlines() if "|" in r]
    accounts = {r[0] for r in rows}
    qos = {q for r in rows for q in r[1].split(",") if q}
    if config.account and config.account not in accounts:
        return finding(
            "fail",
            _("you have no association with account {value} (yours: {mine})").format(
                value=config.account, mine=", ".join(sorted(accounts)) or "-"
            ),
            fix=_("set launch.slurm.account to one of yours"),
            blocks=["launch"],
        )
    if config.qos and config.qos not in qos:
        return finding(
            "fail",
            _("QoS {value} is not one of yours ({mine})").format(
                value=config.qos, mine=", ".join(sorted(qos)) or "-"
            ),
            fix=_("set launch.slurm.qos to one of yours"),
            blocks=["launch"],
        )
    return finding("ok", _("account and QoS are yours"))
