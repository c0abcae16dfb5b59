"""The agent's config file, ``~/.sonde/config.json`` (mode 0600).

It holds the agent's identity (written by `sonde enroll`) and its settings.
Every field is optional so a file holding only ``hubUrl`` and ``apiKey``
(written by `sonde login`) is valid. Keys are camelCase, like the wire.

`save_config` merges: keys already in the file that the new config does not
set are kept, so two commands each owning a few keys never erase each other.
The write is atomic (a temp file in the same directory, then `os.replace`).
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
import stat
import tempfile
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ConfigDict, JsonValue, PrivateAttr, ValidationError, field_validator
from pydantic.alias_generators import to_camel

from sonde.hub_url import check_hub_url
from sonde.packs.context import DEFAULT_ALLOWED_PATHS, ProbeSettings
from sonde.protocol.keytext import key_bytes

log = logging.getLogger(__name__)

CONFIG_FILE_NAME = "config.json"
CONFIG_DIR_MODE = 0o700
CONFIG_FILE_MODE = 0o600
MAX_CONFIG_BYTES = 1024 * 1024
IDENTITY_FIELDS = ("hub_url", "agent_id", "name", "private_key", "hub_public_key")
SECRET_FIELDS = {"privateKey": "a private key", "apiKey": "an API key"}  # `sonde enroll`, `sonde login`


class ConfigError(Exception):
    """The config file is unreadable or wrong; the message names the file."""


def config_path() -> Path:
    """Where the config lives: ``$SONDE_HOME/config.json``, default ``~/.sonde/config.json``."""
    return Path(os.environ.get("SONDE_HOME") or Path.home() / ".sonde") / CONFIG_FILE_NAME


class AgentConfig(BaseModel):
    """The agent's identity and settings, as stored in the config file."""

    model_config = ConfigDict(
        extra="forbid",
        alias_generator=to_camel,
        populate_by_name=True,
        serialize_by_alias=True,
        validate_assignment=True,
        defer_build=True,  # built when a config is read: `sonde serve` on a machine without one never does
    )

    hub_url: str | None = None
    agent_id: str | None = None
    name: str | None = None
    private_key: str | None = None
    hub_public_key: str | None = None
    api_key: str | None = None
    allowed_paths: list[str] = list(DEFAULT_ALLOWED_PATHS)
    packs: dict[str, dict[str, JsonValue]] = {}
    enabled_packs: list[str] | None = None
    scrub_patterns: list[str] = []
    _file: Path | None = PrivateAttr(default=None)  # where it was read or written, for messages

    @field_validator("hub_url")
    @classmethod
    def _http_url(cls, value: str | None) -> str | None:
        if value is not None:
            check_hub_url(value)
            return value.rstrip("/")
        return value

    @field_validator("private_key")
    @classmethod
    def _raw_ed25519_private_key(cls, value: str | None) -> str | None:
        if value is not None:
            key_bytes(value, "an Ed25519 private key")
        return value

    @field_validator("hub_public_key")
    @classmethod
    def _raw_ed25519_public_key(cls, value: str | None) -> str | None:
        if value is not None:
            # imported here: `sonde serve` reads this config without ever loading the crypto library
            from sonde.protocol.signing import public_key_from_text

            try:
                public_key_from_text(value)
            except ValueError as exc:
                raise ValueError(f"not an Ed25519 public key: {exc}") from None
        return value

    @field_validator("allowed_paths")
    @classmethod
    def _absolute_paths(cls, value: list[str]) -> list[str]:
        for path in value:  # a relative one would be read from wherever the agent was started
            if not path.startswith("/"):
                raise ValueError(f"{path!r} is not an absolute path: write it from / (such as /var/log)")
        return value

    @field_validator("scrub_patterns")
    @classmethod
    def _compilable_patterns(cls, value: list[str]) -> list[str]:
        if value:  # imported here: the scrubber's own patterns take a while to compile
            from sonde.agent.scrub_rules import compile_operator_pattern

            for index, pattern in enumerate(value):
                compile_operator_pattern(index, pattern)  # ValueError names the pattern
        return value

    def missing_identity(self) -> list[str]:
        """The camelCase names of the enrollment fields this config lacks (empty once enrolled)."""
        return [to_camel(name) for name in IDENTITY_FIELDS if getattr(self, name) is None]

    @property
    def enrolled(self) -> bool:
        return not self.missing_identity()

    def probe_settings(self) -> ProbeSettings:
        """The settings probes consult (allowed paths, per-pack settings)."""
        return ProbeSettings(
            allowed_paths=tuple(self.allowed_paths),
            packs=dict(self.packs),
            config_file=None if self._file is None else str(self._file),
        )

    def read_from(self, path: Path) -> AgentConfig:
        """This config, known to be ``path``'s."""
        self._file = path
        return self


def describe_config_error(exc: ValidationError) -> str:
    """The first few problems, as ``field: what`` phrases."""
    parts = []
    for error in exc.errors()[:3]:
        where = ".".join(str(part) for part in error["loc"])
        what = error["msg"].removeprefix("Value error, ")  # pydantic's word for our own validators' refusals
        parts.append(f"{where}: {what}" if where else what)
    return "; ".join(parts)


def read_config_data(path: Path) -> dict[str, Any] | None:
    """The raw JSON object in ``path``; None if the file does not exist. Raises `ConfigError`."""
    try:
        with path.open("rb") as file:
            text = file.read(MAX_CONFIG_BYTES + 1)
    except FileNotFoundError:
        return None
    except OSError as exc:
        raise ConfigError(f"config {path}: cannot read it: {exc.strerror or exc}") from None
    if len(text) > MAX_CONFIG_BYTES:
        raise ConfigError(f"config {path}: larger than {MAX_CONFIG_BYTES} bytes")
    try:
        data = json.loads(text)
    except (ValueError, RecursionError) as exc:
        raise ConfigError(f"config {path}: not valid JSON: {exc}") from None
    if not isinstance(data, dict):
        raise ConfigError(f"config {path}: must hold a JSON object")
    return data


def load_config(path: Path | None = None, *, check_access: bool = True) -> AgentConfig | None:
    """Read the config; None if the file does not exist. Raises `ConfigError` naming the file.

    ``check_access=False`` skips `check_config_access`: for a caller that only
    reports what the file says, such as root reading the service user's config.
    """
    path = path or config_path()
    data = read_config_data(path)
    if data is None:
        return None
    if check_access:
        check_config_access(path, held_secrets(data))
    try:
        return AgentConfig.model_validate(data).read_from(path)
    except ValidationError as exc:
        raise ConfigError(f"config {path}: {describe_config_error(exc)}") from None


def save_config(config: AgentConfig, path: Path | None = None, drop: tuple[str, ...] = ()) -> AgentConfig:
    """Merge the fields ``config`` sets into the file and write it atomically.

    Creates the directory (0700) if needed; the file is 0600. Keys already in
    the file that ``config`` does not set are kept, but for the fields named in ``drop``.
    Returns the merged config.
    Raises `ConfigError` if the existing file is unreadable or the result invalid.
    """
    path = path or config_path()
    merged = read_config_data(path) or {}
    for field in drop:
        merged.pop(to_camel(field), None)
    merged.update(config.model_dump(mode="json", by_alias=True, exclude_unset=True))
    try:
        result = AgentConfig.model_validate(merged)
    except ValidationError as exc:
        raise ConfigError(f"config {path}: {describe_config_error(exc)}") from None
    ensure_private_dir(path.parent)
    write_atomically(path, json.dumps(merged, indent=2, sort_keys=True) + "\n")
    return result.read_from(path)


def ensure_private_dir(directory: Path) -> None:
    """Create ``directory`` (mode 0700) if it is missing; an existing one is left as it is."""
    if directory.is_dir():
        return
    directory.mkdir(parents=True, mode=CONFIG_DIR_MODE, exist_ok=True)
    os.chmod(directory, CONFIG_DIR_MODE)  # mkdir's mode is filtered by the umask


def write_atomically(path: Path, text: str) -> None:
    """Write ``text`` to ``path`` (mode 0600) through a temp file and `os.replace`."""
    descriptor, temp_name = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        with os.fdopen(descriptor, "w", encoding="utf-8") as file:
            os.fchmod(file.fileno(), CONFIG_FILE_MODE)
            file.write(text)
            file.flush()
            os.fsync(file.fileno())
        os.replace(temp_name, path)
    except BaseException:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(temp_name)
        raise


def held_secrets(data: dict[str, Any]) -> list[str]:
    """What in the config's raw ``data`` others must not read, in words ("a private key", ...)."""
    return [words for key, words in SECRET_FIELDS.items() if data.get(key)]


def check_config_access(path: Path, secrets: list[str]) -> None:
    """Refuse a config others could change; warn when others could read the ``secrets`` it holds.

    Whoever can rewrite the file (or replace it, through its directory) can
    point this agent at a hub of their own and widen ``allowedPaths``, and so
    read what the agent's user may read: the file and its directory must be
    owned by this user or root and writable by nobody else (a sticky
    directory, like /tmp, is fine). As ssh does with its keys.
    """
    try:
        file_stat, dir_stat = path.stat(), path.parent.stat()
    except OSError:
        return
    uid = os.geteuid()
    for target, info, sticky_is_enough in ((path, file_stat, False), (path.parent, dir_stat, True)):
        what = f"config {path}" if target == path else f"the config's directory {target}"
        mode = stat.S_IMODE(info.st_mode)
        if info.st_uid not in (uid, 0):
            raise ConfigError(
                f"{what} belongs to uid {info.st_uid}, not to this user (uid {uid}) or root, "
                f"who could point this agent at another hub; run `chown {uid} {target}`"
            )
        if mode & 0o022 and not (sticky_is_enough and mode & stat.S_ISVTX):
            raise ConfigError(
                f"{what} has mode {mode:o}: others can change it, and so point this agent at "
                f"another hub; run `chmod go-w {target}`"
            )
    mode = stat.S_IMODE(file_stat.st_mode)
    if mode & 0o077 and secrets:
        held = " and ".join(secrets)
        log.warning("config %s has mode %o; it holds %s, run `chmod 600 %s`", path, mode, held, path)
