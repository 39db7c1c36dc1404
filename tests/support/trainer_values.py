"""Values as a Trainer logs them to TensorBoard, shared by the tests of exact values (live and after a store rebuild)."""

from __future__ import annotations

import struct

# Losses as a Trainer logs them: full precision, two neighbours that print alike (3.23) but differ exactly.
LOSSES = [3.2518253326416016, 3.225397825241089, 3.2338528633117676, 3.2384281158447266, 3.2304599285125732,
          3.2304627895355225]
LRS = [5e-05, 4.1666666666666665e-05, 3.3333333333333335e-05, 2.5e-05, 1.6666666666666667e-05,
       8.333333333333334e-06]


def f32(value: float) -> float:
    """`value` as TensorBoard stores it (float32)."""
    return float(struct.unpack("f", struct.pack("f", value))[0])
