"""The agent's handler for what the hub sends on a link: run probes, cancel them.

`ProbeRunner.on_message` is the link's ``on_message``. It never waits for a
probe: each ``probe.request`` becomes a task in the runner's nursery, inside
its own cancel scope kept by ``requestId``, and the task sends the answer
itself. A probe is in flight until its answer is handed to the link's writer,
not just computed: a hub that stops reading then finds this runner holding at
most ``max_in_flight`` answers, and gets ``busy`` for the rest (or, once the
link's own bounded queue is full too, nothing: the reader waits).
``probe.cancel`` cancels that scope (a probe's subprocess is killed with it,
an answer not yet handed over is dropped) and nothing more is sent for that
request. ``hub.reject`` mid-link is recorded; the owner of the link waits on
`ProbeRunner.wait_rejected` and closes the link.

Usage, per connection::

    async with trio.open_nursery() as probes:
        runner = ProbeRunner(registry, ctx, probes)
        async with open_link(transport, codec, runner.on_message) as link:
            runner.bind(link)
            await runner.wait_rejected()
        probes.cancel_scope.cancel()
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import Any

import trio

from sonde.packs.context import ProbeContext
from sonde.packs.executor import ProbeExecutionError, execute_probe
from sonde.packs.registry import PackRegistry
from sonde.protocol.errors import AgentUnavailable
from sonde.protocol.messages import (
    HubReject,
    Message,
    ProbeCancel,
    ProbeError,
    ProbeErrorPayload,
    ProbeMeta,
    ProbeRequest,
    ProbeRequestPayload,
    ProbeResponse,
    ProbeResponsePayload,
    RejectPayload,
)
from sonde.runtime import Link

log = logging.getLogger(__name__)

MAX_PROBES_IN_FLIGHT = 64
Scrubber = Callable[[dict[str, Any]], tuple[dict[str, Any], int]]


def no_scrub(data: dict[str, Any]) -> tuple[dict[str, Any], int]:
    """The identity scrubber: nothing redacted."""
    return data, 0


class ProbeRunner:
    """Runs the probes a hub asks for on one link, at most ``max_in_flight`` at once.

    Probe tasks run in ``nursery``; cancelling it cancels every probe. The
    runner must be bound to its link (`bind`) before answers can go out;
    answers wait for that.
    """

    def __init__(
        self,
        registry: PackRegistry,
        ctx: ProbeContext,
        nursery: trio.Nursery,
        *,
        max_in_flight: int = MAX_PROBES_IN_FLIGHT,
        scrub: Scrubber | None = None,
    ) -> None:
        self._registry = registry
        self._ctx = ctx
        self._nursery = nursery
        self._max_in_flight = max_in_flight
        self._scrub = scrub or no_scrub
        self._in_flight: dict[str, trio.CancelScope] = {}
        self._link: Link | None = None
        self._bound = trio.Event()
        self._rejected = trio.Event()
        self.rejection: RejectPayload | None = None

    @property
    def probes_in_flight(self) -> int:
        """How many probes are running now or waiting to hand their answer to the link (for heartbeats)."""
        return len(self._in_flight)

    def bind(self, link: Link) -> None:
        """Send answers through ``link`` from now on."""
        self._link = link
        self._bound.set()

    async def wait_rejected(self) -> RejectPayload:
        """Wait until the hub sends ``hub.reject`` on the link; returns its payload."""
        await self._rejected.wait()
        assert self.rejection is not None
        return self.rejection

    def cancel_all(self) -> None:
        """Cancel every probe in flight; none of them will answer."""
        for scope in self._in_flight.values():
            scope.cancel()

    async def on_message(self, message: Message) -> None:
        """Handle one message from the hub; returns without waiting for any probe."""
        if isinstance(message, ProbeRequest):
            await self._start_probe(message.payload)
        elif isinstance(message, ProbeCancel):
            self._cancel(message.payload.request_id)
        elif isinstance(message, HubReject):
            self._record_rejection(message.payload)
        else:
            log.debug("ignoring a %s frame from the hub", message.type)

    # --- internals -------------------------------------------------------

    async def _start_probe(self, request: ProbeRequestPayload) -> None:
        request_id = request.request_id
        if request_id in self._in_flight:
            await self._send_error(
                request_id, "duplicate_request", f"request {request_id} is already running"
            )
            return
        if len(self._in_flight) >= self._max_in_flight:
            message = f"agent is busy: {self._max_in_flight} probes already running, try again later"
            await self._send_error(request_id, "busy", message)
            return
        scope = trio.CancelScope()
        self._in_flight[request_id] = scope
        self._nursery.start_soon(self._run_probe, request, scope)

    async def _run_probe(self, request: ProbeRequestPayload, scope: trio.CancelScope) -> None:
        try:
            with scope:  # until the answer is handed over: it is held here, and counts
                await self._send(await self._reply_to(request))
            if scope.cancelled_caught:
                log.info("probe %s (%s) cancelled by the hub", request.probe, request.request_id)
        finally:
            self._in_flight.pop(request.request_id, None)

    async def _reply_to(self, request: ProbeRequestPayload) -> ProbeResponse | ProbeError:
        try:
            return await self._answer(request)
        except Exception as exc:  # one probe's failure is its own: the link and the others go on
            log.exception("answering probe %s (%s) failed", request.probe, request.request_id)
            message = f"probe {request.probe} failed on the agent: {type(exc).__name__}"
            return self._error(request.request_id, "probe_failed", message)

    async def _answer(self, request: ProbeRequestPayload) -> ProbeResponse | ProbeError:
        try:
            outcome = await execute_probe(
                self._registry,
                request.probe,
                request.params,
                self._ctx,
                timeout_s=request.timeout_s,
                scrub=self._scrub,  # before the cap: a secret cut short could pass
            )
        except ProbeExecutionError as exc:
            return self._error(request.request_id, exc.code, exc.message)
        meta = ProbeMeta(
            truncated=outcome.truncated, redactions=outcome.redactions, output_bytes=outcome.output_bytes
        )
        payload = ProbeResponsePayload(
            request_id=request.request_id,
            probe=request.probe,
            result=outcome.result,
            duration_ms=outcome.duration_ms,
            meta=meta,
        )
        return ProbeResponse(payload=payload)

    def _error(self, request_id: str, code: str, message: str) -> ProbeError:
        scrubbed, _ = self._scrub({"message": message})
        text = scrubbed.get("message", message)
        return ProbeError(payload=ProbeErrorPayload(request_id=request_id, code=code, message=str(text)))

    async def _send_error(self, request_id: str, code: str, message: str) -> None:
        await self._send(self._error(request_id, code, message))

    async def _send(self, reply: ProbeResponse | ProbeError) -> None:
        await self._bound.wait()
        assert self._link is not None
        try:
            await self._link.send(reply)
        except AgentUnavailable:
            log.debug("link closed before a %s could be sent", reply.type)

    def _cancel(self, request_id: str) -> None:
        scope = self._in_flight.get(request_id)
        if scope is None:
            log.debug("probe.cancel for %s, which is not running", request_id)
            return
        scope.cancel()

    def _record_rejection(self, payload: RejectPayload) -> None:
        log.warning("hub rejected this agent: %s (%s)", payload.reason, payload.code)
        self.rejection = payload
        self._rejected.set()
