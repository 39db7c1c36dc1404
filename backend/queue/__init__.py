"""The queue of unattended runs: waiting runs in the run store, and the detached process that starts them."""

import lazy_loader

# The face: every name below is declared, with its module, in __init__.pyi (what type checkers read) and imported
# on first use, so importing one module of the package never loads the rest.
__getattr__, __dir__, __all__ = lazy_loader.attach_stub(__name__, __file__)
