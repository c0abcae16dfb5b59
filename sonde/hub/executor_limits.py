"""Bounds on the hub's fan-out work."""

FANOUT_LIMIT = 256  # probes in flight at once for one health_check or diagnose call
# a fan-out's step without an answer after this is slow: its worker is replaced (at most
# MAX_SET_ASIDE times per call, `step_pool`) and its probe gives back the hub's fan-out place
# (`HubPlaces.give_back_slow`); a step answers in milliseconds, a sampling probe in about a second
SLOW_STEP_S = 2.0
# slow steps a call's pool sets aside (a worker each), beyond its FANOUT_LIMIT workers: it stalls
# only when more than the two together hang (427 agents of 3 steps each)
MAX_SET_ASIDE = 1024
