"""GGUF files of the Llama family for GPT.from_gguf: llama.cpp's `llama` architecture (Llama 2 and
3, SmolLM2, TinyLlama, Mistral), `qwen2` (Qwen2 and 2.5, DeepSeek-R1-Distill-Qwen) and `phi3`
(Phi-3 mini: attn_qkv and ffn_up hold q/k/v and gate/up fused) and `gemma3` (Gemma 3's text model:
norms stored as 1 + w, head_dim as attention.key_length, every sixth layer global and the others
windowed; _gemma3_fields), read into a GPTConfig, weights by
HF name (LlamaForCausalLM's, Qwen2ForCausalLM's and Phi3ForCausalLM's, in HF's layouts:
gpt.architectures' tables) and the file's tokenizer (gpt.gguf_tokenizer).

Hyperparameters: {arch}.block_count, .context_length, .embedding_length, .feed_forward_length,
.attention.head_count, .attention.head_count_kv (grouped-query attention), .attention.
layer_norm_rms_epsilon, .attention.sliding_window (phi3: attention_window), .rope.freq_base,
.rope.scaling.type; the vocabulary size is
token_embd.weight's row count (and must be the token list's). A file without output.weight ties
the LM head to the token embedding, as llama.cpp does.

q/k rows. llama.cpp's converter permutes each head's rows of a `llama` file's attn_q and attn_k
(convert_hf_to_gguf.py, LlamaModel.permute: HF's rotate-half pairs (j, j + head_size/2) become
adjacent rows (2j, 2j + 1), which its rope mode NORM rotates). This loader undoes it, so that the
weights are HF's and the config says rope_layout "half", the same model from_pretrained builds
from the HF checkpoint; `qwen2` files are stored in HF's order (rope mode NEOX) and need nothing.

Llama 3's rope scaling: llama.cpp's converter writes no metadata for it but a rope_freqs.weight
tensor of per-frequency divisors; the RopeScaling that reproduces them exactly is recovered.

Tensor types: F32, F16, BF16 and every type gguf.quants dequantizes (llama.cpp's block types,
Q2_K to Q6_K, ...) are read into float32 at load; the compiled model then stores them in
CompileOptions.weights' format. Matmul weights whose blocks convert to `keep_quantized`'s format
without widening (gpt.kept_formats: their own, and others its table names) are kept
as blocks and compute on the int8 dot-product path; with keep_quantized="auto" each is kept in the
format nearest its own (a Q4_K_M file: q4_k and q6_k side by side, v a matmul of its own where it
is Q6_K beside Q4_K q and k)."""

import dataclasses
import math
from collections.abc import Iterable

import numpy as np

from gpt import architectures, kept_formats
from gpt.config import GPTConfig, RopeScaling
from gpt.errors import ModelFileError
from gpt.gguf.container import (
    QuantizedTensor,
    _check_ne,
    _check_tensor_names,
    _dequantize,
    _Metadata,
    _norm_epsilon,
    _open_gguf,
    _vocab_size,
)
from gpt.gguf_tokenizer import GGUFTokenizer, read_tokenizer
from gpt.resources import check_fits_in_memory
from gpt.weights import _checked_config

ARCHITECTURES = ("llama", "qwen2", "phi3", "gemma3")
# llama.cpp's per-frequency rope divisors (Llama 3's scaling), [head_size / 2] float32.
_ROPE_FREQS = "rope_freqs.weight"
# The architectures whose {arch}.attention.sliding_window is attention_window.
_WINDOWED = ("phi3",)
# Phi-3's longrope (su) scaling, as llama.cpp's converter writes it (Phi-3 128k): not implemented.
_LONGROPE = ("rope_factors_long.weight", "rope_factors_short.weight")


def load(path, keep_quantized: str | None = None) -> tuple[GPTConfig, dict, GGUFTokenizer | None]:
    """Reads a `llama` or `qwen2` GGUF file: (GPTConfig, weights by HF name, tokenizer or None).
    `keep_quantized` (one of kept_formats.KEPT_QUANTIZED, or "auto"): matmul weights whose blocks convert to that
    format (or with "auto" each to the one nearest its type; gpt.kept_formats), and with a
    block-quantized format the LM head's table in q8_0, are returned as gguf_file.QuantizedTensor,
    their blocks as in the file, unread (q/k rows of a `llama` file un-permuted): the compiled model
    converts them, and refuses a NaN or infinite fp16 scale, naming the weight and block. Raises
    FileNotFoundError for a missing file and gpt.ModelFileError naming the file and key or tensor
    for anything it cannot read."""

    path, reader, meta, architecture = _open_gguf(path)
    if architecture not in ARCHITECTURES:
        raise ModelFileError(
            f"{path}: general.architecture {architecture!r} is not a Llama-family architecture "
            f"({', '.join(ARCHITECTURES)})"
        )
    return read(reader, meta, path, architecture, keep_quantized)


def read(
    reader,
    meta: _Metadata,
    path: str,
    architecture: str,
    keep_quantized: str | None = None,
    formats_given: Iterable[str] = (),
):
    """`load` on a file already opened: gguf_file.load_gguf hands its reader and metadata here for
    the architectures of ARCHITECTURES. `formats_given` (CompileOptions.weight_formats' names):
    where they name a layer's v projection of its own, as an "auto" load's options do for a file
    that keeps v apart, v is apart whatever the formats."""
    arch = architecture
    tensors = {tensor.name: tensor for tensor in reader.tensors}
    config = _v_apart(_config(meta, tensors, path, arch), tensors, keep_quantized, formats_given)
    # The format each matmul weight is kept in, by GGUF name (the others are widened).
    plan = _kept_formats(config, tensors, keep_quantized)
    # Before dequantizing for a header that asks too much: the weights this load holds (the cache is
    # checked by the model, at the context it is asked for).
    stored = _stored_format(plan, tensors, keep_quantized)
    check_fits_in_memory(config, stored, kept_quantized=bool(plan), loading=True)

    # What to take off the file's values to get HF's: llama.cpp's converter stores Gemma's norms as
    # 1 + w, and to_compiler adds the 1 again (architectures.Parameter.shift).
    shifts = {architectures.layer_name(p.gguf, i): p.shift for p, i in architectures.parameters(config) if p.shift}
    # GGUF name -> (HF name, numpy shape) of every parameter this config takes.
    expected = {
        p.gguf.replace("{i}", str(i)) if i is not None else p.gguf: (
            p.hf.replace("{i}", str(i)) if i is not None else p.hf,
            architectures.gguf_shape(p, config),
        )
        for p, i in architectures.parameters(config)
    }
    longrope = [name for name in _LONGROPE if name in tensors]
    if longrope:
        raise ModelFileError(f"{path}: tensor {longrope[0]} is longrope (su) rope scaling, which is not supported")
    _check_tensor_names(path, tensors, expected, (_ROPE_FREQS,), arch)

    weights: dict[str, np.ndarray | QuantizedTensor] = {}
    for name, (hf_name, shape) in expected.items():
        tensor = tensors[name]
        heads = _permuted_heads(name, config) if arch == "llama" else None
        keep_as = plan.get(name) or _kept_head_format(
            name, tensor.tensor_type.name, config, stored, auto=keep_quantized == "auto"
        )
        if keep_as:
            _check_ne(tensor, shape, path)
            # A read-only view of the file's memory map, never read here: the compiled model converts
            # the blocks into the kept format as it repacks them from the page cache into its own
            # layout, and refuses a NaN or infinite fp16 scale there, naming the weight and block
            # (a packed-weights cache hit reads none of them). llama.cpp's q/k permutation is undone
            # as set_weights reads the rows (UnpermutedRows).
            blocks = tensor.data
            # Parts of different types (a Q6_K v beside Q4_K q and k): rows of different bytes,
            # which to_compiler_quantized would refuse to fuse; set_weights reads each part's bytes
            # by its own type, so they go as pairs of bytes, a view of the same memory.
            pairs = len(set(keep_as.partition(":")[2].split(","))) > 1
            if heads:
                weights[hf_name] = DeferredQuantizedTensor(keep_as, UnpermutedRows(blocks, heads, pairs))
            else:
                weights[hf_name] = QuantizedTensor(keep_as, blocks.reshape(-1, 2) if pairs else blocks)
            continue
        array = _dequantize(tensor, shape, path)
        if name in shifts:
            array = array - np.float32(shifts[name])
        weights[hf_name] = np.ascontiguousarray(unpermute_rows(array, heads)) if heads else array
    tokenizer = read_tokenizer(meta, path, config.vocab_size)
    # The memory map closes once the kept blocks' views die, after the model has repacked them.
    del tensors, reader
    return config, weights, tokenizer


def _kept_formats(config: GPTConfig, tensors: dict, keep_quantized: str | None) -> dict[str, str]:
    """GGUF name -> the format the layers' matmul weights are given to the model in as blocks (the
    others are widened): per compiler weight, since q, k and v (and gate and up) are fused into one
    weight of one format (kept_formats.given_format: "q8_0:q4_k,q4_k,q6_k" for parts the model
    converts as it repacks them)."""
    groups = [
        [architectures.layer_name(p.gguf, i) for p, i in parts]
        for parts in architectures.compiler_groups(config).values()
        if parts[0][0].linear
    ]
    plan: dict[str, str] = {}
    for names in groups:
        if any(name not in tensors for name in names):
            continue  # refused by name below
        fmt = kept_formats.given_format((tensors[name].tensor_type.name for name in names), keep_quantized)
        if fmt:
            plan.update(dict.fromkeys(names, fmt))
    return plan


def _v_apart(config: GPTConfig, tensors: dict, keep_quantized: str | None, formats_given: Iterable[str]) -> GPTConfig:
    """`config` with v's projection a matmul of its own (GPTConfig.separate_v_proj) where that keeps
    some weight in another format than the fused q/k/v would: fused, the three are stored in the
    most precise of their kept formats (a Q4_K q and k beside a Q6_K v: all three q8_0, 62 MB more
    per decode step at SmolLM2-1.7B's shape); apart, q and k stay q4_k and v q6_k, the file's own
    blocks, as llama.cpp runs them. A file whose q, k and v keep one format stays fused, unless
    `formats_given` names a v projection of its own."""
    if not any(p.apart for p in config.spec.parameters):
        return config
    apart = dataclasses.replace(config, separate_v_proj=True)
    own = {architectures.layer_name(p.apart, i) for p, i in architectures.parameters(apart) if p.apart and p.linear}
    if own.intersection(formats_given):
        return apart
    if not keep_quantized:
        return config
    fused_plan, apart_plan = (_kept_formats(c, tensors, keep_quantized) for c in (config, apart))
    differs = any(
        kept_formats.stored_format(fused_plan[name]) != kept_formats.stored_format(fmt)
        for name, fmt in apart_plan.items()
        if name in fused_plan
    )
    return apart if differs else config


def _stored_format(plan: dict[str, str], tensors: dict, keep_quantized: str | None) -> str:
    """The format most of the matmul weights are stored in (by element count): what the memory
    estimate and the LM head's format go by."""
    if keep_quantized != "auto":
        return keep_quantized if keep_quantized in kept_formats.KEPT_QUANTIZED else "f32"
    if not plan:
        return "f32"
    elements: dict[str, int] = {}
    for name, fmt in plan.items():
        stored = kept_formats.stored_format(fmt)
        elements[stored] = elements.get(stored, 0) + math.prod(int(n) for n in tensors[name].shape)
    return max(elements, key=elements.get)


def _kept_head_format(name: str, type_name: str, config: GPTConfig, stored: str, auto: bool) -> str | None:
    """The [V, D] tables: a model whose matmul weights are block-quantized stores the LM head and
    the token table the lookup reads in q8_0 (the 4-bit formats too, as llama.cpp keeps its output
    table at higher precision; Parameters.cpp), so the file's blocks are kept when they convert to
    q8_0 (Q8_0 as it is; Q6_K or Q4_K, the types llama.cpp's quantizer gives them, by the model as
    it repacks them, with no float32 table): the token embedding, and an untied output.weight.
    Under weights="auto" (`auto`), a Q6_K head is kept in q6_k, its own 6.5625 bits, as llama.cpp
    runs it (native_options): an untied output.weight (only its matmul reads it), and a tied token
    table (the lookup, transformer.packed_embedding, reads q6_k too); an untied model's own lookup
    table stays q8_0."""
    if stored not in kept_formats.KEPT_QUANTIZED:
        return None
    head = name == "output.weight" if not config.tied_head else name == "token_embd.weight"
    if auto and head and type_name == "Q6_K":
        return "q6_k"
    if name == "token_embd.weight" or (name == "output.weight" and not config.tied_head):
        return kept_formats.given_format([type_name], "q8_0")
    return None


class UnpermutedRows:
    """The blocks of a `llama` file's q or k weight with llama.cpp's row permutation undone when
    they are read, not before: rows are whole runs of blocks (blocks run along the input
    dimension), so permuting rows permutes blocks. np.asarray makes that copy; set_weights makes
    none: it takes `file_rows` and `heads` and reads each head's rows in the model's order as it
    repacks them (1.7B Q8_0: 214 MB not copied, on one thread, before the repack). `file_rows`,
    a view of the file's memory map, is what shape, ndim, dtype and nbytes describe; with `pairs`,
    the rows come as pairs of bytes (reshape(-1, 2))."""

    def __init__(self, file_rows: np.ndarray, heads: int, pairs: bool = False):
        self.heads = heads
        self.pairs = pairs
        # The file's rows in the shape the result has: a stand-in for what reads only the shape. A
        # plain ndarray (not a memmap), which np.asarray hands back as itself.
        self.file_rows = np.asarray(file_rows.reshape(-1, 2) if pairs else file_rows)
        self._rows = file_rows

    shape = property(lambda self: self.file_rows.shape)
    ndim = property(lambda self: self.file_rows.ndim)
    dtype = property(lambda self: self.file_rows.dtype)
    nbytes = property(lambda self: self.file_rows.nbytes)

    def __array__(self, dtype=None, copy=None) -> np.ndarray:
        rows = np.ascontiguousarray(unpermute_rows(self._rows, self.heads))
        rows = rows.reshape(-1, 2) if self.pairs else rows
        return rows if dtype is None else rows.astype(dtype, copy=False)


class DeferredQuantizedTensor(QuantizedTensor):
    """A QuantizedTensor whose blocks are UnpermutedRows (`deferred`): `blocks` undoes the
    permutation on first read (and keeps the copy); GPT.from_gguf hands `deferred` on instead, to
    set_weights, which reads the file's rows in the model's order without a copy."""

    def __init__(self, format: str, deferred: UnpermutedRows):
        object.__setattr__(self, "format", format)
        object.__setattr__(self, "deferred", deferred)

    def __getattr__(self, name: str):
        if name != "blocks":
            raise AttributeError(name)
        blocks = np.asarray(self.deferred)
        object.__setattr__(self, "blocks", blocks)
        return blocks


def unpermute_rows(weight: np.ndarray, n_head: int) -> np.ndarray:
    """Undoes llama.cpp's LlamaModel.permute on the rows of a q or k weight ([n_head * head_size,
    ...]): within each head, stored row 2j + t holds HF row t * head_size/2 + j."""
    rows = weight.shape[0]
    half = rows // n_head // 2
    return weight.reshape(n_head, half, 2, *weight.shape[1:]).swapaxes(1, 2).reshape(weight.shape)


def _permuted_heads(name: str, config: GPTConfig) -> int | None:
    """The head count whose rows llama.cpp permuted in tensor `name` of a `llama` file, else None."""
    if name.endswith((".attn_q.weight", ".attn_q.bias")):
        return config.n_head
    if name.endswith((".attn_k.weight", ".attn_k.bias")):
        return config.n_kv_head
    return None


def _config(meta: _Metadata, tensors: dict, path: str, arch: str) -> GPTConfig:
    """The GPTConfig of a Llama-family file's metadata (keys named in the module docstring)."""
    n_layer = meta.get(f"{arch}.block_count", int)
    # Before any per-layer work: a count of millions made the reader spend minutes on the layers'
    # names before it found their tensors missing (the loader fuzzer's finding). Every layer has
    # tensors of its own.
    if n_layer > len(tensors):
        raise ModelFileError(
            f"{path}: {arch}.block_count {n_layer} is more layers than its {len(tensors)} tensors can hold"
        )
    n_ctx = meta.get(f"{arch}.context_length", int)
    n_embd = meta.get(f"{arch}.embedding_length", int)
    n_ff = meta.get(f"{arch}.feed_forward_length", int, per_layer=True)
    n_head = meta.get(f"{arch}.attention.head_count", int, per_layer=True)
    n_kv_head = meta.get(f"{arch}.attention.head_count_kv", int, required=False, per_layer=True)
    eps = meta.get(f"{arch}.attention.layer_norm_rms_epsilon", float)
    rope_base = meta.get(f"{arch}.rope.freq_base", float, required=False)
    # llama.cpp applies a file's sliding window for phi3 only (the key a qwen2 or Mistral file may
    # carry is its HF config's, which their models do not use).
    window = meta.get(f"{arch}.attention.sliding_window", int, required=False) if arch in _WINDOWED else None
    head_dim = _head_dim(meta, tensors, path, arch, n_head, n_embd)

    vocab_size = _vocab_size(meta, tensors, path, arch, n_embd)
    layer_norm_eps = _norm_epsilon(eps, f"{arch}.attention.layer_norm_rms_epsilon", path)
    fields = dict(
        architecture=arch,
        n_layer=n_layer,
        n_head=n_head,
        n_embd=n_embd,
        vocab_size=vocab_size,
        block_size=n_ctx,
        layer_norm_eps=layer_norm_eps,
        n_kv_head=n_kv_head,
        n_ff=n_ff,
        tied_head="output.weight" not in tensors,
        rope_layout="half",  # q/k are un-permuted at load (module docstring)
        attention_window=window or None,  # 0: none, as llama.cpp reads it
        head_dim=head_dim,
    )
    if arch == "gemma3":
        fields.update(_gemma3_fields(meta, path, n_layer, n_head, n_embd, head_dim))
    if rope_base is not None:
        with np.errstate(over="ignore"):  # a float64 beyond float32's range: inf, which GPTConfig refuses
            fields["rope_base"] = float(np.float32(rope_base))
    scaling_type = meta.get(f"{arch}.rope.scaling.type", str, required=False)
    factor = meta.get(f"{arch}.rope.scaling.factor", float, required=False)
    if scaling_type == "linear" and factor not in (None, 1.0):
        # theta_i / factor (Gemma 3 4B and up): Llama 3's scaling with every wavelength past its
        # low-frequency bound (hf_checkpoint._rope); on Gemma's global layers only, as llama.cpp.
        if _ROPE_FREQS in tensors:
            raise ModelFileError(f"{path}: linear rope scaling and {_ROPE_FREQS} exclude each other")
        try:
            fields["rope_scaling"] = RopeScaling(factor, 1.0, 2.0, 1)
        except ValueError as e:
            raise ModelFileError(f"{path}: {arch}.rope.scaling.factor: {e}") from None
    elif scaling_type not in (None, "none", "linear"):
        raise ModelFileError(
            f"{path}: {arch}.rope.scaling.type {scaling_type!r} is not supported (none, linear, and Llama 3's "
            "scaling as rope_freqs.weight)"
        )
    config = _checked_config(path, **fields)
    if _ROPE_FREQS in tensors:
        original = meta.get(f"{arch}.rope.scaling.original_context_length", int, required=False)
        scaling = _llama3_scaling(tensors[_ROPE_FREQS], config, original, path)
        config = _checked_config(path, **fields, rope_scaling=scaling)
    return config


def _head_dim(meta: _Metadata, tensors: dict, path: str, arch: str, n_head, n_embd) -> int | None:
    """{arch}.attention.key_length (Gemma's 256; value_length the same), None where it is absent;
    rope over part of a head (rope.dimension_count below the head size) is refused by name."""
    key_length = meta.get(f"{arch}.attention.key_length", int, required=False)
    value_length = meta.get(f"{arch}.attention.value_length", int, required=False)
    if value_length is not None and value_length != (key_length or value_length):
        raise ModelFileError(
            f"{path}: {arch}.attention.value_length {value_length} differs from key_length {key_length}"
        )
    head_dim = key_length or value_length
    if not (isinstance(n_head, int) and n_head > 0 and isinstance(n_embd, int)):
        return head_dim  # GPTConfig refuses them by name
    head_size = head_dim or (n_embd // n_head)
    q = tensors.get("blk.0.attn_q.weight")
    if head_dim is not None and q is not None and int(q.shape[-1]) != n_head * head_dim:
        raise ModelFileError(
            f"{path}: {arch}.attention.key_length is {head_dim}, but blk.0.attn_q.weight has {int(q.shape[-1])} "
            f"rows, not n_head * {head_dim} = {n_head * head_dim}"
        )
    rotated = meta.get(f"{arch}.rope.dimension_count", int, required=False)
    if rotated is not None and rotated != head_size:
        raise ModelFileError(
            f"{path}: {arch}.rope.dimension_count is {rotated}; only the head size {head_size} is supported "
            "(rope over part of a head is not implemented)"
        )
    return head_dim


def _gemma3_fields(meta: _Metadata, path: str, n_layer, n_head, n_embd, head_dim) -> dict:
    """A `gemma3` file's per-layer attention, as llama.cpp reads it (llama-model.cpp, LLM_ARCH_GEMMA3):
    every sixth layer global and the others windowed by gemma3.attention.sliding_window (no key: all
    global), the windowed layers' rope base 10000 unscaled, and q.k scaled by head_dim ** -0.5 except
    on the 27B (62 layers), by (n_embd / n_head) ** -0.5 (query_pre_attn_scalar)."""
    window = meta.get("gemma3.attention.sliding_window", int, required=False) or 0
    layers = n_layer if isinstance(n_layer, int) and n_layer > 0 else 0
    scale_dim = n_embd // n_head if layers == 62 and isinstance(n_head, int) and n_head > 0 else head_dim
    fields = dict(
        layer_windows=tuple(window if i % 6 < 5 else 0 for i in range(layers)) if layers else None,
        rope_local_base=10000.0,
    )
    if isinstance(scale_dim, int) and scale_dim > 0:
        fields["attention_scale"] = scale_dim**-0.5
    return fields


def llama3_rope_factors(config: GPTConfig, scaling: RopeScaling) -> np.ndarray:
    """The per-frequency divisors llama.cpp's converter writes as rope_freqs.weight for Llama 3's
    scaling (convert_hf_to_gguf.py, LlamaModel.generate_extra_tensors), float32 [head_size / 2]."""
    dim = config.head_size
    freqs = 1.0 / (np.float32(config.rope_base) ** (np.arange(0, dim, 2, dtype=np.float32) / np.float32(dim)))
    low_wavelen = scaling.original_max_position_embeddings / scaling.low_freq_factor
    high_wavelen = scaling.original_max_position_embeddings / scaling.high_freq_factor
    factors = []
    for freq in freqs.astype(np.float64):
        wavelen = 2 * math.pi / freq
        if wavelen < high_wavelen:
            factors.append(1.0)
        elif wavelen > low_wavelen:
            factors.append(scaling.factor)
        else:
            smooth = (scaling.original_max_position_embeddings / wavelen - scaling.low_freq_factor) / (
                scaling.high_freq_factor - scaling.low_freq_factor
            )
            factors.append(1 / ((1 - smooth) / scaling.factor + smooth))
    return np.array(factors, dtype=np.float32)


def _llama3_scaling(tensor, config: GPTConfig, original: int | None, path: str) -> RopeScaling:
    """The RopeScaling whose divisors (llama3_rope_factors) are rope_freqs.weight's. Llama 3's
    own parameters (low 1, high 4, 8192 positions; the factor is the largest divisor) are tried
    first; otherwise the two are solved from the divisors between 1 and the factor, on which
    llama.cpp's interpolation weight is linear in the frequency."""
    half = config.head_size // 2
    factors = _dequantize(tensor, (half,), path).astype(np.float64)
    if not (factors >= 1).all():
        raise ModelFileError(f"{path}: tensor {_ROPE_FREQS} holds divisors below 1; Llama 3's scaling has none")
    factor = float(factors.max())
    if factor == 1.0:
        raise ModelFileError(f"{path}: tensor {_ROPE_FREQS} divides no frequency: it is not Llama 3's scaling")
    original = original or 8192
    candidates = [(factor, 1.0, 4.0)]
    # Between the two bounds: 1/f = (1 - s)/factor + s, with s = (original / wavelen - low) / (high - low).
    freqs = 1.0 / (config.rope_base ** (np.arange(0, config.head_size, 2) / config.head_size))
    between = (factors > 1) & (factors < factor)
    if between.sum() >= 2:
        smooth = (1 / factors[between] - 1 / factor) / (1 - 1 / factor)
        inverse_wavelen = freqs[between] / (2 * math.pi)
        slope, intercept = np.polyfit(inverse_wavelen, smooth, 1)  # s = slope / wavelen + intercept
        if slope > 0:
            width = original / slope  # high - low
            candidates.append((factor, float(-intercept * width), float(-intercept * width + width)))
    for factor, low, high in candidates:
        try:
            scaling = RopeScaling(factor, low, high, original)
        except ValueError:  # not a scaling at all (a low bound below 0, ...)
            continue
        if np.allclose(llama3_rope_factors(config, scaling), factors.astype(np.float32), rtol=1e-5, atol=0):
            return scaling
    raise ModelFileError(
        f"{path}: tensor {_ROPE_FREQS} holds rope divisors that Llama 3's scaling does not make (largest {factor})"
    )
