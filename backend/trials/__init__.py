"""Strategy trials: short measured runs of ZeRO stage x offload x micro-batch on the user's own script, ranked by
step time and peak memory, the fastest that leaves room to spare made a preset.

    spec = plan_trial(TrialOptions(script="train.py", stages="2,3"), base_preset(preset, None))
    folder = create_trial(spec)                 # writes trials/ID and starts the detached driver
    state = folder.state()                      # the results so far; trial_json(state), winner_lines(state)
"""

import lazy_loader

# The face: every name below is declared, with its module, in __init__.pyi (what type checkers read) and imported
# on first use, so importing one module of the package never loads the rest.
__getattr__, __dir__, __all__ = lazy_loader.attach_stub(__name__, __file__)
