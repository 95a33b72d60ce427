"""The weight sync of the loop on its own: trainer shards in, rollout tensors out.

Weights are the random tiny-qwen2 state dict; the expected tensors come from
``model.reference.vllm_local_tensors`` (real tensors sliced by the vLLM rules), never
from the compiler or the hardware.
"""
from __future__ import annotations

import pytest
import torch

from gen.weight_sync import FAULT_KINDS, SyncOptions, WeightSync, corrupt_program
from model.errors import InputError
from model.reference import train_buffers, vllm_local_tensors


@pytest.fixture(scope="module")
def sync(tmp_path_factory):
    return WeightSync(SyncOptions(engine="golden"), tmp_path_factory.mktemp("ws") / "compiled")


@pytest.fixture(scope="module")
def weights(tiny_state):
    return {k: torch.as_tensor(v).float() for k, v in tiny_state.items()}


def shards(sync, weights):
    """Each rank's shards as the FSDP2 layout holds them (one flat tensor per rank)."""
    return [[torch.from_numpy(b.copy())] for b in train_buffers(weights, sync.model, sync.train)]


def test_sync_delivers_the_sliced_vllm_tensors(sync, weights):
    images = sync.images(shards(sync, weights))
    res = sync.run(images)
    assert res.committed and res.fault is None and res.status == ["HALTED", "HALTED"]
    assert all(n > 0 for n in res.rollout_entries_committed)
    for d in range(2):
        want = vllm_local_tensors(weights, sync.model, sync.rollout, d)
        assert list(res.tensors[d]) == list(want)
        for name, t in want.items():
            assert torch.equal(res.tensors[d][name], t.float()), name
    assert sync.check(weights, images, res.tensors) == []
    assert res.bytes_copied > 0 and res.bytes_remapped > 0 and res.lower_bound_cycles > 0


def test_check_names_a_wrong_image_and_a_wrong_tensor(sync, weights):
    images = sync.images(shards(sync, weights))
    res = sync.run(images)
    bad = bytearray(images[1])
    bad[100] ^= 0x40
    tensors = [dict(t) for t in res.tensors]
    name = "model.layers.1.mlp.down_proj.weight"
    tensors[0][name] = tensors[0][name].clone()
    tensors[0][name][0, 0] += 1.0
    problems = sync.check(weights, [images[0], bytes(bad)], tensors)
    assert problems == ["device 1: memory image differs from the FSDP2 layout of verl's weights",
                        f"device 0: rollout tensor {name} differs from the sliced reference"]


@pytest.mark.parametrize("kind, cause", [("unmapped", "NOT_MAPPED"), ("range", "OUT_OF_RANGE")])
@pytest.mark.parametrize("device", [0, 1])
def test_a_corrupted_program_faults_before_the_commit(sync, weights, kind, cause, device):
    assert kind in FAULT_KINDS
    programs = list(sync.programs)
    programs[device] = corrupt_program(programs[device], kind)
    res = sync.run(sync.images(shards(sync, weights)), programs)
    assert not res.committed and res.tensors is None
    assert res.fault.device == device and res.fault.cause == cause
    assert res.status[device] == "FAULT"
    assert res.rollout_entries_committed == [0, 0]     # no device committed: never mixed weights
    assert f"device {device}" in res.fault.line() and cause in res.fault.line()


def test_bad_inputs(sync, weights):
    with pytest.raises(InputError, match="2 devices"):
        sync.images(shards(sync, weights)[:1])
    with pytest.raises(InputError, match="exceed the compiled training region"):
        sync.images([[torch.zeros(sync.train_span // 4 + 1)], [torch.zeros(1)]])
    with pytest.raises(InputError, match="kind"):
        corrupt_program(sync.programs[0], "cosmic-ray")
    with pytest.raises(InputError, match="--engine"):
        SyncOptions(engine="spice")


@pytest.mark.slow
def test_verilator_sync_matches_the_golden_one(sync, weights, tmp_path):
    images = sync.images(shards(sync, weights))
    gold = sync.run(images)
    vl = WeightSync(SyncOptions(engine="verilator"), tmp_path / "compiled")
    res = vl.run(images)
    assert res.committed and res.cycles >= res.lower_bound_cycles
    for d in range(2):
        for name, t in gold.tensors[d].items():
            assert torch.equal(res.tensors[d][name], t), name
