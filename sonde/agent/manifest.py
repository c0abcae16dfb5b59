"""`sondage.manifest.json`: which packs and probes `sonde serve` exposes as tools.

    {"packs": ["system"], "probes": ["system.memory.*", "docker.container.*"]}

At least one of the two keys must be present and non-empty. ``packs`` names
installed packs (all their probes are exposed, detected here or not: the
manifest is an explicit choice); ``probes`` holds fnmatch globs over probe
names. The exposed set is the union. An unknown pack, a glob matching no
probe, an unknown key, a wrong type or invalid JSON is a `ManifestError`
whose message names the file.

Without a manifest, every probe of every pack detected on this machine is
exposed.
"""

from __future__ import annotations

import logging
from pathlib import Path

from pydantic import BaseModel, ConfigDict, StrictStr, ValidationError, model_validator

from sonde.packs.base import Detection, Pack
from sonde.packs.registry import PackRegistry

log = logging.getLogger(__name__)
MANIFEST_FILE_NAME = "sondage.manifest.json"
MAX_MANIFEST_BYTES = 1024 * 1024


class ManifestError(Exception):
    """The manifest is missing, unreadable or wrong; the message names the file."""


class Manifest(BaseModel):
    """The parsed manifest: pack names and probe-name globs."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    packs: tuple[StrictStr, ...] = ()
    probes: tuple[StrictStr, ...] = ()

    @model_validator(mode="after")
    def _names_something(self) -> Manifest:
        if not self.packs and not self.probes:
            raise ValueError("it must list at least one pack in 'packs' or one pattern in 'probes'")
        return self


def describe_manifest_error(exc: ValidationError) -> str:
    """The first few problems of a manifest, as ``where: what`` phrases."""
    parts = []
    for error in exc.errors()[:3]:
        where = ".".join(str(part) for part in error["loc"])
        parts.append(f"{where}: {error['msg']}" if where else error["msg"])
    return "; ".join(parts)


def read_manifest(path: Path) -> Manifest:
    """Read and validate the manifest at ``path``; raises `ManifestError`."""
    try:
        with path.open("rb") as file:
            text = file.read(MAX_MANIFEST_BYTES + 1)
    except FileNotFoundError:
        raise ManifestError(f"manifest {path}: file not found") from None
    except OSError as exc:
        raise ManifestError(f"manifest {path}: cannot read it: {exc.strerror or exc}") from None
    if len(text) > MAX_MANIFEST_BYTES:
        raise ManifestError(f"manifest {path}: larger than {MAX_MANIFEST_BYTES} bytes")
    try:
        return Manifest.model_validate_json(text)
    except ValidationError as exc:
        raise ManifestError(f"manifest {path}: {describe_manifest_error(exc)}") from None


def exposed_by_manifest(manifest: Manifest, registry: PackRegistry, path: Path) -> list[str]:
    """The probe names ``manifest`` selects from ``registry``, sorted; raises `ManifestError`."""
    names: set[str] = set()
    installed = ", ".join(registry.packs) or "none"
    for pack_name in manifest.packs:
        pack = registry.packs.get(pack_name)
        if pack is None:
            raise ManifestError(f"manifest {path}: unknown pack '{pack_name}' (installed: {installed})")
        if not pack_detection(pack).detected:
            log.warning("manifest %s exposes pack %r, which is not detected here", path, pack_name)
        names.update(probe.name for probe in pack.descriptor().probes)
    for pattern in manifest.probes:
        matched = registry.matching(pattern)
        if not matched:
            raise ManifestError(f"manifest {path}: probe pattern '{pattern}' matches no installed probe")
        names.update(matched)
    return sorted(names)


def pack_detection(pack: Pack) -> Detection:
    """``pack.detection()``, with a failing third-party detector reported as not detected."""
    try:
        return pack.detection()
    except Exception as exc:  # the boundary for a pack's own detection code
        log.exception("detection of pack %r failed", pack.name)
        return Detection(False, f"detection failed: {type(exc).__name__}: {exc}")


def detected_probe_names(registry: PackRegistry) -> list[str]:
    """Every probe of every pack detected on this machine, sorted (from the packs' descriptions:
    no probe module is imported)."""
    return sorted(
        probe.name
        for pack in registry.packs.values()
        if pack_detection(pack).detected
        for probe in pack.descriptor().probes
    )


def find_manifest(explicit: Path | None, cwd: Path) -> Path | None:
    """The manifest to use: ``explicit`` if given, else ./sondage.manifest.json if it exists."""
    if explicit is not None:
        return explicit
    default = cwd / MANIFEST_FILE_NAME
    return default if default.exists() else None


def select_tools(registry: PackRegistry, explicit: Path | None, cwd: Path) -> list[str]:
    """The probe names `sonde serve` exposes; raises `ManifestError` on a bad manifest."""
    path = find_manifest(explicit, cwd)
    if path is None:
        return detected_probe_names(registry)
    return exposed_by_manifest(read_manifest(path), registry, path)
