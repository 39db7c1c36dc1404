"""What every floor of the backend stands on: atomic private files (`fileio`), masking secrets in argv, environments
and text (`masking`), where traindeck keeps its files (`paths`), reading /proc (`procfs`), durations said in
words (`durations`) and byte counts (`sizes`)."""

import lazy_loader

# The face: every name below is declared, with its module, in __init__.pyi (what type checkers read) and imported
# on first use, so importing one module of the package never loads the rest.
__getattr__, __dir__, __all__ = lazy_loader.attach_stub(__name__, __file__)
