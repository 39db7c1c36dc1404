"""The batch script of a Slurm run: `#SBATCH` options, then `srun` starting the launcher once per node.

Shaped like accelerate's own Slurm example (huggingface/accelerate examples/slurm/submit_multinode.sh at commit
5f07a9cdc2bb7e1bb20990411099c5f11378e504: one task per node, the head node from `scontrol show hostnames`, the
launcher told the machine count and the head node's address) and DeepSpeed's runner without SSH (`--no_ssh
--node_rank`, deepspeed/launcher/runner.py), read for this and not copied. The launcher's own argv is the one the
local plan would run, shell-quoted with shlex; only the per-node values ($SLURM_NODEID, the head node) are left
for the shell. sbatch's --export=ALL carries the submitting environment; the script sets one variable of its own,
TRAINDECK_LINE_FORWARDER=1 unless the user set it: srun passes a task's output on in whole lines, so the run's
sitecustomize turns a progress bar's carriage-return redraws into lines.
"""

from __future__ import annotations

import re
import shlex
import sys
from dataclasses import dataclass, replace
from pathlib import Path

from traindeck.backend.launch.plan import LaunchPlan

SCRIPT_NAME = "slurm-job.sh"
OUTPUT_PATTERN = "slurm-%j.out"  # in the run directory: it must be on a filesystem the compute nodes share
_NAME = re.compile(r"^[A-Za-z0-9_.+-]{1,128}$")
_TIME = re.compile(r"^(\d+-)?\d{1,3}(:\d{2}){0,2}$")  # Slurm's forms: MM, MM:SS, HH:MM:SS, D-HH[:MM[:SS]]
_MEM = re.compile(r"^\d+[KMGT]?$", re.IGNORECASE)


@dataclass(frozen=True)
class SlurmOptions:
    partition: str | None = None
    nodes: int = 1
    gpus_per_node: int | None = None
    time: str | None = None  # HH:MM:SS (any of Slurm's forms)
    account: str | None = None
    mem: str | None = None  # per node, as sbatch --mem takes it: 500M, 16G

    def problems(self) -> list[str]:
        """What sbatch would refuse, or what would let text into the script's #SBATCH lines; one line each."""
        found = []
        for label, value in (("--partition", self.partition), ("--account", self.account)):
            if value is not None and not _NAME.match(value):
                found.append(f"{label} {value!r}: letters, digits and _.+- only")
        if self.nodes < 1:
            found.append(f"--nodes must be at least 1, not {self.nodes}")
        if self.gpus_per_node is not None and self.gpus_per_node < 0:
            found.append(f"--gpus-per-node must be 0 or more, not {self.gpus_per_node}")
        if self.time is not None and not _TIME.match(self.time):
            found.append(f"--time {self.time!r}: give HH:MM:SS (or D-HH:MM:SS)")
        if self.mem is not None and not _MEM.match(self.mem):
            found.append(f"--mem {self.mem!r}: a size such as 500M or 16G")
        return found

    def sbatch_lines(self, output: str, job_name: str) -> list[str]:
        lines = [f"--job-name={job_name}", f"--output={output}", "--open-mode=append",
                 f"--nodes={self.nodes}", "--ntasks-per-node=1"]
        if self.partition:
            lines.append(f"--partition={self.partition}")
        if self.account:
            lines.append(f"--account={self.account}")
        if self.gpus_per_node:
            lines.append(f"--gpus-per-node={self.gpus_per_node}")
        if self.time:
            lines.append(f"--time={self.time}")
        if self.mem:
            lines.append(f"--mem={self.mem}")
        return lines


def launcher_argv(plan: LaunchPlan, options: SlurmOptions, run_dir: Path) -> tuple[list[str], list[str]]:
    """(the launcher's argv, shell-quoted words; problems). Several nodes: the launcher is told its node."""
    words = [shlex.quote(a) for a in plan.argv]
    if options.nodes == 1:
        return words, []
    per_node = options.gpus_per_node or plan.nproc
    port = str(plan.master_port or 29500)
    module = plan.argv[2] if len(plan.argv) > 2 and plan.argv[1] == "-m" else ""
    at = 3  # right after `python -m <launcher module>`: the launcher's options, before the script
    if module == "accelerate.commands.launch":
        # torchrun on each node for a DeepSpeed config too: accelerate's default there is DeepSpeed's pdsh runner,
        # which srun would start on every node, each reaching every node, and whose SIGTERM (scancel) makes it
        # `pkill -f` every DeepSpeed launcher of this Python on them, other jobs' included.
        extra = ["--num_machines", '"$SLURM_NNODES"', "--num_processes", f'"$((SLURM_NNODES * {per_node}))"',
                 "--rdzv_backend", "c10d", "--main_process_ip", '"$head_node"', "--main_process_port", port,
                 "--deepspeed_multinode_launcher", "standard"]
    elif module == "deepspeed.launcher.runner":
        extra = ["--hostfile", shlex.quote(str(run_dir / "slurm-hostfile")), "--no_ssh",
                 "--node_rank", '"$SLURM_NODEID"', "--master_addr", '"$head_node"']
    else:
        return words, [f"--nodes {options.nodes}: the {plan.launcher} launcher starts processes on one machine; "
                       "use --launcher accelerate or deepspeed for several nodes"]
    return words[:at] + extra + words[at:], []


def batch_script(plan: LaunchPlan, options: SlurmOptions, run_dir: Path, run_id: str, job_name: str) -> str:
    words, _ = launcher_argv(plan, options, run_dir)
    output = str(run_dir / OUTPUT_PATTERN)
    header = [f"#SBATCH {line}" for line in options.sbatch_lines(output, job_name)]
    body = [
        "#!/bin/bash",
        f"# traindeck run {run_id}: submitted with `sbatch --export=ALL` (the environment is not written here but for"
        " TRAINDECK_LINE_FORWARDER below).",
        *header,
        "",
        "# The first node of the allocation is where the ranks meet.",
        'head_node=$(scontrol show hostnames "$SLURM_JOB_NODELIST" | head -n 1)',
    ]
    if options.nodes > 1 and plan.launcher == "deepspeed":
        slots = options.gpus_per_node or plan.nproc
        body.append(f'scontrol show hostnames "$SLURM_JOB_NODELIST" | sed "s/$/ slots={slots}/" > '
                    f"{shlex.quote(str(run_dir / 'slurm-hostfile'))}")
    body += [
        f"cd {shlex.quote(plan.cwd)} || exit 1",
        "# Slurm passes output on in whole lines: progress-bar redraws become lines (the run's sitecustomize).",
        'export TRAINDECK_LINE_FORWARDER="${TRAINDECK_LINE_FORWARDER:-1}"',
        "# One task per node; --kill-on-bad-exit ends every node's launcher when one fails.",
        "srun --kill-on-bad-exit=1 " + " ".join(words),
        "",
    ]
    return "\n".join(body)


def slurm_plan(plan: LaunchPlan, options: SlurmOptions, store_path: Path) -> LaunchPlan:
    """The local plan turned into a Slurm run: its batch script among the run's files, the job follower as the
    process the supervisor starts. Problems come back as the plan's errors (nothing is submitted then)."""
    run_dir = Path(plan.run_dir)
    errors = list(plan.errors) + options.problems()
    errors += launcher_argv(plan, options, run_dir)[1]
    if getattr(sys, "frozen", False):
        errors.append("--slurm needs traindeck installed as a Python package (the job follower runs as "
                      "`python -m`), not the single-file app")
    job_name = f"traindeck-{run_dir.name}"
    files = dict(plan.files)
    files[SCRIPT_NAME] = batch_script(plan, options, run_dir, run_dir.name, job_name)
    follower = [sys.executable, "-m", "traindeck.backend.slurm.job_follower", str(run_dir), str(store_path)]
    warnings = list(plan.warnings)
    warnings.append(f"Slurm: the job runs `{plan.argv[0]}` and writes into {run_dir} on the compute nodes: both "
                    "must be the same paths there (a shared filesystem)")
    return replace(plan, argv=follower, files=files, errors=errors, warnings=warnings)
