"""Runs: a detached supervisor per run, the run directory, the run store, stop and diagnosis.

Start a run:  run_dir = new_run_dir(); plan = build_plan(request, run_dir.path); start_run(plan, run_dir, ...)
Watch it:     RunStore().get_run(id), follow_lines(run_dir.output, ...)
Stop it:      stop_run(store, id, grace_s)
"""
