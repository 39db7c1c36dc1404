"""Another machine's traindeck over SSH: `traindeck --host USER@MACHINE ...` and the dashboard's remote source.

Nothing listens on a port of ours: every call is an `ssh` process (argv list, BatchMode, the user's ssh config) that
runs the remote machine's own `traindeck` and reads what it prints (its --json outputs for the dashboard).
"""

import lazy_loader

# The face: every name below is declared, with its module, in __init__.pyi (what type checkers read) and imported
# on first use, so importing one module of the package never loads the rest.
__getattr__, __dir__, __all__ = lazy_loader.attach_stub(__name__, __file__)
