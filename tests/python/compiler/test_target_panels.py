"""The panel width matmul weights are packed in, the register tile's rows and the vocabulary padding
come from the target's register file (cc/TargetParameters.h, through _gpt.tile_parameters): the
builder, the runtime's packers and the Python frontend take them from there. A model
cross-compiled for haswell (AVX2, which this host runs: 2 x 32 tiles) must compute what the
host's model (AVX-512 here: 8 x 32) and the numpy reference compute, in every weight format, with
the panels its target's parameters name in its IR."""

import json
import os
import re
import subprocess
import sys

import numpy as np
import pytest

import gpt
from gpt import _gpt
from low_precision_reference import bf16_reference, block_quantized_reference
from reference import gpt2_logits
from shapes import NANO, RTOL, exercising_weights, relative_error, token_ids


def host_flags():
    with open("/proc/cpuinfo") as f:
        return set(next(line for line in f if line.startswith("flags")).split(":", 1)[1].split())


pytestmark = pytest.mark.skipif(not {"avx2", "fma"} <= host_flags(), reason="runs haswell code on this CPU")

# NANO's widths (64, 192, 256) divide 16- and 32-wide panels; a vocabulary of 300 is padded (to 512
# with 32-wide panels: 8 thread chunks of whole panels).
SHAPE = dict(NANO, vocab_size=300)
# [N/P, K/rows per word, P] of the first layer's c_attn weight ([64, 192]) in each format.
ROWS_PER_WORD = {"f32": 1, "bf16": 2, "q8_0": 4, "q4_1": 8}
ELEMENT = {"f32": "f32", "bf16": "i32", "q8_0": "i32", "q4_1": "i32"}


def test_tile_parameters_come_from_the_register_file():
    # AVX2: 8 accumulators are 2 rows of 4 ymm. (A 16-wide panel, 4 x 16, was measured slower for
    # q8_0 and no faster for f32: docs/PERFORMANCE.md.)
    haswell = _gpt.tile_parameters("haswell")
    assert (haswell["vector_lanes"], haswell["panel_width"], haswell["tile_rows"]) == (8, 32, 2)
    assert haswell["vocab_multiple"] == 256
    avx512 = _gpt.tile_parameters("skylake-avx512")
    assert (avx512["vector_lanes"], avx512["panel_width"], avx512["tile_rows"]) == (16, 32, 8)
    assert avx512["vocab_multiple"] == 256
    neon = _gpt.tile_parameters("aarch64:neoverse-v1")
    assert (neon["vector_lanes"], neon["panel_width"], neon["tile_rows"]) == (4, 32, 2)
    # One bucket on every target: gpt.frontend pads to it without asking the target.
    assert {_gpt.tile_parameters(t)["smallest_bucket"] for t in ("haswell", "skylake-avx512", "host")} == {8}


@pytest.mark.parametrize("fmt", ["f32", "q8_0", "q4_1", "bf16"])
def test_haswell_panels_compute_what_the_host_computes(fmt):
    cfg = gpt.GPTConfig(**SHAPE)
    weights = exercising_weights(cfg)
    ids = token_ids(cfg, 13)
    # Every format against the float64 numpy reference on the same rounded or dequantized weights
    # and activations (low_precision_reference.py), for each target's panels.
    if fmt == "f32":
        expected = gpt2_logits(weights, ids, cfg.n_layer, cfg.n_head, cfg.pos_embedding)
    elif fmt == "bf16":
        expected = bf16_reference(weights, ids, cfg)
    else:
        expected = block_quantized_reference(fmt, weights, ids, cfg)
    logits = {}
    for target in ("haswell", "host"):
        tiles = _gpt.tile_parameters(target)
        panel, multiple = tiles["panel_width"], tiles["vocab_multiple"]
        model = gpt.GPT.from_weights(cfg, weights, gpt.CompileOptions(weights=fmt, disk_cache=False, target_cpu=target))
        ir = model.ir("transformer", seq_len=8)
        # The packed weights have the target's panels: [64, 192] in 192 / P panels of P columns.
        packed = f"tensor<{192 // panel}x{64 // ROWS_PER_WORD[fmt]}x{panel}x{ELEMENT[fmt]}>"
        assert packed in ir, f"{target}: no {packed} weight"
        # The logits are padded to the target's vocabulary multiple, and cut back to the vocabulary.
        padded = -(-cfg.vocab_size // multiple) * multiple
        assert re.search(rf"tensor<8x{padded}xf32>", ir), f"{target}: logits not padded to {padded}"
        logits[target] = model.forward(ids)
        assert logits[target].shape == (len(ids), cfg.vocab_size)
        assert relative_error(logits[target], expected) < RTOL, target
        # Decode reads the same panels one row at a time.
        cache = model.new_cache()
        model.prefill(ids[:12].tolist(), cache)
        assert relative_error(model.decode(int(ids[12]), cache), logits[target][12]) < RTOL, target
    assert relative_error(logits["haswell"], logits["host"]) < RTOL


@pytest.mark.parametrize("target", ["haswell", "skylake-avx512"])
def test_prefill_register_tiles_are_the_target_rows_of_one_panel(target):
    tiles = _gpt.tile_parameters(target)
    cfg = gpt.GPTConfig(**SHAPE)
    model = gpt.GPT.random(cfg, options=gpt.CompileOptions(disk_cache=False, target_cpu=target))
    # The tiles the vectorized stage applies, chosen from the module's gpt.target as it does.
    ir = _gpt.run_pipeline(model.ir("linalg", seq_len=8), "gpt-select-register-tiles")
    packed = re.findall(r"gpt\.(?:register|epilogue)_tile = \[(\d+), 1, (\d+)(?:, 1)?\]", ir)
    assert packed and {(int(rows), int(width)) for rows, width in packed} == {
        (tiles["tile_rows"], tiles["panel_width"])
    }


def test_frontend_packs_weights_in_the_target_panels():
    torch = pytest.importorskip("torch")
    linear = torch.nn.Linear(64, 48, bias=False).eval()
    x = torch.randn(8, 64)
    expected = linear(x).detach().numpy()
    # 48 columns are 3 panels of 16 on haswell; a target with 32-wide panels pads them to its
    # vocabulary multiple, as the builder pads a vocabulary.
    for target in ("haswell", "host"):
        tiles = _gpt.tile_parameters(target)
        panel, multiple = tiles["panel_width"], tiles["vocab_multiple"]
        columns = 48 if 48 % panel == 0 else -(-48 // multiple) * multiple
        options = gpt.CompileOptions(target_cpu=target, disk_cache=False)
        compiled = gpt.compile_module(linear, (x,), options=options)
        assert f"tensor<{columns // panel}x64x{panel}xf32>" in compiled.ir("imported"), target
        np.testing.assert_allclose(compiled(x).detach().numpy(), expected, rtol=1e-5, atol=1e-5)


def test_gpt_target_cpu_makes_host_mean_that_cpu(tmp_path):
    """GPT_TARGET_CPU=haswell: "host" is Haswell in that process (how an AVX-512 machine runs the
    code an AVX2 machine gets), its logits those of target_cpu="haswell" here, to the bit."""
    cfg = gpt.GPTConfig(**SHAPE)
    ids = token_ids(cfg, 13)
    np.save(tmp_path / "ids.npy", ids)
    script = f"""
import json, numpy as np, gpt
from gpt import _gpt
cfg = gpt.GPTConfig(**{SHAPE!r})
model = gpt.GPT.random(cfg, seed=3, options=gpt.CompileOptions(threads=1, disk_cache=False))
np.save({str(tmp_path / "logits.npy")!r}, model.forward(np.load({str(tmp_path / "ids.npy")!r})))
print(json.dumps([_gpt.target_description(), _gpt.tile_parameters()]))
"""
    package = os.path.dirname(os.path.dirname(os.path.abspath(gpt.__file__)))
    child = subprocess.run(
        [sys.executable, "-c", script],
        capture_output=True,
        text=True,
        timeout=300,
        env=dict(os.environ, PYTHONPATH=package, GPT_TARGET_CPU="haswell"),
    )
    assert child.returncode == 0, child.stderr
    description, tiles = json.loads(child.stdout)
    assert (description["cpu"], description["vector_bits"], description["features"]) == (
        "haswell",
        256,
        ["avx2", "fma"],
    )
    assert tiles == _gpt.tile_parameters("haswell")
    haswell = gpt.GPT.random(cfg, seed=3, options=gpt.CompileOptions(threads=1, disk_cache=False, target_cpu="haswell"))
    np.testing.assert_array_equal(np.load(tmp_path / "logits.npy"), haswell.forward(ids))
