"""Typed accelerate / DeepSpeed / FSDP configs: load with positions, validate, repair, render.

The user's document (a plain dict, exactly as loaded) is the source of truth: it round-trips unchanged,
unknown keys included. The pydantic models in `accelerate_schema` and `deepspeed_schema` describe what each
key means (help text, allowed values, ranges) and are used to validate and to build forms, never to rewrite
the user's data.
"""
