"""The probe runner over a real link (a WebSocket pair in memory): answers, errors, cancel, limits."""

from __future__ import annotations

import re
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

import pytest
import trio

from sonde.agent.runner import ProbeRunner, Scrubber
from sonde.protocol.codec import FrameCodec
from sonde.protocol.errors import ProbeFailed
from sonde.protocol.messages import (
    HubReject,
    JsonValue,
    Message,
    ProbeRequest,
    ProbeRequestPayload,
    ProbeResponse,
    RejectPayload,
)
from sonde.protocol.signing import new_private_key
from sonde.runtime import Link, open_link
from tests.agent.probes import Waiters, context_with, eventually, gone, registry_for_tests, wait_for_child
from tests.runtime.wspair import websocket_pair


async def ignore(message: Message) -> None:
    pass


@asynccontextmanager
async def agent_and_hub(
    waiters: Waiters, *, max_in_flight: int = 64, scrub: Scrubber | None = None
) -> AsyncIterator[tuple[Link, ProbeRunner]]:
    hub_key, agent_key = new_private_key(), new_private_key()
    hub_codec = FrameCodec(signing_key=hub_key, peer_key=agent_key.public_key())
    agent_codec = FrameCodec(signing_key=agent_key, peer_key=hub_key.public_key(), agent_id="a1")
    async with websocket_pair() as (agent_transport, hub_transport), trio.open_nursery() as probes:
        runner = ProbeRunner(
            registry_for_tests(), context_with(waiters), probes, max_in_flight=max_in_flight, scrub=scrub
        )
        async with open_link(agent_transport, agent_codec, runner.on_message) as agent_link:
            runner.bind(agent_link)
            async with open_link(hub_transport, hub_codec, ignore) as hub_link:
                yield hub_link, runner
        probes.cancel_scope.cancel()


def request(
    request_id: str, probe: str, params: dict[str, JsonValue] | None = None, **kw: Any
) -> ProbeRequest:
    payload = ProbeRequestPayload(request_id=request_id, probe=probe, params=params or {}, **kw)
    return ProbeRequest(payload=payload)


async def test_request_is_answered_with_its_request_id(autojump_clock: trio.abc.Clock) -> None:
    async with agent_and_hub(Waiters()) as (hub, _):
        response = await hub.request(request("r-1", "testpack.echo.value", {"value": 7}))
    assert response.payload.request_id == "r-1"
    assert response.payload.probe == "testpack.echo.value"
    assert response.payload.result == {"value": 7, "secret": ""}
    assert response.payload.meta.output_bytes > 0
    assert response.payload.meta.truncated is False


async def test_real_probe_over_the_link() -> None:
    # the real clock: a real probe waits on a thread, and on a machine that had an OOM kill on
    # dmesg too (system.memory.usage reads the kernel log once the count moved), which a
    # virtual clock would skip past its deadline
    async with agent_and_hub(Waiters()) as (hub, _):
        response = await hub.request(request("mem", "system.memory.usage"))
    assert response.payload.result["total_bytes"] > 0  # type: ignore[operator]


async def test_many_concurrent_requests_each_get_their_own_answer(autojump_clock: trio.abc.Clock) -> None:
    answers: dict[int, ProbeResponse] = {}
    async with agent_and_hub(Waiters()) as (hub, runner):

        async def ask(i: int) -> None:
            answers[i] = await hub.request(request(f"r{i}", "testpack.echo.value", {"value": i}))

        async with trio.open_nursery() as nursery:
            for i in range(60):
                nursery.start_soon(ask, i)
        assert runner.probes_in_flight == 0
    assert {i: a.payload.result["value"] for i, a in answers.items()} == {i: i for i in range(60)}


async def test_unknown_probe_is_an_error(autojump_clock: trio.abc.Clock) -> None:
    async with agent_and_hub(Waiters()) as (hub, _):
        with pytest.raises(ProbeFailed) as caught:
            await hub.request(request("r1", "nopack.no.probe"))
    assert caught.value.code == "unknown_probe"
    assert "testpack.echo.value" in caught.value.message


async def test_invalid_params_is_an_error(autojump_clock: trio.abc.Clock) -> None:
    async with agent_and_hub(Waiters()) as (hub, _):
        with pytest.raises(ProbeFailed) as caught:
            await hub.request(request("r1", "testpack.echo.value", {"value": -1, "extra": 1}))
    assert caught.value.code == "invalid_params"
    assert "value" in caught.value.message


async def test_probe_past_the_requested_timeout_is_a_timeout_error(autojump_clock: trio.abc.Clock) -> None:
    waiters = Waiters()
    async with agent_and_hub(waiters) as (hub, _):
        started = trio.current_time()
        with pytest.raises(ProbeFailed) as caught:
            await hub.request(request("r1", "testpack.wait.forever", timeout_s=2))
        assert trio.current_time() - started == pytest.approx(2)
    assert caught.value.code == "timeout"
    assert waiters.cancelled == 1


async def test_cancel_stops_the_probe_and_nothing_more_is_sent(autojump_clock: trio.abc.Clock) -> None:
    waiters = Waiters()
    async with agent_and_hub(waiters) as (hub, runner):
        with trio.move_on_after(5):
            await hub.request(request("r1", "testpack.wait.forever"))
        await waiters.wait_for("cancelled", 1)
        await trio.sleep(1)
        assert runner.probes_in_flight == 0
        assert hub.statistics().late == 0  # no response came after the cancel


async def test_cancel_kills_the_probe_subprocess() -> None:
    async with agent_and_hub(Waiters()) as (hub, runner):
        with trio.fail_after(10):
            async with trio.open_nursery() as nursery:
                nursery.start_soon(hub.request, request("sleep", "testpack.sleep.process"))
                child = await wait_for_child("sleep")
                nursery.cancel_scope.cancel()  # the hub stops waiting: probe.cancel goes out
            await eventually(lambda: gone(child))
            await eventually(lambda: runner.probes_in_flight == 0)
        assert hub.statistics().late == 0


async def test_over_the_limit_is_busy(autojump_clock: trio.abc.Clock) -> None:
    waiters = Waiters()
    async with agent_and_hub(waiters, max_in_flight=2) as (hub, runner):
        async with trio.open_nursery() as nursery:
            nursery.start_soon(hub.request, request("w1", "testpack.wait.forever"))
            nursery.start_soon(hub.request, request("w2", "testpack.wait.forever"))
            await waiters.wait_for("started", 2)
            assert runner.probes_in_flight == 2
            with pytest.raises(ProbeFailed) as caught:
                await hub.request(request("w3", "testpack.echo.value", {"value": 1}))
            assert caught.value.code == "busy"
            nursery.cancel_scope.cancel()
        await waiters.wait_for("cancelled", 2)
        response = await hub.request(request("w4", "testpack.echo.value", {"value": 1}))
        assert response.payload.result["value"] == 1


async def test_duplicate_request_id_in_flight_is_refused(autojump_clock: trio.abc.Clock) -> None:
    waiters = Waiters()
    async with agent_and_hub(waiters) as (hub, runner):
        async with trio.open_nursery() as nursery:

            async def first() -> None:
                with pytest.raises(ProbeFailed) as caught:
                    await hub.request(request("same", "testpack.wait.forever"))
                assert caught.value.code == "duplicate_request"

            nursery.start_soon(first)
            await waiters.wait_for("started", 1)
            await hub.send(request("same", "testpack.echo.value", {"value": 1}))
        # the original probe is still running: only the duplicate was refused
        assert runner.probes_in_flight == 1
        runner.cancel_all()
        await waiters.wait_for("cancelled", 1)


def redact_secrets(data: dict[str, Any]) -> tuple[dict[str, Any], int]:
    count = 0

    def scrub(value: Any) -> Any:
        nonlocal count
        if isinstance(value, str) and "hunter2" in value:
            count += 1
            return re.sub("hunter2", "[REDACTED]", value)
        if isinstance(value, dict):
            return {k: scrub(v) for k, v in value.items()}
        return value

    return scrub(data), count


async def test_scrubber_applies_to_results_and_error_messages(autojump_clock: trio.abc.Clock) -> None:
    async with agent_and_hub(Waiters(), scrub=redact_secrets) as (hub, _):
        response = await hub.request(
            request("r1", "testpack.echo.value", {"value": 1, "secret": "pw=hunter2"})
        )
        with pytest.raises(ProbeFailed) as caught:
            await hub.request(request("r2", "testpack.fail.loudly", {"value": 1, "secret": "hunter2"}))
    assert response.payload.result["secret"] == "pw=[REDACTED]"
    assert response.payload.meta.redactions == 1
    assert caught.value.code == "refused"
    assert caught.value.message == "cannot use [REDACTED]"


def redact_bracketed(data: dict[str, Any]) -> tuple[dict[str, Any], int]:
    """A scrubber whose secret shape needs its end, as a URL's ``@`` or a closing quote: <<...>>."""
    secret = data.get("secret", "")
    if "<<" in secret and ">>" in secret:
        return data | {"secret": re.sub(r"<<.*?>>", "[REDACTED]", secret, flags=re.DOTALL)}, 1
    return data, 0


async def test_a_result_is_scrubbed_whole_before_it_is_capped(autojump_clock: trio.abc.Clock) -> None:
    long_secret = "<<hunter2" + "x" * 400_000 + ">>"  # over the 256 KiB cap: cut first, it lost its end
    async with agent_and_hub(Waiters(), scrub=redact_bracketed) as (hub, _):
        scrubbed = await hub.request(
            request("r1", "testpack.echo.value", {"value": 1, "secret": long_secret})
        )
        capped = await hub.request(
            request("r2", "testpack.echo.value", {"value": 2, "secret": "y" * 400_000})
        )
    assert scrubbed.payload.result["secret"] == "[REDACTED]"
    assert scrubbed.payload.meta.redactions == 1
    assert scrubbed.payload.meta.truncated is False
    assert capped.payload.meta.truncated is True  # the cap still bounds the result
    assert capped.payload.meta.output_bytes <= 256 * 1024


def scrubber_failing_on_13(data: dict[str, Any]) -> tuple[dict[str, Any], int]:
    if data.get("value") == 13:
        raise RuntimeError("a bug after the probe ran")
    return data, 0


async def test_a_failure_while_answering_is_that_probes_error_and_the_link_goes_on(
    autojump_clock: trio.abc.Clock,
) -> None:
    async with agent_and_hub(Waiters(), scrub=scrubber_failing_on_13) as (hub, _):
        with pytest.raises(ProbeFailed) as caught:
            await hub.request(request("r1", "testpack.echo.value", {"value": 13}))
        after = await hub.request(request("r2", "testpack.echo.value", {"value": 1}))
    assert caught.value.code == "probe_failed"
    assert caught.value.message == "probe testpack.echo.value failed on the agent: RuntimeError"
    assert after.payload.result["value"] == 1


async def test_hub_reject_mid_link_is_recorded(autojump_clock: trio.abc.Clock) -> None:
    async with agent_and_hub(Waiters()) as (hub, runner):
        await hub.send(HubReject(payload=RejectPayload(code="revoked", reason="revoked by admin")))
        with trio.fail_after(1):
            rejection = await runner.wait_rejected()
    assert rejection.code == "revoked"
    assert runner.rejection == rejection
