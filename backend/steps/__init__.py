"""Inside the step: each rank's step phases and memory, read from the ranks' side channel; what bounds the run.

Modules:
- `records`: `StepRecord` (one step of one rank) and `HookReport` (what a rank's timing attached to), read from
  the lines the run's site hook writes;
- `side_channel`: `StepFiles`, the bounded incremental reader of <run dir>/steps/rank<R>.jsonl, and
  `RelayedSteps`, the writer of the lines the node agents send back from ranks on other machines;
- `anatomy`: `StepAnatomy`, `RankAnatomy` (per-rank typical steps, peaks), the bounds, the slow-down;
- `facts`: `RunFacts`, what the run's set-up says (its DeepSpeed config, cores, estimate, FSDP), and `fsdp_of`;
- `memory`: per-rank GPU memory verdicts (fragmentation, estimate against the measured peak) from the step records
  or from DeepSpeed's MA/CA lines and torch's OOM message;
- `advice`: the one-line verdict and the rules (from DeepSpeed's and PyTorch's docs) behind the advice;
- `verdict`: `analyse` -> `StepAnatomy`: the anatomy with its bound, summary and advice;
- `report`: the text table of `traindeck steps`.

The writer lives in launch/site_hook (it runs inside the user's interpreter, standard library only).
This package never imports Qt, torch or DeepSpeed.
"""

import lazy_loader

__getattr__, __dir__, __all__ = lazy_loader.attach_stub(__name__, __file__)
