"""KV caches in half-width formats (CompileOptions(kv_cache="f16" | "bf16")) and in q8_0 against an
independent float64 numpy GPT whose keys and values are rounded to the format, for a GPT-2 shape
(learned positions) and a Llama shape (rope, grouped-query attention): prefill and decode logits,
the bytes the cache holds, the paged batched step against the contiguous cache, a long greedy
generation against the f32 cache, the arrays' dtype and bytes, the pages a short prefill leaves in
memory, the disk cache keeping the formats apart, and the refusals."""

import dataclasses
import os

import numpy as np
import pytest

import gpt
import quant_reference as ref
from gpt.resources import estimate_memory
from reference import gelu_tanh, layer_norm, rotate_half_rope
from shapes import exercising_weights, token_ids

HALF_FORMATS = ("f16", "bf16")
Q8_BLOCK = 32
# Float32 compute against the float64 reference with the same rounded keys and values: measured
# at 1.4e-7 to 2.9e-7 of the logits' range on both shapes. A key or value whose f32 value (which
# differs between CPUs, with or without FMA) lies next to a rounding midpoint may round one ulp
# away from the reference's: one such bf16 value moved the logits by 1.6e-5 (target x86-64), one
# f16 value would by 8x less. Rounding the cache at all moves them by more: the reference without
# it is 1.9e-5 (f16) and 1.4e-4 (bf16) away (see test_the_reference_tells_the_formats_apart).
RTOL = {"f16": 5e-6, "bf16": 4e-5, "f32": 2e-6}

GPT2_SHAPE = dict(n_layer=2, n_head=4, n_embd=64, vocab_size=256, block_size=128)
LLAMA_SHAPE = dict(
    architecture="llama", n_layer=2, n_head=4, n_kv_head=2, n_embd=64, n_ff=96, vocab_size=300, block_size=128
)
SHAPES = {"gpt2": GPT2_SHAPE, "llama": LLAMA_SHAPE}
# q8_0 needs a head_dim that is a multiple of 32: the same two shapes with heads of 32.
Q8_SHAPES = {"gpt2": dict(GPT2_SHAPE, n_head=2), "llama": dict(LLAMA_SHAPE, n_embd=128)}


def q8_0_rows(values):
    """float32 rows [..., d] as a q8_0 cache stores them: (int8 codes [..., d], float16 scales
    [..., d / 32]). Per block of 32, amax = max|x|: codes round_even(x * (127 / amax)) in float32 (0
    where amax is 0) and the scale fp16(amax / 127), as llama.cpp's vectorized quantize_row_q8_0."""
    x = np.ascontiguousarray(values, np.float32)
    blocks = x.reshape(*x.shape[:-1], -1, Q8_BLOCK)
    amax = np.abs(blocks).max(axis=-1, keepdims=True)
    with np.errstate(divide="ignore"):
        inverse = np.where(amax > 0, np.float32(127) / amax, np.float32(0)).astype(np.float32)
    codes = np.rint((blocks * inverse).astype(np.float32)).astype(np.int8)
    scales = (amax / np.float32(127)).astype(np.float32).astype(np.float16)
    return codes.reshape(x.shape), scales[..., 0]


def dequantized_q8_0(codes, scales):
    """code * scale in float64 (exact), rows [..., d]."""
    blocks = codes.astype(np.float64).reshape(*codes.shape[:-1], -1, Q8_BLOCK)
    return (blocks * scales.astype(np.float64)[..., None]).reshape(codes.shape)


def q8_0_buffer(buffer, head_size):
    """A q8_0 cache's int8 rows [..., head_size * 17/16] read as the layout says: the codes, then
    the fp16 scales' bytes."""
    codes = np.asarray(buffer[..., :head_size])
    scales = np.ascontiguousarray(buffer[..., head_size:]).view(np.float16)
    return codes, scales


def rounded_to(kv_cache, values):
    """`values` (float64) as a `kv_cache` cache stores them: rounded once from float32 (what the
    compiled code computes) to the format, to nearest even."""
    single = np.asarray(values, np.float32)
    if kv_cache == "f16":
        return single.astype(np.float16).astype(np.float64)
    if kv_cache == "bf16":
        return ref.bf16_rounded(single).astype(np.float64)
    if kv_cache == "q8_0":
        return dequantized_q8_0(*q8_0_rows(single))
    return single.astype(np.float64)


def attention(q, k, v):
    """Causal attention, q [H, T, d] over k, v [Hkv, T, d] (each kv head serving H / Hkv query heads)."""
    group = q.shape[0] // k.shape[0]
    k, v = np.repeat(k, group, axis=0), np.repeat(v, group, axis=0)
    t = q.shape[1]
    scores = q @ k.transpose(0, 2, 1) / np.sqrt(q.shape[-1])
    scores = np.where(np.arange(t)[None, :] <= np.arange(t)[:, None], scores, -np.inf)
    p = np.exp(scores - scores.max(axis=-1, keepdims=True))
    return (p / p.sum(axis=-1, keepdims=True)) @ v


def rms_norm(x, weight, eps):
    return x / np.sqrt((x * x).mean(axis=-1, keepdims=True) + eps) * weight


def reference_logits(cfg, weights, ids, kv_cache, stored=None):
    """Logits [T, vocab] in float64 of a GPT-2 (HF names, Conv1D [in, out] weights) or Llama (HF
    names, [out, in] weights) model whose keys (after rotary embedding) and values pass through
    a `kv_cache` cache: rounded to its format before attention reads them, as written. `stored`,
    a list, receives each layer's rounded (keys, values) [Hkv, T, d]."""
    stored = [] if stored is None else stored
    w = {name: np.asarray(value, np.float64) for name, value in weights.items()}
    ids = np.asarray(ids)
    t, d, heads, kv_heads = len(ids), cfg.n_embd, cfg.n_head, cfg.n_kv_head
    hs = d // heads
    positions = np.arange(t)

    def split(x, count):
        return x.reshape(t, count, hs).transpose(1, 0, 2)

    if cfg.architecture == "llama":
        x = w["model.embed_tokens.weight"][ids]
        for i in range(cfg.n_layer):
            p = f"model.layers.{i}."
            h = rms_norm(x, w[p + "input_layernorm.weight"], cfg.layer_norm_eps)
            q = split(h @ w[p + "self_attn.q_proj.weight"].T, heads)
            k = split(h @ w[p + "self_attn.k_proj.weight"].T, kv_heads)
            v = split(h @ w[p + "self_attn.v_proj.weight"].T, kv_heads)
            q, k = rotate_half_rope(q, positions, cfg.rope_base), rotate_half_rope(k, positions, cfg.rope_base)
            stored.append((rounded_to(kv_cache, k), rounded_to(kv_cache, v)))
            a = attention(q, *stored[-1]).transpose(1, 0, 2).reshape(t, d)
            x = x + a @ w[p + "self_attn.o_proj.weight"].T
            h = rms_norm(x, w[p + "post_attention_layernorm.weight"], cfg.layer_norm_eps)
            gate, up = h @ w[p + "mlp.gate_proj.weight"].T, h @ w[p + "mlp.up_proj.weight"].T
            x = x + (gate / (1.0 + np.exp(-gate)) * up) @ w[p + "mlp.down_proj.weight"].T
        x = rms_norm(x, w["model.norm.weight"], cfg.layer_norm_eps)
        head = w["lm_head.weight"] if "lm_head.weight" in w else w["model.embed_tokens.weight"]
        return x @ head.T
    x = w["transformer.wte.weight"][ids] + w["transformer.wpe.weight"][positions]
    for i in range(cfg.n_layer):
        p = f"transformer.h.{i}."
        h = layer_norm(x, w[p + "ln_1.weight"], w[p + "ln_1.bias"], cfg.layer_norm_eps)
        qkv = h @ w[p + "attn.c_attn.weight"] + w[p + "attn.c_attn.bias"]
        q, k, v = (split(qkv[:, j * d : (j + 1) * d], heads) for j in range(3))
        stored.append((rounded_to(kv_cache, k), rounded_to(kv_cache, v)))
        a = attention(q, *stored[-1]).transpose(1, 0, 2).reshape(t, d)
        x = x + a @ w[p + "attn.c_proj.weight"] + w[p + "attn.c_proj.bias"]
        h = layer_norm(x, w[p + "ln_2.weight"], w[p + "ln_2.bias"], cfg.layer_norm_eps)
        h = gelu_tanh(h @ w[p + "mlp.c_fc.weight"] + w[p + "mlp.c_fc.bias"])
        x = x + h @ w[p + "mlp.c_proj.weight"] + w[p + "mlp.c_proj.bias"]
    x = layer_norm(x, w["transformer.ln_f.weight"], w["transformer.ln_f.bias"], cfg.layer_norm_eps)
    return x @ w["transformer.wte.weight"].T


def shape_weights(name, seed=0, shapes=SHAPES):
    cfg = gpt.GPTConfig(**shapes[name])
    # (A Llama model's state_dict gives its HF names; random_weights the compiler's fused ones.)
    weights = exercising_weights(cfg, seed) if name == "gpt2" else gpt.GPT.random(cfg, seed).state_dict()
    if name == "llama":
        # Perturbed norm scales: unit scales would hide a norm bug.
        rng = np.random.default_rng(seed + 7)
        for key, value in weights.items():
            if key.endswith("norm.weight"):
                weights[key] = (1.0 + rng.standard_normal(value.shape) * 0.1).astype(np.float32)
    return cfg, weights


def options(kv_cache, **more):
    return gpt.CompileOptions(kv_cache=kv_cache, disk_cache=False, **more)


@pytest.fixture(scope="module", params=list(SHAPES))
def shape(request):
    cfg, weights = shape_weights(request.param)
    ids = token_ids(cfg, 19, seed=3)
    return request.param, cfg, weights, ids


@pytest.fixture(scope="module", params=list(Q8_SHAPES))
def q8_shape(request):
    cfg, weights = shape_weights(request.param, shapes=Q8_SHAPES)
    ids = token_ids(cfg, 19, seed=3)
    return request.param, cfg, weights, ids


def cached_logits(model, ids, prompt):
    """Logits of every position from `prompt` on: a prefill of ids[:prompt], then one decode per token."""
    cache = model.new_cache(64)
    rows = [model.prefill(ids[:prompt], cache)]
    rows += [model.decode(int(token), cache) for token in ids[prompt:]]
    return np.array(rows), cache


def relative(actual, expected):
    return float(np.abs(np.asarray(actual, np.float64) - expected).max() / np.abs(expected).max())


def format_bits(kv_cache, values):
    """The 16-bit patterns of float64 `values` already representable in `kv_cache`'s format."""
    if kv_cache == "f16":
        return values.astype(np.float16).view(np.uint16)
    return ref.bf16_bits(values.astype(np.float32))


def ulps_apart(kv_cache, cached, expected):
    """How many representable values of the format lie between each cached element (the buffer's
    own 16-bit patterns) and the reference's, for finite values of one sign."""
    a = np.asarray(cached).view(np.uint16).astype(np.int64)
    b = format_bits(kv_cache, expected).astype(np.int64)
    same_sign = (a >> 15) == (b >> 15)
    return np.where(same_sign, np.abs(a - b), np.abs(a & 0x7FFF) + np.abs(b & 0x7FFF))


@pytest.mark.parametrize("kv_cache", HALF_FORMATS)
def test_prefill_and_decode_match_the_reference_with_rounded_keys_and_values(shape, kv_cache):
    name, cfg, weights, ids = shape
    model = gpt.GPT.from_weights(cfg, weights, options(kv_cache))
    prompt = 13
    logits, cache = cached_logits(model, ids, prompt)
    stored = []
    expected = reference_logits(cfg, weights, ids, kv_cache, stored)[prompt - 1 :]
    assert relative(logits, expected) <= RTOL[kv_cache], (name, kv_cache)
    # The cache holds the format's values, not float32 ones: every key and value written is the
    # reference's, rounded to nearest even, or (next to a midpoint) its neighbour.
    assert cache.dtype == {"f16": np.float16, "bf16": np.uint16}[kv_cache]
    for layer, (keys, values) in enumerate(stored):
        for buffer, expected_rows in ((cache._keys, keys), (cache._values, values)):
            apart = ulps_apart(kv_cache, buffer[layer, :, : len(ids)], expected_rows)
            assert apart.max() <= 1 and np.mean(apart > 0) < 0.01, (name, kv_cache, layer, apart.max())


@pytest.mark.parametrize("kv_cache", HALF_FORMATS)
def test_the_reference_tells_the_formats_apart(shape, kv_cache):
    """The tolerance above is tight enough to see the rounding: the reference without it (an f32
    cache) is further from the half-width model than RTOL, for every shape and format."""
    name, cfg, weights, ids = shape
    model = gpt.GPT.from_weights(cfg, weights, options(kv_cache))
    logits, _ = cached_logits(model, ids, 13)
    unrounded = reference_logits(cfg, weights, ids, "f32")[12:]
    assert relative(logits, unrounded) > 2 * RTOL[kv_cache], (name, kv_cache)


def test_an_f32_cache_is_unchanged(shape):
    name, cfg, weights, ids = shape
    model = gpt.GPT.from_weights(cfg, weights, options("f32"))
    logits, cache = cached_logits(model, ids, 13)
    assert cache.dtype == np.float32
    assert relative(logits, reference_logits(cfg, weights, ids, "f32")[12:]) <= RTOL["f32"]


@pytest.mark.parametrize("kv_cache", HALF_FORMATS)
def test_paged_batched_step_equals_the_contiguous_cache(shape, kv_cache):
    """Two sequences through the paged pool, a prompt each then decode steps together, against each
    sequence's prefill and decode over a contiguous cache of the same format."""
    paged_against_contiguous(shape, kv_cache, RTOL[kv_cache])


def paged_against_contiguous(shape, kv_cache, tolerance):
    name, cfg, weights, ids = shape
    model = gpt.GPT.from_weights(cfg, weights, options(kv_cache))
    first, second = [int(t) for t in ids[:11]], [int(t) for t in token_ids(cfg, 6, seed=9)]
    follow = [int(t) for t in token_ids(cfg, 4, seed=10)]
    expected = []
    for prompt in (first, second):
        logits, _ = cached_logits(model, prompt + follow, len(prompt))
        expected.append(logits)
    pool = model.new_block_pool(num_blocks=8, block_size=4)
    assert pool.keys.dtype == {"f16": np.float16, "bf16": np.uint16, "q8_0": np.int8}[kv_cache]
    tables = np.array([[0, 1, 2, 3], [4, 5, 6, 7]])
    got = [[], []]
    step = model.step_batch(pool, first + second, [len(first), len(second)], [0, 0], tables)
    for b in range(2):
        got[b].append(step[b])
    for i, token in enumerate(follow):
        step = model.step_batch(pool, [token, token], [1, 1], [len(first) + i, len(second) + i], tables)
        for b in range(2):
            got[b].append(step[b])
    for b in range(2):
        difference = relative(got[b], expected[b].astype(np.float64))
        print(f"{name} {kv_cache} sequence {b}: paged vs contiguous {difference:.2g}")
        # The two programs compute the same keys and values in another order (a batch of tokens,
        # a bucketed prefill): the tolerance of the reference comparison, which allows for one
        # of them to round to the neighbouring value.
        assert difference <= tolerance, (name, kv_cache, b)


def test_half_width_caches_hold_half_the_bytes(shape):
    name, cfg, weights, _ = shape
    models = {fmt: gpt.GPT.from_weights(cfg, weights, options(fmt)) for fmt in ("f32",) + HALF_FORMATS}
    full = models["f32"].new_cache(128)
    full_pool = models["f32"].new_block_pool(16, 8)
    assert full.nbytes == 2 * cfg.n_layer * cfg.n_kv_head * 128 * cfg.head_size * 4
    for fmt in HALF_FORMATS:
        cache, pool = models[fmt].new_cache(128), models[fmt].new_block_pool(16, 8)
        assert cache.nbytes * 2 == full.nbytes, fmt
        assert (pool.keys.nbytes + pool.values.nbytes) * 2 == full_pool.keys.nbytes + full_pool.values.nbytes


def resident_pages(array):
    """How many of the 4 KiB pages `array` spans are in memory, from /proc/self/pagemap (bit 63 of
    each page's entry: present; readable without privileges)."""
    first, last = array.ctypes.data // 4096, (array.ctypes.data + array.nbytes - 1) // 4096
    with open("/proc/self/pagemap", "rb") as pagemap:
        pagemap.seek(first * 8)
        entries = np.frombuffer(pagemap.read((last - first + 1) * 8), np.uint64)
    return int(np.count_nonzero(entries >> np.uint64(63)))


@pytest.mark.skipif(not os.path.exists("/proc/self/pagemap"), reason="reads Linux's /proc/self/pagemap")
def test_a_cache_holds_the_pages_its_positions_use():
    """Every cache has the context's slots, a short one too, and a head's positions lie the
    context's rows apart (2 MiB here): four tokens write one page per head and layer. In
    transparent huge pages (numpy's choice for large arrays) they made the kernel zero every 2 MiB
    page of the buffers, the whole cache, on the first prefill."""
    cfg = gpt.GPTConfig(**dict(LLAMA_SHAPE, n_embd=256, block_size=8192))
    model = gpt.GPT.random(cfg, seed=1, options=options("f32"))
    cache = model.new_cache(16)
    assert cache.slots == 8192 and cache.max_len == 16
    model.prefill([1, 2, 3, 4], cache)
    assert cache.nbytes == 2 * cfg.n_layer * cfg.n_kv_head * 8192 * cfg.head_size * 4  # 16 MiB
    written = cfg.n_layer * cfg.n_kv_head  # pages: 4 rows of 256 bytes in each head's first page
    for buffer in (cache._keys, cache._values):
        # A prefill writes its bucket's padded positions too, and the attention reads a tile of
        # positions at a time: a read of a page never written maps the kernel's zero page (present,
        # but no memory). Measured: 2 pages a head here, and 1,539 of the 2,048 in huge pages.
        resident = resident_pages(buffer)
        assert resident <= 4 * written, (resident, buffer.nbytes // 4096)
    # The prefill wrote into these arrays' own pages (not into a copy): its keys are there.
    assert np.all(cache._keys[:, :, :4] != 0) and np.all(cache._values[:, :, :4] != 0)


def memory_and_swap_bytes():
    with open("/proc/meminfo") as meminfo:
        fields = {line.split(":")[0]: int(line.split()[1]) * 1024 for line in meminfo}
    return fields["MemTotal"] + fields["SwapTotal"]


def heuristic_overcommit():
    """Whether Linux overcommits heuristically (mode 0): one map larger than memory and swap is
    refused, unless it is MAP_NORESERVE."""
    if not os.path.exists("/proc/sys/vm/overcommit_memory"):
        return False
    with open("/proc/sys/vm/overcommit_memory") as mode:
        return mode.read().strip() == "0"


@pytest.mark.skipif(not heuristic_overcommit(), reason="needs Linux's heuristic overcommit (mode 0)")
def test_a_cache_buffer_larger_than_memory_is_address_space_only():
    """A cache reserves its model's whole context (an 8B model's 128K positions in f32 are 32 GiB
    a buffer): the buffer is reserved with MAP_NORESERVE, which the kernel does not weigh against
    memory and swap, and holds only the pages written."""
    size = 2 * memory_and_swap_bytes()
    buffer = gpt.cache.zeroed_in_small_pages((size,), np.uint8)
    buffer[-1] = 7
    buffer[size // 2] = 9
    assert buffer[-1] == 7 and buffer[size // 2] == 9 and buffer[0] == 0
    assert resident_pages(buffer[-4096:]) == 1


def test_a_cache_whose_context_cannot_be_reserved_holds_its_own_length(monkeypatch):
    """Where the context's address space is refused (MemoryError), a cache holds max_len slots, as
    caches did before they all had the context's, and computes the same logits."""
    cfg = gpt.GPTConfig(**LLAMA_SHAPE)
    model = gpt.GPT.random(cfg, seed=2, options=options("f32"))
    ids = [int(t) for t in token_ids(cfg, 12, seed=3)]
    whole = model.new_cache(24)
    expected = [model.prefill(ids[:8], whole)] + [model.decode(t, whole) for t in ids[8:]]
    reserve = gpt.cache.zeroed_in_small_pages

    def refuse_the_context(shape, dtype):
        if shape[2] == cfg.block_size:
            raise MemoryError("refused")
        return reserve(shape, dtype)

    monkeypatch.setattr(gpt.cache, "zeroed_in_small_pages", refuse_the_context)
    own = model.new_cache(24)
    assert own.slots == 24 and whole.slots == cfg.block_size
    got = [model.prefill(ids[:8], own)] + [model.decode(t, own) for t in ids[8:]]
    np.testing.assert_allclose(np.array(got), np.array(expected), rtol=RTOL["f32"], atol=1e-6)
    assert {(1, 24), (1, cfg.block_size)} <= set(model.compiled_steps())


LONG_SHAPE = dict(architecture="llama", n_layer=2, n_head=4, n_kv_head=2, n_embd=128, n_ff=256, vocab_size=512)


@pytest.fixture(scope="module")
def long_generation():
    """A Llama-shaped model (rope, GQA) generating 320 greedy tokens with an f32 cache: its config,
    weights, the prompt and the f32 run's tokens and logits."""
    cfg = gpt.GPTConfig(**LONG_SHAPE, block_size=512)
    weights = gpt.GPT.random(cfg, 5).state_dict()
    model = gpt.GPT.from_weights(cfg, weights, options("f32"))
    prompt = [int(t) for t in token_ids(cfg, 16, seed=4)]
    cache = model.new_cache(512)
    logits = [model.prefill(prompt, cache)]
    tokens = []
    for _ in range(320):
        tokens.append(int(np.argmax(logits[-1])))
        logits.append(model.decode(tokens[-1], cache))
    return cfg, weights, prompt, tokens, np.array(logits)


@pytest.mark.parametrize("kv_cache", HALF_FORMATS + ("q8_0",))
def test_a_long_generation_stays_close_to_the_f32_cache(long_generation, kv_cache, record_property):
    """The f32 run's tokens fed to a half-width cache (the same sequence, so each position's logits
    compare): the largest logit difference stays small against the logits' own range, and greedy
    decoding of the half-width cache picks the f32 cache's token at nearly every position."""
    cfg, weights, prompt, tokens, expected = long_generation
    model = gpt.GPT.from_weights(cfg, weights, options(kv_cache))
    cache = model.new_cache(512)
    logits = [model.prefill(prompt, cache)]
    for token in tokens:
        logits.append(model.decode(token, cache))
    logits = np.array(logits)
    difference = float(np.abs(logits - expected).max())
    spread = float(np.abs(expected).max())
    agreement = float(np.mean(np.argmax(logits, axis=1) == np.argmax(expected, axis=1)))
    record_property("max_abs_logit_difference", difference)
    record_property("greedy_agreement", agreement)
    print(
        f"kv_cache={kv_cache}: max |logit - f32| {difference:.3g} (max |logit| {spread:.3g}), "
        f"greedy agreement {agreement:.4f} over {len(logits)} positions"
    )
    assert difference > 0  # the format is in use
    # Measured: 6e-5 (f16), 4e-4 (bf16) and 1.16e-3 (q8_0) of the logits' range over 321 positions,
    # every greedy token the same. The half-width bounds leave 50x: f16 keeps 11 bits of mantissa,
    # bf16 8; q8_0's is 2.6x its figure (its error is set by its 8-bit codes, not by rounding luck).
    # The peer: on SmolLM2-135M's q8_0 file over 320 positions (the f32 run's tokens fed), a q8_0
    # cache moved the logits by 8.0e-3 of their range here and by 2.4e-2 in llama.cpp 0.3.36's
    # (llama-cpp-python, flash attention, type_k = type_v = Q8_0, against its F32 cache).
    assert difference <= {"f16": 3e-3, "bf16": 2e-2, "q8_0": 3e-3}[kv_cache] * spread
    assert agreement >= 0.95


def test_the_disk_cache_keeps_formats_apart(tmp_path):
    """A program compiled for an f32 cache is not served for an f16 one (and back): the second model
    compiles its own, and computes with its own format."""
    cfg, weights = shape_weights("gpt2")
    ids = token_ids(cfg, 19, seed=3)
    results = {}
    for fmt in ("f32", "f16", "f32"):
        model = gpt.GPT.from_weights(cfg, weights, gpt.CompileOptions(kv_cache=fmt, cache_dir=str(tmp_path)))
        logits, _ = cached_logits(model, ids, 13)
        results.setdefault(fmt, []).append((model.disk_cache_hits(), logits))
    (f32_hits, f32_logits), (again_hits, again_logits) = results["f32"]
    f16_hits, f16_logits = results["f16"][0]
    assert f32_hits == 0 and f16_hits == 0 and again_hits > 0
    np.testing.assert_array_equal(again_logits, f32_logits)
    assert relative(f16_logits, reference_logits(cfg, weights, ids, "f16")[12:]) <= RTOL["f16"]


def test_step_refuses_arrays_of_another_format():
    cfg, weights = shape_weights("gpt2")
    model = gpt.GPT.from_weights(cfg, weights, options("f16"))
    shape = (cfg.n_kv_head, 16, cfg.head_size)
    wrong = [np.zeros(shape, np.float32) for _ in range(cfg.n_layer)]
    with pytest.raises(ValueError, match="kv_cache='f16'.*float16 arrays, got float32"):
        model._compiled.step(np.array([1]), 0, 16, wrong, wrong)


def test_q8_0_refuses_a_head_dim_not_a_multiple_of_32():
    cfg, weights = shape_weights("gpt2")  # heads of 16
    message = "kv_cache='q8_0' stores keys and values in blocks of 32: head_dim must be a multiple of 32, got 16"
    with pytest.raises(ValueError, match=message):
        gpt.GPT.from_weights(cfg, weights, options("q8_0"))
    # The compiled model's own check, for callers of the extension.
    with pytest.raises(ValueError, match=message):
        gpt._gpt.CompiledModel(cfg, pipeline="default", threads=1, kv_cache="q8_0")


# q8_0 against the reference with q8_0-rounded keys and values (the float32 keys the compiled code
# computes quantized as q8_0_rows does): measured at 3.4e-7 (llama) and 4.1e-7 (gpt2) of the
# logits' range, every stored value equal to the reference's. A value whose float32 differs on
# another CPU (with or without FMA) next to a code's rounding midpoint may take the neighbouring
# code (a step of max|x| / 127 of its block); the bound allows for a few. The reference with an
# f32 cache is 5.8e-4 and 8.7e-4 away (test_q8_0_is_told_apart_from_f32).
Q8_RTOL = 2e-5


def test_q8_0_prefill_and_decode_match_the_reference_and_store_q8_0_blocks(q8_shape):
    name, cfg, weights, ids = q8_shape
    model = gpt.GPT.from_weights(cfg, weights, options("q8_0"))
    prompt = 13
    logits, cache = cached_logits(model, ids, prompt)
    stored = []
    expected = reference_logits(cfg, weights, ids, "q8_0", stored)[prompt - 1 :]
    difference = relative(logits, expected)
    print(f"{name} q8_0 vs reference {difference:.3g}")
    assert difference <= Q8_RTOL, name
    # Each row of the int8 buffers is its head_size codes, then its fp16 scales as bytes: read so,
    # every key and value is the reference's q8_0 value, or (a code next to a midpoint) one step
    # away from it.
    assert cache.dtype == np.int8
    assert cache._keys.shape[-1] == cfg.head_size * 17 // 16
    for layer, (keys, values) in enumerate(stored):
        for buffer, expected_rows in ((cache._keys, keys), (cache._values, values)):
            codes, scales = q8_0_buffer(buffer[layer, :, : len(ids)], cfg.head_size)
            assert np.all(np.abs(codes.astype(np.int64)) <= 127)
            got = dequantized_q8_0(codes, scales)
            step = np.repeat(scales.astype(np.float64), Q8_BLOCK, axis=-1)
            apart = np.abs(got - expected_rows)
            assert np.all(apart <= 1.01 * step), (name, layer)
            assert np.mean(apart > 0) < 0.01, (name, layer)


def test_q8_0_is_told_apart_from_f32(q8_shape):
    """The tolerance above sees the quantization: the f32-cache reference is far outside it."""
    name, cfg, weights, ids = q8_shape
    model = gpt.GPT.from_weights(cfg, weights, options("q8_0"))
    logits, _ = cached_logits(model, ids, 13)
    assert relative(logits, reference_logits(cfg, weights, ids, "f32")[12:]) > 10 * Q8_RTOL, name


def test_q8_0_paged_batched_step_equals_the_contiguous_cache(q8_shape):
    paged_against_contiguous(q8_shape, "q8_0", Q8_RTOL)


def test_q8_0_caches_hold_34_bytes_per_32_values(q8_shape):
    """new_cache() and the block pool hold 34/32 bytes per value, what the memory estimate counts."""
    name, cfg, weights, _ = q8_shape
    model = gpt.GPT.from_weights(cfg, weights, options("q8_0"))
    values = 2 * cfg.n_layer * cfg.n_kv_head * 128 * cfg.head_size
    cache, pool = model.new_cache(128), model.new_block_pool(16, 8)
    assert cache.nbytes == values * 34 // 32
    assert pool.keys.nbytes + pool.values.nbytes == values * 34 // 32
    estimate = estimate_memory(dataclasses.replace(cfg, block_size=128), kv_cache="q8_0")
    assert estimate.kv_cache == cache.nbytes


def test_q8_0_greedy_tokens_equal_the_f32_caches():
    """A short greedy generation on a small model picks the same tokens from a q8_0 cache as from
    an f32 one."""
    cfg, weights = shape_weights("llama", shapes=Q8_SHAPES)
    prompt = [int(t) for t in token_ids(cfg, 8, seed=5)]
    runs = {}
    for fmt in ("f32", "q8_0"):
        model = gpt.GPT.from_weights(cfg, weights, options(fmt))
        cache = model.new_cache(64)
        tokens = [int(np.argmax(model.prefill(prompt, cache)))]
        for _ in range(31):
            tokens.append(int(np.argmax(model.decode(tokens[-1], cache))))
        runs[fmt] = tokens
    assert runs["q8_0"] == runs["f32"]


def test_q8_0_step_refuses_arrays_of_another_format_or_shape():
    cfg, weights = shape_weights("gpt2", shapes=Q8_SHAPES)
    model = gpt.GPT.from_weights(cfg, weights, options("q8_0"))
    floats = [np.zeros((cfg.n_kv_head, 16, cfg.head_size), np.float32) for _ in range(cfg.n_layer)]
    with pytest.raises(ValueError, match="kv_cache='q8_0'.*int8 arrays, got float32"):
        model._compiled.step(np.array([1]), 0, 16, floats, floats)
    # Rows of head_size bytes hold no room for the scales.
    short = [np.zeros((cfg.n_kv_head, 16, cfg.head_size), np.int8) for _ in range(cfg.n_layer)]
    with pytest.raises(ValueError, match=r"wrong shape: a kv_cache='q8_0' model takes \[2, 16, 34\]"):
        model._compiled.step(np.array([1]), 0, 16, short, short)
