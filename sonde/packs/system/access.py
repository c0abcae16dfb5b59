"""Why the agent may not read a path, and what would let it: advice that follows the file.

`refusal_advice` is pure: given what stat says about the path that refused the
agent (owner, group, mode) and who the agent is (user, groups), it says either
which group to join (only when that group may read the path and the agent is
not in it) or who may read it and that the agent's user is not among them.
`why_refused` is the shell: it stats the path and every directory above it,
finds the first one whose mode shuts the agent out, and asks `refusal_advice`.
"""

from __future__ import annotations

import grp
import os
import pwd
import stat
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

from sonde.packs.system.privileges import agent_groups, agent_user

Need = Literal["read", "enter"]  # read a file or list a directory; pass through a directory
ROOT_GID = 0
# (owner, group, others) permission bits for each need
BITS: dict[Need, tuple[int, int, int]] = {
    "read": (stat.S_IRUSR, stat.S_IRGRP, stat.S_IROTH),
    "enter": (stat.S_IXUSR, stat.S_IXGRP, stat.S_IXOTH),
}


@dataclass(frozen=True)
class PathOwnership:
    """What stat says about a path: its owner and group (ids and names) and its mode."""

    path: Path
    uid: int
    gid: int
    mode: int
    owner: str
    group: str


@dataclass(frozen=True)
class Agent:
    """Who asks: the effective user (id and name) and every group the process holds."""

    uid: int
    user: str
    gids: frozenset[int]


def mode_allows(found: PathOwnership, agent: Agent, need: Need) -> bool:
    """The classic Unix check: the owner bits for the owner, else the group bits for a member, else the others'."""
    owner_bit, group_bit, other_bit = BITS[need]
    if agent.uid == 0:
        return True
    if agent.uid == found.uid:
        return bool(found.mode & owner_bit)
    if found.gid in agent.gids:
        return bool(found.mode & group_bit)
    return bool(found.mode & other_bit)


def _who_may(found: PathOwnership, need: Need) -> str:
    owner_bit, group_bit, _ = BITS[need]
    who = [f"its owner '{found.owner}'"] if found.mode & owner_bit else []
    who += [f"the '{found.group}' group"] if found.mode & group_bit else []
    return " and ".join(who) or "root"


def refusal_advice(found: PathOwnership, agent: Agent, need: Need) -> str:
    """Why ``agent`` may not ``need`` ``found``, and what would help (pure)."""
    verb, done = ("read", "read") if need == "read" else ("enter", "entered")
    facts = f"{found.path} (owner {found.owner}, group {found.group}, mode {stat.filemode(found.mode)})"
    _, group_bit, _ = BITS[need]
    if mode_allows(found, agent, need):
        return (
            f"{facts}: its mode lets user '{agent.user}' {verb} it, yet that was refused: an ACL, "
            "AppArmor/SELinux or the agent's systemd sandbox may forbid it"
        )
    if agent.uid == found.uid:  # the owner bits alone apply to the owner
        return f"{facts} is owned by user '{agent.user}', but its mode does not let its owner {verb} it"
    if found.mode & group_bit and found.gid not in agent.gids and found.gid != ROOT_GID:
        return (
            f"{facts} may be {done} by the '{found.group}' group, which user '{agent.user}' is not in: "
            f"add that user to it (`usermod -aG {found.group} {agent.user}`) and restart the agent"
        )
    return (
        f"{facts} may be {done} only by {_who_may(found, need)}, and user '{agent.user}' is not among "
        "them: grant that user access or leave the path out of allowedPaths"
    )


def _name(lookup_id: int, kind: Literal["user", "group"]) -> str:
    try:
        return pwd.getpwuid(lookup_id).pw_name if kind == "user" else grp.getgrgid(lookup_id).gr_name
    except KeyError:
        return str(lookup_id)


def ownership(path: Path) -> PathOwnership:
    """stat ``path`` (symlinks followed); raises OSError."""
    info = os.stat(path)
    return PathOwnership(
        path, info.st_uid, info.st_gid, info.st_mode, _name(info.st_uid, "user"), _name(info.st_gid, "group")
    )


def this_agent() -> Agent:
    return Agent(os.geteuid(), agent_user(), agent_groups())


def why_refused(path: Path) -> str:
    """Advice for a read of ``path`` that was refused: about the first directory above it that shuts
    the agent out, else about ``path`` itself."""
    agent = this_agent()
    steps: list[tuple[Path, Need]] = [(parent, "enter") for parent in reversed(path.parents)]
    for step, need in [*steps, (path, "read")]:
        try:
            found = ownership(step)
        except OSError:
            break
        if step == path:
            return refusal_advice(found, agent, need)
        if not mode_allows(found, agent, need):
            return f"{path}: {refusal_advice(found, agent, need)}"
    return f"user '{agent.user}' may not read {path}"
