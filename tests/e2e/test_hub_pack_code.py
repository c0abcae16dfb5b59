"""A real `sonde hub` loads every pack's probe code before it serves.

Left to the first `list_capabilities` or `health_check`, the imports ran on the event loop
while every agent's frames waited (some 0.3 s for Sonde's own packs), and a pack whose code
could not load was found only by that first caller.
"""

from __future__ import annotations

import re
from pathlib import Path

from tests.e2e.procs import running_hub
from tests.testpacks import install_test_pack

LOADED_PACK = """
from sonde.packs.base import Pack

PACK = Pack("eager", "0.0.1", "Test-only: its probe module leaves a mark when imported.",
            modules=("sonde_eager_probes",))
"""

LOADED_PROBES = """
import os
from pathlib import Path

from sonde.packs.base import NoParams, Result
from sonde_eager import PACK

Path(__file__).with_suffix(".imported").write_text(str(os.getpid()))


class Nothing(Result):
    pass


@PACK.probe("eager.nothing.here", "Returns nothing.")
async def nothing(ctx, params: NoParams) -> Nothing:
    return Nothing()
"""

BROKEN_PACK = """
from sonde.packs.base import Pack

PACK = Pack("broken", "0.0.1", "Test-only: its probe module cannot be imported.",
            modules=("sonde_broken_probes",))
"""

BROKEN_PROBES = """
raise RuntimeError("this probe module is broken on purpose")
"""


def test_pack_code_is_loaded_at_start_and_a_broken_pack_is_named(tmp_path: Path) -> None:
    site = install_test_pack(tmp_path / "site", "eager", LOADED_PACK)
    (site / "sonde_eager_probes.py").write_text(LOADED_PROBES)
    install_test_pack(site, "broken", BROKEN_PACK)
    (site / "sonde_broken_probes.py").write_text(BROKEN_PROBES)
    mark = site / "sonde_eager_probes.imported"

    with running_hub(tmp_path, site=site) as hub:
        # serving, and no tool has been called: the probe module was imported by the hub itself
        assert mark.read_text() == str(hub.proc.popen.pid)
        hub.proc.wait_for(
            re.compile(
                r"pack broken 0\.0\.1 could not load its probe code \(sonde_broken_probes: "
                r"RuntimeError: this probe module is broken on purpose\)"
            )
        )
        with hub.client() as client:  # the hub serves despite the broken pack
            assert client.get("/api/v1/agents").status_code == 200
