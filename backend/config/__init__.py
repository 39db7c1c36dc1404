"""Typed accelerate / DeepSpeed / FSDP configs: load with positions, validate, repair, render.

The user's document (a plain dict, exactly as loaded) is the source of truth: it round-trips unchanged,
unknown keys included. The pydantic models in `accelerate_schema` and `deepspeed_schema` describe what each
key means (help text, allowed values, ranges) and are used to validate and to build forms, never to rewrite
the user's data.
"""

import lazy_loader

# The face: every name below is declared, with its module, in __init__.pyi (what type checkers read) and imported
# on first use, so importing one module of the package never loads the rest.
__getattr__, __dir__, __all__ = lazy_loader.attach_stub(__name__, __file__)
