"""GPT's model-file loaders (from_pretrained, from_gguf): the context a file is served at, HF-named
weights checked and converted to the compiler's parameters, and the formats a GGUF file runs in."""

import dataclasses
import os
from collections.abc import Mapping

import numpy as np

from gpt import _gpt, architecture_weights, architectures, hf_checkpoint, kept_formats, model_files, weight_cache
from gpt.config import CompileOptions, GPTConfig
from gpt.gguf_file import KEPT_QUANTIZED, QuantizedTensor, load_gguf, native_weights_format
from gpt.gguf_llama import DeferredQuantizedTensor, UnpermutedRows
from gpt.tokenizer import HFTokenizer
from gpt.weights import load_pretrained

# The context a model file is served at unless the caller asks for another: llama.cpp's default -c.
# A file's own context can be far longer (131072 for Llama 3.1) than a machine holds a cache for.
DEFAULT_CONTEXT = 4096


def file_context(config: GPTConfig, context: int | None) -> int:
    """The context a model file's model serves: `context` when given (checked by with_context), else
    the file's own, up to DEFAULT_CONTEXT."""
    return context if context is not None else min(config.block_size, DEFAULT_CONTEXT)


def with_context(
    config: GPTConfig, weights: Mapping[str, np.ndarray], context: int
) -> tuple[GPTConfig, Mapping[str, np.ndarray]]:
    """(config, weights) of a model serving `context` positions of config.block_size: the config's
    block_size is `context`, and a learned position table keeps its first `context` rows (a view)."""
    if isinstance(context, bool) or not isinstance(context, (int, np.integer)) or not 1 <= context <= config.block_size:
        raise ValueError(
            f"context must be an int in [1, {config.block_size}] (the model's block_size), got {context!r}"
        )
    context = int(context)
    if context == config.block_size:
        return config, weights
    try:
        config = dataclasses.replace(config, block_size=context)
    except ValueError as e:  # an attention mask laid out for the whole block_size
        raise ValueError(f"context={context}: {e}") from None
    table = weights.get("transformer.wpe.weight") if isinstance(weights, Mapping) else None
    if config.pos_embedding == "learned" and isinstance(table, np.ndarray) and table.ndim == 2:
        weights = dict(weights)
        weights["transformer.wpe.weight"] = table[:context].copy()  # not a view that holds the whole table
    return config, weights


def compiler_weights(config: GPTConfig, weights: Mapping[str, np.ndarray]) -> dict[str, object]:
    """HF-named weights of a Llama-family config, checked by their HF names and shapes (so that
    errors name what the caller gave), as the compiler's parameters (architecture_weights.to_compiler).
    dtypes and values are checked afterwards, by validate_weights."""
    if not isinstance(weights, Mapping):
        raise TypeError(f"weights must be a mapping of parameter name to array, got {type(weights).__name__}")
    expected = architectures.hf_shapes(config)
    missing = [name for name in expected if name not in weights]
    if missing:
        raise ValueError(f"missing parameter(s): {', '.join(missing[:5])}" + (" ..." if len(missing) > 5 else ""))
    unexpected = sorted(name for name in weights if name not in expected)
    if unexpected:
        raise ValueError(f"unexpected parameter(s) for this config: {', '.join(unexpected[:5])}")
    for name, shape in expected.items():
        value = weights[name]
        if not isinstance(value, np.ndarray):
            raise ValueError(f"parameter {name} must be a numpy array, got {type(value).__name__}")
        if value.shape != shape:
            raise ValueError(f"parameter {name} has shape {value.shape}, expected {shape}")
    return architecture_weights.to_compiler(config, weights)


def native_options(options: CompileOptions, config: GPTConfig, quantized: Mapping, path) -> CompileOptions:
    """CompileOptions(weights="auto") made concrete for a GGUF file loaded with its matmul weights kept
    in their nearest formats (`quantized`: {compiler name: (format, blocks)}): `weights` the format
    most of them are in (by weight count), `weight_formats` each one in another. Matmul weights the
    load widened (a float tensor among quantized ones) are stored in q8_0 there, not in 4 bits.
    A file with no block-quantized matmul weight runs in its own float format (f32 or bf16)."""
    matmuls = [name for name, (_, linear) in architecture_weights.hf_parts(config).items() if linear]
    given = {name: quantized[name][0] for name in matmuls if name in quantized}
    if not given:
        return dataclasses.replace(options, weights=native_weights_format(path), weight_formats=())
    layer_formats = {name: kept_formats.stored_format(fmt) for name, fmt in given.items()}
    counts: dict[str, int] = {}
    for name, fmt in layer_formats.items():
        counts[fmt] = counts.get(fmt, 0) + kept_formats.elements(quantized[name][1], given[name])
    base = max(counts, key=counts.get)
    widened = {name: "q8_0" for name in matmuls if name not in quantized and base != "q8_0"}
    others = {name: fmt for name, fmt in layer_formats.items() if fmt != base}
    # A head given in another format than the model's head format (a Q6_K output, or a tied Q6_K
    # token table, kept in q6_k: gguf_llama._kept_head_format) is stored in it: its copy,
    # "lm_head.weight_t", is.
    head_source = _head_source(config)
    head = {}
    if head_source in quantized:
        given_head = kept_formats.stored_format(quantized[head_source][0])
        if given_head != kept_formats.head_format(base):
            head = {"lm_head.weight_t": given_head}
    return dataclasses.replace(options, weights=base, weight_formats={**others, **widened, **head})


def _head_source(config: GPTConfig) -> str:
    """The compiler's name of the weight the LM head's copy ("lm_head.weight_t") is made from: the
    tied token table, or the untied output matrix."""
    names = architectures.get(config.architecture).compiler
    return names("token_embedding") if config.tied_head else names("head")


def _as_stored(config: GPTConfig, options: CompileOptions, quantized: dict) -> dict:
    """`quantized` with each weight's blocks given for the format explicit `options` store it in:
    weight_formats' own where it names the weight ("lm_head.weight_t" for the LM head's source, as
    an "auto" load's options name a Q6_K head kept in q6_k), else `weights` (the head: its head
    format); an untied token table is left as it is. The load chose the kept formats from `weights`
    alone (a Q6_K v of a weights="q8_0" load is given as q8_0 blocks); the blocks are the file's, so
    they go retargeted where their types convert (the model converts them as it repacks), and as
    they were otherwise (set_weights names the mismatch)."""
    formats = dict(options.weight_formats)
    head_source = _head_source(config)
    matmuls = {name for name, (_, linear) in architecture_weights.hf_parts(config).items() if linear}
    retargeted = {}
    for name, (fmt, blocks) in quantized.items():
        if name == head_source:
            wanted = formats.get("lm_head.weight_t") or kept_formats.head_format(options.weights)
        elif name in matmuls:
            wanted = formats.get(name, options.weights)
        else:  # an untied model's own token table: q8_0, whatever the weights (Parameters.cpp)
            retargeted[name] = (fmt, blocks)
            continue
        types = kept_formats.part_types(fmt, len(blocks) if isinstance(blocks, list) else 1)
        given = kept_formats.given_format([t.upper() for t in types], wanted)
        retargeted[name] = (given or fmt, blocks)
    return retargeted


def _to_compiler_quantized(config: GPTConfig, quantized: Mapping) -> dict:
    """architecture_weights.to_compiler_quantized (concatenate=False) of blocks some of which are
    UnpermutedRows: it reads them with np.asarray, which would undo the permutation there; it is
    given their file rows (a view of the same shape) instead, and the result has them back."""
    deferred = {id(b.file_rows): b for _, b in quantized.values() if isinstance(b, UnpermutedRows)}
    given = {name: (fmt, b.file_rows if isinstance(b, UnpermutedRows) else b) for name, (fmt, b) in quantized.items()}
    fused = architecture_weights.to_compiler_quantized(config, given, concatenate=False)
    if not deferred:
        return fused

    def restored(blocks):
        if isinstance(blocks, list):
            return [deferred.get(id(part), part) for part in blocks]
        return deferred.get(id(blocks), blocks)

    return {name: (fmt, restored(blocks)) for name, (fmt, blocks) in fused.items()}


def from_pretrained(cls, path: str, options: CompileOptions | None, context: int | None):
    """GPT.from_pretrained's body: a `cls` (gpt.GPT) of the HF checkpoint directory `path`."""
    # A Llama-family directory (config.json's model_type llama or qwen2) goes to its loader.
    llama_family = hf_checkpoint.architecture_of(hf_checkpoint.model_type(path)) is not None
    if llama_family:
        config, weights = hf_checkpoint.load_pretrained(path)
    else:
        config, weights = load_pretrained(path)
    source = weight_cache.source_key(path, options.resolved_weights() if isinstance(options, CompileOptions) else "f32")
    model = cls(
        config, weights, options, context=file_context(config, context), _copy_weights=False, _packed_source=source
    )
    # What the model copied into its own layouts dies with `weights` (the arrays compiled code
    # reads in place stay referenced by the model): its heap pages go back to the system.
    del weights
    _gpt.release_freed_memory()
    if llama_family:
        ids = hf_checkpoint.eos_token_ids(path)
        model._end_of_generation = frozenset(i for i in ids if i < config.vocab_size)
    # Present in any form (a FIFO, a dangling link), it is read, so that what may not be read is
    # refused by name rather than passed over as if the directory had no tokenizer.
    if model_files.present(path, "tokenizer.json"):
        model._tokenizer = HFTokenizer(os.path.join(path, "tokenizer.json"))
    return model


def from_gguf(cls, path: str, options: CompileOptions | None, context: int | None):
    """GPT.from_gguf's body: a `cls` (gpt.GPT) of the GGUF file `path`."""
    options = options if options is not None else CompileOptions()
    if options.kv_cache == "auto":  # as llama.cpp stores a GGUF model's cache
        options = dataclasses.replace(options, kv_cache="f16")
    if options.weights == "auto" and options.pipeline in ("baseline", "fused"):
        # The block formats need a vectorized pipeline: the reference pipelines take the values in f32.
        options = dataclasses.replace(options, weights="f32")
    auto = options.weights == "auto"
    keep = options.weights if auto or options.weights in KEPT_QUANTIZED else None
    config, weights, tokenizer = load_gguf(path, keep_quantized=keep, formats_given=dict(options.weight_formats))
    # A `llama` file's q/k blocks go as UnpermutedRows, which set_weights reads in the model's
    # order without a copy.
    quantized = {
        name: (w.format, w.deferred if isinstance(w, DeferredQuantizedTensor) else w.blocks)
        for name, w in weights.items()
        if isinstance(w, QuantizedTensor)
    }
    floats = {name: w for name, w in weights.items() if name not in quantized}
    if config.spec.converts:  # HF names -> the compiler's fused parameters
        quantized = _to_compiler_quantized(config, quantized)
        floats = architecture_weights.to_compiler(config, floats, consume=True)
    if auto:
        options = native_options(options, config, quantized, path)
    else:
        quantized = _as_stored(config, options, quantized)
    del weights
    model = cls(
        config,
        floats,
        options,
        context=file_context(config, context),
        _copy_weights=False,
        _quantized=quantized,
        _packed_source=weight_cache.source_key(path, options.weights),
        _weights_file=path,
    )
    model._tokenizer = tokenizer
    model._end_of_generation = frozenset(getattr(tokenizer, "end_of_generation", ()))
    # The file's blocks and float32 tensors, copied into the model's own layouts, die here:
    # their heap pages go back to the system instead of staying resident (SmolLM2-135M as shipped:
    # 317 -> about 250 MiB after load).
    del quantized, floats
    _gpt.release_freed_memory()
    return model
