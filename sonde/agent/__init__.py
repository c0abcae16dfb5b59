"""The agent: config, enrollment, the daemon, the probe executor, `serve --json`."""
