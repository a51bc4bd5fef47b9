"""The context a model serves (`context=N`, `--ctx N`) and the memory estimate that counts what a
load of a format and context really holds: kept-quantized blocks with no float32 copy, the KV cache
at the context asked for, attention in tiles instead of a [T, T] score matrix."""

import dataclasses
import os
import subprocess
import sys

import numpy as np
import pytest

import gpt
from gpt.gguf_file import save_gguf
from gpt.model import DEFAULT_CONTEXT
from gpt.resources import check_fits_in_memory, estimate_memory
from gpt.weights import random_weights
from shapes import NANO, config

GIB = 2**30
# Real models' widths (random weights are never made for them here: the estimate is arithmetic).
SMOLLM2_1_7B = gpt.GPTConfig(
    n_layer=24, n_head=32, n_embd=2048, vocab_size=49152, block_size=8192, architecture="llama", n_ff=8192
)
LLAMA_3_1_8B = gpt.GPTConfig(
    n_layer=32,
    n_head=32,
    n_kv_head=8,
    n_embd=4096,
    vocab_size=128256,
    block_size=131072,
    architecture="llama",
    n_ff=14336,
    tied_head=False,
)


def test_a_kept_quantized_1p7b_model_is_estimated_at_what_its_load_holds():
    kept = estimate_memory(SMOLLM2_1_7B, "q4_0", kept_quantized=True)
    widened = estimate_memory(SMOLLM2_1_7B, "q4_0")
    # No float32 copy of the matmul weights nor of the embedding (kept as the q8_0 head's blocks):
    # the norms are float32, and that is all.
    assert kept.weights_f32 == 4 * (13 * 2048 * 24 + 2 * 2048)
    assert widened.weights_f32 > 6 * GIB > 10 * kept.weights_f32
    # 1.6e9 matmul weights in q4_0 (18 bytes per 32) held once as the file's blocks, once repacked.
    matmul = 24 * (4 * 2048 * 2048 + 3 * 2048 * 8192)
    assert abs(kept.stored_weights - 2 * matmul * 18 / 32) < 0.2 * GIB
    # Online-softmax attention: no 32 x 8192 x 8192 score matrix (8 GiB); a prefill's activations.
    assert kept.activations < 1 * GIB
    # The file's whole context in an f32 cache: 24 layers x (k, v) x 8192 positions x 2048.
    assert kept.kv_cache == 24 * 2 * 8192 * 2048 * 4
    assert kept.total < 8 * GIB  # the estimate said 26.25 GiB; llama.cpp runs it in 1.9 GB


def test_the_cache_is_counted_in_its_format_at_the_context_asked_for():
    short = dataclasses.replace(SMOLLM2_1_7B, block_size=2048)
    f32 = estimate_memory(SMOLLM2_1_7B).kv_cache
    assert estimate_memory(short).kv_cache * 4 == f32
    assert estimate_memory(SMOLLM2_1_7B, kv_cache="f16").kv_cache * 2 == f32
    assert estimate_memory(SMOLLM2_1_7B, kv_cache="bf16").kv_cache * 2 == f32
    assert estimate_memory(SMOLLM2_1_7B, kv_cache="q8_0").kv_cache == f32 * 34 // 32 // 4


def test_a_loader_checks_the_weights_and_the_model_checks_its_context():
    # Llama 3.1 8B's file says 131072 positions: an f32 cache of them is 32 GiB. The loader checks
    # only the weights it reads; the model refuses the whole context, naming the way out.
    check_fits_in_memory(LLAMA_3_1_8B, "q4_0", kept_quantized=True, loading=True)
    with pytest.raises(MemoryError, match=r"kv cache \(f32\) 32\.00, .* a shorter context \(context=N, --ctx N\)"):
        check_fits_in_memory(LLAMA_3_1_8B, "q4_0", kept_quantized=True)
    at_default = dataclasses.replace(LLAMA_3_1_8B, block_size=DEFAULT_CONTEXT)
    estimate = check_fits_in_memory(at_default, "q4_0", kept_quantized=True)
    # At the peak of the load: the file's blocks and their repacked copy (3.7 GiB each), the widened
    # embedding and output tables (2 GiB each), the cache (1 GiB): a 24 GiB machine holds it.
    assert estimate.total < 16 * GIB


@pytest.mark.parametrize("pos_embedding", ["learned", "rope"])
def test_a_shorter_context_computes_the_same_logits(pos_embedding):
    cfg = config(NANO, pos_embedding)
    weights = random_weights(cfg, seed=3)
    full = gpt.GPT(cfg, weights)
    short = gpt.GPT(cfg, weights, context=32)
    assert short.config.block_size == 32 and full.config.block_size == 128
    ids = np.random.default_rng(0).integers(0, cfg.vocab_size, 20)
    np.testing.assert_allclose(short.forward(ids), full.forward(ids), rtol=1e-5, atol=1e-5)
    cache = short.new_cache()
    assert cache.max_len == 32
    np.testing.assert_allclose(short.prefill(ids, cache), full.forward(ids)[-1], rtol=1e-5, atol=1e-5)
    with pytest.raises(ValueError, match="longer than block_size=32"):
        short.forward(np.zeros(33, np.int64))
    with pytest.raises(ValueError, match="exceed block_size=32"):
        short.generate([1, 2], max_new_tokens=31)
    if pos_embedding == "learned":  # the position table keeps its first 32 rows, as the model's own
        table = short.state_dict()["transformer.wpe.weight"]
        np.testing.assert_array_equal(table, weights["transformer.wpe.weight"][:32])


@pytest.mark.parametrize("context", [0, 129, 2.5, True, "64"])
def test_a_context_outside_the_model_is_refused(context):
    cfg = config(NANO)
    with pytest.raises(ValueError, match=r"context must be an int in \[1, 128\] \(the model's block_size\)"):
        gpt.GPT(cfg, random_weights(cfg), context=context)


@pytest.fixture(scope="module")
def long_context_file(tmp_path_factory):
    """A GPT-2 GGUF file whose context is 8192 positions (a nano model's widths)."""
    cfg = dataclasses.replace(config(NANO), block_size=8192)
    path = str(tmp_path_factory.mktemp("context") / "long.gguf")
    save_gguf(random_weights(cfg, seed=1), cfg, path)
    return path


def test_a_file_is_served_at_its_context_up_to_the_default(long_context_file):
    assert gpt.GPT.from_gguf(long_context_file).config.block_size == DEFAULT_CONTEXT == 4096
    assert gpt.GPT.from_gguf(long_context_file, context=8192).config.block_size == 8192
    model = gpt.GPT.from_gguf(long_context_file, context=100)
    assert model.config.block_size == 100 and model.new_cache().max_len == 100
    with pytest.raises(ValueError, match=r"context must be an int in \[1, 8192\]"):
        gpt.GPT.from_gguf(long_context_file, context=8193)


def test_ctx_on_the_command_line(long_context_file):
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(sys.path))
    command = [sys.executable, "-m", "gpt", "generate", "--model", long_context_file, "--prompt", "0123456789"]
    refused = subprocess.run(command + ["--ctx", "8", "--max_new_tokens", "1"], capture_output=True, text=True, env=env)
    assert refused.returncode != 0
    assert "longer than the model's block_size=8" in refused.stderr
    too_long = subprocess.run(command + ["--ctx", "9000"], capture_output=True, text=True, env=env)
    assert too_long.returncode != 0 and "context must be an int in [1, 8192]" in too_long.stderr
