"""The Docker runner on every node (``launch.runner: docker`` with ``scheduler: ssh``).

Each node runs the same image, checked by id: node 0's ``docker image inspect`` id is the
reference, a node without the tag gets it (``docker pull`` when node 0's copy came from a
registry, else ``docker save`` here streamed into ``docker load`` over ssh: no file is written
anywhere), and a node whose tag names a *different* image is refused before any container
starts (trainwiz never overwrites an image it did not put there).

Then each node's agent runs in a detached container started over ssh with the single-node
runner's own flags (``backend.plan.docker_args.container_options``: the one docker argv builder),
``--network=host`` (c10d and NCCL need the node's own addresses), a per-run, per-node name and
trainwiz's labels. The node's shell follows the container's log, waits for its exit code and
removes it; ``stop`` signals exactly those containers by name (``docker kill``, then
``docker rm -f``). Every word of the shell text on the node is ``shlex``-quoted.
"""

from __future__ import annotations

import json
import shlex
import subprocess
from pathlib import Path
from typing import IO, Any

from backend import subproc
from backend.errors import BadInput
from backend.i18n import _
from backend.images import env_image_tag
from backend.plan.docker_args import container_options
from backend.plan.ssh_argv import ssh_base
from backend.preset.schema import Preset
from backend.redact import split_secret_env
from backend.rundir import update_status
from backend.runs.docker_runner import LABEL_PRESET, LABEL_RUN
from backend.runs.multinode import ssh
from backend.runs.multinode.agents import PID_MARK, NodeLog
from backend.runs.multinode.ssh import stdin_reads

LABEL_NODE = "trainwiz.node"
CONTAINER_MARK = "TRAINWIZ_NODE_CONTAINER="
# The single-node flags a node's container sets itself (docker_argv), and those taking a value.
_OWN_FLAGS = ("--rm", "--name=", "--net=")
_WITH_VALUE = ("--gpus", "--ulimit", "-v", "-e", "-w")


def _run_id(run_dir: Path | str) -> str:
    return "<run_id>" if str(run_dir).startswith("<") else Path(run_dir).name  # plan: no run yet


def container_name(run_id: str, index: int) -> str:
    """Unique per run and node, so two nodes on one daemon (or two runs) never collide."""
    return f"trainwiz-{run_id}-node{index}"


def node_image(preset: Preset) -> str:
    """The image every node runs: the environment image trainwiz builds (mode: image)."""
    if preset.environment.mode != "image":
        raise BadInput(
            _(
                "environment.mode: in_container runs its setup steps inside one container; a "
                "multi-node docker run needs mode: image (one built image on every node)"
            )
        )

    return str(env_image_tag(preset))


def docker_argv(
    preset: Preset,
    run_dir: Path | str,
    image: str,
    agent: list[str],
    env: dict[str, str],
    index: int,
) -> list[str]:
    """``docker run -d ...`` for node ``index``: the single-node flags, host network, labels.

    Detached (``-d``), never ``--rm``: the node's shell reads the exit code before removing it.
    """
    network = preset.container.network
    if network not in (None, "host"):
        raise BadInput(
            _(
                "container.network: '{network}' would hide the node's addresses from the "
                "rendezvous: a multi-node docker run uses the host network (set it to host)"
            ).format(network=network)
        )
    run_id = _run_id(run_dir)
    flags, _sdk = container_options(preset, Path(run_dir))
    # --pid=host: torch's rendezvous tells agents apart by host name and pid, and in a pid
    # namespace of its own every agent would be pid 1 (two nodes on one host would never form).
    argv = ["docker", "run", "-d", *_kept_flags(flags[1:]), "--network=host", "--pid=host"]
    argv.append(f"--name={container_name(run_id, index)}")
    for key, value in ((LABEL_RUN, run_id), (LABEL_PRESET, preset.name), (LABEL_NODE, index)):
        argv += ["--label", f"{key}={value}"]
    for key, value in env.items():
        argv += ["-e", f"{key}={value}"]
    if preset.launch.workdir:
        argv += ["-w", preset.launch.workdir]
    return [*argv, image, *agent]


def _kept_flags(flags: list[str]) -> list[str]:
    """The flags minus -itd, --rm, --name and --net (a flag's value is never taken for one)."""
    kept: list[str] = []
    value_next = False
    for flag in flags:
        if value_next or not flag.startswith(_OWN_FLAGS):
            kept.append(flag)
        value_next = not value_next and flag in _WITH_VALUE
    return kept


def hide_secret_flags(run_argv: list[str]) -> tuple[list[str], list[str]]:
    """``-e KEY=SECRET`` becomes ``-e KEY`` (docker takes the value from its own environment,
    which the node's shell reads from stdin); returns (argv, the secret names)."""
    out: list[str] = []
    names: list[str] = []
    for index, word in enumerate(run_argv):
        if index and run_argv[index - 1] == "-e" and "=" in word:
            key, _sep, value = word.partition("=")
            if split_secret_env({key: value})[1]:
                names.append(key)
                word = key
        out.append(word)
    return out, names


def remote_command(run_argv: list[str], name: str, secret_names: list[str] | None = None) -> str:
    """The node's shell: its pid, the container, its log until it ends, its code, its removal."""
    quoted = shlex.quote(name)
    reads = stdin_reads(secret_names or []).removesuffix(" && ")
    return (
        f"echo {PID_MARK}$$; "
        + (f"{reads} || exit 125; " if reads else "")
        + f"cid=$({shlex.join(run_argv)}) || exit 125; "
        f"echo {CONTAINER_MARK}$cid; "
        f"docker logs -f {quoted} 2>&1; "
        f"code=$(docker wait {quoted}); "
        f"docker rm -f {quoted} >/dev/null 2>&1; "
        'exit "${code:-1}"'
    )


def node_specs(
    preset: Preset, run_dir: Path | str, agent: list[str], env: dict[str, str]
) -> list[dict[str, Any]]:
    """launch.json's ``nodes`` for docker: the ssh argv, the container and how to signal it."""
    image = node_image(preset)
    run_id = _run_id(run_dir)
    out = []
    for index, node in enumerate(preset.launch.nodes):
        base = ssh_base(preset.launch.ssh, node)
        name = container_name(run_id, index)
        run_argv, secret_names = hide_secret_flags(
            docker_argv(preset, run_dir, image, agent, env, index)
        )
        quoted = shlex.quote(name)
        out.append(
            {
                "index": index,
                "host": node,
                "ssh": base,
                "image": image,
                "container": name,
                "argv": [*base, remote_command(run_argv, name, secret_names)],
                "stdin_env": secret_names,
                "signal": {
                    "TERM": f"docker kill --signal=TERM {quoted} >/dev/null 2>&1 || true",
                    "KILL": f"docker rm -f {quoted} >/dev/null 2>&1 || true",
                },
            }
        )
    return out


def _ssh(node: dict[str, Any], argv: list[str], timeout: float = 120) -> tuple[int, str, str]:
    """One quoted command on a node: (exit code, stdout, stderr)."""
    done = subproc.probe([*node["ssh"], shlex.join(argv)], timeout)
    if isinstance(done.error, OSError):
        raise done.error  # no ssh client: raised, as it always was
    if done.timed_out:
        return 124, "", f"no answer within {timeout:.0f} s"
    assert done.code is not None
    return done.code, done.stdout.strip(), done.stderr.strip()


def _inspect(node: dict[str, Any], image: str) -> tuple[str | None, list[str], str]:
    """(image id or None when the tag is missing, its registry digests, why it failed)."""
    fmt = "{{.Id}} {{json .RepoDigests}}"
    code, out, err = _ssh(node, ["docker", "image", "inspect", "--format", fmt, image], 60)
    if code == 0 and out:
        ident, _sep, digests = out.splitlines()[-1].partition(" ")
        try:
            found = json.loads(digests or "[]")
        except ValueError:
            found = []
        return ident, [str(d) for d in found or []], ""
    if "no such" in err.lower():
        return None, [], ""
    return None, [], err.splitlines()[-1] if err else f"exit code {code}"


def _where(node: dict[str, Any]) -> str:
    return f"node {node['index']} ({node['host']})"


def _ship(source: dict[str, Any], node: dict[str, Any], image: str, log: NodeLog) -> str:
    """``docker save`` on node 0 piped into ``docker load`` on the node: streamed, no file."""
    save = subproc.spawn(
        [*source["ssh"], shlex.join(["docker", "save", image])],
        stderr=subprocess.PIPE,
        text=False,
    )
    assert save.stdout is not None
    load = subproc.probe([*node["ssh"], shlex.join(["docker", "load"])], None, stdin=save.stdout)
    if isinstance(load.error, OSError):
        subproc.stop_group(save, 5.0)
        raise load.error  # no ssh client: raised, as it always was
    save.stdout.close()
    saved = save.wait()
    err = (save.stderr.read().decode(errors="replace") if save.stderr else "").strip()
    if saved != 0 or load.code != 0:
        why = err or load.stderr.strip() or f"exit codes {saved}/{load.code}"
        return why.splitlines()[-1]
    log.note(f"{_where(node)}: {load.stdout.strip()}")
    return ""


def ensure_images(nodes: list[dict[str, Any]], log: NodeLog) -> str:
    """Every node has node 0's image under the same tag, with the same id; '' or the finding
    (recorded in status.json by the watcher: English, like every run record's finding)."""
    image = nodes[0]["image"]
    reference, digests, why = _inspect(nodes[0], image)
    if reference is None:
        missing = why or "no such image"
        return f"{_where(nodes[0])}: image {image} is not there ({missing}): build it first"
    log.note(f"image {image} on {_where(nodes[0])}: {reference}")
    for node in nodes[1:]:
        found, _digests, why = _inspect(node, image)
        if found is None and why:
            return f"{_where(node)}: cannot ask docker for image {image}: {why}"
        if found is None and digests:
            log.note(f"{_where(node)}: docker pull {image}")
            _ssh(node, ["docker", "pull", image], timeout=3600)
            found, _digests, why = _inspect(node, image)
        if found is None:
            log.note(f"{_where(node)}: shipping {image} from node 0 (docker save | docker load)")
            failed = _ship(nodes[0], node, image, log)
            if failed:
                return f"{_where(node)}: could not ship image {image}: {failed}"
            found, _digests, why = _inspect(node, image)
        if found != reference:
            return (
                f"{_where(node)}: image {image} is {found} there but {reference} on node 0: "
                "the nodes would train in different environments; remove or retag that image there "
                "(trainwiz does not replace it) so node 0's can be shipped"
            )
        log.note(f"image {image} on {_where(node)}: {found}")
    return ""


def run(run_dir: Path, spec: dict[str, Any], log: IO[bytes]) -> tuple[int, str, str | None]:
    """Check (and ship) the image on every node, then start and follow the agents over ssh."""
    nodes: list[dict[str, Any]] = spec["nodes"]
    update_status(
        run_dir, step="images", message=f"checking image {nodes[0]['image']} on every node"
    )
    finding = ensure_images(nodes, NodeLog(log, []))
    if finding:
        return 2, finding, None
    return ssh.run(run_dir, spec, log)


def remove_containers(nodes: list[dict[str, Any]]) -> None:
    """``docker rm -f`` of this run's containers (by their names) on every node."""
    for node in nodes:
        if node.get("container"):
            _ssh(node, ["docker", "rm", "-f", node["container"]], timeout=60)
