"""The queue of unattended runs: waiting runs in the run store, and the detached process that starts them."""
