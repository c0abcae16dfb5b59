"""The nginx config test: `nginx -t` on the configured config file, and why it cannot pass as
a user who may not open the files it needs."""

from __future__ import annotations

from pydantic import Field

from sonde.packs.base import NoParams, Result
from sonde.packs.context import ProbeContext
from sonde.packs.nginx import PACK
from sonde.packs.nginx.logformat import ConfigTest, parse_config_test, refused_files
from sonde.packs.system.privileges import agent_user

CHECK_AS_ROOT = "this is no verdict on the config: check it with `sudo nginx -t`"


class ConfigMessage(Result):
    level: str
    text: str
    file: str | None
    line: int | None


class ConfigTestResult(Result):
    ok: bool
    syntax_ok: bool
    config_file: str | None
    version: str | None
    messages: list[ConfigMessage]
    permission_problem: bool = Field(
        description="The test failed only because this user may not open files nginx -t needs."
    )
    note: str | None


def permission_note(tested: ConfigTest, refused: list[str], user: str) -> str | None:
    """Why a test that failed only on ``refused`` files cannot run as ``user`` (None if none were)."""
    if not refused:
        return None
    files = ", ".join(refused)
    if tested.syntax_ok:  # past parsing: nginx -t opens its pid file and log files for writing
        return (
            f"the syntax is ok, but nginx -t could not open {files} for writing as user '{user}': "
            "nginx -t needs to write its pid file and open its log files for writing, which this user "
            f"may not (or the agent's sandbox keeps read-only), so it cannot pass for this agent; {CHECK_AS_ROOT}"
        )
    return (
        f"nginx -t could not read {files} as user '{user}': the config names files this user may "
        f"not read (TLS keys are rightly kept from it), so the test cannot run as this user; {CHECK_AS_ROOT}"
    )


async def _version(ctx: ProbeContext) -> str | None:
    output = await ctx.run(["nginx", "-v"])
    text = (output.stderr or output.stdout).strip()
    return text.split("nginx/", 1)[1].split()[0] if "nginx/" in text else None


@PACK.probe(
    "nginx.config.test",
    """Run `nginx -t` on the configured config file (agent config nginx.config, else
    nginx's default): whether the test passed, whether the syntax is ok, the config file,
    the nginx version and every message with level, file and line. `permission_problem`
    says it failed only because this user may not open files nginx -t needs (its pid and
    log files, which it writes, or files the config names, such as TLS keys): that is no
    verdict on the config, and `note` says how to check it.""",
    timeout_s=20,
)
async def config_test(ctx: ProbeContext, params: NoParams) -> ConfigTestResult:
    config = ctx.settings.for_pack("nginx").get("config")
    argv = ["nginx", "-t", "-e", "stderr"]
    if config:
        argv += ["-c", str(config)]
    output = await ctx.run(argv)
    if "invalid option" in output.stderr:  # nginx before 1.19.5 has no -e
        output = await ctx.run([item for item in argv if item not in ("-e", "stderr")])
    tested = parse_config_test(output.stderr + output.stdout)
    refused = refused_files(tested)
    return ConfigTestResult(
        ok=tested.successful and output.returncode == 0,
        syntax_ok=tested.syntax_ok,
        config_file=tested.config_file,
        version=await _version(ctx),
        messages=[
            ConfigMessage(level=m.level, text=m.text, file=m.file, line=m.line) for m in tested.messages
        ],
        permission_problem=bool(refused),
        note=permission_note(tested, refused, agent_user()),
    )
