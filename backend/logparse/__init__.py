"""Launcher output -> lines, progress and metrics (no Qt, no torch; pure string work, safe to call in a hot loop).

    asm, parser = LineAssembler(), OutputParser()
    for chunk in pipe:                      # raw bytes, any chunking
        for line in asm.feed(chunk):        # Line(text, rank, transient)
            log(line); items = parser.feed(line)   # [Progress | Metric]
    for line in asm.flush(): ...            # the unterminated tail
    items = parser.flush()                  # a dict line held back for its exact step

Readers: `ConsoleBuffer` / `collapse_transient` turn lines into what a console shows.
Scripts: resources/pyhelpers/traindeck_report.py prints exact progress/metrics (`@traindeck {...}` lines).
"""

import lazy_loader

# The face: every name below is declared, with its module, in __init__.pyi (what type checkers read) and imported
# on first use, so importing one module of the package never loads the rest.
__getattr__, __dir__, __all__ = lazy_loader.attach_stub(__name__, __file__)
