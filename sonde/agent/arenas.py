"""The agent's C heap: at most two malloc arenas.

glibc gives each thread that allocates while another holds an arena an arena of its own, and
keeps what is freed in each for reuse. The agent runs probes in up to 24 worker threads, and
a burst of probes with large results (log tails of a big file) left some 16 arenas holding
about 20 MB each: 45 MB before, 338 MB for as long as the agent then ran (a review). With two
arenas, as `MALLOC_ARENA_MAX=2` gives, the same burst peaked at 200 MB and left 149 MB. The
probes' work holds the GIL, so threads hardly wait on an arena lock. An operator's own
``MALLOC_ARENA_MAX`` is left as it is; elsewhere than glibc nothing is done.
"""

from __future__ import annotations

import ctypes
import os

M_ARENA_MAX = -8  # glibc's mallopt parameter
AGENT_ARENAS = 2


def cap_malloc_arenas(arenas: int = AGENT_ARENAS) -> bool:
    """Cap glibc's malloc arenas (before the worker threads start); whether it was done."""
    if "MALLOC_ARENA_MAX" in os.environ:
        return False
    try:
        mallopt = ctypes.CDLL(None).mallopt
    except (OSError, AttributeError):  # not glibc
        return False
    mallopt.argtypes = [ctypes.c_int, ctypes.c_int]
    mallopt.restype = ctypes.c_int
    return bool(mallopt(M_ARENA_MAX, arenas))
