"""The site hook's note on an FSDP-sharded model (launch/site_hook/_traindeck_steps.py's `_note_fsdp`), driven directly:
what the rank's hooks line says when the model is FSDP2 or FSDP1, and when this torch lacks the entry points FSDP's
collectives go through (an unknown torch version: the run goes on, the Step view says what could not be timed).

The module is loaded from its file as a fresh module per test; torch.distributed.fsdp is a stand-in module holding
the two public classes the note looks for, so no torch is imported here.
"""

from __future__ import annotations

import importlib.util
import json
import sys
from pathlib import Path
from types import ModuleType, SimpleNamespace

import pytest

HOOK = Path(__file__).resolve().parents[3] / "backend" / "launch" / "site_hook" / "_traindeck_steps.py"


class FSDPModule:
    pass


class FullyShardedDataParallel:
    pass


class Plain:
    pass


@pytest.fixture
def hook(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> ModuleType:
    spec = importlib.util.spec_from_file_location("_traindeck_steps_under_test", HOOK)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    module._TIMING = module._Timing(str(tmp_path / "steps"), "0")
    monkeypatch.setitem(sys.modules, "torch.distributed.fsdp",
                        SimpleNamespace(FSDPModule=FSDPModule, FullyShardedDataParallel=FullyShardedDataParallel))
    return module


def _hooks_line(hook: ModuleType, tmp_path: Path) -> dict:  # type: ignore[type-arg]
    timing = hook._TIMING
    timing.enter("forward")
    timing.leave("forward")
    timing.step_ended()
    timing.flush()
    lines = [json.loads(line) for line in (tmp_path / "steps" / "rank0.jsonl").read_text().splitlines()]
    return [line for line in lines if line.get("kind") == "hooks"][-1]


def test_an_fsdp2_model_whose_collectives_are_timed_is_said(hook: ModuleType, tmp_path: Path) -> None:
    hook._TIMING.wrapped.update({"all_gather_single", "reduce_scatter_single", "Work.wait"})
    hook._TIMING.stream_waits.add("FSDP2")  # FSDPParamGroup's waits and torch.cuda.Stream.wait_event were found
    hook._note_fsdp([FSDPModule()])
    said = _hooks_line(hook, tmp_path)
    assert "FSDP2 (fully_shard) model: its all-gathers, reduce-scatters and their waits" in said["attached"]
    assert said["missing"] == []


def test_fsdp1_through_the_older_entry_points_is_timed_too(hook: ModuleType, tmp_path: Path) -> None:
    hook._TIMING.wrapped.update({"all_gather_into_tensor", "reduce_scatter_tensor", "Work.wait"})
    hook._TIMING.stream_waits.add("FSDP1")  # _runtime_utils' waits and torch.cuda.Stream.wait_event were found
    hook._note_fsdp([Plain(), FullyShardedDataParallel()])
    said = _hooks_line(hook, tmp_path)
    assert "FSDP1 model: its all-gathers, reduce-scatters and their waits" in said["attached"]
    assert said["missing"] == []


def test_a_torch_without_the_entry_points_leaves_the_run_going_and_says_what_is_missing(
        hook: ModuleType, tmp_path: Path) -> None:
    hook._TIMING.wrapped.update({"all_reduce", "Work.wait"})  # no all-gather nor reduce-scatter of a known name
    hook._TIMING.stream_waits.add("FSDP2")
    hook._note_fsdp([FSDPModule()])
    said = _hooks_line(hook, tmp_path)
    assert not any("FSDP" in a for a in said["attached"])
    assert said["missing"] == ["FSDP2 (fully_shard) model: its collectives (torch.distributed's all-gather, "
                               "reduce-scatter or Work.wait not found in this torch): they count in forward and "
                               "backward"]


def test_an_fsdp2_model_whose_stream_waits_were_not_found_says_so(hook: ModuleType, tmp_path: Path) -> None:
    # A torch whose FSDPParamGroup lacks the methods the waits are found in: its collectives are timed, the compute
    # stream's waits for them on CUDA are not.
    hook._TIMING.wrapped.update({"all_gather_single", "reduce_scatter_single", "Work.wait"})
    hook._ATTACH["torch.distributed.fsdp._fully_shard._fsdp_param_group"](
        SimpleNamespace(FSDPParamGroup=type("FSDPParamGroup", (), {"post_backward": Plain})))
    hook._note_fsdp([FSDPModule()])
    said = _hooks_line(hook, tmp_path)
    assert "FSDP2 (fully_shard) model: its all-gathers, reduce-scatters and their waits" in said["attached"]
    assert said["missing"] == ["FSDP2 model: its CUDA streams' waits (FSDPParamGroup's wait_for_unshard, "
                               "post_backward, finalize_backward or torch.cuda.Stream.wait_event not found in this "
                               "torch): on CUDA they count in forward and backward"]


def test_fsdp1_and_zero3_whose_stream_waits_were_not_found_say_so(hook: ModuleType, tmp_path: Path) -> None:
    # A torch whose FSDP1 runtime lacks a function the waits are in, a DeepSpeed whose ZeRO-3 coordinator lacks
    # fetch_sub_module: the run goes on, and the hooks line says which waits count in forward and backward.
    hook._TIMING.wrapped.update({"all_gather_into_tensor", "reduce_scatter_tensor", "Work.wait"})
    hook._ATTACH["torch.distributed.fsdp._runtime_utils"](SimpleNamespace(_pre_forward_unshard=Plain))
    hook._ATTACH["deepspeed.runtime.zero.partitioned_param_coordinator"](
        SimpleNamespace(PartitionedParameterCoordinator=Plain))
    hook._note_fsdp([FullyShardedDataParallel()])
    said = _hooks_line(hook, tmp_path)
    assert hook._TIMING.stream_waits == set()
    assert said["missing"] == [
        "ZeRO-3: the compute stream's waits for its parameter all-gathers (PartitionedParameterCoordinator's "
        "fetch_sub_module or torch.cuda.Stream.wait_event not found in this DeepSpeed): on CUDA they count in forward "
        "and backward",
        "FSDP1 model: its CUDA streams' waits (torch.distributed.fsdp._runtime_utils's _pre_forward_unshard, "
        "_pre_backward_hook, _post_backward_final_callback or torch.cuda.Stream.wait_event not found in this torch): "
        "on CUDA they count in forward and backward"]


def test_a_model_that_is_not_sharded_says_nothing_of_fsdp(hook: ModuleType, tmp_path: Path,
                                                           monkeypatch: pytest.MonkeyPatch) -> None:
    hook._note_fsdp([Plain()])
    monkeypatch.delitem(sys.modules, "torch.distributed.fsdp")
    hook._note_fsdp([FSDPModule()])  # FSDP never imported: nothing is looked up
    said = _hooks_line(hook, tmp_path)
    assert not any("FSDP" in a for a in said["attached"] + said["missing"])
