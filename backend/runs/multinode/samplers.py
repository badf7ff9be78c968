"""One GPU sampler per node (backend/entry/gpusampler.py), started, tracked and stopped with
the run.

- **SSH**: the watcher starts each node's sampler over its own ssh connection (the same ssh
  options as the agent; the sampler runs on the node's host, where NVML sees every GPU). The
  node's shell prints the sampler's pid, which is recorded in ``status.json``
  (``nodes[i].sampler``) and signalled by ``stop`` like the agent's. The sampler writes a
  heartbeat line to its ssh channel each sample, so if the watcher dies the channel closes
  and the sampler ends itself; it also ends once status.json says the run is over.
- **Slurm**: the job script starts one sampler task per node (``srun --overlap``, in the
  background) before the training step, and ends it when the step ends; ``scancel`` ends both.
- Both write ``<run>/nodes/node<i>/gpu.jsonl`` over the run's shared file system (the run dir
  must be shared across nodes anyway: the entry and metrics live there). Not supported: a run
  dir that only node 0 sees (the samples would need to come back over ssh).

The state each node's sampler is in (``ok``, ``no_gpu``, ``stopped``, ``gone``...) is read from
its file by the same ``describe`` the monitor uses, so a sampler that died is a visible state.
"""

from __future__ import annotations

import shlex
import shutil
import signal
import subprocess
import threading
import time
from pathlib import Path
from typing import Any

from backend import subproc
from backend.entry import ENTRY_DIR
from backend.entry.gpusampler import describe
from backend.monitor.nodegpu import GPU_FILE, NODES_DIR, NodeGpuFile
from backend.rundir import STATUS
from backend.runs.multinode.agents import NodeLog, NodeState

MODULE = "gpusampler.py"
PID_MARK = "TRAINWIZ_SAMPLER_PID="
STOP_FILE = "samplers.stop"
INTERVAL = 1.0


def install(run_dir: Path) -> Path:
    """Copy the sampler into ``<run>/entry/`` (like the entry: a run keeps the code it ran)."""
    target_dir = run_dir / "entry"
    target_dir.mkdir(parents=True, exist_ok=True, mode=0o700)
    target = target_dir / MODULE
    shutil.copy2(ENTRY_DIR / MODULE, target)
    target.chmod(0o600)
    return target


def python_beside(torchrun: str) -> str:
    """The python of the training venv (the same path on every node), else ``python3``."""
    path = Path(torchrun)
    return str(path.with_name("python")) if path.is_absolute() else "python3"


def sampler_argv(
    python: str, run_dir: Path | str, node: str, marker: str, **extra: str
) -> list[str]:
    base = Path(run_dir)
    argv = [python, str(base / "entry" / MODULE), f"--node={node}"]
    argv += [f"--out-dir={base / NODES_DIR}", f"--status={base / STATUS}"]
    argv += [f"--interval={INTERVAL:g}", f"--marker={marker}"]
    return argv + [f"--{key.replace('_', '-')}={value}" for key, value in extra.items()]


def ssh_argv(
    ssh_base: list[str], torchrun: str, env: dict[str, str], index: int, host: str
) -> list[str]:
    """The node's sampler over ssh: its pid first, then the sampler with a heartbeat."""
    metrics = env["TRAINWIZ_METRICS"]
    argv = sampler_argv(
        python_beside(torchrun),
        Path(metrics).parent,
        f"node{index}",
        f"TRAINWIZ_METRICS={metrics}",
        host=host,
    )
    return [*ssh_base, f"echo {PID_MARK}$$; exec {shlex.join([*argv, '--heartbeat'])} 2>&1"]


def slurm_lines(torchrun: str, run_dir: Path | str, env: dict[str, str], nnodes: int) -> list[str]:
    """The job script's lines that start one sampler task per node in the background (and
    end it with the script)."""
    stop = Path(run_dir) / NODES_DIR / STOP_FILE
    argv = sampler_argv(
        python_beside(torchrun),
        run_dir,
        "auto",
        f"TRAINWIZ_METRICS={env['TRAINWIZ_METRICS']}",
        stop_file=str(stop),
    )
    srun = ["srun", "--overlap", f"--nodes={nnodes}", "--ntasks-per-node=1"]
    srun += ["--cpus-per-task=1", f"--output={Path(run_dir) / NODES_DIR}/sampler-node%n-%N.log"]
    # At the script's end (success or not) the stop file tells every node's sampler to write
    # its end line and exit; after 30 s the sampler step is ended anyway. The script's exit
    # status is kept (an EXIT trap does not change it).
    ending = (
        f"touch {shlex.quote(str(stop))}; "
        'for _ in $(seq 30); do kill -0 "$sampler" 2>/dev/null || break; sleep 1; done; '
        'kill "$sampler" 2>/dev/null || true'
    )
    return [
        "# one GPU sampler per node (trainwiz gpusampler), ended with this script",
        f"{shlex.join([*srun, *argv])} &",
        "sampler=$!",
        f"trap {shlex.quote(ending)} EXIT",
    ]


def file_state(run_dir: Path, node: str, now: float | None = None) -> dict[str, Any]:
    """What a node's sampler file says: state, why, pid, source, host, last sample time."""
    path = run_dir / NODES_DIR / node / GPU_FILE
    handle = NodeGpuFile(path)
    handle.poll()
    state, why = describe(handle.header, handle.last, handle.end, now or time.time())
    header = handle.header or {}
    last = handle.last or {}
    return {
        "state": state,
        "message": why,
        "pid": header.get("pid"),
        "source": header.get("source"),
        "gpus": len(header.get("gpus") or []),
        "last_t": last.get("t"),
    }


def refresh(run_dir: Path, nodes: list[NodeState]) -> bool:
    """Fold every node's sampler file into its status record; True when one changed state."""
    changed = False
    for node in nodes:
        seen = file_state(run_dir, f"node{node.index}")
        record = {**node.sampler, **{k: v for k, v in seen.items() if k != "last_t"}}
        if node.sampler.get("client") == "exited" and record["state"] in (
            "ok",
            "no_gpu",
            "waiting",
        ):
            record["state"] = "gone"  # its ssh ended but the file has not gone stale yet
        if record.get("state") != node.sampler.get("state"):
            changed = True
        node.sampler = record
    return changed


def finish(run_dir: Path, nodes: list[NodeState], grace: float = 5.0) -> None:
    """The run is over: give each sampler ``grace`` s to write its end line; one that did not
    ended without a word (killed with the job, or its node went away) and is recorded as
    ``gone``, never left looking alive."""
    deadline = time.monotonic() + grace
    while True:
        refresh(run_dir, nodes)
        live = [n for n in nodes if n.sampler.get("state") in ("ok", "no_gpu", "error", "waiting")]
        if not live or time.monotonic() > deadline:
            break
        time.sleep(0.25)
    for node in live:
        node.sampler.update(state="gone", message="ended with the run without an end line")


class SshSamplers:
    """The watcher's ssh clients of every node's sampler (started beside the agents)."""

    def __init__(self, specs: list[dict[str, Any]], states: list[NodeState], nlog: NodeLog) -> None:
        self.specs, self.states, self.nlog = specs, states, nlog
        self.procs: list[subprocess.Popen[bytes]] = []
        self.threads: list[threading.Thread] = []

    def start(self) -> None:
        for spec, state in zip(self.specs, self.states):
            if not spec.get("sampler"):
                continue  # a launch.json from before the samplers
            proc = subproc.spawn(spec["sampler"], text=False)
            self.procs.append(proc)
            state.sampler = {"state": "waiting", "client": "running"}
            thread = threading.Thread(target=self._read, args=(proc, state), daemon=True)
            thread.start()
            self.threads.append(thread)

    def _read(self, proc: subprocess.Popen[bytes], state: NodeState) -> None:
        assert proc.stdout is not None
        for raw in iter(proc.stdout.readline, b""):
            text = raw.decode("utf-8", errors="replace").strip()
            if text.startswith(PID_MARK):
                state.sampler["ssh_pid"] = int(text[len(PID_MARK) :] or 0) or None
                self.nlog.changed.set()
            elif text and not text.replace(".", "", 1).isdigit():  # not a heartbeat
                self.nlog.tagged(f"node{state.index} {state.host} sampler", text)
        code = proc.wait()
        state.sampler.update(client="exited", client_exit=code)
        self.nlog.changed.set()

    def stop(self, timeout: float = 10.0) -> None:
        """TERM on each node (its end line says why), then end the local ssh clients."""
        calls = [
            [*spec["ssh"], f"kill -TERM {int(state.sampler['ssh_pid'])} 2>/dev/null || true"]
            for spec, state in zip(self.specs, self.states)
            if state.sampler.get("ssh_pid") and state.sampler.get("client") != "exited"
        ]
        subproc.run_all(calls, 30.0)
        deadline = time.monotonic() + timeout
        for proc in self.procs:
            try:
                proc.wait(timeout=max(0.1, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                subproc.signal_group(proc, signal.SIGKILL)
                proc.wait()
        for thread in self.threads:
            thread.join(timeout=5)


def signal_samplers(nodes: list[dict[str, Any]], records: list[dict[str, Any]]) -> None:
    """``stop`` without a watcher: TERM each node's sampler from the pid status.json kept."""
    for spec, record in zip(nodes, records):
        pid = (record.get("sampler") or {}).get("ssh_pid")
        if pid and spec.get("ssh"):
            done = subproc.probe([*spec["ssh"], f"kill -TERM {int(pid)} 2>/dev/null || true"], 60)
            if done.error is not None:
                raise done.error  # no ssh client or no answer: raised, as it always was
