"""Host paths a preset names, checked when it is loaded rather than when a run reaches them.

``model.dir`` is written to (a download, a clone, the tiny model), often as root: a system
directory or a home folder itself would be filled with model files, and was refused only at the
prepare step of a run that had already started. ``notify.ca_file`` is read by the watcher when
the run ends: ``/dev/zero``, a FIFO (which blocks its reader forever), a directory or a file
without a certificate passed ``trainwiz plan`` and failed only then, with no one watching.

Both functions return a problem (words for the user, naming the fix) or None; the schema turns
a problem into the loader's ``file:line:col field: ...`` line.
"""

from __future__ import annotations

import os
import stat
from pathlib import Path

from backend import paths
from backend.i18n import _

# A model may not live at or below these: the system's own trees.
_SYSTEM_TREES = (
    "/etc", "/usr", "/bin", "/sbin", "/lib", "/lib32", "/lib64", "/libx32", "/boot", "/proc",
    "/sys", "/dev", "/run", "/snap", "/var/lib", "/var/log", "/var/run", "/var/spool",
    "/var/cache", "/var/mail", "/var/backups",
)  # fmt: skip
# Nor be one of these folders itself (folders below them are fine: /home/u/models/x, /mnt/nfs/m).
_SHARED_ROOTS = ("/", "/var", "/home", "/root", "/tmp", "/var/tmp", "/opt", "/srv", "/mnt",
                 "/media")  # fmt: skip
MODEL_DIR_FIX = "@home/models/NAME"


def _placeholder_free(value: str) -> str:
    """``@home/...`` where trainwiz's state directory is; ``~`` expanded; normalised (``..``
    and ``//`` folded) and absolute, without touching the file system."""
    if value == "@home" or value.startswith("@home/"):
        value = str(paths.home()) + value[len("@home") :]
    path = os.path.expanduser(value)
    if path.startswith("//"):
        path = "/" + path.lstrip("/")  # POSIX keeps a leading '//' apart; Linux does not
    return os.path.normpath(os.path.abspath(path))


def _homes() -> set[str]:
    found = {os.path.normpath(os.path.expanduser("~"))}
    try:
        found.add(os.path.normpath(str(Path.home())))
    except RuntimeError:  # no home known for this user
        pass
    return found


def _kind(path: str) -> str | None:
    """``home`` for a home folder itself, ``system`` for a system tree or a shared root, else
    None (``path`` absolute and normalised)."""
    if path in _homes() or os.path.dirname(path) == "/home" or path == "/root":
        return "home"  # /home/NAME: somebody's home
    if path in _SHARED_ROOTS:
        return "system"
    return "system" if any(path == t or path.startswith(t + "/") for t in _SYSTEM_TREES) else None


def model_dir_problem(value: str) -> str | None:
    """Why ``value`` may not be ``model.dir``, or None. ``@run``/``@sample`` are checked where
    they are resolved; a symlink is judged by what it points to too."""
    if value.startswith(("@run", "@sample")):
        return None
    path = _placeholder_free(value)
    if value.startswith("@home/"):
        home = os.path.normpath(os.path.abspath(str(paths.home())))
        if path.startswith(home + "/"):
            # Below trainwiz's own state directory: where that directory may be is
            # TRAINWIZ_HOME's rule (a home in /proc is named as such, not as this field's).
            return None
    for candidate in dict.fromkeys((path, os.path.realpath(path))):
        kind = _kind(candidate)
        if kind is None:
            continue
        what = (
            _("{path} is a home folder itself").format(path=candidate)
            if kind == "home"
            else _("{path} is a system directory").format(path=candidate)
        )
        return _(
            "{what}, and the model's files would be written into it: name a folder of the "
            "model's own, e.g. {fix} (under TRAINWIZ_HOME) or /data/models/NAME"
        ).format(what=what, fix=MODEL_DIR_FIX)
    return None


MAX_CA_BYTES = 16 << 20  # the system's whole bundle is ~200 KiB
PEM_CERT = b"-----BEGIN CERTIFICATE-----"


def ca_bundle_problem(value: str) -> str | None:
    """Why ``value`` is not a CA bundle to verify a webhook's server with, or None.

    Never opens anything but a regular file (a FIFO would block, ``/dev/zero`` never ends),
    reads at most ``MAX_CA_BYTES``, and has OpenSSL load what it read."""
    fix = _("name a PEM file of CA certificates (-----BEGIN CERTIFICATE-----)")
    if not value.strip():
        return _("empty: {fix}").format(fix=fix)
    try:
        info = os.stat(value)
    except FileNotFoundError:
        return _("{path} does not exist: {fix}").format(path=value, fix=fix)
    except OSError as exc:
        return _("{path} cannot be read ({why}): {fix}").format(
            path=value, why=exc.strerror, fix=fix
        )
    if stat.S_ISDIR(info.st_mode):
        return _("{path} is a directory: {fix}").format(path=value, fix=fix)
    if not stat.S_ISREG(info.st_mode):
        return _("{path} is not a regular file (a device, FIFO or socket): {fix}").format(
            path=value, fix=fix
        )
    if info.st_size > MAX_CA_BYTES:
        return _("{path} is too large for a CA bundle: {fix}").format(path=value, fix=fix)
    try:
        fd = os.open(value, os.O_RDONLY | os.O_NONBLOCK | os.O_NOCTTY)
        with os.fdopen(fd, "rb") as handle:
            if not stat.S_ISREG(os.fstat(handle.fileno()).st_mode):
                return _("{path} is not a regular file (a device, FIFO or socket): {fix}").format(
                    path=value, fix=fix
                )  # swapped since the stat above
            data = handle.read(MAX_CA_BYTES + 1)
    except OSError as exc:
        return _("{path} cannot be read ({why}): {fix}").format(
            path=value, why=exc.strerror, fix=fix
        )
    if PEM_CERT not in data or not _loads(data):
        return _("{path} holds no PEM certificate: {fix}").format(path=value, fix=fix)
    return None


def _loads(data: bytes) -> bool:
    """OpenSSL reads at least one certificate from ``data`` (what ssl will do at send time)."""
    import ssl  # deferred: loading a preset without a ca_file never pays for it

    text = data.decode("ascii", errors="ignore")  # comments in a bundle may be UTF-8
    try:
        ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT).load_verify_locations(cadata=text)
    except (ssl.SSLError, ValueError):
        return False
    return True
