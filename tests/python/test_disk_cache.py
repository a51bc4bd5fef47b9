"""The on-disk object cache: a second model (as a second process would) loads compiled code
instead of compiling it, gets identical results, and survives a damaged cache."""

import os
import subprocess
import sys

import numpy as np

import gpt
from shapes import NANO, config, exercising_weights, token_ids

CFG = config(NANO)
WEIGHTS = exercising_weights(CFG)


def model(cache_dir, **options):
    return gpt.GPT.from_weights(CFG, WEIGHTS, gpt.CompileOptions(cache_dir=str(cache_dir), **options))


def test_second_model_loads_instead_of_compiling(tmp_path):
    ids = token_ids(CFG, 20)
    first = model(tmp_path)
    expected = first.forward(ids)
    cache = first.new_cache(64)
    first.prefill(ids, cache)
    expected_decode = first.decode(7, cache)
    assert first.disk_cache_hits() == 0
    files = sorted(os.listdir(tmp_path))
    assert len(files) == 3 and all(f.endswith(".o") for f in files)  # forward, prefill step, decode step

    second = model(tmp_path)
    np.testing.assert_array_equal(second.forward(ids), expected)
    cache = second.new_cache(64)
    second.prefill(ids, cache)
    np.testing.assert_array_equal(second.decode(7, cache), expected_decode)
    assert second.disk_cache_hits() == 3
    assert sorted(os.listdir(tmp_path)) == files


def test_another_process_loads_it(tmp_path):
    ids = token_ids(CFG, 12)
    expected = model(tmp_path).forward(ids)
    np.save(tmp_path / "ids.npy", ids)
    script = f"""
import numpy as np, gpt, sys
sys.path.insert(0, {os.path.dirname(os.path.abspath(__file__))!r})
from shapes import NANO, config, exercising_weights
cfg = config(NANO)
m = gpt.GPT.from_weights(cfg, exercising_weights(cfg), gpt.CompileOptions(cache_dir={str(tmp_path)!r}))
np.save({str(tmp_path / "out.npy")!r}, m.forward(np.load({str(tmp_path / "ids.npy")!r})))
print(m.disk_cache_hits())
"""
    package = os.path.dirname(os.path.dirname(os.path.abspath(gpt.__file__)))
    result = subprocess.run(
        [sys.executable, "-c", script],
        capture_output=True,
        text=True,
        timeout=300,
        env=dict(os.environ, PYTHONPATH=package),
    )
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == "1"
    np.testing.assert_array_equal(np.load(tmp_path / "out.npy"), expected)


def test_damaged_entry_is_recompiled(tmp_path):
    ids = token_ids(CFG, 5)
    expected = model(tmp_path).forward(ids)
    (entry,) = os.listdir(tmp_path)
    (tmp_path / entry).write_bytes(b"not an object file")
    again = model(tmp_path)
    np.testing.assert_array_equal(again.forward(ids), expected)
    assert again.disk_cache_hits() == 0
    assert (tmp_path / entry).read_bytes()[:4] == b"\x7fELF"  # rewritten


def test_keys_separate_options_and_disk_cache_can_be_off(tmp_path):
    # 100 tokens (bucket 128): enough work that 2 threads split the matmuls, so the programs differ.
    ids = token_ids(CFG, 100)
    model(tmp_path, threads=1).forward(ids)
    model(tmp_path, threads=2).forward(ids)
    model(tmp_path, pipeline="fused").forward(ids)
    assert len(os.listdir(tmp_path)) == 3
    off = tmp_path / "off"
    gpt.GPT.from_weights(CFG, WEIGHTS, gpt.CompileOptions(cache_dir=str(off), disk_cache=False)).forward(ids)
    assert not off.exists()
