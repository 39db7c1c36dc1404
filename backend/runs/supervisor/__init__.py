"""The supervisor: the one detached process that owns a run, and the small processes beside it.

- `process`: the supervisor itself (`python -m traindeck.backend.runs.supervisor.process RUN_DIR`): starts the
  launcher, drains its output, samples resources, watches for stalls, stops the run on request and writes its end.
- `stop_sequence`, `run_end`, `tracking`, `output_drain`, `exits`: the parts it holds: the stop (signals and their
  escalation), the end (nothing left behind, the diagnosis), the run's processes and ranks, the output path
  (pipe -> output.log -> progress and metrics), and how each process ended; `instructions`: what it is told at its
  start and the run store it writes through.
- `liveness`: whether a run's supervisor is still there, and the end of a run whose supervisor is gone.
- `run_cgroup`: the run's own cgroup v2, which holds every process the launcher starts: listed, killed and
  confirmed empty through it, by the supervisor and, once it is gone, by whoever ends the lost run.
- `sidecar`, `sentinel`, `node_sampler`, `beside`: the processes started beside it (provenance and TensorBoard
  reads; the last-resort stop after a killed supervisor; the per-node agents of a multi-node run).
- `alerts`, `loss_guard`, `node_diagnosis`, `shm_leftovers`, `diary`: the user's alert command, NaN/spike loss
  events, what the nodes saw, DeepSpeed's shared-memory leftovers, the supervisor's own log.
"""
