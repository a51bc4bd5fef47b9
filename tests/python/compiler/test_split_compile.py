"""A large program is optimized and compiled in two parts, on two threads, and linked into one
shared object (cc/compiler/MachineCode.cpp, partsFor). GPT_SPLIT_INSTRUCTIONS lowers the size from
which a program splits, so that a small model's programs take that path here: a split program is
linked from two objects (each leaves its file symbol in the shared object), and computes what the
whole one computes, bit for bit, and the numpy reference's logits."""

import os
import subprocess

import numpy as np
import pytest

import gpt
from machine_code import objdump
from reference import gpt2_logits
from shapes import MID, RTOL, config, exercising_weights, relative_error, token_ids

pytestmark = pytest.mark.skipif((os.cpu_count() or 1) < 2, reason="a program splits only on a second core")


def logits(model: gpt.GPT, ids) -> np.ndarray:
    """Forward's logits, then a prefill's and two decode steps' (the cached step's programs)."""
    cache = model.new_cache(len(ids) + 2)
    steps = [model.prefill(ids, cache), model.decode(3, cache), model.decode(5, cache)]
    return np.concatenate([model.forward(ids).ravel(), *steps])


def objects_linked(cache_dir) -> list[int]:
    """For each program in a disk cache directory, the objects its shared object was linked from:
    its file symbols (llvm-objdump's "df" entries), one per object."""
    counts = []
    for path in sorted(cache_dir.rglob("*.gptjit")):
        symbols = subprocess.run([objdump(), "--syms", str(path)], capture_output=True, text=True, check=True).stdout
        counts.append(sum(" df " in line for line in symbols.splitlines()))
    return counts


@pytest.mark.parametrize("weights", ["f32", "q4_k"])
def test_a_split_program_computes_what_the_whole_one_computes(monkeypatch, tmp_path, weights):
    cfg = config(MID)
    values = exercising_weights(cfg)
    ids = token_ids(cfg, 7, seed=7)
    monkeypatch.setenv("GPT_SPLIT_INSTRUCTIONS", str(2**62))  # never split
    whole_model = gpt.GPT.from_weights(cfg, values, gpt.CompileOptions(weights=weights, cache_dir=str(tmp_path / "w")))
    whole = logits(whole_model, ids)
    monkeypatch.setenv("GPT_SPLIT_INSTRUCTIONS", "1")  # every program in two parts
    split_model = gpt.GPT.from_weights(cfg, values, gpt.CompileOptions(weights=weights, cache_dir=str(tmp_path / "s")))
    split = logits(split_model, ids)
    assert objects_linked(tmp_path / "w") == [1, 1, 1]  # forward, prefill, decode
    assert objects_linked(tmp_path / "s") == [2, 2, 2]
    np.testing.assert_array_equal(split, whole)
    if weights == "f32":
        expected = gpt2_logits(values, ids, cfg.n_layer, cfg.n_head)
        assert relative_error(split_model.forward(ids), expected) < RTOL
