"""Where a multi-node run's torchrun agents meet (c10d rendezvous), as one rule for the printed
plan, launch.json and the nodes check.

The port is decided once, with the single-node master_port, by ``backend.runs.spec.decide_port``
(``probes_here`` says when this machine's ports matter); this module turns that port into the
endpoint every node's agent is given, so the plan shows the endpoint the launch uses. A Slurm
job without its own ``launch.rdzv_endpoint`` has no port before it starts: its batch step asks
the OS for a free one on the head node (``port_chosen_in_job``), so two jobs that land on one
head node never share a port, and every agent is given ``$head:$port``.
"""

from __future__ import annotations

from backend.plan.ssh_argv import split_node
from backend.preset.schema import Preset

SLURM_HEAD = "$head"  # the allocation's first node, known only inside the job (slurm.py)
SLURM_PORT = "$port"  # the port the job's batch step chose on that node (slurm.py)
SLURM_ENDPOINT = f"{SLURM_HEAD}:{SLURM_PORT}"


def port_chosen_in_job(preset: Preset) -> bool:
    """Whether the rendezvous port is chosen inside a Slurm job, on its head node: a port fixed
    before the job (the preset's master_port) is the same for every job of the preset, and two
    of them on one head node collide. A preset that names its own endpoint keeps it."""
    launch = preset.launch
    return launch.scheduler == "slurm" and not launch.rdzv_endpoint


def probes_here(preset: Preset) -> bool:
    """Whether the rendezvous port is one of this machine's: an SSH run's store listens on node
    0, where trainwiz (its watcher) runs, unless the preset names its own endpoint. A Slurm
    run's head node is known only in the job, so its port is chosen there."""
    launch = preset.launch
    return launch.scheduler == "ssh" and not launch.rdzv_endpoint


def port_moves_here(preset: Preset) -> bool:
    """Whether a launch takes the next free port itself when master_port is taken here: one
    node on this machine's network, or an SSH run whose store listens here. Nodes started by
    hand must agree on the preset's port and a bridge network has the container's own ports:
    there the preset's port is kept; a Slurm job chooses its own (``port_chosen_in_job``). The
    launch spec decides by this rule and the Checks step names its outcome."""
    launch = preset.launch
    if launch.scheduler != "local":
        return probes_here(preset)
    return launch.nnodes == 1 and (launch.runner == "host" or preset.container.network == "host")


def rdzv_host_port(preset: Preset, port: int) -> tuple[str, int]:
    """(host, port) of the rendezvous for the decided ``port`` (the preset's endpoint wins), for
    an endpoint known before the run starts (the SSH nodes check)."""
    launch = preset.launch
    if launch.rdzv_endpoint:
        host, _, given = launch.rdzv_endpoint.rpartition(":")
        return host, int(given)
    return split_node(launch.nodes[0], launch.ssh.port)[1], port


def rdzv_endpoint(preset: Preset, port: int | None) -> str:
    """``--rdzv_endpoint``'s value: the preset's own endpoint as written, ``$head:$port`` for a
    port chosen in the Slurm job, else host:port."""
    if preset.launch.rdzv_endpoint:
        return preset.launch.rdzv_endpoint
    if port_chosen_in_job(preset):
        return SLURM_ENDPOINT
    assert port is not None  # decide_port gives every other run a port
    host, port = rdzv_host_port(preset, port)
    return f"{host}:{port}"
