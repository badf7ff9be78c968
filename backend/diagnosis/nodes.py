"""Which node a finding comes from, in a multi-node run's log.

Both multi-node launchers copy every node's output into the run's ``train.log`` with the node
named at the start of each line (``[node1 gpu-b] ...``, backend/runs/multinode/agents.py). The
scanner reads that prefix, so each finding says which node its line came from and on which
nodes it was seen. A collective timeout is usually a symptom: the rank that stopped answering
failed first, often on another node (out of memory, killed). When the root cause sits on a
different node than the timeout, the timeout's explanation says so and names that node.
"""

from __future__ import annotations

import re
from pathlib import Path

from backend.diagnosis.model import Finding
from backend.i18n import _

# The prefix both multi-node launchers put on each node's line (runs/multinode/agents.py
# NodeLog): the log pane colours it, the scanner names the finding's node from it.
NODE_TAG = re.compile(r"\[node(\d+) ([^\]\s]+)\] ")
SYMPTOMS = ("nccl", "rendezvous_timeout")  # what another node's failure shows up as here


def node_of(line: str) -> str | None:
    """``node1 gpu-b`` for a line the launcher tagged, else None (a single-node log)."""
    match = NODE_TAG.match(line.lstrip())
    return f"node{match[1]} {match[2]}" if match else None


def node_of_path(path: Path) -> str | None:
    """A Slurm run's own per-node log (``<run>/nodes/node1-gpu-b.log``, untagged lines):
    every finding in it is that node's."""
    match = re.fullmatch(r"node(\d+)-(.+)\.log", path.name)
    return f"node{match[1]} {match[2]}" if match and path.parent.name == "nodes" else None


def cross_node(findings: list[Finding]) -> None:
    """Point a timeout on one node at the error on another node that it follows from."""
    causes = [
        f for f in findings if f.severity == "error" and f.node and f.category not in SYMPTOMS
    ]
    for finding in findings:
        if finding.category not in SYMPTOMS or not finding.node:
            continue
        cause = next((c for c in causes if c.node not in finding.nodes), None)
        if cause is None:
            continue
        sentence = _(
            "This is {node}'s view of the failure: the root cause is on {cause_node} "
            "({category}, line {line}: {title}); fix that first."
        ).format(
            node=finding.node,
            cause_node=cause.node,
            category=cause.category,
            line=cause.line,
            title=cause.title,
        )
        if sentence not in finding.explanation:  # a run's node logs come in a second pass
            finding.explanation += " " + sentence


def merge_node_log(findings: list[Finding], name: str, extra: list[Finding]) -> None:
    """Add one node's own log's findings (``name``: its path in the run dir) to the run's.

    A failure train.log already holds for that node (the watcher copies node logs into it) is
    not repeated; one seen on another node gains this node; a new one is added, its text naming
    the file its line number belongs to."""
    for finding in extra:
        same = next((f for f in findings if f.category == finding.category), None)
        if same is not None and finding.node is not None and finding.node in same.nodes:
            continue
        if same is not None and same.severity == finding.severity:
            if finding.node is not None:
                same.nodes.append(finding.node)
            same.count += finding.count
            continue
        finding.text = f"{name} line {finding.line}: {finding.text}"
        findings.append(finding)
