"""Hardware summary: CPU model and topology, memory size, virtualisation, DMI, PCI and USB.

The CPU comes from ``lscpu -J`` (flat in util-linux 2.38, nested under
``children`` in later versions: `flatten_lscpu` handles both), or from
/proc/cpuinfo when lscpu is missing. DMI, PCI and USB come from sysfs, which any
user may read (only serial numbers are root-only, and those are not read).
"""

from __future__ import annotations

import json
import os
from collections.abc import Iterable
from pathlib import Path
from typing import Any

import psutil

from sonde.packs.base import NoParams, ProbeUnavailable, Result
from sonde.packs.context import ProbeContext
from sonde.packs.system import PACK

SYSFS = Path("/sys")
DMI_FIELDS = ("sys_vendor", "product_name", "product_version", "board_vendor", "board_name", "bios_version")
DEVICES_MAX = 200


class CpuSummary(Result):
    model_name: str | None
    vendor: str | None
    architecture: str | None
    logical_cpus: int | None
    sockets: int | None
    cores_per_socket: int | None
    threads_per_core: int | None
    max_mhz: float | None
    hypervisor_vendor: str | None
    virtualization_type: str | None
    hardware_virtualization: str | None = None  # VT-x / AMD-V offered to guests
    source: str


class PciDevice(Result):
    address: str
    vendor_id: str
    device_id: str
    class_id: str
    driver: str | None


class UsbDevice(Result):
    name: str
    vendor_id: str
    product_id: str
    manufacturer: str | None
    product: str | None


class HardwareSummary(Result):
    cpu: CpuSummary
    memory_total_bytes: int
    swap_total_bytes: int
    virtualized: bool
    dmi: dict[str, str]
    pci_devices: list[PciDevice]
    usb_devices: list[UsbDevice]
    truncated: bool


def flatten_lscpu(entries: Iterable[dict[str, Any]]) -> dict[str, str]:
    """``lscpu -J`` rows as ``{"Model name": "...", ...}`` (nested children included)."""
    fields: dict[str, str] = {}
    for entry in entries:
        name = str(entry.get("field", "")).rstrip(":").strip()
        if name and entry.get("data") is not None:
            fields.setdefault(name, str(entry["data"]))
        fields.update({k: v for k, v in flatten_lscpu(entry.get("children", [])).items() if k not in fields})
    return fields


def _int(text: str | None) -> int | None:
    try:
        return int(text) if text is not None else None
    except ValueError:
        return None


def _float(text: str | None) -> float | None:
    try:
        return float(text) if text is not None else None
    except ValueError:
        return None


def cpu_from_lscpu(document: dict[str, Any]) -> CpuSummary:
    fields = flatten_lscpu(document.get("lscpu", []))
    return CpuSummary(
        model_name=fields.get("Model name"),
        vendor=fields.get("Vendor ID"),
        architecture=fields.get("Architecture"),
        logical_cpus=_int(fields.get("CPU(s)")),
        sockets=_int(fields.get("Socket(s)")),
        cores_per_socket=_int(fields.get("Core(s) per socket")),
        threads_per_core=_int(fields.get("Thread(s) per core")),
        max_mhz=_float(fields.get("CPU max MHz")),
        hypervisor_vendor=fields.get("Hypervisor vendor"),
        virtualization_type=fields.get("Virtualization type"),
        hardware_virtualization=fields.get("Virtualization"),
        source="lscpu",
    )


def parse_cpuinfo(text: str) -> list[dict[str, str]]:
    """/proc/cpuinfo as one dict per logical CPU."""
    cpus: list[dict[str, str]] = []
    for block in text.strip().split("\n\n"):
        fields = {}
        for line in block.splitlines():
            key, sep, value = line.partition(":")
            if sep:
                fields[key.strip()] = value.strip()
        if fields:
            cpus.append(fields)
    return cpus


def cpu_from_cpuinfo(text: str, architecture: str | None) -> CpuSummary:
    cpus = parse_cpuinfo(text)
    first = cpus[0] if cpus else {}
    sockets = {cpu.get("physical id") for cpu in cpus if "physical id" in cpu}
    cores = _int(first.get("cpu cores"))
    siblings = _int(first.get("siblings"))
    flags = first.get("flags", "").split()
    hw_virt = "VT-x" if "vmx" in flags else "AMD-V" if "svm" in flags else None
    return CpuSummary(
        model_name=first.get("model name") or first.get("Model") or first.get("cpu model"),
        vendor=first.get("vendor_id") or first.get("CPU implementer"),
        architecture=architecture,
        logical_cpus=len(cpus) or None,
        sockets=len(sockets) or None,
        cores_per_socket=cores,
        threads_per_core=siblings // cores if siblings and cores else None,
        max_mhz=None,
        hypervisor_vendor="unknown" if "hypervisor" in flags else None,
        virtualization_type="full" if "hypervisor" in flags else None,
        hardware_virtualization=hw_virt,
        source="/proc/cpuinfo",
    )


def _read(path: Path) -> str | None:
    try:
        return path.read_text().strip()
    except OSError:
        return None


def read_dmi(sysfs: Path = SYSFS) -> dict[str, str]:
    found = {name: _read(sysfs / "class/dmi/id" / name) for name in DMI_FIELDS}
    return {name: value for name, value in found.items() if value}


def read_pci(sysfs: Path = SYSFS) -> list[PciDevice]:
    root = sysfs / "bus/pci/devices"
    devices = []
    for device in sorted(root.iterdir()) if root.is_dir() else []:
        driver = device / "driver"
        devices.append(
            PciDevice(
                address=device.name,
                vendor_id=_read(device / "vendor") or "",
                device_id=_read(device / "device") or "",
                class_id=_read(device / "class") or "",
                driver=driver.resolve().name if driver.exists() else None,
            )
        )
    return devices


def read_usb(sysfs: Path = SYSFS) -> list[UsbDevice]:
    root = sysfs / "bus/usb/devices"
    devices = []
    for device in sorted(root.iterdir()) if root.is_dir() else []:
        vendor = _read(device / "idVendor")
        if vendor is None:  # an interface, not a device
            continue
        devices.append(
            UsbDevice(
                name=device.name,
                vendor_id=vendor,
                product_id=_read(device / "idProduct") or "",
                manufacturer=_read(device / "manufacturer"),
                product=_read(device / "product"),
            )
        )
    return devices


async def _cpu(ctx: ProbeContext) -> CpuSummary:
    try:
        output = await ctx.run(["lscpu", "-J"])
        if output.returncode == 0:
            return cpu_from_lscpu(json.loads(output.stdout))
    except (ProbeUnavailable, json.JSONDecodeError):
        pass  # no lscpu, or an lscpu without -J: fall back to /proc/cpuinfo
    text = await ctx.in_thread(Path("/proc/cpuinfo").read_text)
    return cpu_from_cpuinfo(text, os.uname().machine)


def _devices() -> tuple[dict[str, str], list[PciDevice], list[UsbDevice]]:
    return read_dmi(), read_pci(), read_usb()


@PACK.probe(
    "system.hardware.summary",
    """Hardware of this machine: CPU model, vendor, architecture, logical CPUs, sockets,
    cores per socket, threads per core, max MHz, hypervisor vendor and virtualisation type
    (from lscpu, else /proc/cpuinfo), total RAM and swap in bytes, DMI vendor/product/board/
    BIOS, and PCI devices (vendor/device/class ids, driver) and USB devices from sysfs (at
    most 200 each). Use it for 'what hardware is this', 'is this a VM'.""",
    timeout_s=10,
)
async def hardware_summary(ctx: ProbeContext, params: NoParams) -> HardwareSummary:
    cpu = await _cpu(ctx)
    dmi, pci, usb = await ctx.in_thread(_devices)
    return HardwareSummary(
        cpu=cpu,
        memory_total_bytes=psutil.virtual_memory().total,
        swap_total_bytes=psutil.swap_memory().total,
        virtualized=cpu.hypervisor_vendor is not None,
        dmi=dmi,
        pci_devices=pci[:DEVICES_MAX],
        usb_devices=usb[:DEVICES_MAX],
        truncated=len(pci) > DEVICES_MAX or len(usb) > DEVICES_MAX,
    )
