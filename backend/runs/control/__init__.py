"""The supervisor's clients: starting a run (`new_run`, `lifecycle`), stopping it (`lifecycle`), starting it again
(`resume`, `relaunch`), and what a viewer reads of runs (`view`, `watched_run`, `console_feed`, `history`,
`compare`, `lineage`, `leftbehind`, `node_report`, `alert_feed`). Nothing here waits on a run's processes: a run
belongs to its supervisor."""
