"""``trainwiz serve``'s refusals, said before anything starts (exit 2, one line naming the flag
and the fix): a key asked for that is not there, an address the API could not listen on (each
reason as what it is: a name that does not resolve is no port in use), and an address other
machines reach with no API key unless ``--allow-no-key`` waives it.
"""

from __future__ import annotations

import os

from backend import ports
from backend.errors import BadInput
from backend.i18n import _


def api_key(name: str | None) -> str | None:
    """The key ``--api-key-env NAME`` names. A flag given with an empty name, or a variable
    that is unset or empty, is refused: serving with no key where one was asked for would
    leave the API open while the user believes it locked."""
    if name is None:
        return None
    if not name:
        raise BadInput(
            _(
                "--api-key-env: give the name of an environment variable that holds the API key "
                "(--api-key-env VAR)"
            )
        )
    key = os.environ.get(name)
    if key is None:
        raise BadInput(
            _("--api-key-env {name}: that environment variable is not set: export {name}=KEY first")
            .format(name=name)
        )  # fmt: skip
    if not key:
        raise BadInput(
            _("--api-key-env {name}: that environment variable is empty: set it to the API key")
            .format(name=name)
        )  # fmt: skip
    return key


def check_listen(host: str, port: int) -> None:
    """The API could listen on ``host``:``port``: a name that does not resolve, an address no
    interface has and a port in use are each said as what they are."""
    if not 0 < port < 65536:
        raise BadInput(_("--port {port}: give a port from 1 to 65535").format(port=port))
    problem = ports.listen_problem(host, port)
    if problem == "unresolvable":
        raise BadInput(
            _(
                "--host {host}: cannot resolve that name: give an address of this machine "
                "(127.0.0.1 by default, 0.0.0.0 for every interface)"
            ).format(host=host)
        )
    if problem == "not_here":
        raise BadInput(
            _(
                "--host {host}: not an address of this machine: give one of its addresses "
                "(127.0.0.1 by default, 0.0.0.0 for every interface)"
            ).format(host=host)
        )
    if problem == "denied":
        raise BadInput(
            _(
                "--port {port}: this user may not listen on {host}:{port} (ports below 1024 "
                "need privileges): choose another port"
            ).format(port=port, host=host)
        )
    if problem == "in_use":
        raise BadInput(
            _("--port {port}: {host}:{port} is in use: choose another port").format(
                port=port, host=host
            )
        )


def check_open(host: str, key: str | None, allow_no_key: bool) -> bool:
    """Whether other machines reach ``host`` (anything but loopback: 0.0.0.0, ::, a LAN
    address); without a key that is refused unless ``allow_no_key`` says it is meant."""
    open_to_others = not ports.loopback_only(host)
    if open_to_others and not key and not allow_no_key:
        raise BadInput(
            _(
                "--host {host}: the API would be reachable from other machines without an API "
                "key: add --api-key-env VAR (or --allow-no-key to serve it open)"
            ).format(host=host)
        )
    return open_to_others
