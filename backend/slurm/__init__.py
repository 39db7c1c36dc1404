"""Runs submitted to a Slurm cluster (`traindeck run --slurm`).

The run is an ordinary supervised run whose "launcher" is the job follower (follow.py): it submits the batch
script (script.py) with sbatch, copies the job's output file to its own stdout (so the supervisor's usual output
pump, parser, progress and stall watch see the job's output), shows squeue's state and reason as the run's status,
turns a stop into scancel and, at the end, reads the job's end from sacct or scontrol (ended.py) into the file the
diagnosis reads. Nothing here runs on the compute nodes except what the batch script itself starts.
"""

import lazy_loader

# The face: every name below is declared, with its module, in __init__.pyi (what type checkers read) and imported
# on first use, so importing one module of the package never loads the rest.
__getattr__, __dir__, __all__ = lazy_loader.attach_stub(__name__, __file__)
