"""Serve a run's model through FastChat's own stack: an OpenAI-compatible API for the user's apps.

Three processes of the training side's python, as FastChat documents them: the controller, one
model worker (FastChat's ``model_worker``, or ``vllm_worker`` where vllm imports and a GPU is
visible), and the OpenAI API server (``serve_api.py``: FastChat's app, with the API key read
from the environment instead of argv, where ``ps`` would show it). The model is the one
``trainwiz chat`` loads (``weights.weights``): a full run's folder, an FSDP-sharded checkpoint
consolidated once into ``serve/``, or a LoRA adapter on its base (FastChat's peft adapter), named
after the run and formatted with the chat template the run trained with (``serve_template``:
FastChat's vicuna_v1.1 for a vicuna run, the FastChat template it named, or, for the model's own
Jinja template, the prompt rendered by the run's tokenizer in the API server).

Every process runs in a session of its own with ``TRAINWIZ_SERVE_DIR`` in its environment, so
ctrl+c, ``trainwiz stop RUN`` or a failure ends all of them, leftovers included; and each dies
with the process that started it (the kernel's parent-death signal), so ``kill -9`` of a
foreground ``trainwiz serve`` or of the detached supervisor leaves no server answering.
``serve.json`` in ``RUN/serve/`` records the supervisor (and its start time, so a reused pid is
never signalled) while it serves. 127.0.0.1 by default; an address other machines reach is the
user's explicit choice, with a warning, and needs an API key or ``--allow-no-key``. Readiness
is asked where the API listens (0.0.0.0 as 127.0.0.1, :: as ::1).
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, Any

from backend import ports, subproc
from backend.errors import BadInput, TrainwizError
from backend.i18n import _
from backend.procinfo import env_entry, find_processes
from backend.results import serve_checks, serve_ready
from backend.results.serve_template import (
    TEMPLATE_ENV,
    TOKENIZER_ENV,
    api_env,
    run_template,
    tokenizer_dir,
)
from backend.results.serve_template import worker_conv_template as conv_template
from backend.results.weights import WORKER, Weights, weights, worker_python

SERVE_DIR = "serve"
RECORD = "serve.json"
MARK_ENV = "TRAINWIZ_SERVE_DIR"
KEY_ENV = "TRAINWIZ_SERVE_API_KEY"
PORT_TRIES = 3  # starts on fresh loopback ports when one was taken between its pick and bind
API_SCRIPT = Path(__file__).resolve().with_name("serve_api.py")
CONSOLIDATE = WORKER.parents[1] / "entry" / "consolidate.py"


@dataclass
class ServePlan:
    run_dir: Path
    model_name: str
    model_path: Path
    host: str
    port: int
    engine: str  # "model_worker" | "vllm_worker"
    python: str
    device: str
    api_key: str | None = None
    warnings: list[str] = field(default_factory=list)
    source: Weights | None = None
    template: str = "vicuna"  # the run's chat template (serve_template.run_template)
    allow_no_key: bool = False  # --allow-no-key: reachable from other machines, no key, on purpose

    @property
    def base_url(self) -> str:
        """Where a client on this machine reaches the API (readiness is asked there too)."""
        shown = ports.url_host(ports.client_address(self.host))
        return f"http://{shown}:{self.port}/v1"

    def curl(self) -> str:
        auth = ' -H "Authorization: Bearer $API_KEY"' if self.api_key else ""
        body = json.dumps(
            {"model": self.model_name, "messages": [{"role": "user", "content": "Hello!"}]}
        )
        return f"curl {self.base_url}/chat/completions -H 'Content-Type: application/json'{auth} -d '{body}'"


def _engine(python: str, device: str) -> str:
    """vLLM's worker where vllm imports with a CUDA device in the training environment."""
    if device == "cpu":
        return "model_worker"
    probe = "import torch, vllm; print(torch.cuda.is_available())"
    out = subproc.probe([python, "-c", probe], 60)
    return "vllm_worker" if out.code == 0 and out.stdout.strip() == "True" else "model_worker"


def _lora_folder(run_dir: Path, source: Weights) -> Path:
    """FastChat loads a peft adapter whose adapter_config.json names its base: a folder in
    ``serve/`` with that config pointing at the base as this host sees it (a container path
    would not load) and links to the adapter's own files."""
    assert source.adapter_base is not None
    folder = run_dir / SERVE_DIR / f"adapter-{source.path.name}"
    folder.mkdir(parents=True, exist_ok=True)
    config = json.loads((source.path / "adapter_config.json").read_text(encoding="utf-8"))
    config["base_model_name_or_path"] = str(source.adapter_base)
    (folder / "adapter_config.json").write_text(json.dumps(config, indent=2), encoding="utf-8")
    for path in source.path.iterdir():
        link = folder / path.name
        if path.is_file() and path.name != "adapter_config.json" and not link.exists():
            link.symlink_to(path)
    return folder


def _consolidated(run_dir: Path, source: Weights, python: str) -> Path:
    """An FSDP-sharded checkpoint as full weights, made once (the training side's python)."""
    assert source.base is not None
    folder = run_dir / SERVE_DIR / f"consolidated-{source.path.name}"
    if (folder / "config.json").is_file():
        return folder
    tmp = folder.with_name(folder.name + ".partial")
    argv = [python, str(CONSOLIDATE), "--checkpoint", str(source.path)]
    argv += ["--base", str(source.base), "--out", str(tmp)]
    proc = subproc.probe(argv, None)
    if isinstance(proc.error, OSError):
        raise proc.error  # the training side's python is gone
    if proc.code != 0:
        tail = " | ".join(proc.stderr.strip().splitlines()[-3:])
        raise (BadInput if proc.code == 2 else TrainwizError)(
            _("consolidating {path} failed: {tail}").format(path=source.path, tail=tail)
        )
    os.replace(tmp, folder)
    return folder


def plan_serve(
    run_dir: Path,
    *,
    checkpoint: int | None = None,
    host: str = "127.0.0.1",
    port: int = 8000,
    api_key_env: str | None = None,
    device: str = "auto",
    allow_no_key: bool = False,
) -> ServePlan:
    """What ``trainwiz serve`` will run, checked before anything starts (exit 2 on bad input)."""
    key = serve_checks.api_key(api_key_env)
    serve_checks.check_listen(host, port)
    source = weights(run_dir, checkpoint)
    open_to_others = serve_checks.check_open(host, key, allow_no_key)
    python = worker_python(run_dir)
    warnings = []
    if open_to_others:
        warnings.append(
            _("serving on {host}: the API is reachable from other machines{keyless}").format(
                host=host,
                keyless="" if key else _(", without an API key (--allow-no-key)"),
            )
        )
    return ServePlan(
        run_dir=run_dir,
        model_name=run_dir.name,
        model_path=source.path,
        host=host,
        port=port,
        engine=_engine(python, device),
        python=python,
        device=device,
        api_key=key,
        warnings=warnings,
        source=source,
        template=run_template(run_dir),
        allow_no_key=allow_no_key and open_to_others and not key,
    )


@dataclass
class Serving:
    """The three live processes of a serve; ``stop()`` ends them all (idempotent)."""

    plan: ServePlan
    procs: dict[str, subprocess.Popen[bytes]]
    logs: Path

    def alive(self) -> bool:
        return all(p.poll() is None for p in self.procs.values())

    def dead(self) -> str | None:
        for name, proc in self.procs.items():
            if proc.poll() is not None:
                return name
        return None

    def stop(self, grace: float = 10.0) -> None:
        for proc in self.procs.values():
            subproc.signal_group(proc, signal.SIGTERM)
        deadline = time.monotonic() + grace
        for proc in self.procs.values():
            try:
                proc.wait(max(0.1, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                subproc.signal_group(proc, signal.SIGKILL)
                proc.wait(5)
        end_leftovers(self.plan.run_dir)


def serve_processes(run_dir: Path, exclude: tuple[int, ...] = ()) -> list[int]:
    """Live processes with this run's serve marker in their environment."""
    marker = env_entry(MARK_ENV, run_dir.resolve())
    return sorted(p.pid for p in find_processes(env=marker, skip=exclude))


def end_leftovers(run_dir: Path, exclude: tuple[int, ...] = ()) -> None:
    for sig in (signal.SIGTERM, signal.SIGKILL):
        pids = serve_processes(run_dir, exclude)
        for pid in pids:
            try:
                os.kill(pid, sig)
            except (ProcessLookupError, PermissionError):
                pass
        deadline = time.monotonic() + 5
        while serve_processes(run_dir, exclude) and time.monotonic() < deadline:
            time.sleep(0.1)


def _argvs(plan: ServePlan, model_path: Path, controller: int, worker: int) -> dict[str, list[str]]:
    py, loop = plan.python, "127.0.0.1"
    device = (
        plan.device if plan.device != "auto" else ("cuda" if plan.engine == "vllm_worker" else "")
    )
    worker_argv = [py, "-m", f"fastchat.serve.{plan.engine}", "--host", loop, "--port", str(worker)]
    worker_argv += ["--worker-address", f"http://{loop}:{worker}"]
    worker_argv += ["--controller-address", f"http://{loop}:{controller}"]
    worker_argv += ["--model-path", str(model_path), "--model-names", plan.model_name]
    worker_argv += ["--conv-template", conv_template(plan.template)]
    if plan.engine == "model_worker":
        if not device:
            device = "cuda" if _has_cuda(py) else "cpu"
        worker_argv += ["--device", device]
    return {
        "controller": [py, "-m", "fastchat.serve.controller", "--host", loop, "--port", str(controller)],
        "worker": worker_argv,
        "api": [py, str(API_SCRIPT), "--host", plan.host, "--port", str(plan.port),
                "--controller-address", f"http://{loop}:{controller}"],
    }  # fmt: skip


def _has_cuda(python: str) -> bool:
    probe = "import torch; print(torch.cuda.is_available())"
    out = subproc.probe([python, "-c", probe], 120)
    return out.error is None and out.stdout.strip() == "True"


class _PortTaken(Exception):
    """An internal server (controller or worker) could not bind the port picked for it."""


def start(
    plan: ServePlan,
    *,
    ready_timeout: float = 600.0,
    cancel: threading.Event | None = None,
    progress: Any = None,
) -> Serving:
    """Start controller, worker and API server; return once the API lists the model and our
    controller routes it to our worker. On any failure (or ``cancel``) everything started is
    ended and the error names the log to read. The controller's and worker's loopback ports are
    picked free and bound a moment later by another process, so one can be taken in between
    (by anything on the machine): that start is ended and retried on new ports."""
    run_dir = plan.run_dir
    logs = run_dir / SERVE_DIR
    logs.mkdir(parents=True, exist_ok=True)
    model_path = plan.model_path
    if plan.source is not None and plan.source.adapter_base is not None:
        model_path = _lora_folder(run_dir, plan.source)
    elif plan.source is not None and plan.source.sharded:
        model_path = _consolidated(run_dir, plan.source, plan.python)
    began = time.monotonic()
    for attempt in range(1, PORT_TRIES + 1):
        try:
            return _start_stack(plan, model_path, (began, ready_timeout), cancel, progress)
        except _PortTaken as taken:
            if attempt == PORT_TRIES:
                raise TrainwizError(
                    _("the {name} process found its port taken {n} times: see {log}").format(
                        name=taken.args[0], n=PORT_TRIES, log=logs / f"{taken.args[0]}.log"
                    )
                ) from None
    raise AssertionError("unreachable")


def _start_stack(
    plan: ServePlan,
    model_path: Path,
    clock: tuple[float, float],  # (when the serve began, seconds it may take to be ready)
    cancel: threading.Event | None,
    progress: Any,
) -> Serving:
    run_dir, logs = plan.run_dir, plan.run_dir / SERVE_DIR
    unset = ("TRAINWIZ_RUN_DIR", KEY_ENV, TOKENIZER_ENV, TEMPLATE_ENV)
    env = {k: v for k, v in os.environ.items() if k not in unset}
    env.update({MARK_ENV: str(run_dir.resolve()), "LOGDIR": str(logs), "PYTHONUNBUFFERED": "1"})
    controller, worker = ports.any_free_port(), ports.any_free_port()
    argvs = _argvs(plan, model_path, controller, worker)
    api = {**env, **api_env(plan.template, tokenizer_dir(plan.source, model_path))}
    if plan.api_key:
        api[KEY_ENV] = plan.api_key
    procs: dict[str, subprocess.Popen[bytes]] = {}
    offsets: dict[str, int] = {}
    serving = Serving(plan, procs, logs)
    try:
        for name in ("controller", "worker", "api"):
            child_env = api if name == "api" else env
            log: IO[bytes]
            with open(logs / f"{name}.log", "ab") as log:
                offsets[name] = log.tell()
                procs[name] = subproc.spawn(
                    argvs[name], env=child_env, stdout=log, cwd=logs, text=False,
                    die_with_parent=True,  # kill -9 of this process leaves no server answering
                )  # fmt: skip
        while True:
            # A server that lost its port may live on (FastChat's heartbeat thread): its log says.
            for name in ("controller", "worker"):
                if serve_ready.lost_its_port(logs / f"{name}.log", offsets[name]):
                    raise _PortTaken(name)
            dead = serving.dead()
            if dead is not None:
                raise TrainwizError(
                    _("the {name} process exited (code {code}): see {log}").format(
                        name=dead, code=procs[dead].returncode, log=logs / f"{dead}.log"
                    )
                )
            ready = serve_ready.api_lists(
                plan.base_url, plan.api_key, plan.model_name
            ) and serve_ready.routed_to(controller, worker, plan.model_name)
            if ready and serving.alive():
                return serving
            waited = time.monotonic() - clock[0]
            if waited > clock[1]:
                raise TrainwizError(
                    _("the model was not served within {s:.0f} s: see {log}").format(
                        s=clock[1], log=logs / "worker.log"
                    )
                )
            if cancel is not None and cancel.is_set():
                raise TrainwizError(_("cancelled"))
            if progress is not None:
                progress(waited)
            time.sleep(0.5)
    except BaseException:
        serving.stop(grace=5)
        raise
