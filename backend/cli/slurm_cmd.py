"""`traindeck run --slurm ...`: the run submitted to Slurm as a batch job (backend/slurm).

Adds its options to the `run` command (registered after run_cmd) and, with --slurm, hands `run` a plan wrapper:
the rest of `run` (presets, configs, the supervisor, following, `logs`, `stop`, `runs show`) is the same.
"""

from __future__ import annotations

import argparse
from typing import Any

from traindeck.backend.cli import UserError

ORDER = 31  # after run_cmd: extends its parser
_SLURM_ONLY = ("partition", "nodes", "gpus_per_node", "time", "account", "mem")


def register(sub: argparse._SubParsersAction) -> None:
    run = sub.choices.get("run")
    if run is None:
        return
    group = run.add_argument_group("Slurm", "submit the run as a Slurm batch job (sbatch; srun starts the launcher "
                                            "once per node); followed, stopped (scancel) and diagnosed like any run")
    group.add_argument("--slurm", action="store_true", help="submit to Slurm instead of starting here")
    group.add_argument("--partition", metavar="P", help="Slurm partition (default: the cluster's default)")
    group.add_argument("--nodes", type=int, metavar="N", help="nodes (one launcher per node; default 1)")
    group.add_argument("--gpus-per-node", type=int, metavar="G", help="GPUs per node (sbatch --gpus-per-node)")
    group.add_argument("--time", metavar="HH:MM:SS", help="the job's time limit")
    group.add_argument("--account", metavar="A", help="the account the job is charged to")
    group.add_argument("--mem", metavar="SIZE", help="memory per node (sbatch --mem: 500M, 64G)")
    run_handler = run.get_default("handler")
    run.set_defaults(handler=lambda args: _run(args, run_handler))


def _run(args: argparse.Namespace, run_handler: Any) -> int:
    given = [f"--{name.replace('_', '-')}" for name in _SLURM_ONLY if getattr(args, name, None) is not None]
    if not args.slurm:
        if given:
            raise UserError(f"{', '.join(given)} only applies with --slurm")
        return int(run_handler(args))
    for option, value in (("--sweep", args.sweep), ("--gpus", args.gpus)):
        if value:
            raise UserError(f"{option} cannot be used with --slurm (Slurm chooses the GPUs; use --gpus-per-node)")
    from traindeck.backend.core import run_store_path
    from traindeck.backend.slurm import SlurmOptions, slurm_plan

    options = SlurmOptions(partition=args.partition, nodes=args.nodes or 1, gpus_per_node=args.gpus_per_node,
                           time=args.time, account=args.account, mem=args.mem)
    problems = options.problems()
    if problems:
        raise UserError(problems[0])
    if args.gpus_per_node and args.nproc is None:
        args.nproc = args.gpus_per_node  # one rank per GPU on each node, as the launcher counts them
    store = run_store_path()
    args.wrap_plan = lambda plan: slurm_plan(plan, options, store)
    return int(run_handler(args))
