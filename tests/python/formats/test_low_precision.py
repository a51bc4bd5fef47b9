"""Low-precision weights (CompileOptions(weights="bf16" | "q8_0" | "q4_0" | "q4_1")): numerics against the
float64 numpy GPT-2 run on the same rounded or dequantized weights (quantized by the separate
numpy implementation in quant_reference.py) and the same rounding of every matmul's activations
(bf16, or int8 per block of 32), generation with and without the cache, the IR and the machine
code, and the options that are refused.

Rounding activations makes a comparison with a float64 reference sensitive in one way: where an
activation lies within float32 noise of a rounding boundary, the compiled model (f32) and the
reference (f64) can round it to neighbouring values, and the logits of that token and of every
later one (through attention) move by about 1e-3 (bf16) to 1e-2 (int8, 12 layers) relative: as
much as the activation rounding itself. Such boundaries are rare (about 1 in 10^5 values) but a
12-layer GPT-2 small meets several per token. So the exactness tests use models and sequences in
which none occurs (deterministic: the same weights, tokens and code every run), the GPT-2 small
widths with one layer; test_dot_products.py shows the instructions compute exactly what their
plain-arithmetic fallback computes on long sequences, where no reference rounding is involved."""

from functools import partial

import numpy as np
import pytest

import gpt
import quant_reference as ref
from low_precision_reference import MATMUL_WEIGHTS, bf16_reference, block_quantized_reference
from reference import gpt2_logits, layer_norm
from shapes import GPT2_SMALL, MID, NANO, RTOL, config, exercising_weights, relative_error, token_ids


@pytest.mark.parametrize("fmt", ["bf16", "q8_0", "q4_0"])
@pytest.mark.parametrize("shape", [NANO, MID], ids=["nano", "mid"])
def test_the_activation_rounding_of_the_references_is_measurable(fmt, shape):
    """The references' activation rounding is no rounding error: without it they differ by more
    than the tolerance the compiled models are held to."""
    cfg = config(shape)
    weights = exercising_weights(cfg)
    ids = token_ids(cfg, 20)
    reference = bf16_reference if fmt == "bf16" else partial(block_quantized_reference, fmt)
    rounded = reference(weights, ids, cfg)
    exact = reference(weights, ids, cfg, activations=False)
    assert relative_error(rounded, exact) > RTOL


GPT2_SMALL_ONE_LAYER = dict(GPT2_SMALL, n_layer=1)


@pytest.mark.parametrize("fmt", ["q8_0", "q4_0", "q4_1"])
@pytest.mark.parametrize(
    "shape, pos_embedding, lengths",
    [
        (NANO, "learned", (1, 7, 64)),
        (NANO, "rope", (13,)),
        (MID, "learned", (1, 50)),
        (GPT2_SMALL_ONE_LAYER, "learned", (16,)),
    ],
)
def test_block_quantized_forward_matches_reference_on_dequantized_weights(fmt, shape, pos_embedding, lengths):
    cfg = config(shape, pos_embedding)
    weights = exercising_weights(cfg)
    model = gpt.GPT.from_weights(cfg, weights, gpt.CompileOptions(weights=fmt, disk_cache=False))
    if fmt == "q4_1" and shape is MID:
        # q4_1's MID weights put one activation of token 27 within float32 noise of an int8
        # rounding boundary (module docstring): rows 27 on move by 7e-3, rows 0-26 agree to 2e-7.
        lengths = (1, 24)
    for length in lengths:
        ids = token_ids(cfg, length)
        expected = block_quantized_reference(fmt, weights, ids, cfg)
        assert relative_error(model.forward(ids), expected) < RTOL
        # The quantization is real: f32 weights give measurably different logits.
        f32 = gpt2_logits(weights, ids, cfg.n_layer, cfg.n_head, cfg.pos_embedding)
        assert relative_error(f32, expected) > 10 * RTOL


@pytest.mark.parametrize("fmt", ["q4_k", "q5_k", "q6_k"])
def test_k_quant_matmuls_take_their_activations_per_super_block(fmt):
    """llama.cpp's q4_K x q8_K (q6_K x q8_K): a K-quant matmul's input is quantized to int8 with one
    scale per super-block of 256 (each block's integer sums are weighed by their 6- or 8-bit scales
    in i32 before one conversion per super-block). The qkv projection's output, as the KV cache keeps it in f32 (keys
    and values of 8 prompt tokens, then of one decoded token), against numpy's product of the
    model's own weight values (its state_dict) and the layer norm's output quantized per 256 and
    per 32: at float32 rounding from the first, far from the second. A position may sit one code
    off where numpy's float64 layer norm and the model's float32 one round an exact tie apart
    (2e-3 of the keys, 1e-2 for the other block size)."""
    cfg = gpt.GPTConfig(n_layer=1, n_head=8, n_embd=256, vocab_size=1000, block_size=64)
    qkv = "transformer.h.0.attn.c_attn.weight"
    options = gpt.CompileOptions(weights="q8_0", weight_formats={qkv: fmt}, kv_cache="f32", disk_cache=False)
    model = gpt.GPT.from_weights(cfg, exercising_weights(cfg), options)
    assert dict(model.options.weight_formats)[qkv] == fmt
    state = {name: np.asarray(value, np.float64) for name, value in model.state_dict().items()}
    ids = token_ids(cfg, 9, seed=5)
    cache = model.new_cache(16)
    model.prefill(ids[:-1], cache)
    model.decode(ids[-1], cache)
    # Layer 0's [heads, positions, head size] -> [positions, heads * head size], as the projection writes them.
    keys, values = (
        np.asarray(buffers[0])[:, : len(ids)].transpose(1, 0, 2).reshape(len(ids), -1)
        for buffers in (cache._keys, cache._values)
    )
    x = state["transformer.wte.weight"][ids] + state["transformer.wpe.weight"][: len(ids)]
    h = layer_norm(x, state["transformer.h.0.ln_1.weight"], state["transformer.h.0.ln_1.bias"], 1e-5)
    errors = {}
    for block in (256, 32):
        expected = ref.int8_activations(h, block=block) @ state[qkv] + state["transformer.h.0.attn.c_attn.bias"]
        ours = np.concatenate([keys, values], axis=1)
        theirs = expected[:, cfg.n_embd :]
        errors[block] = np.abs(ours - theirs).max(axis=1) / np.abs(theirs).max(axis=1)
    assert np.median(errors[256]) < 1e-6 and errors[256].max() < 5e-3, errors[256]
    assert errors[32].min() > 2 * errors[256].max(), errors


@pytest.mark.parametrize("fmt", ["q8_0", "q4_0", "q4_1"])
@pytest.mark.parametrize("threads", [1, 2])
def test_block_quantized_cached_generation_matches_recomputation(fmt, threads):
    cfg = config(MID)
    model = gpt.GPT.from_weights(
        cfg, exercising_weights(cfg), gpt.CompileOptions(weights=fmt, threads=threads, disk_cache=False)
    )
    prompt = token_ids(cfg, 9).tolist()
    cached = model.generate(prompt, max_new_tokens=20)
    assert cached == model.generate(prompt, max_new_tokens=20, use_cache=False)
    cache = model.new_cache()
    sequence = list(prompt)
    logits = model.prefill(prompt, cache)
    for token in cached[:4]:
        assert relative_error(logits, model.forward(sequence)[-1]) < RTOL
        sequence.append(token)
        logits = model.decode(token, cache)


def test_block_quantized_formats_are_in_the_ir():
    cfg = config(NANO)
    for fmt, codes in (("q8_0", "tensor<6x16x32xi32>"), ("q4_0", "tensor<6x8x32xi32>")):
        model = gpt.GPT.random(cfg, options=gpt.CompileOptions(weights=fmt, threads=1, disk_cache=False))
        transformer = model.ir("transformer", seq_len=8)
        # c_attn [64, 192]: 6 panels of lane words (4 int8 codes, or 8 4-bit ones, of a column
        # along K per i32) and their [6, 2, 32] f16 scales.
        assert f"{codes}, tensor<6x2x32xf16>" in transformer
        # The tied embedding is stored once, as the q8_0 LM head [64, 256] (8 panels), which the
        # token lookup reads: no f32 [256, 64] table is an argument.
        assert "transformer.packed_embedding" in transformer
        assert "tensor<8x16x32xi32>, tensor<8x2x32xf16>" in transformer
        assert "tensor<256x64xf32>" not in transformer
        # The activations are quantized per block (max |x|, codes rounded to even, packed into
        # lanes), multiplied with the weight lanes in i32 and scaled once per block.
        linalg = model.ir("linalg", seq_len=8)
        assert "gpt.quantizes_activations" in linalg and "math.roundeven" in linalg
        assert "transformer.lane_dot_u8i8" in linalg and "gpt.block_partials" in linalg
        assert "arith.sitofp" in linalg and "f16 to f32" in linalg
        if fmt == "q4_0":
            assert "arith.shrui" in linalg and "arith.andi" in linalg
        else:
            assert "arith.xori" in linalg  # the signed codes made unsigned (+128)


def test_q4_1_is_in_the_ir():
    """q4_1 stores q4_0's code lanes with a scale and a min per block: [6, 4, 32] f16 for c_attn
    [64, 192] (each block's scale, then its min), split into pairs and read as two [6, 2, 32]
    views; its LM head is q8_0, as q4_0's. The op names each weight's format."""
    cfg = config(NANO)
    model = gpt.GPT.random(cfg, options=gpt.CompileOptions(weights="q4_1", threads=1, disk_cache=False))
    transformer = model.ir("transformer", seq_len=8)
    assert "transformer.packed_matmul q4_1 " in transformer
    assert "tensor<6x8x32xi32>, tensor<6x4x32xf16>" in transformer
    assert "transformer.packed_matmul q8_0 " in transformer  # the LM head
    assert "tensor<8x16x32xi32>, tensor<8x2x32xf16>" in transformer
    linalg = model.ir("linalg", seq_len=8)
    assert "tensor<6x4x32xf16> into tensor<6x2x2x32xf16>" in linalg
    assert "tensor<6x2x2x32xf16> to tensor<6x2x32xf16>" in linalg
    assert "transformer.lane_dot_u8i8" in linalg and "arith.shrui" in linalg


@pytest.mark.parametrize("fmt", ["f32", "bf16", "q8_0", "q4_0", "q4_1"])
def test_state_dict_is_what_the_model_computes_with(fmt):
    cfg = config(NANO)
    weights = exercising_weights(cfg)
    model = gpt.GPT.from_weights(cfg, weights, gpt.CompileOptions(weights=fmt, disk_cache=False))
    state = model.state_dict()
    assert set(state) == set(weights)
    for name, value in weights.items():
        if name.endswith(MATMUL_WEIGHTS):
            if fmt == "f32":
                expected = value
            elif fmt == "bf16":
                expected = ref.bf16_rounded(value)
            else:
                expected = ref.dequantized(fmt, value)
        elif name == "transformer.wte.weight" and fmt in ("q8_0", "q4_0", "q4_1"):
            expected = ref.dequantized("q8_0", value.T).T  # stored once, as the q8_0 LM head
        else:
            expected = value
        np.testing.assert_array_equal(state[name], expected.astype(np.float32), err_msg=name)
        assert not state[name].flags.writeable
    # The formats are idempotent: a model made from that state dict stores the same values.
    again = gpt.GPT.from_weights(cfg, state, gpt.CompileOptions(weights=fmt, disk_cache=False))
    for name, value in again.state_dict().items():
        np.testing.assert_array_equal(value, state[name], err_msg=name)


@pytest.mark.parametrize("fmt", ["f32", "bf16", "q8_0", "q4_0", "q4_1"])
def test_a_model_made_from_its_state_dict_computes_the_same_logits(fmt):
    cfg = config(NANO)
    model = gpt.GPT.from_weights(cfg, exercising_weights(cfg), gpt.CompileOptions(weights=fmt, disk_cache=False))
    again = gpt.GPT.from_weights(cfg, model.state_dict(), gpt.CompileOptions(weights=fmt, disk_cache=False))
    ids = token_ids(cfg, 9)
    np.testing.assert_array_equal(again.forward(ids), model.forward(ids))


@pytest.mark.parametrize("fmt", ["q8_0", "q4_0", "q4_1"])
def test_activations_too_small_to_invert_their_scale_give_finite_logits(fmt):
    # ln_1's scale 1e-38 makes the first c_attn input's blocks have max |x| ~1e-38, whose
    # d = max|x| / 127 has no finite 1 / d: the codes must still be in [-127, 127], not NaN.
    cfg = config(NANO)
    weights = exercising_weights(cfg)
    weights["transformer.h.0.ln_1.weight"] = np.full_like(weights["transformer.h.0.ln_1.weight"], 1e-38)
    weights["transformer.h.0.ln_1.bias"] = np.zeros_like(weights["transformer.h.0.ln_1.bias"])
    model = gpt.GPT.from_weights(cfg, weights, gpt.CompileOptions(weights=fmt, disk_cache=False))
    assert np.all(np.isfinite(model.forward(token_ids(cfg, 9))))


@pytest.mark.parametrize("fmt", ["bf16", "q8_0", "q4_0", "q4_1"])
def test_an_infinite_activation_gives_nan_logits_not_a_crash(fmt):
    # Garbage in, NaN out. The weights themselves must be finite, but ln_1's scale 3e38 overflows
    # the first c_attn input to inf wherever |normalized x| > 1.2 (each row has such elements).
    cfg = config(NANO)
    weights = exercising_weights(cfg)
    weights["transformer.h.0.ln_1.weight"] = np.full_like(weights["transformer.h.0.ln_1.weight"], 3e38)
    model = gpt.GPT.from_weights(cfg, weights, gpt.CompileOptions(weights=fmt, disk_cache=False))
    assert np.all(np.isnan(model.forward(token_ids(cfg, 9))))


@pytest.mark.parametrize("fmt", ["f32", "q8_0", "q4_0", "q4_1"])
def test_model_keeps_no_float32_copy_of_the_weights_it_stores(fmt):
    """Only the arrays compiled code reads in place (biases, LayerNorm, position embeddings; for
    f32 and bf16 also the token embedding) stay on the Python side: traced numpy memory after
    construction is their size, not the matmul weights'."""
    import tracemalloc

    cfg = config(MID)
    tracemalloc.start()
    model = gpt.GPT.random(cfg, options=gpt.CompileOptions(weights=fmt, disk_cache=False))
    held, _ = tracemalloc.get_traced_memory()
    tracemalloc.stop()
    shapes = dict(model._compiled.supplied_parameters())
    borrowed = sum(4 * int(np.prod(shapes[name])) for name in model._compiled.borrowed_parameters())
    everything = sum(4 * int(np.prod(shape)) for shape in shapes.values())
    assert "transformer.h.0.mlp.c_fc.weight" not in model._compiled.borrowed_parameters()
    assert ("transformer.wte.weight" in model._compiled.borrowed_parameters()) == (fmt == "f32")
    assert held < borrowed + 0.05 * everything


@pytest.mark.parametrize("fmt", ["q8_0", "q4_0", "q4_1"])
def test_block_quantized_needs_n_embd_in_whole_blocks(fmt):
    cfg = gpt.GPTConfig(n_layer=1, n_head=2, n_embd=48, vocab_size=64, block_size=16)
    with pytest.raises(ValueError, match=f"{fmt} weights need n_embd \\(48\\) to be a multiple of 32"):
        gpt.GPT.random(cfg, options=gpt.CompileOptions(weights=fmt, disk_cache=False))


def test_bf16_needs_an_even_n_embd():
    # Its lanes pair the two halves of K (n_embd or 4 n_embd); the LM head is always packed.
    cfg = gpt.GPTConfig(n_layer=1, n_head=3, n_embd=33, vocab_size=64, block_size=16)
    with pytest.raises(ValueError, match="bf16 weights need an even n_embd \\(33\\)"):
        gpt.GPT.random(cfg, options=gpt.CompileOptions(weights="bf16", disk_cache=False))


@pytest.mark.parametrize(
    "shape, pos_embedding, lengths",
    # bf16 rounding boundaries come 2^15 times closer together than f32's: shorter sequences.
    [
        (NANO, "learned", (1, 7, 48)),
        (NANO, "rope", (13,)),
        (MID, "learned", (1, 4)),
        (GPT2_SMALL_ONE_LAYER, "learned", (6,)),
    ],
)
def test_bf16_forward_matches_reference_on_rounded_weights(shape, pos_embedding, lengths):
    cfg = config(shape, pos_embedding)
    weights = exercising_weights(cfg)
    model = gpt.GPT.from_weights(cfg, weights, gpt.CompileOptions(weights="bf16", disk_cache=False))
    for length in lengths:
        ids = token_ids(cfg, length)
        expected = bf16_reference(weights, ids, cfg)
        assert relative_error(model.forward(ids), expected) < RTOL
        # The rounding is real: f32 weights give measurably different logits.
        if length > 1:
            f32 = gpt2_logits(weights, ids, cfg.n_layer, cfg.n_head, cfg.pos_embedding)
            assert relative_error(f32, expected) > 10 * RTOL


@pytest.mark.parametrize("threads", [1, 2])
def test_bf16_cached_generation_matches_recomputation(threads):
    cfg = config(NANO)
    model = gpt.GPT.from_weights(
        cfg, exercising_weights(cfg), gpt.CompileOptions(weights="bf16", threads=threads, disk_cache=False)
    )
    prompt = token_ids(cfg, 9).tolist()
    cached = model.generate(prompt, max_new_tokens=30)
    assert cached == model.generate(prompt, max_new_tokens=30, use_cache=False)
    # Prefill then decode gives forward's logits at each position.
    cache = model.new_cache()
    sequence = list(prompt)
    logits = model.prefill(prompt, cache)
    for token in cached[:5]:
        assert relative_error(logits, model.forward(sequence)[-1]) < RTOL
        sequence.append(token)
        logits = model.decode(token, cache)


def test_bf16_is_in_the_ir():
    cfg = config(NANO)
    model = gpt.GPT.random(cfg, options=gpt.CompileOptions(weights="bf16", threads=1, disk_cache=False))
    transformer = model.ir("transformer", seq_len=8)
    assert "tensor<6x32x32xi32>" in transformer  # c_attn [64, 192] as 6 panels of bf16 pairs
    linalg = model.ir("linalg", seq_len=8)
    assert "transformer.lane_dot_bf16" in linalg


def test_formats_compile_separately_in_one_disk_cache(tmp_path):
    cfg = config(NANO)
    f32 = gpt.GPT.random(cfg, options=gpt.CompileOptions(cache_dir=str(tmp_path)))
    f32.forward([1, 2, 3])
    bf16 = gpt.GPT.random(cfg, options=gpt.CompileOptions(cache_dir=str(tmp_path), weights="bf16"))
    bf16.forward([1, 2, 3])
    assert bf16.disk_cache_hits() == 0  # a different program, not the f32 one
    again = gpt.GPT.random(cfg, options=gpt.CompileOptions(cache_dir=str(tmp_path), weights="bf16"))
    again.forward([1, 2, 3])
    assert again.disk_cache_hits() == 1
    for fmt in ("q8_0", "q4_0", "q4_1"):
        quantized = gpt.GPT.random(cfg, options=gpt.CompileOptions(cache_dir=str(tmp_path), weights=fmt))
        quantized.forward([1, 2, 3])
        assert quantized.disk_cache_hits() == 0


@pytest.mark.parametrize(
    "options, message",
    [
        (dict(weights="q8_0", pipeline="fused"), "needs a vectorized pipeline"),
        (dict(weights="fp8"), "weights must be one of"),
        (dict(weights="bf16", pipeline="baseline"), "needs a vectorized pipeline"),
    ],
)
def test_unsupported_weight_options_are_refused(options, message):
    with pytest.raises(ValueError, match=message):
        gpt.CompileOptions(**options)
