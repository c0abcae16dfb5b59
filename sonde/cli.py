"""The `sonde` command line: parses, then calls into the parts.

Every command imports what it needs inside its body, so `sonde serve --json`
never pays for the hub or the mcp SDK.
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Annotated

from cyclopts import App, Parameter

from sonde import __version__

app = App(
    name="sonde", help="Read-only, structured probes of your machines for AI assistants.", version=__version__
)
packs_app = App(name="packs", help="Inspect the probe packs installed here.")
app.command(packs_app)


@app.command
def serve(
    *,
    json: Annotated[bool, Parameter(negative="")] = False,
    manifest: Path | None = None,
) -> int:
    """Serve this machine's probes as tools over the JSON-line protocol on stdin/stdout.

    Parameters
    ----------
    json
        Speak the JSON-line protocol (the only mode there is; required).
    manifest
        The manifest naming the packs and probes to expose
        (default: ./sondage.manifest.json when it exists, else every detected pack).
    """
    if not json:
        print("sonde serve: only the JSON-line mode exists; run `sonde serve --json`", file=sys.stderr)
        return 2
    from sonde.agent.serve import run_serve

    return run_serve(manifest)


@packs_app.command(name="list")
def packs_list(*, json: Annotated[bool, Parameter(negative="")] = False) -> int:
    """List installed packs: version, whether detected on this machine, and their probes.

    Parameters
    ----------
    json
        Print JSON instead of a table.
    """
    from sonde.agent.packs_report import print_packs

    return print_packs(as_json=json)


def main() -> None:
    result = app(sys.argv[1:], result_action="return_value")
    sys.exit(result if isinstance(result, int) else 0)
