"""Model-state arithmetic against DeepSpeed's own estimators, without DeepSpeed: figures recorded from
`estimate_zero2_model_states_mem_needs` / `estimate_zero3_model_states_mem_needs` into
tests/fixtures/deepspeed_model_states.json (tests/fixtures/record_deepspeed_model_states.py re-records them).

The live comparison in test_estimate_model_states.py needs the train extra; this one runs in every `make test`,
so a change to the arithmetic is caught where torch and DeepSpeed are not installed.
"""

from __future__ import annotations

import json

from support import TESTS

from traindeck.backend.estimate.model_states import zero2_model_states, zero3_model_states

TABLE = json.loads((TESTS / "fixtures" / "deepspeed_model_states.json").read_text())


def test_the_table_covers_every_case_deepspeed_prints():
    assert len(TABLE["zero2"]) == 4 * 3 * 3 * 2 * 2
    assert len(TABLE["zero3"]) == 4 * 3 * 3 * 6 * 2
    assert {(r["cpu_offload"], r["cpu_offload_params"], r["zero_init"]) for r in TABLE["zero3"]} == {
        (True, True, True), (True, True, False), (True, False, True), (True, False, False), (False, False, True),
        (False, False, False)}


def test_zero2_is_byte_exact_with_the_recorded_deepspeed_figures():
    wrong = []
    for row in TABLE["zero2"]:
        mine = zero2_model_states(row["total"], row["gpus"], row["nodes"], cpu_offload=row["cpu_offload"],
                                  additional_buffer_factor=row["factor"])
        if mine != (row["cpu"], row["gpu"]):
            wrong.append((row, mine))
    assert not wrong, f"{len(wrong)} of {len(TABLE['zero2'])} rows differ, first: {wrong[0]}"


def test_zero3_is_byte_exact_with_the_recorded_deepspeed_figures():
    wrong = []
    for row in TABLE["zero3"]:
        mine = zero3_model_states(row["total"], row["largest"], row["gpus"], row["nodes"], row["cpu_offload"],
                                  row["cpu_offload_params"], row["zero_init"], row["factor"])
        if mine != (row["cpu"], row["gpu"], row["largest_layer_bytes"]):
            wrong.append((row, mine))
    assert not wrong, f"{len(wrong)} of {len(TABLE['zero3'])} rows differ, first: {wrong[0]}"
