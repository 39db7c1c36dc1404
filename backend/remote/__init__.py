"""Another machine's traindeck over SSH: `traindeck --host USER@MACHINE ...` and the dashboard's remote source.

Nothing listens on a port of ours: every call is an `ssh` process (argv list, BatchMode, the user's ssh config) that
runs the remote machine's own `traindeck` and reads what it prints (its --json outputs for the dashboard).
"""
