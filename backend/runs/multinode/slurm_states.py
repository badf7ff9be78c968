"""What Slurm says about a trainwiz job, in words: its live state, why it is pending, and how it
ended (docs/multi-node.md has the table).

- Live: ``squeue`` (state, nodes, reason). A pending job's reason becomes a sentence, with the
  partition's real size from ``sinfo`` where that is the reason ("the partition has 1 node,
  the preset asks 2").
- Final: ``sacct`` when the cluster keeps accounting; without accounting storage (sacct says
  "Slurm accounting storage is disabled", as on a one-host cluster) ``scontrol show job``,
  which slurmctld keeps for MinJobAge seconds after the end; ``source`` says which answered.
- Ending: COMPLETED finished; CANCELLED (trainwiz's stop or the user's own scancel) stopped;
  TIMEOUT its own cause (``slurm_timeout``), NODE_FAIL ``node_fail``, OUT_OF_MEMORY
  ``host_oom``, PREEMPTED ``preempted``; FAILED is the nodes' own finding.
"""

from __future__ import annotations

import re

from backend import subproc

ACTIVE = ("PENDING", "CONFIGURING", "RUNNING", "COMPLETING", "SUSPENDED", "REQUEUED", "RESIZING")


def query(argv: list[str]) -> str:
    """stdout of a Slurm command ('' when it fails, is missing or hangs)."""
    done = subproc.probe(argv, 30)
    return done.stdout.strip() if done.code == 0 else ""


def scontrol_fields(job_id: str) -> dict[str, str]:
    shown = query(["scontrol", "-o", "show", "job", job_id])
    return dict(re.findall(r"(\w+)=(\S*)", shown.splitlines()[0])) if shown else {}


def job_info(job_id: str) -> dict[str, str]:
    """``{"state", "nodes", "exit", "reason", "source"}``: squeue (live), else the final."""
    live = query(["squeue", "-h", "-j", job_id, "-o", "%T|%N|%r"])
    if live:
        state, nodes, reason = [*live.splitlines()[0].split("|"), "", ""][:3]
        if state in ACTIVE:
            return {
                "state": state,
                "nodes": nodes,
                "exit": "",
                "reason": reason,
                "source": "squeue",
            }
    return final_info(job_id)


def final_info(job_id: str) -> dict[str, str]:
    """The job's end from sacct (accounting), else scontrol (no accounting storage here)."""
    acct = query(["sacct", "-n", "-P", "-X", "-j", job_id, "-o", "State,NodeList,ExitCode,Reason"])
    if acct:
        state, nodes, code, reason = [*acct.splitlines()[0].split("|"), "", "", ""][:4]
        return {
            "state": state.split()[0] if state else "UNKNOWN",
            "by": state.split(" by ", 1)[1] if " by " in state else "",
            "nodes": nodes,
            "exit": code,
            "reason": reason,
            "source": "sacct",
        }
    fields = scontrol_fields(job_id)  # sacct: "Slurm accounting storage is disabled"
    if fields:
        return {
            "state": fields.get("JobState", "UNKNOWN"),
            "nodes": fields.get("NodeList", ""),
            "exit": fields.get("ExitCode", ""),
            "reason": fields.get("Reason", ""),
            "source": "scontrol",
        }
    return {"state": "UNKNOWN", "nodes": "", "exit": "", "reason": "", "source": ""}


def exit_code(info: dict[str, str]) -> int:
    code, _, sig = info.get("exit", "").partition(":")
    if code.isdigit() and int(code):
        return int(code)
    if sig.isdigit() and int(sig):
        return 128 + int(sig)
    return 0 if info["state"] == "COMPLETED" else 1


def partition_nodes(partition: str | None) -> int | None:
    """Nodes in the partition (the default one when None), from sinfo."""
    argv = ["sinfo", "-h", "-o", "%P|%D"]
    rows = [r.split("|") for r in query(argv).splitlines() if "|" in r]
    total = 0
    found = False
    for name, count in rows:
        default = name.endswith("*")
        if (partition and name.rstrip("*") == partition) or (not partition and default):
            found = True
            total += int(count) if count.isdigit() else 0
    return total if found else None


_REASONS = {
    "Resources": "waiting for free nodes (the nodes it needs are busy)",
    "Priority": "other jobs are ahead of it in the queue",
    "Dependency": "waiting for another job it depends on",
    "BeginTime": "its start time has not come yet",
    "JobHeldUser": "held by its user (scontrol release JOBID)",
    "JobHeldAdmin": "held by an administrator",
    "ReqNodeNotAvail": "the nodes it needs are down, drained or reserved (sinfo -R)",
    "PartitionDown": "the partition is down",
    "PartitionInactive": "the partition is inactive",
    "PartitionTimeLimit": "launch.slurm.time_limit is above the partition's time limit",
    "InvalidAccount": "launch.slurm.account is not an account you may use (sacctmgr show assoc)",
    "InvalidQOS": "launch.slurm.qos is not a QoS you may use",
    "QOSMaxJobsPerUserLimit": "you already run as many jobs as the QoS allows",
    "AssocMaxJobsLimit": "your account already runs as many jobs as it may",
    "AssocGrpGRES": "your account's GPU share is in use",
}


def pending_words(reason: str, nnodes: int, partition: str | None) -> str:
    """A pending job's reason as a sentence (Slurm's own word kept in brackets)."""
    if reason in ("PartitionConfig", "PartitionNodeLimit", "BadConstraints"):
        have = partition_nodes(partition)
        if have is not None and have < nnodes:
            return (
                f"the partition has {have} node{'s' if have != 1 else ''}, the preset asks "
                f"{nnodes}: it can never start; set launch.nnodes: {have} or another "
                f"launch.slurm.partition ({reason})"
            )
        return f"the partition cannot take the job as asked (nodes, GPUs or time) ({reason})"
    if reason in _REASONS:
        return f"{_REASONS[reason]} ({reason})"
    return f"Slurm's reason: {reason}" if reason and reason != "None" else "in the queue"


def ending(info: dict[str, str], job_id: str, time_limit: str | None) -> tuple[str, str, str]:
    """(kind, message, cause) for a job that ended; kind: finished | stopped | failed, and
    "failed_nodes" when only the nodes' own finding can say why (FAILED)."""
    state = info["state"]
    src = f"(from {info.get('source') or 'Slurm'})"
    if state == "COMPLETED":
        return "finished", "finished", ""
    if state.startswith("CANCELLED"):
        by = f" by {info['by']}" if info.get("by") else ""
        return "stopped", f"slurm job {job_id} cancelled{by} (scancel) {src}", "stopped"
    if state == "TIMEOUT":
        limit = f" launch.slurm.time_limit {time_limit}" if time_limit else ""
        return (
            "failed",
            f"slurm job {job_id} reached its time limit (TIMEOUT{limit}) {src}: raise "
            "launch.slurm.time_limit or resume from the last checkpoint",
            "slurm_timeout",
        )
    if state == "NODE_FAIL":
        return (
            "failed",
            f"slurm job {job_id}: a node failed (NODE_FAIL on {info.get('nodes') or '?'}) "
            f"{src}: resume; Slurm drains the node (sinfo -R)",
            "node_fail",
        )
    if state == "OUT_OF_MEMORY":
        return (
            "failed",
            f"slurm job {job_id} went over its memory (OUT_OF_MEMORY) {src}: raise "
            "launch.slurm.mem or lower the batch size",
            "host_oom",
        )
    if state == "PREEMPTED":
        return "failed", f"slurm job {job_id} was preempted {src}: resume it", "preempted"
    return "failed_nodes", f"slurm job {job_id} {state} {src}", ""
