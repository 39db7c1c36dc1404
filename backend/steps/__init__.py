"""Inside the step: each rank's step phases and memory, read from the ranks' side channel; what bounds the run.

Modules:
- `records`: `StepRecord` (one step of one rank) and `HookReport` (what a rank's timing attached to), read from
  the lines the run's site hook writes;
- `side_channel`: `StepFiles`, the bounded incremental reader of <run dir>/steps/rank<R>.jsonl;
- `anatomy`: `analyse` -> `StepAnatomy` (per-rank medians, slowest rank, bound, slowdown);
- `advice`: `RunFacts` and the rules (from DeepSpeed's and PyTorch's docs) behind the verdict and its advice;
- `report`: the text table of `traindeck steps`.

The writer lives in launch/site_hook (it runs inside the user's interpreter, standard library only).
This package never imports Qt, torch or DeepSpeed.
"""

import lazy_loader

__getattr__, __dir__, __all__ = lazy_loader.attach_stub(__name__, __file__)
