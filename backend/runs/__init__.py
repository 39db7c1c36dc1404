"""Runs: a detached supervisor per run, the run's record, its diagnosis, and the clients that start and stop it.

Start a run:  launch_run(request, store)   (or new_run_dir(); build_plan(request, run_dir.path); start_run(...))
Watch it:     RunStore().get_run(id), WatchedRun(id).poll(...), follow_lines(run_dir.output, ...)
Stop it:      stop_run(store, id, grace_s)

Subpackages: supervisor/ (the process that owns a run), record/ (what a run is and leaves), diagnosis/ (why it
ended, stalled or slowed), control/ (the supervisor's clients), demo/ (runs that never ran); processes.py finds and
signals a run's processes.
"""

import lazy_loader

# The face: every name below is declared, with its module, in __init__.pyi (what type checkers read) and imported
# on first use, so importing one module of the package never loads the rest.
__getattr__, __dir__, __all__ = lazy_loader.attach_stub(__name__, __file__)
