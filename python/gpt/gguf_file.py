"""GGUF, llama.cpp's model file format, for GPT-2: `load_gguf` reads a file for GPT.from_gguf,
`save_gguf` writes one as llama.cpp's converter (convert_hf_to_gguf.py, architecture "gpt2") and
`llama-quantize --pure` write them, so that llama.cpp can run the same weights. Writing goes
through the `gguf` package (llama.cpp's own Python library): GGUFWriter for the container,
gguf.quants for the block formats. Reading goes through GgufFile: the walk that checks a header
against the file, which also records where each value lies, and views of the file's memory map;
it gives what gguf's GGUFReader gives (tested against it) without parsing every value up front.

Names and layout. The model takes HF GPT-2 parameter names; llama.cpp's converter renames them
(transformer.h.N.attn.c_attn.weight -> blk.N.attn_qkv.weight, ...; `tensor_names`) and transposes
the four matmul weights from HF's Conv1D layout [in, out] to torch Linear layout [out, in]. GGUF
records a tensor's dimensions fastest-varying first (ggml's ne), so those weights have
ne = [in, out] and gguf's numpy view of them is [out, in]; quantization blocks (32 values) run
along ne[0], the input dimension K, the same axis the compiler's q8_0 and q4_0 formats block along.
The embeddings are [vocab, n_embd] and [n_ctx, n_embd] (numpy order) in both.

Which tensors a file of each format quantizes (as llama.cpp writes them): the token embedding and
the matmul weights are in the file's format; the position embedding, LayerNorm parameters and
biases stay F32."""

import json
import math
import os
from collections.abc import Iterable, Mapping

import numpy as np

from gpt import gguf_llama
from gpt.config import WEIGHT_FORMATS, GPTConfig
from gpt.errors import ModelFileError
from gpt.gguf.container import (  # also read from here: tests and tools name gguf_file.GgufFile, _Metadata, ...
    GgufFile,  # noqa: F401 - re-exported
    QuantizedTensor,
    _check_ne,
    _check_tensor_names,
    _dequantize,
    _Metadata,
    _non_finite_fp16,
    _norm_epsilon,
    _open_gguf,
    _types,
    _vocab_size,
)
from gpt.gguf.layout import _check_layout
from gpt.gguf_tokenizer import building_tokenizer, carries_vocabulary, read_vocabulary
from gpt.kept_formats import KEPT_QUANTIZED, head_format  # the formats kept as blocks (CompileOptions.weights)
from gpt.resources import check_fits_in_memory
from gpt.tokenizer import HFTokenizer
from gpt.weights import _checked_config, expected_shapes, validate_weights

ARCHITECTURE = "gpt2"
# Formats save_gguf writes, named as llama.cpp names them; from_gguf reads tensors of these types:
# the compiler's (its table, cc/kernels/WeightFormats.h) and f16, but the K-quants, which gguf's
# Python quantizer cannot write (from_gguf reads and keeps Q4_K, Q5_K and Q6_K tensors all the same).
_UNWRITABLE = ("q4_k", "q5_k", "q6_k")
FORMATS = ("f16", *(fmt for fmt in WEIGHT_FORMATS if fmt not in _UNWRITABLE))
# The GGUF names of the model-level tensors and of block N's, with their HF GPT-2 names and
# whether llama.cpp stores them transposed ([out, in] instead of Conv1D's [in, out]).
_MODEL_TENSORS = (
    ("token_embd.weight", "transformer.wte.weight", False),
    ("position_embd.weight", "transformer.wpe.weight", False),
)
_BLOCK_TENSORS = (
    ("attn_norm.weight", "ln_1.weight", False),
    ("attn_norm.bias", "ln_1.bias", False),
    ("attn_qkv.weight", "attn.c_attn.weight", True),
    ("attn_qkv.bias", "attn.c_attn.bias", False),
    ("attn_output.weight", "attn.c_proj.weight", True),
    ("attn_output.bias", "attn.c_proj.bias", False),
    ("ffn_norm.weight", "ln_2.weight", False),
    ("ffn_norm.bias", "ln_2.bias", False),
    ("ffn_up.weight", "mlp.c_fc.weight", True),
    ("ffn_up.bias", "mlp.c_fc.bias", False),
    ("ffn_down.weight", "mlp.c_proj.weight", True),
    ("ffn_down.bias", "mlp.c_proj.bias", False),
)
_FINAL_TENSORS = (
    ("output_norm.weight", "transformer.ln_f.weight", False),
    ("output_norm.bias", "transformer.ln_f.bias", False),
)
# The LM head. GPT-2 ties it to the token embedding; llama.cpp's converter does not write it (the
# loader then uses token_embd), older converters wrote a copy.
_OUTPUT = "output.weight"
# Tokenizer models that mean "no vocabulary" to llama.cpp.
_NO_VOCABULARY = ("none", "no_vocab")


def _check_block_scales(name: str, blocks: np.ndarray, fmt: str, path: str) -> None:
    """Refuses a kept-quantized tensor with a NaN or infinite fp16 scale (or min) in any block
    (dequantized tensors are checked as float32 in _dequantize). Vectorized over all blocks."""
    import gguf

    block_values, block_bytes = gguf.GGML_QUANT_SIZES[_types()[fmt]]
    found = _non_finite_fp16(blocks, fmt.upper())
    if found is not None:
        index, field, value = found
        row, block = divmod(index, blocks.shape[-1] // block_bytes)
        raise ModelFileError(
            f"{path}: tensor {name} ({fmt.upper()}): block {block} of row {row} (values "
            f"{block * block_values} to {(block + 1) * block_values - 1}) has fp16 {field} {value}; "
            f"{fmt} {field}s must be finite"
        )


def tensor_names(n_layer: int) -> dict[str, tuple[str, bool]]:
    """GGUF tensor name -> (HF GPT-2 name, stored transposed), for every tensor of a GPT-2 file
    except the optional output.weight, in the order save_gguf writes them."""
    names = {gguf: (hf, transposed) for gguf, hf, transposed in _MODEL_TENSORS}
    for layer in range(n_layer):
        for gguf, hf, transposed in _BLOCK_TENSORS:
            names[f"blk.{layer}.{gguf}"] = (f"transformer.h.{layer}.{hf}", transposed)
    names.update({gguf: (hf, transposed) for gguf, hf, transposed in _FINAL_TENSORS})
    return names


def native_weights_format(path) -> str:
    """The CompileOptions.weights to run a GGUF file in as it is stored, as llama.cpp does: the type
    of most of its layers' matmul weights (by element count) when the compiler keeps that format
    (gpt.config.WEIGHT_FORMATS); F16 runs in f32 (the compiler has no f16 format), and the other
    block types in the kept format nearest above them in precision (kept_formats.NEAREST_KEPT). "f32" for a
    file it cannot read: loading it then raises the error that names the problem."""
    try:
        tensors = _check_layout(os.fspath(path))  # the header's tensor descriptions, no metadata parse
    except Exception:
        return "f32"
    elements: dict[str, int] = {}
    for tensor in tensors:
        if tensor.name.startswith("blk.") and len(tensor.ne) == 2:
            name = tensor.type_name.lower()
            elements[name] = elements.get(name, 0) + math.prod(tensor.ne)
    if not elements:
        return "f32"
    stored = max(elements, key=elements.get)
    if stored in WEIGHT_FORMATS:
        return stored
    return "f32" if stored == "f16" else "q8_0"


def vocabulary_without_tokenizer(path) -> int | None:
    """The vocabulary size of a GGUF file that carries no tokenizer (gguf_tokenizer.carries_vocabulary),
    from its header alone: what a command that takes text can refuse before the weights load. None
    when the file carries one, or when its header cannot be read (loading it then names the problem)."""
    try:
        _, reader, meta, _ = _open_gguf(path)
        if carries_vocabulary(meta):
            return None
        embedding = next(t for t in reader.tensors if t.name == "token_embd.weight")
        return int(embedding.shape[1])
    except (OSError, ValueError, StopIteration, IndexError):  # ModelFileError is a ValueError
        return None


def load_gguf(
    path, keep_quantized: str | None = None, formats_given: Iterable[str] = ()
) -> tuple[GPTConfig, dict[str, np.ndarray | QuantizedTensor], HFTokenizer | None]:
    """Reads a GPT-2 GGUF file into (GPTConfig, float32 weights by HF name, tokenizer or None).
    A `llama`, `qwen2` or `phi3` file is read by gpt.gguf_llama.read instead (HF names).

    Hyperparameters come from the metadata (gpt2.block_count, gpt2.context_length,
    gpt2.embedding_length, gpt2.attention.head_count, gpt2.attention.layer_norm_epsilon), the
    vocabulary size from token_embd's shape. Every tensor is dequantized to float32 with gguf's own
    gguf.quants.dequantize and put back in HF's layout. The tokenizer is built when the file
    carries GPT-2's (tokenizer.ggml.model "gpt2": byte-level BPE from tokenizer.ggml.tokens and
    tokenizer.ggml.merges). With `keep_quantized` (one of KEPT_QUANTIZED), the matmul weights stored
    in that type (and the token embedding, when the format is its own head format) are returned as
    QuantizedTensor instead, their blocks copied out of the file as they are (after checking that
    every block's scale is finite). `formats_given`: the parameters CompileOptions.weight_formats
    names, which gguf_llama.read reads for a v projection of its own.

    Raises FileNotFoundError for a missing file, MemoryError for hyperparameters that would not fit
    in memory, and gpt.ModelFileError (a ValueError) naming the file and the key or tensor for
    anything else: a header whose counts, lengths, types, dimensions or offsets do not fit the
    file (checked before gguf reads it: _check_layout), another architecture, a missing or
    misshapen tensor, a tensor type gguf cannot dequantize, NaN or infinity in a tensor or a block
    scale, an output.weight unlike token_embd.weight (an untied LM head), hyperparameters this model
    cannot take, tokenizer data that does not make a tokenizer."""

    path, reader, meta, architecture = _open_gguf(path)
    if architecture in gguf_llama.ARCHITECTURES:  # the Llama family: gpt/gguf_llama.py
        return gguf_llama.read(reader, meta, path, architecture, keep_quantized, formats_given)
    if architecture != ARCHITECTURE:
        raise ModelFileError(
            f"{path}: general.architecture {architecture!r} is not supported ('gpt2', 'llama' and 'qwen2' are read)"
        )
    if keep_quantized == "auto":  # GPT-2 keeps one format: the one most of its layers are stored in
        keep_quantized = native_weights_format(path)
    tensors = {tensor.name: tensor for tensor in reader.tensors}
    config = _gpt2_config(meta, tensors, path)
    # Before dequantizing for a header that asks too much: the weights this load holds (the cache is
    # checked by the model, at the context it is asked for).
    kept = keep_quantized in KEPT_QUANTIZED
    check_fits_in_memory(config, keep_quantized if kept else "f32", kept_quantized=kept, loading=True)
    weights = _gpt2_weights(tensors, config, keep_quantized, path)
    tokenizer = _read_tokenizer(meta, path, config.vocab_size)
    del tensors, reader  # closes the memory map: every array above is a copy
    return config, weights, tokenizer


def _gpt2_config(meta: _Metadata, tensors: dict, path: str) -> GPTConfig:
    """A GPT-2 file's hyperparameters (the vocabulary size from token_embd's rows), checked."""
    n_layer = meta.get("gpt2.block_count", int)
    n_ctx = meta.get("gpt2.context_length", int)
    n_embd = meta.get("gpt2.embedding_length", int)
    n_head = meta.get("gpt2.attention.head_count", int, per_layer=True)
    eps = meta.get("gpt2.attention.layer_norm_epsilon", float)
    # Keys that would change the computation, when present: only GPT-2's values are implemented.
    n_ff = meta.get("gpt2.feed_forward_length", int, required=False, per_layer=True)
    if n_ff is not None and n_ff != 4 * n_embd:
        raise ModelFileError(
            f"{path}: gpt2.feed_forward_length {n_ff} is not supported (only 4 * n_embd = {4 * n_embd})"
        )
    n_head_kv = meta.get("gpt2.attention.head_count_kv", int, required=False, per_layer=True)
    if n_head_kv is not None and n_head_kv != n_head:
        raise ModelFileError(f"{path}: gpt2.attention.head_count_kv {n_head_kv} differs from head_count {n_head}")
    vocab_size = _vocab_size(meta, tensors, path, ARCHITECTURE, n_embd)
    layer_norm_eps = _norm_epsilon(eps, "gpt2.attention.layer_norm_epsilon", path)
    return _checked_config(
        path,
        n_layer=n_layer,
        n_head=n_head,
        n_embd=n_embd,
        vocab_size=vocab_size,
        block_size=n_ctx,
        layer_norm_eps=layer_norm_eps,
    )


def _gpt2_weights(
    tensors: dict, config: GPTConfig, keep_quantized: str | None, path: str
) -> dict[str, np.ndarray | QuantizedTensor]:
    """A GPT-2 file's weights by HF name: float32 in HF's layout, or the blocks of `keep_quantized`
    as they are (see load_gguf); an output.weight must be token_embd.weight's copy."""
    names = tensor_names(config.n_layer)
    _check_tensor_names(path, tensors, names, (_OUTPUT,), "GPT-2")
    shapes = _gguf_shapes(config)
    weights: dict[str, np.ndarray | QuantizedTensor] = {}
    kept_type = _types()[keep_quantized] if keep_quantized in KEPT_QUANTIZED else None
    for name, (hf_name, transposed) in names.items():
        tensor = tensors[name]
        # Matmul weights are stored transposed ([out, in], blocks along in = K); the embedding's
        # rows [vocab, n_embd] are the LM head's columns, blocks along n_embd = K too. A model
        # stores its embedding in its format's head format (q8_0 for the 4-bit ones), so an
        # embedding in another one is dequantized.
        keep = tensor.tensor_type == kept_type and (
            transposed or (name == "token_embd.weight" and head_format(keep_quantized) == keep_quantized)
        )
        if keep:
            _check_ne(tensor, shapes[name], path)
            blocks = np.array(tensor.data, dtype=np.uint8)
            # The compiled model multiplies by these scales as they are: one NaN makes every logit NaN.
            _check_block_scales(name, blocks, keep_quantized, path)
            weights[hf_name] = QuantizedTensor(keep_quantized, blocks)
            continue
        array = _dequantize(tensor, shapes[name], path)
        weights[hf_name] = np.ascontiguousarray(array.T) if transposed else array
    if _OUTPUT in tensors:
        _check_tied_output(tensors, weights, shapes, path)
    return weights


def _check_tied_output(tensors: dict, weights: dict, shapes: dict, path: str) -> None:
    """Raises ModelFileError unless output.weight is token_embd.weight's copy (GPT-2's head is tied)."""
    embedding, output = tensors["token_embd.weight"], tensors[_OUTPUT]
    if isinstance(weights["transformer.wte.weight"], QuantizedTensor):
        _check_ne(output, shapes["token_embd.weight"], path)
        tied = output.tensor_type == embedding.tensor_type and np.array_equal(
            np.asarray(output.data), np.asarray(embedding.data)
        )
    else:
        tied = np.array_equal(_dequantize(output, shapes["token_embd.weight"], path), weights["transformer.wte.weight"])
    if not tied:
        raise ModelFileError(
            f"{path}: output.weight differs from token_embd.weight (an untied LM head is not supported)"
        )


def _gguf_shapes(config: GPTConfig) -> dict[str, tuple[int, ...]]:
    """GGUF tensor name -> numpy shape (ne reversed) of a GPT-2 of this config."""
    hf_shapes = expected_shapes(config)
    return {
        name: hf_shapes[hf][::-1] if transposed else hf_shapes[hf]
        for name, (hf, transposed) in tensor_names(config.n_layer).items()
    }


def _read_tokenizer(meta: _Metadata, path: str, vocab_size: int) -> HFTokenizer | None:
    """GPT-2's byte-level BPE from the file's vocabulary, or None when it carries none (or one of
    another kind, such as SentencePiece's "llama")."""
    model = meta.get("tokenizer.ggml.model", str, required=False)
    if model != "gpt2":
        return None
    # llama.cpp picks the pre-tokenizer's split regex by this name; "gpt-2" is GPT-2's (older
    # files lack the key). Another would split text differently from the tokenizer built here.
    pre = meta.get("tokenizer.ggml.pre", str, required=False)
    if pre not in (None, "gpt-2"):
        raise ModelFileError(f"{path}: tokenizer.ggml.pre {pre!r} is not supported (GPT-2's, 'gpt-2', only)")
    tokens, merges, types, vocab = read_vocabulary(meta, path, vocab_size)
    # What tokenizers' BPE requires of a merge "a b" (and otherwise reports by a Rust panic, not an
    # error): a and b are tokens, and so is ab, the token the merge makes.
    pairs = []
    for i, merge in enumerate(merges):
        parts = merge.split(" ")
        if len(parts) != 2:
            raise ModelFileError(f"{path}: tokenizer.ggml.merges entry {i} {merge!r} is not two tokens")
        for token in (*parts, parts[0] + parts[1]):
            if token not in vocab:
                raise ModelFileError(
                    f"{path}: tokenizer.ggml.merges entry {i} {merge!r} needs {token!r}, which is not in "
                    "tokenizer.ggml.tokens"
                )
        pairs.append((parts[0], parts[1]))

    from tokenizers import AddedToken, Tokenizer, decoders, models, pre_tokenizers

    with building_tokenizer(path, "merges", "BPE"):
        # What GPT-2's tokenizer.json holds: BPE over GPT-2's byte-to-unicode alphabet, the split
        # regex and byte mapping of ByteLevel, no prefix space.
        tokenizer = Tokenizer(models.BPE(vocab=vocab, merges=pairs))
        tokenizer.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
        tokenizer.decoder = decoders.ByteLevel()
        if types is not None:
            control, user = _gguf_token_types()
            # Control tokens (<|endoftext|>) are special: matched whole, left out of decoded text;
            # user-defined ones are matched whole, as llama.cpp does.
            tokenizer.add_special_tokens(
                [AddedToken(tokens[i], special=True) for i, t in enumerate(types) if t == control]
            )
            tokenizer.add_tokens([AddedToken(tokens[i], special=False) for i, t in enumerate(types) if t == user])
        return HFTokenizer(tokenizer)


def _gguf_token_types() -> tuple[int, int]:
    import gguf

    return int(gguf.TokenType.CONTROL), int(gguf.TokenType.USER_DEFINED)


# -- writing ------------------------------------------------------------------------------------


def _unwritable(format) -> str:
    """Why save_gguf cannot write `format`."""
    if format in _UNWRITABLE:
        # gguf.quants has no K-quant quantizer (llama.cpp's llama_model_quantize writes Q4_K_M files).
        return (
            f"save_gguf cannot write format {format!r}: gguf's Python quantizer has no {format.upper()}; "
            f"write one of {FORMATS}, or quantize the file with llama.cpp"
        )
    return f"format must be one of {FORMATS}, got {format!r}"


def save_gguf(model_or_weights, config: GPTConfig | None, path, format: str = "f32", *, tokenizer=None, name="gpt"):
    """Writes a GPT-2 as a GGUF file that llama.cpp loads: the tensor names, layout and metadata
    of llama.cpp's converter for architecture "gpt2" (general.architecture, gpt2.block_count,
    gpt2.context_length, gpt2.embedding_length, gpt2.feed_forward_length,
    gpt2.attention.head_count, gpt2.attention.layer_norm_epsilon, general.file_type,
    general.quantization_version).

    `model_or_weights`: a gpt.GPT (then `config` may be None) or a mapping of HF GPT-2 names to
    arrays. `format`: one of FORMATS (f32, f16, bf16 and the block formats gguf.quants quantizes):
    the token embedding and the matmul weights are converted with gguf.quants.quantize (ggml's
    reference quantizers; the 4-bit formats for the token embedding too, as `llama-quantize --pure`
    does), the position embedding, LayerNorm
    parameters and biases stay F32. `tokenizer`: a gpt.HFTokenizer or tokenizers.Tokenizer of
    byte-level BPE (GPT-2's kind), written as tokenizer.ggml.* (model "gpt2", pre "gpt-2"); by
    default the model's own tokenizer when `model_or_weights` is a GPT that has one. Without one the
    file says tokenizer.ggml.model "none" and gpt2.vocab_size, which llama.cpp accepts."""
    import gguf

    if isinstance(model_or_weights, Mapping):
        weights = model_or_weights
    elif all(hasattr(model_or_weights, a) for a in ("config", "state_dict", "tokenizer")):
        # A gpt.GPT, known by what is read of it: gpt.model imports this module (GPT.from_gguf).
        if config is not None and config != model_or_weights.config:
            raise ValueError(f"config {config} is not the model's ({model_or_weights.config})")
        config = model_or_weights.config
        weights = model_or_weights.state_dict()
        if tokenizer is None:
            tokenizer = model_or_weights.tokenizer
    else:
        raise TypeError(
            f"model_or_weights must be a gpt.GPT or a mapping of names to arrays, got {type(model_or_weights).__name__}"
        )
    if not isinstance(config, GPTConfig):
        raise TypeError(f"config must be a gpt.GPTConfig, got {type(config).__name__}")
    if config.pos_embedding != "learned":
        raise ValueError(
            f"GGUF's gpt2 architecture has learned positions; pos_embedding={config.pos_embedding!r} cannot be written"
        )
    if config.attention_window is not None:
        raise ValueError(
            f"GGUF's gpt2 architecture has full causal attention; attention_window={config.attention_window} "
            "cannot be written"
        )
    if format not in FORMATS:
        raise ValueError(_unwritable(format))
    weights = validate_weights(config, weights, copy=False)
    qtype = _types()[format]
    plain = gguf.GGMLQuantizationType.F32
    vocabulary = _gpt2_vocabulary(tokenizer, config.vocab_size) if tokenizer is not None else None

    # Convert everything before the file is opened, so that a refusal leaves no file behind.
    tensors = []
    for gguf_name, (hf_name, transposed) in tensor_names(config.n_layer).items():
        array = weights[hf_name]
        array = np.ascontiguousarray(array.T) if transposed else array
        kind = plain if array.ndim == 1 or gguf_name == "position_embd.weight" else qtype
        block, _ = gguf.GGML_QUANT_SIZES[kind]
        if array.shape[-1] % block:
            raise ValueError(
                f"{gguf_name} rows have {array.shape[-1]} values, not a multiple of {format}'s block of {block}"
            )
        tensors.append((gguf_name, gguf.quants.quantize(array, kind), kind))

    file_types = {"f32": gguf.LlamaFileType.ALL_F32} | {
        fmt: gguf.LlamaFileType[f"MOSTLY_{fmt.upper()}"] for fmt in FORMATS if fmt != "f32"
    }
    writer = gguf.GGUFWriter(os.fspath(path), arch=ARCHITECTURE)
    try:
        writer.add_type(gguf.GGUFType.MODEL)
        writer.add_name(name)
        writer.add_block_count(config.n_layer)
        writer.add_context_length(config.block_size)
        writer.add_embedding_length(config.n_embd)
        writer.add_feed_forward_length(4 * config.n_embd)
        writer.add_head_count(config.n_head)
        writer.add_layer_norm_eps(float(config.layer_norm_eps))
        writer.add_file_type(int(file_types[format]))
        writer.add_quantization_version(gguf.GGML_QUANT_VERSION)
        if vocabulary is None:
            writer.add_tokenizer_model("none")
            writer.add_vocab_size(config.vocab_size)
        else:
            tokens, types, merges, endoftext = vocabulary
            writer.add_tokenizer_model("gpt2")
            writer.add_tokenizer_pre("gpt-2")
            writer.add_token_list(tokens)
            writer.add_token_types(types)
            writer.add_token_merges(merges)
            if endoftext is not None:  # GPT-2's bos and eos (config.json's bos/eos_token_id)
                writer.add_bos_token_id(endoftext)
                writer.add_eos_token_id(endoftext)
        for gguf_name, data, kind in tensors:
            writer.add_tensor(gguf_name, data, raw_dtype=kind)
        writer.write_header_to_file()
        writer.write_kv_data_to_file()
        writer.write_tensors_to_file()
    finally:
        writer.close()


def _gpt2_vocabulary(tokenizer, vocab_size: int):
    """(tokens, token types, merges, id of <|endoftext|> or None) of a byte-level BPE tokenizer, as
    llama.cpp's converter lists them: one token per id up to vocab_size (ids the tokenizer lacks
    become "[PAD<id>]", user-defined), added special tokens as control tokens."""
    import gguf
    from tokenizers import Tokenizer

    if isinstance(tokenizer, HFTokenizer):
        tokenizer = tokenizer.backend
    if not isinstance(tokenizer, Tokenizer):
        raise TypeError(f"tokenizer must be a gpt.HFTokenizer or tokenizers.Tokenizer, got {type(tokenizer).__name__}")
    spec = json.loads(tokenizer.to_str())
    model, pre = spec.get("model") or {}, spec.get("pre_tokenizer") or {}
    if model.get("type") != "BPE" or pre.get("type") != "ByteLevel":
        raise ValueError(
            f"only byte-level BPE tokenizers (GPT-2's kind) can be written to GGUF; this one is "
            f"{model.get('type')} with pre-tokenizer {pre.get('type')}"
        )
    by_id = {int(i): token for token, i in model["vocab"].items()}
    types = {}
    for added in spec.get("added_tokens") or []:
        by_id[int(added["id"])] = added["content"]
        types[int(added["id"])] = gguf.TokenType.CONTROL if added.get("special") else gguf.TokenType.USER_DEFINED
    if max(by_id) >= vocab_size:
        raise ValueError(f"the tokenizer has token id {max(by_id)}, outside the model's vocabulary of {vocab_size}")
    tokens, token_types = [], []
    for i in range(vocab_size):
        tokens.append(by_id.get(i, f"[PAD{i}]"))
        token_types.append(int(types.get(i, gguf.TokenType.NORMAL if i in by_id else gguf.TokenType.USER_DEFINED)))
    merges = [merge if isinstance(merge, str) else " ".join(merge) for merge in model.get("merges") or []]
    endoftext = tokens.index("<|endoftext|>") if "<|endoftext|>" in tokens else None
    return tokens, token_types, merges, endoftext
