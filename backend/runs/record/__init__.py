"""A run's record: its directory (`layout`), the run store (`run_store`, SQLite; rebuilt from the run folders
when found corrupt or emptied: `store_rebuild`, `folder_record`), metric series kept in bounded
memory (`series`), where it came from (`provenance`, `provenance_diff`), the checkpoints it left (`checkpoints`),
its TensorBoard scalars (`tensorboard`), what it was launched with (`launch_settings`), its output read back as
lines (`log_follow`), the companion's save-then-stop protocol (`savestop`) and the bug-report zip (`bundle`)."""
