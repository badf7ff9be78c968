"""The ssh argv every trainwiz call to a node starts with. It lives in the plan layer because
the node checks (backend/checks/nodes.py) and the multi-node runner both build it: one owner,
below both of them."""

from __future__ import annotations

from pathlib import Path

from backend.preset.schema import SshConfig


def split_node(node: str, default_port: int) -> tuple[str | None, str, int]:
    """``[user@]host[:port]`` (validated by the schema) -> (user, host, port)."""
    user, _, rest = node.rpartition("@")
    host, _, port = rest.partition(":")
    return (user or None, host, int(port) if port else default_port)


def ssh_base(config: SshConfig, node: str) -> list[str]:
    """``ssh`` with the options every trainwiz call uses, up to and including the host."""
    user, host, port = split_node(node, config.port)
    argv = ["ssh", "-o", "BatchMode=yes", "-o", f"ConnectTimeout={config.connect_timeout}"]
    argv += ["-o", "ServerAliveInterval=15", "-o", "ServerAliveCountMax=4", "-p", str(port)]
    if config.identity_file:
        argv += ["-i", str(Path(config.identity_file).expanduser()), "-o", "IdentitiesOnly=yes"]
    if config.known_hosts_file:
        argv += ["-o", f"UserKnownHostsFile={Path(config.known_hosts_file).expanduser()}"]
    if user or config.user:
        argv += ["-l", str(user or config.user)]
    return [*argv, "--", host]
