"""Why a run ended, stalled or slowed: the diagnosis of an end from its evidence (`diagnose`, `evidence`,
`failures`, `kinds`, `cgroups`, `scheduler_end`), a run gone quiet (`stall`, `op_builds`), and every rank's Python
stack (`stacks`)."""
