"""`sonde start`'s exit codes: what its supervisor (the systemd unit) is told."""

EXIT_OK = 0  # stopped by SIGTERM or SIGINT
EXIT_NOT_ENROLLED = 1  # also any unexpected error: a restart may help
EXIT_ROOT = 2  # run as root without --allow-root
EXIT_USAGE = 2  # a bad setting (a log level, the config file)
EXIT_REJECTED = 3  # the hub no longer knows this agent (removed, or another hub's): enroll again
EXIT_ALREADY_RUNNING = 4  # another `sonde start` holds this identity: restarted, it runs once that one stops
# never the process's: the agent's config holds a new identity (enrolled again while it ran), and
# `sonde start` goes on with it (`sonde.agent.main.run_agent`)
EXIT_ENROLLED_AGAIN = -1
