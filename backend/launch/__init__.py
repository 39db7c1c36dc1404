"""Pure builders: (preset or config, script, args, env) -> a LaunchPlan. Nothing here starts a process."""
