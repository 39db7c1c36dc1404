"""Live resources: GPUs through NVML, the host and a run's process tree through psutil, recorded with each run.

Modules, each usable alone:
- `snapshots`: the frozen, timestamped values every sampler returns (`None` where a device cannot tell).
- `loop`: `Collector`, the start/stop/context-manager base with a drift-free sampling loop.
- `nvml`: `NvmlLibrary`, the only code that calls pynvml (per-GPU handles and errors, versions, retried start).
- `gpu_processes`: process lists by the ABI the driver exports (v3 / v2 / v1, entry size), and the three answers
  (none, these PIDs, unknown with the reason) used by the end-of-run check.
- `gpu_sampler`: `GpuSampler` (placeholder per unreadable GPU; PCIe from counters, else sampled off-phase).
- `run_gpus`: the run's GPUs by UUID (CUDA_VISIBLE_DEVICES mapped in PCI bus order).
- `host`: `HostSampler` (CPU, RAM, swap, disks, network) and `block_device_for_path`.
- `processes`: `RunProcessSampler` (every process under a run's launcher, with ranks found by environment).
- `machine`: `MachineProcessSampler` (every process of the machine, htop's table: user, CPU, RSS, GPU memory, run)
  and `ProcessTable`, that table filtered and sorted for a viewer; `process_signals`: a person's signal to one of
  their own processes (or its tree), planned for a confirmation, then sent.
- `gpu_health`: each GPU's throttling, PCIe link, replays, ECC and XIDs; `kernel_log`: the kernel log's records and
  the GPU driver's XID lines in it; `health_strip`: health readings cut into time spans for the GPUs tab's strips.
- `sampler`: `ResourceSampler`, one call that takes all three (and, on request, the machine's processes) and ties
  GPU memory to the run's processes.
- `store` / `recorder` / `offload`: the run store's resource tables, `RunResourceRecorder`, and the readers
  `read_series`, `resource_summary`, `offload_view`.

This package never imports Qt; pynvml is imported only when a GPU sampler opens.
"""

import lazy_loader

# The face: every name below is declared, with its module, in __init__.pyi (what type checkers read) and imported
# on first use, so importing one module of the package never loads the rest.
__getattr__, __dir__, __all__ = lazy_loader.attach_stub(__name__, __file__)
