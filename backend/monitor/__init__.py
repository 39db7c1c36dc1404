"""Live resources: GPUs through NVML, the host and a run's process tree through psutil, recorded with each run.

Modules, each usable alone:
- `snapshots`: the frozen, timestamped values every sampler returns (`None` where a device cannot tell).
- `loop`: `Collector`, the start/stop/context-manager base with a drift-free sampling loop.
- `nvml`: `NvmlLibrary` (the only code that calls pynvml) and `GpuSampler` (PCIe read on its own thread).
- `host`: `HostSampler` (CPU, RAM, swap, disks, network) and `block_device_for_path`.
- `processes`: `RunProcessSampler` (every process under a run's launcher, with ranks found by environment).
- `sampler`: `ResourceSampler`, one call that takes all three and ties GPU memory to the run's processes.
- `store` / `recorder` / `offload`: the run store's resource tables, `RunResourceRecorder`, and the readers
  `read_series`, `resource_summary`, `offload_view`.

This package never imports Qt; pynvml is imported only when a GPU sampler opens.
"""
