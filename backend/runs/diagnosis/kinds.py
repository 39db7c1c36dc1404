"""The words a run's ending is told in: what kind of ending (Diagnosis.kind) and which memory ran out
(Diagnosis.memory). A leaf, so the failure patterns (failures.py) and the diagnosis (diagnosis.py) share them."""

from __future__ import annotations

from typing import Literal, get_args

# The Runs page and `runs show` pick their wording and advice by the kind.
DiagnosisKind = Literal[
    "succeeded", "stopped", "start_failed", "lost", "host_oom", "cgroup_oom", "cpu_alloc", "cuda_oom",
    "collective_timeout", "peer_lost", "port_in_use", "missing_module", "deepspeed_batch_size", "config_error",
    "exception", "killed", "exit_code", "loss_scale", "op_build", "segfault", "disk_full", "package_version",
    "local_rank_arg", "signalled_from_outside",
]
KINDS: tuple[DiagnosisKind, ...] = get_args(DiagnosisKind)
MemoryKind = Literal["", "host", "cgroup", "cuda"]  # "" = not memory
# What a failure line in a rank's output is: a diagnosis kind, or the launcher's own summary of a failed rank
# (torchrun's ChildFailedError), which only ever points at another rank's cause.
ErrorKind = DiagnosisKind | Literal["launcher_summary"]
