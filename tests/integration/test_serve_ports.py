"""A serve whose controller's or worker's loopback port is taken between trainwiz picking it and
the server binding it (another program on the machine got it first) starts again on new ports
instead of failing, or worse, answering through whatever holds that port. The worker's case is
the subtle one: FastChat's worker registers its address with the controller before it binds it,
and a server that lost its port lives on (its heartbeat thread), so the API lists the model."""

from __future__ import annotations

import socket
from pathlib import Path

import pytest

from backend import ports
from backend.results.serve import plan_serve, start
from tests.integration.test_serve_dies_with_supervisor import (  # noqa: F401 (fixture)
    READY_S,
    ask,
    finished,
    free_port,
)

pytestmark = [pytest.mark.slow]


@pytest.mark.parametrize("server", ["controller", "worker"])  # the order start() picks them
def test_a_port_taken_before_its_bind_is_picked_again(
    server: str,
    finished: Path,  # noqa: F811 (the fixture)
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    with socket.socket() as holder:
        holder.bind(("127.0.0.1", 0))
        holder.listen(8)  # accepts connections and never answers: a hung server
        taken = holder.getsockname()[1]
        pick = ports.any_free_port
        picks = [taken] if server == "controller" else [taken, pick()]  # popped from the end
        monkeypatch.setattr(ports, "any_free_port", lambda: picks.pop() if picks else pick())
        plan = plan_serve(finished, port=free_port("127.0.0.1"), device="cpu")
        serving = start(plan, ready_timeout=READY_S)
        try:
            assert ask(plan.base_url, finished.name)["model"] == finished.name
            argv = serving.procs[server].args
            assert isinstance(argv, list) and str(taken) not in argv
            log = (finished / "serve" / f"{server}.log").read_text().lower()
            assert "address already in use" in log  # the first one did lose its port
        finally:
            serving.stop()
