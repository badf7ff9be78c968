"""Automatic OOM fallback: an attempt that runs out of memory in its first steps restarts on the
next candidate configuration, and says so.

At launch (``record_chain``) the planner's chain (``backend.planner.fallback``: the launched
preset, then up to three configurations tune ranks after it, each predicted to need less
memory) is written to ``fallback.json`` with, per fallback candidate, the launch.json pieces
that train it (``train`` / ``docker`` / ``exec``, built by the same plan builder as the launch)
and its preset record. The watcher (``backend.runs.resume.run_attempts``) asks ``next_after``
when an attempt fails; the rule:

- the attempt's cause is an out-of-memory (the diagnosis classifier's top finding of that
  attempt's part of train.log is ``cuda_oom`` or ``host_oom``), and
- it logged at most ``FIRST_STEPS`` optimizer steps (metrics.jsonl lines of that attempt): an
  OOM later than that is no configuration that cannot run, so it is left to the diagnosis, and
- a later candidate is predicted to need less of the memory that ran out (GPU memory per GPU
  for ``cuda_oom``, host RAM for ``host_oom``).

The next attempt (``how: oom_fallback``) runs that candidate: launch.json and preset.yaml become
the candidate's (so ``trainwiz resume`` and the record keep training what runs now), and it
resumes from a complete checkpoint when one exists, like every attempt. The chain is finite and
every candidate is tried at most once, so the fallback never loops; each ending has a cause.
"""

from __future__ import annotations

import json
import os
import time
from pathlib import Path
from typing import IO, Any

from backend.i18n import _
from backend.plan.resolve import resolve_preset
from backend.preset.loader import preset_to_yaml
from backend.preset.redacted import redact_preset
from backend.redact import (
    read_secret_env,
    restore_spec_secrets,
    strip_spec_secrets,
    write_secret_env,
)
from backend.rundir import (
    LAUNCH,
    METRICS,
    PRESET,
    atomic_write,
    read_attempts,
    update_status,
)
from backend.runs.spec import build_spec

FALLBACK = "fallback.json"
FIRST_STEPS = 10
OOM_CATEGORIES = ("cuda_oom", "host_oom")
# backend.diagnosis.unrecognised's category, named here rather than imported: the watcher loads
# the classifier's tables only once an attempt has failed (backend.runs.resume).
UNRECOGNISED = "unrecognised_failure"
SPEC_KEYS = ("train", "docker", "exec", "remove_after", "master_port", "torchrun", "image")
RULE = (
    f"an attempt whose top diagnosis is {' or '.join(OOM_CATEGORIES)} within its first "
    f"{FIRST_STEPS} optimizer steps restarts on the next candidate predicted to need less of "
    "that memory"
)


def read_fallback(run_dir: Path) -> list[dict[str, Any]]:
    """The recorded candidates (candidate 1 = the launch), or [] when the run has none."""
    try:
        data = json.loads((run_dir / FALLBACK).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return []
    found = data.get("candidates") if isinstance(data, dict) else None
    return [c for c in found if isinstance(c, dict)] if isinstance(found, list) else []


def record_chain(
    preset: Any,
    run_dir: Path,
    *,
    transformers_version: str | None,
    taken: set[int],
    prepare_file: Path,
) -> str | None:
    """Write fallback.json for a run about to start; returns the launch note, None when there
    is nothing to say (a CPU run, fallback off). Never raises: a launch is not refused because
    its fallback could not be planned."""
    try:
        return _record_chain(preset, run_dir, transformers_version, taken, prepare_file)
    except Exception as exc:  # the planner met a preset it cannot model: launch without it
        return _("OOM fallback: not planned ({error})").format(error=f"{type(exc).__name__}: {exc}")


def _record_chain(
    preset: Any,
    run_dir: Path,
    transformers_version: str | None,
    taken: set[int],
    prepare_file: Path,
) -> str | None:
    from backend.planner.fallback import (  # deferred: the planner, only after an OOM
        GPU_ENV,
        fallback_chain,
    )

    chain, why = fallback_chain(preset)
    if not chain:
        planned = preset.launch.device == "cuda" or os.environ.get(GPU_ENV)
        quiet = not planned or not preset.launch.oom_fallback
        return None if quiet else _("OOM fallback: none ({why})").format(why=why)
    records = []
    for candidate in chain:
        record = candidate.record()
        if candidate.number > 1:  # its own spec, built by the launch's one function
            spec = build_spec(
                candidate.preset,
                run_dir=run_dir,
                transformers_version=transformers_version,
                preset_ref=str(prepare_file),
                prepare="none",
                taken=set(taken),
                kind="oom_fallback",
                overrides=candidate.overrides,
            ).launch_json()
            pieces, secrets = strip_spec_secrets({k: spec[k] for k in SPEC_KEYS if k in spec})
            if secrets:  # as launch.json: values in the run's 0600 file, never here
                write_secret_env(run_dir, secrets)
            record["spec"] = pieces
            resolved = resolve_preset(candidate.preset, run_dir)
            record["preset_yaml"] = preset_to_yaml(redact_preset(resolved))
        records.append(record)
    data = {"rule": RULE, "candidates": records}
    atomic_write(run_dir / FALLBACK, json.dumps(data, indent=2) + "\n")
    rest = "; ".join(f"{c.number}: {c.words}" for c in chain[1:])
    return _("OOM fallback: {n} smaller candidate(s) recorded in {file} ({rest})").format(
        n=len(chain) - 1, file=FALLBACK, rest=rest
    )


def attempt_steps(run_dir: Path, attempt: int) -> tuple[int, int | None]:
    """(steps logged by ``attempt``, its last step number) from metrics.jsonl."""
    count, last = 0, None
    try:
        with open(run_dir / METRICS, "rb") as handle:
            for raw in handle:
                try:
                    rec = json.loads(raw)
                except ValueError:
                    continue
                mine = isinstance(rec, dict) and rec.get("attempt", 1) == attempt
                if mine and rec.get("kind") == "step" and isinstance(rec.get("step"), int):
                    count, last = count + 1, rec["step"]
    except OSError:
        pass
    return count, last


def current_candidate(attempts: list[dict[str, Any]]) -> int:
    """The candidate the latest attempt ran (1 until a fallback happened)."""
    for record in reversed(attempts):
        if isinstance(record.get("candidate"), int):
            return int(record["candidate"])
    return 1


def next_after(
    candidates: list[dict[str, Any]], current: int, category: str | None, steps: int
) -> tuple[dict[str, Any] | None, str]:
    """The decision rule (module docstring): (next candidate, '') or (None, why not)."""
    if category not in OOM_CATEGORIES:
        return None, "not an out-of-memory"
    if not candidates:
        return None, "no fallback candidates were recorded at launch"
    if steps > FIRST_STEPS:
        return None, (
            f"out of memory after {steps} steps: the fallback covers the first {FIRST_STEPS}"
        )
    now = next((c for c in candidates if c.get("number") == current), candidates[0])
    key = "predicted_gpu_gib" if category == "cuda_oom" else "predicted_host_gib"
    for cand in candidates:
        if int(cand.get("number", 0)) <= current or "spec" not in cand:
            continue
        need, had = cand.get(key), now.get(key)
        smaller = need is None or had is None or need < had
        if category == "host_oom":  # the chain lowers GPU memory; host RAM must not grow
            smaller = need is None or had is None or need <= had
        if smaller:
            return cand, ""
    total = len(candidates)
    return None, f"no candidate after {current} of {total} needs less memory"


def oom_text(ended: dict[str, Any], steps: int, last: int | None, now: dict[str, Any]) -> str:
    step = (last or ended.get("resumed_from") or 0) + 1
    what = "GPU" if ended.get("diagnosis_category") == "cuda_oom" else "host"
    return f"{what} OOM at step {step} with {now.get('words', '?')}"


def fall_back(
    run_dir: Path,
    spec: dict[str, Any],
    ended: dict[str, Any],
    attempts: list[dict[str, Any]],
    log: IO[bytes],
) -> tuple[dict[str, Any], dict[str, Any]] | None:
    """After a failed attempt: switch the run to the next candidate when the rule says so.
    Returns (the new launch spec, the next attempt's record fields), or None (with a log line
    saying why when the run has candidates and the failure was an OOM)."""
    candidates = read_fallback(run_dir)
    category = ended.get("diagnosis_category")
    if category not in OOM_CATEGORIES or not candidates:  # no fallback here: nothing to say
        return None
    current = current_candidate(attempts)
    steps, last = attempt_steps(run_dir, int(ended["attempt"]))
    chosen, why = next_after(candidates, current, category, steps)
    now = next((c for c in candidates if c.get("number") == current), {})
    oom = oom_text(ended, steps, last, now)
    if chosen is None:
        ended_note = f"{oom}; no OOM fallback: {why}"
        _note(log, ended_note)
        update_status(run_dir, fallback=ended_note)
        return None
    number, total = int(chosen["number"]), len(candidates)
    text = _("{oom}; restarted with {words} (candidate {n} of {total})").format(
        oom=oom, words=chosen.get("words", "?"), n=number, total=total
    )
    new_spec = {k: v for k, v in spec.items() if k not in SPEC_KEYS}
    new_spec.update(chosen["spec"])  # built at launch by backend.runs.spec.build_spec
    new_spec.update(kind="oom_fallback", overrides=chosen.get("overrides", {}))
    public, _secrets = strip_spec_secrets(new_spec)  # values stay in the run's 0600 file
    atomic_write(run_dir / LAUNCH, json.dumps(public, indent=2) + "\n")
    new_spec = restore_spec_secrets(new_spec, read_secret_env(run_dir))
    if chosen.get("preset_yaml"):
        atomic_write(run_dir / PRESET, str(chosen["preset_yaml"]))
    _note(log, text)
    update_status(run_dir, state="running", message=text, fallback=text)
    extra = {
        "candidate": number,
        "candidate_of": total,
        "overrides": chosen.get("overrides", {}),
        "fallback_after": {
            "attempt": ended["attempt"],
            "cause": category,
            "diagnosis": ended.get("diagnosis"),
            "steps": steps,
        },
    }
    return new_spec, extra


def final_record(run_dir: Path, message: str, cause: str | None) -> tuple[str, str | None]:
    """The final message and cause with the fallback's part: the candidate the run ended on,
    an out-of-memory named as the cause when it ended the last attempt, and the quoted line of
    a failure no category knows in front of a bare exit code."""
    attempts = read_attempts(run_dir)
    if not attempts:
        return message, cause
    category = attempts[-1].get("diagnosis_category")
    if category in OOM_CATEGORIES and cause == "exit_code":  # a signal stays its own cause
        cause = str(category)
    quote = attempts[-1].get("diagnosis_quote")
    if category == UNRECOGNISED and cause == "exit_code" and quote:
        message = f"{quote} ({message})"  # what ended it, not only "exit code 1"
    current = current_candidate(attempts)
    candidates = read_fallback(run_dir)
    if current > 1 and candidates:
        words = next((c.get("words") for c in candidates if c.get("number") == current), "?")
        message = f"{message} (on candidate {current} of {len(candidates)}, {words}, after an OOM fallback)"
    return message, cause


def _note(log: IO[bytes], text: str) -> None:
    stamp = time.strftime("%Y-%m-%d %H:%M:%S")
    log.write(f"[trainwiz {stamp}] {text}\n".encode())
    log.flush()
