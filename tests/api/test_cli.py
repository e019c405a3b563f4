"""The pub/sub/status commands against a served test-double daemon."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import trio

from overlay.commands.pubsub import parse_attr
from overlay.runtime.api import ApiConfig, ApiServer
from tests.api.fake_service import FakeService


def overlay_cmd(*args: str) -> list[str]:
    return [sys.executable, "-m", "overlay.cli", *args]


@pytest.mark.parametrize(
    ("text", "expected"),
    [("n=3", ("n", 3)), ("x=1.5", ("x", 1.5)), ("u=true", ("u", True)),
     ("s=ACME", ("s", "ACME")), ("q='42'", ("q", "42")), ("e=", ("e", "")),
     ("k=a=b", ("k", "a=b"))],
)
def test_attribute_values_are_typed(text: str, expected: tuple[str, Any]) -> None:
    assert parse_attr(text) == expected


async def test_pub_sub_status_through_the_api(tmp_path: Path) -> None:
    service = FakeService()
    path = tmp_path / "api.sock"
    async with trio.open_nursery() as nursery:
        await nursery.start(ApiServer(service, ApiConfig(socket_path=path)).run)
        env = {"OVERLAY_API": str(path), "PATH": "/usr/bin:/bin"}
        results: dict[str, subprocess.CompletedProcess[bytes]] = {}

        async def run(name: str, *args: str, stdin: bytes = b"") -> None:
            results[name] = await trio.run_process(overlay_cmd(*args), stdin=stdin,
                                                   capture_stdout=True, capture_stderr=True,
                                                   check=False, env=env)

        nursery.start_soon(run, "sub", "sub", "t", "--count", "2", "--json", "--timeout", "20")
        with trio.fail_after(20):
            while not service.subs:
                await trio.sleep(0.02)
        await run("pub", "pub", "t", "-a", "n=1", "-a", "s=x", "--count", "2", stdin=b"body")
        with trio.fail_after(20):
            while "sub" not in results:
                await trio.sleep(0.02)
        await run("status", "status", "--json")
        nursery.cancel_scope.cancel()
    assert results["pub"].returncode == 0, results["pub"].stderr
    assert results["pub"].stderr.decode().count("published ") == 2
    assert results["sub"].returncode == 0, results["sub"].stderr
    events = [json.loads(line) for line in results["sub"].stdout.decode().splitlines()]
    assert [e["attrs"] for e in events] == [{"n": 1, "s": "x"}] * 2
    assert [e["payload"] for e in events] == ["body", "body"]
    assert json.loads(results["status"].stdout)["node"] == service.node_hex


def test_unreachable_daemon_exits_1_and_bad_usage_exits_2(tmp_path: Path) -> None:
    env = {"OVERLAY_API": str(tmp_path / "none.sock"), "PATH": "/usr/bin:/bin"}
    status = subprocess.run(overlay_cmd("status"), env=env, capture_output=True, check=False)
    assert status.returncode == 1 and b"cannot reach the daemon" in status.stderr
    usage = subprocess.run(overlay_cmd("sub"), env=env, capture_output=True, check=False)
    assert usage.returncode == 2
    bad_attr = subprocess.run(overlay_cmd("pub", "t", "x", "-a", "novalue"), env=env,
                              capture_output=True, check=False)
    assert bad_attr.returncode == 2 and b"not KEY=VALUE" in bad_attr.stderr
