"""ping and traceroute of one validated host, with bounded counts and waits.

The host must match `HOST_PATTERN` (a name, an IPv4 or an IPv6 address; it can
never start with '-') and is passed after ``--`` so neither tool can read it as
an option. Both parsers are pure and cover iputils ping, busybox ping and the
Linux traceroute (``-n`` numeric output).
"""

from __future__ import annotations

import re
from typing import Annotated

from pydantic import Field

from sonde.packs.base import Params, Requirements, Result
from sonde.packs.context import ProbeContext
from sonde.packs.system import PACK
from sonde.protocol.names import worded

HOST_PATTERN = worded(
    r"^[A-Za-z0-9:][A-Za-z0-9.:-]{0,252}$",
    "a host name or IP address: 1 to 253 letters, digits, '.', ':' or '-', not starting with '.' or '-'",
)
PING_INTERVAL_S = 0.2  # the smallest interval iputils allows an unprivileged user
Host = Annotated[str, Field(pattern=HOST_PATTERN, strict=True, description="Host name or IP address.")]
TRANSMITTED = re.compile(r"(\d+) packets transmitted, (\d+) (?:packets )?received")
LOSS = re.compile(r"([\d.]+)% packet loss")
RTT = re.compile(r"= ([\d.]+)/([\d.]+)/([\d.]+)(?:/([\d.]+))? ms")
ERRORS = re.compile(r"\+(\d+) errors?")
ICMP_ERROR = re.compile(r"^From (\S+)(?: \([^)]*\))? icmp_seq=\d+ (.+)$", re.MULTILINE)
ERROR_MAX_CHARS = 300
HOP = re.compile(r"^\s*(\d+)\s+(.*)$")
PING_PERMISSION_HINT = (
    "ping needs CAP_NET_RAW, or the agent's group inside net.ipv4.ping_group_range "
    "(sysctl) for unprivileged ICMP sockets"
)


class PingParams(Params):
    host: Host
    count: int = Field(default=3, ge=1, le=10, strict=True, description="Echo requests to send.")
    timeout_s: int = Field(
        default=2, ge=1, le=10, strict=True, description="Wait for the last reply, seconds."
    )


class PingResult(Result):
    host: str
    reachable: bool
    transmitted: int
    received: int
    errors: int = Field(
        description="ICMP errors that came back instead of replies (ping's '+N errors'), "
        "e.g. Destination Host Unreachable."
    )
    loss_percent: float | None
    rtt_min_ms: float | None
    rtt_avg_ms: float | None
    rtt_max_ms: float | None
    error: str | None = Field(
        description="Why there was no answer, when ping says: its failure before any packet (e.g. "
        "an unknown host), or the ICMP errors received and who sent them. Null when replies "
        "came back or the packets were lost silently."
    )


def parse_ping(host: str, stdout: str, stderr: str) -> PingResult:
    """The summary lines of ping output; a failure before any packet, or the ICMP errors
    counted as "+N errors", become ``error``."""
    sent = TRANSMITTED.search(stdout)
    loss = LOSS.search(stdout)
    rtt = RTT.search(stdout)
    transmitted, received = (int(sent[1]), int(sent[2])) if sent else (0, 0)
    errors = ERRORS.search(stdout)
    error_count = int(errors[1]) if errors else 0
    if sent is None:
        error: str | None = (stderr.strip().splitlines() or ["no output"])[-1][:ERROR_MAX_CHARS]
    else:
        error = icmp_errors(stdout, error_count) if error_count else None
    return PingResult(
        host=host,
        reachable=received > 0,
        transmitted=transmitted,
        received=received,
        errors=error_count,
        loss_percent=float(loss[1]) if loss else None,
        rtt_min_ms=float(rtt[1]) if rtt else None,
        rtt_avg_ms=float(rtt[2]) if rtt else None,
        rtt_max_ms=float(rtt[3]) if rtt else None,
        error=error,
    )


def icmp_errors(stdout: str, count: int) -> str:
    """The distinct ICMP errors in ping's "From ADDRESS icmp_seq=N MESSAGE" lines, with their count:
    "Destination Host Unreachable from 10.0.0.1 (2 errors)"."""
    distinct = dict.fromkeys(
        f"{message.strip()} from {sender}" for sender, message in ICMP_ERROR.findall(stdout)
    )
    counted = f"{count} error{'s' if count != 1 else ''}"
    text = f"{'; '.join(distinct)} ({counted})" if distinct else counted
    return text[:ERROR_MAX_CHARS]


@PACK.probe(
    "system.network.ping",
    """Ping a host: `count` echo requests (at most 10, 0.2 s apart), then wait up to
    `timeout_s` for the last reply. Whether it answered, packets sent and received, ICMP
    errors (e.g. Destination Host Unreachable), loss percent and min/avg/max round trip in
    ms, or the error (e.g. unknown host). Use it for 'can this machine reach X'.""",
    timeout_s=15,
    requires=Requirements(commands=("ping",)),
)
async def network_ping(ctx: ProbeContext, params: PingParams) -> PingResult:
    # No -w: with a deadline iputils reads -c as the replies to wait for and sends until the
    # deadline. Without one it sends `count` requests and waits -W after the last, so it ends
    # within (count - 1) * interval + timeout_s seconds (the probe's timeout bounds a slow DNS).
    argv = ["ping", "-n", "-c", str(params.count), "-i", str(PING_INTERVAL_S)]
    argv += ["-W", str(params.timeout_s), "--", params.host]
    output = await ctx.run(argv)
    if "Operation not permitted" in output.stderr or "cap_net_raw" in output.stderr:
        raise PermissionError(PING_PERMISSION_HINT)
    return parse_ping(params.host, output.stdout, output.stderr)


class TraceParams(Params):
    host: Host
    max_hops: int = Field(default=20, ge=1, le=30, strict=True, description="Give up after this many hops.")
    queries: int = Field(default=1, ge=1, le=3, strict=True, description="Probes per hop.")
    wait_s: int = Field(default=2, ge=1, le=3, strict=True, description="Wait per probe, seconds.")


class Hop(Result):
    hop: int
    addresses: list[str]
    rtt_ms: list[float]
    timeouts: int
    notes: list[str]


class TraceResult(Result):
    host: str
    destination: str | None
    reached: bool
    hops: list[Hop]
    error: str | None


def parse_hop(line: str) -> Hop | None:
    match = HOP.match(line)
    if match is None:
        return None
    tokens = match[2].split()
    addresses: list[str] = []
    rtts: list[float] = []
    notes: list[str] = []
    timeouts = 0
    for index, token in enumerate(tokens):
        if token == "*":
            timeouts += 1
        elif token == "ms":
            continue
        elif token.startswith("!"):
            notes.append(token)
        elif index + 1 < len(tokens) and tokens[index + 1] == "ms":
            rtts.append(float(token))
        elif token not in addresses:
            addresses.append(token)
    return Hop(hop=int(match[1]), addresses=addresses, rtt_ms=rtts, timeouts=timeouts, notes=notes)


def parse_traceroute(host: str, stdout: str, stderr: str) -> TraceResult:
    """``traceroute -n`` output: the header names the destination, then one line per hop."""
    lines = stdout.splitlines()
    header = re.match(r"traceroute to \S+ \(([^)]+)\)", lines[0]) if lines else None
    hops = [hop for hop in (parse_hop(line) for line in lines[1:]) if hop is not None]
    destination = header[1] if header else None
    return TraceResult(
        host=host,
        destination=destination,
        reached=bool(hops) and destination in hops[-1].addresses,
        hops=hops,
        error=None if header else (stderr.strip().splitlines() or ["no output"])[-1][:300],
    )


@PACK.probe(
    "system.network.traceroute",
    """The route to a host, hop by hop (numeric, at most 30 hops, 1-3 probes per hop, 1-3 s
    wait): each hop's addresses, round trips in ms, timeouts ('*') and notes such as !H,
    and whether the destination was reached. Use it when a host is unreachable or slow to
    see where the path breaks.""",
    timeout_s=60,
    requires=Requirements(commands=("traceroute",)),
)
async def network_traceroute(ctx: ProbeContext, params: TraceParams) -> TraceResult:
    argv = ["traceroute", "-n", "-q", str(params.queries), "-w", str(params.wait_s)]
    argv += ["-m", str(params.max_hops), "--", params.host]
    output = await ctx.run(argv)
    return parse_traceroute(params.host, output.stdout, output.stderr)
