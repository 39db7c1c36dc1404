"""Which GPUs a run uses, as NVML UUIDs: from the GPUs that list its processes and from its ranks'
CUDA_VISIBLE_DEVICES, never by taking CUDA's device numbers for NVML's indexes (NVML's documentation: the two
orders may differ).

CUDA_VISIBLE_DEVICES holds UUIDs (or unique prefixes of them: "GPU-8f2c") or numbers. A number counts in CUDA's
order: by PCI bus id under CUDA_DEVICE_ORDER=PCI_BUS_ID; under the default FASTEST_FIRST fastest first, which for
GPUs of one model is PCI bus order again. Mixed models under FASTEST_FIRST, and MIG instances, cannot be placed
from NVML's side: the answer is then "cannot tell" and the run's figures cover every GPU (and say so).
"""

from __future__ import annotations

from collections.abc import Iterable

from traindeck.backend.monitor.snapshots import GpuSnapshot, RunSnapshot


def map_visible_devices(value: str, gpus: Iterable[GpuSnapshot], order: str | None = None) -> frozenset[str] | None:
    """UUIDs of the GPUs one CUDA_VISIBLE_DEVICES value makes visible, or None where they cannot be told."""
    known = [g for g in gpus if g.uuid]
    by_bus = sorted(known, key=lambda g: (g.pci_bus_id or "", g.index))
    out: set[str] = set()
    for entry in (e.strip() for e in value.split(",")):
        if not entry:
            break  # CUDA stops at the first entry it cannot use
        if entry.startswith("MIG-"):
            return None
        if entry.startswith("GPU-"):
            matches = [g.uuid for g in known if g.uuid and g.uuid.startswith(entry)]
            if len(matches) != 1:
                break
            out.add(matches[0])
            continue
        try:
            number = int(entry)
        except ValueError:
            break
        if number < 0 or number >= len(by_bus):
            break
        same_model = len({g.name for g in known}) <= 1
        if order != "PCI_BUS_ID" and not same_model:
            return None
        if any(g.pci_bus_id is None for g in known):
            return None
        uuid = by_bus[number].uuid
        assert uuid is not None
        out.add(uuid)
    return frozenset(out)


def run_gpus(gpus: tuple[GpuSnapshot, ...], run: RunSnapshot | None) -> tuple[str, ...] | None:
    """UUIDs of the GPUs the run uses (sorted), or None when that cannot be told."""
    if run is None or not gpus:
        return None
    pids = {p.pid for p in run.processes}
    found = {g.uuid for g in gpus if g.uuid and any(p.pid in pids for p in g.processes) and g.processes_unknown is None}
    told = bool(found)
    ranks = run.ranks
    values = {(p.cuda_visible_devices, p.cuda_device_order) for p in ranks if p.cuda_visible_devices is not None}
    if values:
        for value, order in values:
            mapped = map_visible_devices(value, gpus, order)
            if mapped is None:
                return tuple(sorted(found)) if found else None
            found |= mapped
            told = True
    return tuple(sorted(found)) if told else None
