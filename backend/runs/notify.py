"""Tell the preset's webhooks how a run is doing: finished, failed (with the likely cause and
its first fix), loss NaN, stalled (no training step for ``notify.stalled_minutes``).

The run's watcher sends them (``watch_in_background`` while it trains, ``run_ended`` when it
records the end), so a message arrives with the wizard closed and the SSH session gone. A
delivery that fails is one line in the run's ``notify.log`` and train.log; it never fails or
slows the run (each send has a short timeout, in the watcher's own thread for the live events).

Security: https only, certificates always verified (a private endpoint's CA is trusted through
``notify.ca_file`` or ``TRAINWIZ_NOTIFY_CA``, never by turning verification off); URLs, tokens
and signing secrets are read from the environment at send time and never written anywhere: the
log names the webhook by kind and variable ("slack via $SLACK_URL").

An endpoint is not trusted with more than its one request: a redirect is never followed (it
would carry the bearer token and the message to wherever it points, http included); a failure
is logged as the exception's type (and HTTP status), never its message, which can quote the
token or the URL; and each delivery has a total deadline (``DEADLINE_S``), because urllib's
timeout is per socket read and a receiver sending one byte at a time would keep the watcher, and
so the finished run's processes, alive for as long as it likes.
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import http.client
import json
import math
import os
import re
import socket
import ssl
import threading
import time
import urllib.error
import urllib.parse
import urllib.request
from dataclasses import dataclass
from pathlib import Path
from typing import IO, Any

from backend.i18n import _
from backend.monitor.metrics import MetricsFollower, StepRecord
from backend.preset.hostpaths import ca_bundle_problem
from backend.preset.loader import load_preset
from backend.preset.schema_notify import check_https
from backend.redact import MIN_SCRUB, redact_text
from backend.rundir import LOG, RunDir
from backend.runs.diagnose_run import diagnose_run
from backend.runs.summary import summarize_run

CA_ENV = "TRAINWIZ_NOTIFY_CA"
NOTIFY_LOG = "notify.log"
SENT = "notify.json"  # events already sent once (loss_nan, stalled), so a restart repeats none
TIMEOUT_S = 10.0  # one socket operation (connect, one read)
DEADLINE_S = 30.0  # one delivery in all: a receiver that answers a byte at a time is cut off here
POLL_S = 15.0
_SSL_CODE = re.compile(r"^[A-Z0-9_]{1,64}$")  # OpenSSL's fixed reason codes, never input


class Refused(ValueError):
    """A webhook not sent, said in trainwiz's own words (they name variables, never a value),
    so it is the one failure whose text is logged."""


@dataclass(frozen=True)
class Message:
    event: str
    run_id: str
    title: str
    text: str
    fields: dict[str, Any]


def _hook_name(hook: Any) -> str:
    source = f"${hook.url_env}" if hook.url_env else "url"
    return f"{hook.kind} via {source}"


def _sign(secret: str, stamp: str) -> str:
    """Feishu and DingTalk: base64(HMAC-SHA256) over "timestamp\\nsecret"; Feishu keys the HMAC
    with that string and signs nothing, DingTalk keys it with the secret and signs the string."""
    line = f"{stamp}\n{secret}".encode()
    return base64.b64encode(hmac.new(line, b"", hashlib.sha256).digest()).decode()


def _dingtalk_sign(secret: str, stamp: str) -> str:
    line = f"{stamp}\n{secret}".encode()
    digest = hmac.new(secret.encode(), line, hashlib.sha256).digest()
    return urllib.parse.quote_plus(base64.b64encode(digest).decode())


def request_for(
    hook: Any, message: Message, env: dict[str, str]
) -> tuple[str, dict[str, Any], dict[str, str]]:
    """(url, JSON body, headers) for one webhook; ``Refused`` (a ValueError) when its variables
    are unset or the URL is not https (said without the URL)."""
    url = hook.url or env.get(hook.url_env or "", "")
    if not url:
        raise Refused(f"${hook.url_env} is not set in the watcher's environment")
    try:
        check_https(url, f"${hook.url_env}" if hook.url_env else "url")
    except ValueError as exc:
        raise Refused(str(exc).split(":", 1)[0] + ": not an https URL without userinfo") from None
    secret = env.get(hook.secret_env, "") if hook.secret_env else ""
    if hook.secret_env and not secret:
        raise Refused(f"${hook.secret_env} is not set in the watcher's environment")
    text = f"{message.title}\n{message.text}".strip()
    headers = {"Content-Type": "application/json"}
    body: dict[str, Any]
    if hook.kind == "slack":
        body = {"text": text}
    elif hook.kind == "feishu":
        body = {"msg_type": "text", "content": {"text": text}}
        if secret:
            stamp = str(int(time.time()))
            body.update(timestamp=stamp, sign=_sign(secret, stamp))
    elif hook.kind == "dingtalk":
        body = {"msgtype": "text", "text": {"content": text}}
        if secret:
            stamp = str(int(time.time() * 1000))
            joiner = "&" if "?" in url else "?"
            url += f"{joiner}timestamp={stamp}&sign={_dingtalk_sign(secret, stamp)}"
    else:
        body = {"event": message.event, "run_id": message.run_id, "title": message.title,
                "text": message.text, **message.fields}  # fmt: skip
        token = env.get(hook.token_env, "") if hook.token_env else ""
        if hook.token_env and not token:
            raise Refused(f"${hook.token_env} is not set in the watcher's environment")
        if token:
            headers["Authorization"] = f"Bearer {token}"
    return url, body, headers


def _context(ca_file: str | None, env: dict[str, str]) -> ssl.SSLContext:
    """Verified TLS; the system's CAs, or the CA bundle the preset or environment names."""
    bundle = ca_file or env.get(CA_ENV) or None
    problem = ca_bundle_problem(bundle) if bundle else None
    if problem:  # a FIFO would block this thread forever; the log names the file, no secret
        raise Refused(f"CA bundle: {problem}")
    return ssl.create_default_context(cafile=bundle)


class _NoRedirect(urllib.request.HTTPRedirectHandler):
    """Follows no redirect: urllib would re-send the request's headers (the bearer token) to
    wherever ``Location`` points, http or another host. The 3xx reaches ``deliver`` as an
    HTTPError and the message counts as not delivered."""

    def redirect_request(
        self,
        req: urllib.request.Request,
        fp: IO[bytes],
        code: int,
        msg: str,
        headers: Any,
        newurl: str,
    ) -> urllib.request.Request | None:
        return None


class _Connection(http.client.HTTPSConnection):
    """An https connection that a deadline can cut off, also while it is still connecting."""

    cut = False

    def connect(self) -> None:
        super().connect()
        if self.cut:  # the deadline passed during the connect: the socket is set only now
            self.cut_off()

    def cut_off(self) -> None:
        self.cut = True
        if self.sock is not None:
            try:  # the plain socket's shutdown: it wakes a read blocked in another thread
                socket.socket.shutdown(self.sock, socket.SHUT_RDWR)
            except OSError:
                pass


class _Deadline:
    """One delivery's connections, so that at its deadline they are cut off (shut down, which
    ends the delivery's thread) instead of reading on in a thread nobody waits for; one opened
    after the deadline passed is cut off as it opens."""

    def __init__(self) -> None:
        self.passed = False
        self.connections: list[_Connection] = []
        self.lock = threading.Lock()

    def track(self, connection: _Connection) -> _Connection:
        with self.lock:
            self.connections.append(connection)
            connection.cut = self.passed
        return connection

    def pass_now(self) -> None:
        with self.lock:
            self.passed = True
            connections = list(self.connections)
        for connection in connections:
            connection.cut_off()


class _Https(urllib.request.HTTPSHandler):
    """Verified https whose connections the delivery's ``_Deadline`` can cut off."""

    def __init__(self, context: ssl.SSLContext, deadline: _Deadline) -> None:
        super().__init__(context=context)
        self.tls, self.deadline = context, deadline

    def https_open(self, req: urllib.request.Request) -> http.client.HTTPResponse:
        def connection(host: str, **kwargs: Any) -> http.client.HTTPSConnection:
            return self.deadline.track(_Connection(host, **kwargs))

        return self.do_open(connection, req, context=self.tls)


def _failure(exc: BaseException | str) -> str:
    """What a failed delivery logs: the exception's type, never its message (``ValueError:
    Invalid header value b'Bearer <token>'``, ``InvalidURL: ... '/services/<secret>/...'``).
    A TLS failure adds OpenSSL's reason code (``CERTIFICATE_VERIFY_FAILED``), a fixed word."""
    if isinstance(exc, str):  # URLError("unknown url type") and the like
        return "URLError"
    name = type(exc).__name__
    code = getattr(exc, "reason", None) if isinstance(exc, ssl.SSLError) else None
    return f"{name}: {code}" if isinstance(code, str) and _SSL_CODE.match(code) else name


def _attempt(hook: Any, message: Message, ca_file: str | None, env: dict[str, str],
             timeout: float, deadline: _Deadline) -> tuple[bool, str]:  # fmt: skip
    try:
        url, body, headers = request_for(hook, message, env)
        data = json.dumps(body, ensure_ascii=False).encode()
        request = urllib.request.Request(url, data=data, headers=headers, method="POST")
        opener = urllib.request.build_opener(_Https(_context(ca_file, env), deadline), _NoRedirect)
        with opener.open(request, timeout=timeout) as answer:
            return True, f"HTTP {answer.status}"
    except urllib.error.HTTPError as exc:
        exc.close()
        if 300 <= exc.code < 400:
            return False, _("HTTP {code}: redirects are not followed").format(code=exc.code)
        return False, f"HTTP {exc.code}"
    except Refused as exc:
        return False, str(exc)
    except urllib.error.URLError as exc:
        return False, _failure(exc.reason)
    except Exception as exc:  # http.client.InvalidURL is no ValueError: nothing escapes
        return False, _failure(exc)


def deliver(hook: Any, message: Message, *, ca_file: str | None = None,
            env: dict[str, str] | None = None, timeout: float = TIMEOUT_S,
            deadline: float | None = None) -> tuple[bool, str]:  # fmt: skip
    """POST one message; (delivered?, what happened) and never an exception, within
    ``deadline`` seconds in all (``DEADLINE_S``). ``timeout`` bounds each socket operation only,
    so the request runs in a daemon thread that is waited for until the deadline and then cut
    off: the watcher (and with it the finished run) never waits on a slow receiver longer."""
    env = dict(os.environ) if env is None else env
    limit = DEADLINE_S if deadline is None else deadline
    outcome: list[tuple[bool, str]] = []
    cut = _Deadline()

    def run() -> None:
        outcome.append(_attempt(hook, message, ca_file, env, min(timeout, limit), cut))

    worker = threading.Thread(target=run, name="trainwiz-notify-send", daemon=True)
    worker.start()
    worker.join(limit)
    if outcome:
        return outcome[0]
    cut.pass_now()
    return False, _("timed out after {seconds} s").format(seconds=f"{limit:g}")


def _secrets(hook: Any, env: dict[str, str]) -> list[str]:
    """The values a log line about ``hook`` must never hold: its URL (and the URL's path and
    query alone, which an error can quote), token and signing secret, as set and stripped."""
    found: list[str] = []
    for name in (hook.url_env, hook.token_env, hook.secret_env):
        value = env.get(name or "", "") if name else ""
        found += [value, value.strip()]
    url = env.get(hook.url_env or "", "") if hook.url_env else ""
    try:
        parts = urllib.parse.urlsplit(url)
        found += [parts.path, parts.query]
    except ValueError:
        pass
    return [value for value in found if len(value) >= MIN_SCRUB]


def _log(run_dir: Path, line: str, secrets: list[str] | None = None,
         logs: tuple[str, ...] = (NOTIFY_LOG, LOG)) -> None:  # fmt: skip
    """One line in notify.log and train.log (``logs``), through the redaction (``secrets`` and
    this process's secret-looking variables, URL userinfo, Bearer tokens): whatever a future
    line quotes, a webhook's secret is not written."""
    stamp = time.strftime("%Y-%m-%d %H:%M:%S")
    line = redact_text(line, secrets or ())
    for name in logs:
        try:
            with open(run_dir / name, "a", encoding="utf-8") as handle:
                handle.write(f"[trainwiz {stamp}] notify: {line}\n")
        except OSError:
            pass


def _settings(run_dir: Path) -> Any:
    try:
        # the CA bundle is checked when it is used (below), not as a reason to send nothing
        return load_preset(RunDir(run_dir).preset_file, host_files=False).notify
    except Exception:
        return None


def send(
    run_dir: Path,
    message: Message,
    settings: Any | None = None,
    logs: tuple[str, ...] = (NOTIFY_LOG, LOG),
) -> list[tuple[str, bool, str]]:
    """Send ``message`` to every webhook that wants its event; log each outcome in ``logs``
    (a sweep's folder has a notify.log and no train.log)."""
    settings = settings if settings is not None else _settings(run_dir)
    env = dict(os.environ)
    results = []
    for hook in getattr(settings, "webhooks", None) or []:
        if message.event not in hook.events:
            continue
        ok, detail = deliver(hook, message, ca_file=settings.ca_file, env=env)
        name = _hook_name(hook)
        _log(
            run_dir,
            f"{message.event} -> {name}: {'delivered' if ok else 'NOT delivered'} ({detail})",
            _secrets(hook, env),
            logs,
        )
        results.append((name, ok, detail))
    return results


def _once(run_dir: Path, key: str) -> bool:
    """True the first time ``key`` is claimed for this run (notify.json keeps the claims)."""
    path = run_dir / SENT
    try:
        sent = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        sent = []
    if key in sent:
        return False
    try:
        path.write_text(json.dumps([*sent, key]), encoding="utf-8")
    except OSError:
        pass
    return True


def failure_text(run_dir: Path, message: str) -> tuple[str, dict[str, Any]]:
    """The failure, the diagnosis' top cause and its first fix (what ``trainwiz diagnose`` says)."""
    try:
        # Deferred: the classifier's signature tables load only when a run failed and has a
        # webhook to tell (the watcher of every other run never needs them).
        top = diagnose_run(run_dir).diagnosis.top
    except Exception:
        top = None
    if top is None:
        return message, {"message": message}
    fix = top.fixes[0].title if top.fixes else None
    text = f"{message}\ncause: {top.category}: {top.title}" + (f"\nfix: {fix}" if fix else "")
    return text, {"message": message, "cause": top.category, "cause_title": top.title, "fix": fix}


def run_ended(run_dir: Path, state: str, message: str, cause: str | None) -> None:
    """The watcher's end of run: ``finished`` or ``failed`` (a stop is the user's own doing).
    Called after the final record is written; whatever goes wrong here is logged, not raised."""
    try:
        _run_ended(run_dir, state, message, cause)
    except Exception as exc:
        _log(run_dir, f"end of run not sent: {type(exc).__name__}")  # a message may quote a secret


def _run_ended(run_dir: Path, state: str, message: str, cause: str | None) -> None:
    settings = _settings(run_dir)
    if not getattr(settings, "webhooks", None) or state not in ("finished", "failed"):
        return
    send(run_dir, end_message(run_dir, state, message, cause), settings)


def end_message(run_dir: Path, state: str, message: str, cause: str | None) -> Message:
    """The end-of-run message: what happened, on failure the likely cause and fix, then the
    run's summary line and its figures as fields (the launch's own summary: the same numbers as
    the Monitor, ``runs compare`` and the model card)."""
    run_id = run_dir.name
    fields: dict[str, Any]
    if state == "finished":
        text, fields = message, {"message": message}
    else:
        text, fields = failure_text(run_dir, message)
    summary = summarize_run(run_dir)
    figures = {
        "steps": summary.steps,
        "max_steps": summary.max_steps,
        "real_tokens_per_s": summary.real_tokens_per_s,
        "wall_s": summary.wall_s,
        "gpus": summary.gpus,
        "gpu_hours": summary.gpu_hours,
        "mean_loss": summary.mean_loss,
        "attempts": summary.attempts,
    }
    text = f"{text}\n{summary.line()}"
    fields = {"state": state, "cause_recorded": cause, **fields, **figures}
    return Message(state, run_id, f"trainwiz: run {run_id} {state}", text, fields)


@dataclass
class LiveWatch:
    """Reads the run's new metrics lines: a non-finite loss sends ``loss_nan`` once; no new
    step for ``stalled_minutes`` sends ``stalled`` (once per stall; a new step re-arms it)."""

    run_dir: Path
    settings: Any
    started: float

    def __post_init__(self) -> None:
        self.follower = MetricsFollower(RunDir(self.run_dir).metrics)
        self.last_step_at = self.started
        self.last_step = 0
        self.stall_sent = False

    def check(self, now: float | None = None) -> None:
        now = time.time() if now is None else now
        if not self._training():  # an environment build or model load is no stall
            self.last_step_at = now
            return
        for event in self.follower.poll():
            if not isinstance(event, StepRecord):
                continue
            self.last_step, self.last_step_at, self.stall_sent = event.step, now, False
            nan = event.loss is not None and not math.isfinite(event.loss)
            if nan and _once(self.run_dir, "loss_nan"):
                text = f"loss is {event.loss} at step {event.step}"
                self._send("loss_nan", f"trainwiz: run {self.run_dir.name}: loss NaN", text,
                           {"step": event.step})  # fmt: skip
        idle = now - self.last_step_at
        if not self.stall_sent and idle >= self.settings.stalled_minutes * 60:
            self.stall_sent = True
            text = f"no training step for {idle / 60:.1f} min (last step {self.last_step})"
            self._send("stalled", f"trainwiz: run {self.run_dir.name} stalled", text,
                       {"last_step": self.last_step, "idle_s": round(idle)})  # fmt: skip

    def _training(self) -> bool:
        status = RunDir(self.run_dir).status_dict()
        return status is not None and status.get("state") == "running"

    def _send(self, event: str, title: str, text: str, fields: dict[str, Any]) -> None:
        send(self.run_dir, Message(event, self.run_dir.name, title, text, fields), self.settings)


def watch_in_background(run_dir: Path, poll_s: float | None = None) -> threading.Event | None:
    """Start the live events' thread (daemon: it ends with the watcher); set the returned
    event to stop it. None when the preset has no webhook for loss_nan or stalled."""
    settings = _settings(run_dir)
    hooks = getattr(settings, "webhooks", None) or []
    if not any({"loss_nan", "stalled"} & set(h.events) for h in hooks):
        return None
    done = threading.Event()
    live = LiveWatch(run_dir, settings, time.time())
    every = poll_s or min(POLL_S, settings.stalled_minutes * 60 / 4)

    def loop() -> None:
        while not done.wait(every):
            try:
                live.check()
            except Exception as exc:  # a notifier bug must not touch the run
                _log(run_dir, f"live check failed: {type(exc).__name__}")  # as run_ended

    threading.Thread(target=loop, name="trainwiz-notify", daemon=True).start()
    return done
