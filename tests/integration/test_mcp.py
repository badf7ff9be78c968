"""`trainwiz mcp` driven by the MCP SDK's own client, as a coding agent drives it: the server is
started over stdio in this test's TRAINWIZ_HOME, its tools listed and called, and what comes back
compared with the CLI's ``--json`` (one builder for both). One short tiny CPU training (a few
steps) is launched through the server and polled to its end; a failed run is a record written
by ``tests/run_records.py``, not a second training.
"""

from __future__ import annotations

import asyncio
import json
import os
import sys
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any, TypeVar

import pytest
import yaml
from mcp import Client, StdioServerParameters
from mcp.types import CallToolResult

from tests.integration.test_resume_host import free_port
from tests.run_records import make_ended_run
from tests.trainwiz_cli import cli
from tests.waiting import WaitTimeout

pytestmark = [pytest.mark.training, pytest.mark.slow]

ROOT = Path(__file__).resolve().parents[2]
READ_TOOLS = {
    "check", "presets", "plan", "tune", "data_check", "model_validate", "runs", "run_status",
    "logs_tail", "diagnose", "compare",
}  # fmt: skip
WRITE_TOOLS = {"launch", "stop", "resume"}
FINAL = ("finished", "failed", "stopped")
OOM = (
    "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB. GPU 0 has a total "
    "capacity of 79.15 GiB of which 1.2 GiB is free.\n"
)
T = TypeVar("T")


@pytest.fixture
def home() -> Path:
    """This test's TRAINWIZ_HOME, the session's tiny Llama in it already (tests/conftest.py)."""
    return Path(os.environ["TRAINWIZ_HOME"])


@asynccontextmanager
async def server(*flags: str) -> AsyncIterator[Client]:
    """`trainwiz mcp FLAGS` as a client starts it: a child process over stdio, this test's
    environment (its TRAINWIZ_HOME) passed on."""
    params = StdioServerParameters(
        command=sys.executable,
        args=["-m", "tui.cli", "mcp", *flags],
        env=dict(os.environ),
        cwd=str(ROOT),
    )
    async with Client(params, read_timeout_seconds=120) as client:
        yield client


async def call(client: Client, tool: str, **arguments: Any) -> CallToolResult:
    result = await client.call_tool(tool, arguments)
    assert isinstance(result, CallToolResult), result
    return result


def text(result: CallToolResult) -> str:
    (block,) = result.content
    return str(block.text)  # type: ignore[union-attr]


def payload(result: CallToolResult) -> Any:
    """A successful tool's result: the command's --json, as text and as structured content."""
    assert not result.is_error, text(result)
    data = json.loads(text(result))
    assert result.structured_content == (data if isinstance(data, dict) else {"result": data})
    return data


def error(result: CallToolResult) -> str:
    """A tool error as the CLI tells it: short lines, no traceback."""
    assert result.is_error, text(result)[:500]
    message = text(result)
    assert "Traceback" not in message and len(message) < 4000, message[:500]
    return message


async def poll(
    check: Callable[[], Awaitable[tuple[T | None, object]]],
    *,
    what: str,
    timeout: float,
    interval: float = 0.5,
) -> T:
    """``check`` (the awaited result or None, and what it saw) until it returns a result, against
    a deadline: tests/waiting.py's rule, for a client that is awaited."""
    deadline = time.monotonic() + timeout
    while True:
        found, seen = await check()
        if found is not None:
            return found
        if time.monotonic() >= deadline:
            raise WaitTimeout(f"waited {timeout:g} s for {what}; saw {seen!r}")
        await asyncio.sleep(interval)


def short_preset(tmp_path: Path, max_steps: int) -> Path:
    data = yaml.safe_load((ROOT / "presets" / "tiny-cpu.yaml").read_text())
    data["training"]["max_steps"] = max_steps
    path = tmp_path / "tiny-short.yaml"
    path.write_text(yaml.safe_dump(data))
    return path


async def test_without_allow_launch_the_write_tools_are_absent(tmp_path: Path) -> None:
    async with server() as client:
        tools = {t.name: t for t in (await client.list_tools()).tools}
        assert set(tools) == READ_TOOLS
        # Schemas come from the argument types, with the CLI's bounds.
        plan = tools["plan"].input_schema
        assert plan["required"] == ["preset"]
        host_ram = plan["properties"]["host_ram"]["anyOf"][0]
        assert (host_ram["minimum"], host_ram["maximum"]) == (1, 65536)
        assert tools["tune"].input_schema["properties"]["probe"]["default"] is False
        refused = error(await call(client, "launch", preset="tiny-cpu"))
        assert "--allow-launch" in refused
        templates = await client.list_resource_templates()
        assert {t.uri_template for t in templates.resource_templates} == {
            "trainwiz://runs/{run_id}/status",
            "trainwiz://runs/{run_id}/launch",
            "trainwiz://runs/{run_id}/metrics",
        }
    assert not (Path(os.environ["TRAINWIZ_HOME"]) / "runs").exists()


async def test_results_are_the_cli_json(tmp_path: Path) -> None:
    # tiny-cpu with a master_port of its own: the plan moves off a port that is in use here, and
    # tiny-cpu's 29511 is every parallel test's run's (a shuffled run saw it taken for one plan
    # and free for the other)
    data = yaml.safe_load((ROOT / "presets" / "tiny-cpu.yaml").read_text())
    data["launch"]["master_port"] = free_port()
    preset = tmp_path / "tiny-cpu.yaml"
    preset.write_text(yaml.safe_dump(data))
    async with server() as client:
        assert payload(await call(client, "presets")) == json.loads(cli("presets", "--json").stdout)
        planned = payload(await call(client, "plan", preset=str(preset)))
        assert planned == json.loads(cli("plan", str(preset), "--json").stdout)
        assert not planned["notes"], planned["notes"]
        assert planned["steps"][-1]["id"] == "train"
        assert payload(await call(client, "runs")) == []


async def test_hostile_arguments_get_the_cli_s_one_line_errors(tmp_path: Path) -> None:
    bad_yaml = tmp_path / "bad.yaml"
    bad_yaml.write_text("schema: 1\nname: bad\nmodel:\n  source: tiny\n  dir: [unclosed\n")
    unknown_key = tmp_path / "typo.yaml"
    unknown_key.write_text("schema: 1\nname: typo\nmodel:\n  source: tiny\n  dirr: x\n")
    async with server() as client:
        missing = error(await call(client, "plan", preset=str(tmp_path / "nope.yaml")))
        assert missing.startswith(f"trainwiz: preset '{tmp_path / 'nope.yaml'}'")
        assert "\n" not in missing
        syntax = error(await call(client, "plan", preset=str(bad_yaml)))
        assert syntax.startswith(f"trainwiz: {bad_yaml}:6:1 (yaml): ") and "\n" not in syntax
        typo = error(await call(client, "tune", preset=str(unknown_key)))
        assert f"{unknown_key}:5:3 model.dirr: unknown key 'dirr'; did you mean 'dir'?" in typo
        assert all(line.startswith("trainwiz: ") for line in typo.splitlines())
        huge = error(await call(client, "plan", preset="x" * 200_000))
        assert huge == "trainwiz: preset: String should have at most 4096 characters"
        escape = error(await call(client, "run_status", run="\x1b]0;owned\x07"))
        assert "\x1b" not in escape and "\\x1b" in escape
        wrong_type = error(await call(client, "logs_tail", run="last", lines="many"))
        assert wrong_type.startswith("trainwiz: lines: ")
        # A token in an argument is not echoed back.
        token = "hf_" + "a" * 30
        assert token not in error(await call(client, "diagnose", target=token))


async def test_a_failed_run_is_diagnosed_and_read() -> None:
    home = Path(os.environ["TRAINWIZ_HOME"])
    run_dir = make_ended_run(home, "failed", None, preset="tiny-cpu", log="step 1\n" + OOM)
    async with server("--allow-launch") as client:
        found = payload(await call(client, "diagnose", target=run_dir.name))
        assert found == json.loads(cli("diagnose", run_dir.name, "--json", check=False).stdout)
        assert found["run"]["state"] == "failed"
        assert found["findings"][0]["category"] == "cuda_oom"
        status = payload(await call(client, "run_status", run=run_dir.name))
        assert status == json.loads(cli("attach", run_dir.name, "--json").stdout)
        assert status["state"] == "failed" and status["progress"]["eta_s"] is None
        tail = payload(await call(client, "logs_tail", run=run_dir.name, lines=1))
        assert tail["text"] == OOM.strip()
        # What the CLI refuses, the tool refuses in the same words.
        refused = error(await call(client, "resume", run=run_dir.name))
        cli_refusal = cli("resume", run_dir.name, "--detach", check=False)
        assert cli_refusal.returncode == 2 and refused == cli_refusal.stderr.strip()
        record = await client.read_resource(f"trainwiz://runs/{run_dir.name}/status")
        assert json.loads(record.contents[0].text)["state"] == "failed"  # type: ignore[union-attr]


async def test_plan_launch_status_to_the_end(home: Path, tmp_path: Path) -> None:
    preset = str(short_preset(tmp_path, 4))
    async with server("--allow-launch") as client:
        assert {t.name for t in (await client.list_tools()).tools} == READ_TOOLS | WRITE_TOOLS
        assert payload(await call(client, "check", only=["disk"]))["checks"][0]["id"] == "disk"
        planned = payload(await call(client, "plan", preset=preset))
        assert planned["preset"] == "tiny-cpu"
        started = payload(await call(client, "launch", preset=preset))
        run_id = started["run_id"]
        assert started["state"] in ("starting", "running")

        async def ended() -> tuple[dict[str, Any] | None, object]:
            status = payload(await call(client, "run_status", run=run_id))
            seen = {"state": status["state"], "message": status["message"], **status["progress"]}
            return (status if status["state"] in FINAL else None), seen

        final = await poll(ended, what=f"run {run_id} to end", timeout=300)
        assert final["state"] == "finished", payload(await call(client, "logs_tail", run=run_id))
        progress = final["progress"]
        assert (progress["step"], progress["max_steps"], progress["eta_s"]) == (4, 4, 0.0)
        assert progress["real_tokens_per_s"] > 0 and progress["loss"] is not None
        tail = payload(await call(client, "logs_tail", run=run_id, lines=50))
        assert "model saved" in tail["text"]
        listed = payload(await call(client, "runs"))
        assert [r["run_id"] for r in listed] == [run_id]
        diagnosed = payload(await call(client, "diagnose", target=run_id))
        assert diagnosed["run"]["state"] == "finished"
        metrics = await client.read_resource(f"trainwiz://runs/{run_id}/metrics")
        kinds = [json.loads(x)["kind"] for x in metrics.contents[0].text.splitlines()]  # type: ignore[union-attr]
        assert kinds[0] == "start" and kinds[-1] == "end"
        stopped = payload(await call(client, "stop", run=run_id, timeout=5))
        assert stopped["state"] == "finished"


async def test_http_listens_on_the_loopback_only() -> None:
    assert cli("mcp", "--port", "8765", check=False).returncode == 2  # a port needs --http
    proc = await asyncio.create_subprocess_exec(
        sys.executable, "-m", "tui.cli", "mcp", "--http",
        cwd=ROOT, stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE,
    )  # fmt: skip
    try:
        assert proc.stdout is not None
        url = (await asyncio.wait_for(proc.stdout.readline(), 120)).decode().strip()
        assert url.startswith("http://127.0.0.1:") and url.endswith("/mcp"), url
        async with Client(url) as client:
            assert {t.name for t in (await client.list_tools()).tools} == READ_TOOLS
            assert payload(await call(client, "presets"))["presets"][0]["name"] == "tiny-cpu"
    finally:
        proc.terminate()
        await asyncio.wait_for(proc.wait(), 60)
