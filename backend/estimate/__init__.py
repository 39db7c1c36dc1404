"""Memory estimator and strategy advisor: pure arithmetic (no torch at import), DeepSpeed-exact model states.

    shape = shape_from_params(parse_count("7B"))            # or count_model_config("config.json") (child process)
    machine = describe_machine(gpu_mem_bytes=80 * GIB)      # detected where not given
    rows = estimate_rows(shape, machine, Workload(micro_batch=4, seq_len=2048))
    advice = advise(rows, workload)                          # -> Advice(row, reason, preset, settings, rejected)
    check_against_machine(row, free_gpu_bytes, available_host_bytes)   # before launch: warnings
    compare_with_measured(row, monitor_summary)                         # after a run: (what, est, measured, ratio)
"""

import lazy_loader

# The face: every name below is declared, with its module, in __init__.pyi (what type checkers read) and imported
# on first use, so importing one module of the package never loads the rest.
__getattr__, __dir__, __all__ = lazy_loader.attach_stub(__name__, __file__)
