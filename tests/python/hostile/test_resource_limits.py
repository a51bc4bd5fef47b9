"""A configuration that would not fit in memory is refused before anything is allocated, with
an error that names the size it needs: from a config, a config.json or a GGUF header."""

import json
import os
import resource
import subprocess
import sys

import numpy as np
import pytest

import gpt
from gpt.resources import estimate_memory
from gpt.weights import random_weights
from shapes import NANO, config

GPT3 = gpt.GPTConfig(n_layer=96, n_head=96, n_embd=12288, vocab_size=50257, block_size=2048)


def resident_bytes():
    with open(f"/proc/{os.getpid()}/status", encoding="ascii") as f:
        return next(int(line.split()[1]) * 1024 for line in f if line.startswith("VmRSS:"))


@pytest.mark.parametrize("weights", ["f32", "q4_0"])
def test_a_gpt3_sized_model_is_refused_naming_its_size_before_allocating(weights):
    before = resident_bytes()
    with pytest.raises(MemoryError, match=rf"n_layer=96.* with {weights} weights needs about [0-9.]+ GiB"):
        gpt.GPT.random(GPT3, options=gpt.CompileOptions(weights=weights))
    with pytest.raises(MemoryError, match="more than the [0-9.]+ GiB this process can use"):
        gpt.GPT.from_weights(GPT3, {})  # refused before the (missing) weights are even looked at
    assert resident_bytes() - before < 64 * 2**20


def test_quantized_formats_need_less():
    sizes = [estimate_memory(GPT3, weights).stored_weights for weights in ("f32", "bf16", "q8_0", "q4_0")]
    assert sizes == sorted(sizes, reverse=True) and sizes[0] > 3 * sizes[-1]


@pytest.mark.parametrize("pos_embedding", ["learned", "rope"])
def test_the_estimate_counts_every_parameter(pos_embedding):
    cfg = config(NANO, pos_embedding)
    arrays = random_weights(cfg)
    assert estimate_memory(cfg).weights_f32 == sum(a.nbytes for a in arrays.values())
    kv = gpt.GPT.random(cfg).new_cache()
    assert estimate_memory(cfg).kv_cache == kv._keys.nbytes + kv._values.nbytes


@pytest.mark.parametrize("architecture", ["llama", "gemma3"])
def test_the_estimate_counts_gated_mlps_and_explicit_head_widths(architecture):
    # Gemma's GeGLU has a gate beside its up, and its heads (head_dim) are wider than n_embd / n_head:
    # the matmul weights were counted as a plain MLP's and n_embd-wide queries, below what they hold.
    cfg = gpt.GPTConfig(
        n_layer=2,
        n_head=4,
        n_embd=64,
        vocab_size=256,
        block_size=64,
        architecture=architecture,
        head_dim=32,
        n_kv_head=2,
    )
    arrays = sum(4 * int(np.prod(shape)) for shape in gpt.architectures.hf_shapes(cfg).values())
    assert estimate_memory(cfg).weights_f32 >= arrays


def test_a_config_json_that_asks_too_much_is_refused_before_reading_tensors(tmp_path):
    from safetensors.numpy import save_file

    hf = dict(n_layer=96, n_head=96, n_embd=12288, vocab_size=50257, n_positions=2048, model_type="gpt2")
    (tmp_path / "config.json").write_text(json.dumps(hf))
    save_file({"wte.weight": np.zeros((4, 4), np.float32)}, str(tmp_path / "model.safetensors"))
    with pytest.raises(MemoryError, match="needs about [0-9.]+ GiB"):
        gpt.GPT.from_pretrained(str(tmp_path))


LIMITED_CHILD = """
import resource, sys, gpt
from gpt.resources import _mapped_bytes
resource.setrlimit(resource.RLIMIT_AS, (_mapped_bytes() + 2**30, resource.RLIM_INFINITY))
cfg = gpt.GPTConfig(n_layer=24, n_head=16, n_embd=1024, vocab_size=50257, block_size=1024)  # GPT-2 medium: ~3 GiB
try:
    gpt.GPT.random(cfg)
except MemoryError as e:
    print(e)
"""


def test_an_address_space_limit_is_respected():
    package = os.path.dirname(os.path.dirname(os.path.abspath(gpt.__file__)))
    child = subprocess.run(
        [sys.executable, "-c", LIMITED_CHILD],
        capture_output=True,
        text=True,
        timeout=120,
        env=dict(os.environ, PYTHONPATH=package),
    )
    assert child.returncode == 0, child.stderr
    assert "needs about" in child.stdout and "(RLIMIT_AS)" in child.stdout, child.stdout
    assert resource.getrlimit(resource.RLIMIT_AS)[0] == resource.RLIM_INFINITY  # the child's alone
