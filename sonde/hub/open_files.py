"""The hub's open-file limit: every agent holds one socket, so the soft limit caps the fleet.

systemd and most shells start a process with a soft ``RLIMIT_NOFILE`` of 1024
and a much higher hard limit; left there, a hub stops accepting agents at about
a thousand. `raise_open_file_limit` lifts the soft limit to the hard one (as Go
and nginx's ``worker_rlimit_nofile`` do), and the hub logs what it got.
"""

from __future__ import annotations

import logging
import resource

log = logging.getLogger(__name__)

CEILING = 1 << 20  # an unlimited hard limit is taken as this (the kernel's usual nr_open)
FEW = 4096  # below this, say how to get more
RESERVED = 64  # the store, the log, listeners and the odd client: not agents


def raise_open_file_limit() -> int:
    """Raise the soft open-file limit to the hard one; log it and return the soft limit in force."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft == resource.RLIM_INFINITY:
        log.info("no open-file limit")
        return CEILING
    target = CEILING if hard == resource.RLIM_INFINITY else hard
    if soft < target:
        try:
            resource.setrlimit(resource.RLIMIT_NOFILE, (target, hard))
            soft = target
        except (ValueError, OSError) as exc:
            log.warning("could not raise the open-file limit from %d to %d: %s", soft, target, exc)
    agents = max(soft - RESERVED, 0)
    if soft < FEW:
        log.warning(
            "open-file limit %d: this hub can hold about %d agents; raise it (LimitNOFILE= in a systemd unit)",
            soft,
            agents,
        )
    else:
        log.info("open-file limit %d: room for about %d agents", soft, agents)
    return soft
