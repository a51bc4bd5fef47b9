"""GPT, a model compiled by the gpt compiler: its constructor, steps, compile statistics, IR and export."""

import dataclasses
import os
import threading
import time
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

from gpt import _gpt, architecture_weights, loading, weight_cache
from gpt.block_pool import BatchStepArguments, KVBlockPool
from gpt.cache import KVCache
from gpt.config import CompileOptions, GPTConfig
from gpt.errors import ModelFileError
from gpt.generation import GenerationMixin, GenerationStats
from gpt.loading import DEFAULT_CONTEXT, file_context, with_context
from gpt.resources import check_fits_in_memory
from gpt.tokenizer import HFTokenizer
from gpt.weights import random_weights, validate_weights
from gpt_runtime.read_only import ReadOnly
from gpt_runtime.sampling import check_token_ids

# Importable from here as before the split (gpt.GenerationStats, tests, tools and the CLI).
__all__ = ["DEFAULT_CONTEXT", "GPT", "GPU_STAGES", "STAGES", "GenerationStats", "file_context", "with_context"]


def _mask_expression(config: GPTConfig) -> str:
    """config.attention_mask as an expression of positions, "" when it has none (or no mask)."""
    return (config.attention_mask and config.attention_mask.expression()) or ""


STAGES = tuple(_gpt.STAGES)
# The CUDA target's stages (cc/codegen/gpu): kernels as gpu.func source, after NVVM conversion, PTX.
GPU_STAGES = ("gpu", "nvvm", "ptx")


def _prepare_compiler_meanwhile() -> None:
    """Loads the compiler library on a thread of its own while a model file loads, if no compile
    has loaded it yet (_gpt.prepare_compiler). Called on a first load of a file (its packed weights
    not in the disk cache), whose first token compiles its programs: the library's 30-60 ms and
    LLVM's and MLIR's one-time set-up then overlap the load, where they were the first compile's.
    A load whose weights come from the cache does not call it: its programs are likely cached too,
    and a process that never compiles never maps the compiler's 100 MiB. An error is left to the
    compile that needs the library, which raises it."""
    if _gpt.compiler_loaded():
        return

    def prepare() -> None:
        try:
            _gpt.prepare_compiler()
        except Exception:  # noqa: BLE001 - raised again by the compile that needs the library
            pass

    # Not a daemon: at exit Python waits for it (tens of milliseconds), where a daemon thread
    # would be torn down inside dlopen.
    threading.Thread(target=prepare, name="gpt-prepare-compiler").start()


class GPT(GenerationMixin):
    """Construct with GPT.random, GPT.from_weights, GPT.from_pretrained or GPT.from_gguf.

    What is fixed for the model's lifetime (`config`, `options`) and the record of the last
    generate() (`last_generation`) are properties; the compile statistics (`compiled_lengths()`,
    `compiled_steps()`, `disk_cache_hits()`, `compile_seconds()`) are methods, because each call
    asks the compiled model for its state at that moment.
    """

    def __init__(
        self,
        config: GPTConfig,
        weights: Mapping[str, np.ndarray],
        options: CompileOptions | None = None,
        *,
        context: int | None = None,
        _copy_weights: bool = True,
        _quantized: Mapping[str, tuple[str, np.ndarray]] | None = None,
        _packed_source: str | None = None,
        _weights_file: str | None = None,
    ):
        """`context`: the positions the model serves, at most config.block_size (default: all of
        them); the model's config.block_size is then `context`, so its caches, its memory estimate and
        the longest generation are sized by it, as llama.cpp's -c sizes them."""
        if not isinstance(config, GPTConfig):
            raise TypeError(f"config must be a gpt.GPTConfig, got {type(config).__name__}")
        options = options if options is not None else CompileOptions()
        if not isinstance(options, CompileOptions):
            raise TypeError(f"options must be a gpt.CompileOptions, got {type(options).__name__}")
        if options.kv_cache == "q8_0" and config.head_size % 32 != 0:
            raise ValueError(
                "CompileOptions.kv_cache='q8_0' stores keys and values in blocks of 32: head_dim must be a "
                f"multiple of 32, got {config.head_size}; use 'f16' or 'bf16' for this model"
            )
        if options.weights == "auto" or options.kv_cache == "auto":  # from_gguf resolved its file's before this
            options = dataclasses.replace(
                options, weights=options.resolved_weights(), kv_cache=options.resolved_kv_cache()
            )
        if context is not None:
            config, weights = with_context(config, weights, context)
        # Before the copies and the packed weights below are made.
        check_fits_in_memory(
            config, options.weights, options.target_cpu, kv_cache=options.kv_cache, kept_quantized=bool(_quantized)
        )
        self._config = config
        self._options = options
        self._compile_waits = 0.0  # seconds calls have waited for programs to compile (generate's stats)
        # The model reads some weights in place for its whole life: it keeps copies, unless the
        # arrays were made for it (random, from_pretrained) and nobody else holds them.
        # `_quantized` (from_gguf): {name: (format, llama.cpp blocks)} for weights the compiled
        # model repacks as they are, never widened to float32.
        quantized = dict(_quantized or {})
        self._weights = validate_weights(config, weights, copy=_copy_weights, given_quantized=quantized)
        self._compiled = _gpt.CompiledModel(
            config,
            pipeline=options.pipeline,
            threads=options.resolved_threads(),
            cache_dir=options.resolved_cache_dir(),
            weights=options.weights,
            cache_max_bytes=options.resolved_cache_max_bytes(),
            target_cpu=options.target_cpu,
            kv_cache=options.kv_cache,
            weight_formats=dict(options.weight_formats),
        )
        arguments = [self._weights.get(name) for name, _ in self._compiled.supplied_parameters()]
        # `_packed_source` (from_gguf, from_pretrained): the model file's weight_cache key. Its
        # weights laid out by an earlier load are read back instead of converted and repacked.
        self._packed_weights_hit = weight_cache.bind(self._compiled, arguments, options, _packed_source)
        if not self._packed_weights_hit and _packed_source and weight_cache.directory(options):
            _prepare_compiler_meanwhile()
        if not self._packed_weights_hit:
            try:
                self._compiled.set_weights(arguments, quantized)
            except ValueError as error:
                if _weights_file is None:
                    raise
                # The file's blocks are first read here (a NaN block scale, rows of the wrong bytes):
                # the error names the file, as the reader's own do.
                raise ModelFileError(f"{_weights_file}: {error}") from None
            weight_cache.store(self._compiled, options, _packed_source)
        del arguments, quantized
        # Compiled code reads only the borrowed weights in place; the others it packed or
        # converted into storage of its own, so keeping them here would hold a second copy (for a
        # quantized model, fp32 copies of what it stores in fewer bytes). state_dict() reads those
        # back from the compiled model.
        borrowed = set(self._compiled.borrowed_parameters())
        self._weights = {name: value for name, value in self._weights.items() if name in borrowed}
        # The counters of the generate() run in progress or last run; None before the first.
        self._generation: dict[str, Any] | None = None
        # The speculation counters of that run (SpeculationStats); None when it did not speculate.
        self._speculation: dict[str, int] | None = None
        # The checkpoint's tokenizer (from_pretrained, from_gguf), when it has one.
        self._tokenizer: HFTokenizer | None = None
        # The ids generate() stops at by default (see end_of_generation; from_pretrained, from_gguf).
        self._end_of_generation: frozenset[int] = frozenset()

    # -- constructors ---------------------------------------------------------------------------

    @classmethod
    def random(cls, config: GPTConfig, seed: int = 0, options: CompileOptions | None = None) -> "GPT":
        """GPT-2 initialisation, deterministic in `seed`."""
        if isinstance(config, GPTConfig):  # else the constructor names the wrong type
            check_fits_in_memory(config, options.resolved_weights() if isinstance(options, CompileOptions) else "f32")
        return cls(config, random_weights(config, seed), options, _copy_weights=False)

    @classmethod
    def from_weights(
        cls, config: GPTConfig, weights: Mapping[str, np.ndarray], options: CompileOptions | None = None
    ) -> "GPT":
        """Weights by the architecture's HF parameter names, in HF's layouts (gpt/architectures.py
        lists them: `architectures.hf_shapes(config)`): GPT-2's Conv1D weights are [in, out]
        (c_attn.weight is [n_embd, 3 n_embd]); the Llama family's Linear weights [out, in]."""
        if isinstance(config, GPTConfig) and config.spec.converts:
            weights = loading.compiler_weights(config, weights)
        return cls(config, weights, options)

    @classmethod
    def from_pretrained(cls, path: str, options: CompileOptions | None = None, *, context: int | None = None) -> "GPT":
        """A HF checkpoint directory: GPT-2 (config.json and model.safetensors), or a
        LlamaForCausalLM / Qwen2ForCausalLM (config.json's model_type llama or qwen2; one
        model.safetensors or the shards of model.safetensors.index.json; a tied or untied head;
        Llama 3 rope scaling). Tensors F32, F16, BF16 or F64 (F16 and BF16 widen to float32
        exactly); no network access. `model.tokenizer` is the directory's tokenizer.json when
        there is one. `context` (default: config.json's, up to DEFAULT_CONTEXT) is the positions the
        model serves, at most the checkpoint's (see GPT's constructor)."""
        return loading.from_pretrained(cls, path, options, context)

    @classmethod
    def from_gguf(cls, path: str, options: CompileOptions | None = None, *, context: int | None = None) -> "GPT":
        """A GGUF file (llama.cpp's format, as llama.cpp's convert_hf_to_gguf.py and
        llama-quantize write it), read by gpt.gguf_file.GgufFile: architecture "gpt2" (an
        output.weight must equal token_embd.weight, GPT-2's tied head), or "llama" / "qwen2"
        (gpt/gguf_llama.py: grouped-query attention, tied or untied heads, llama.cpp's q/k
        permutation undone). Tensor types F32, F16, BF16 and llama.cpp's block types
        (_gpt.gguf_block_types; others that gguf dequantizes, widened at load); hyperparameters from the {arch}.*
        metadata. `model.tokenizer` is the file's BPE vocabulary (tokenizer.ggml.model "gpt2",
        with llama.cpp's pre-tokenizer: gpt/gguf_tokenizer.py) when it carries one. Anything else
        raises gpt.ModelFileError (a ValueError) naming the file and the problem.

        Quantized tensors stay quantized when their blocks convert to `options.weights`' format
        without fewer bits (gpt.kept_formats): the matmul weights of a file in a format the compiler
        stores (gpt.config.WEIGHT_FORMATS), and the LM head's table (in the format's head format),
        are repacked from the file's blocks into the compiled model's lane layouts, codes and fp16
        scales as they are, with no float32 copy (a q4_K block keeps its 6-bit sub-block scales and
        mins); every block type becomes q8_0 (q4_0 and q5_0 exactly).
        `options.weights="auto"` keeps each matmul weight in the format nearest its own type (a
        Q4_K_M file: q4_k, q6_k, and q8_0 where it has Q5_0), the way llama.cpp computes each
        tensor in its own; the model's `options` then name the formats.
        Any other tensor is dequantized to float32 and converted at load like any weight; the
        formats' definitions round-trip, so a file loaded in its own format computes with exactly
        the file's values either way.

        `context` (default: the file's context_length, up to DEFAULT_CONTEXT) is the positions the model
        serves, at most the file's (see GPT's constructor).
        """
        return loading.from_gguf(cls, path, options, context)

    # -- properties -----------------------------------------------------------------------------

    config = ReadOnly[GPTConfig]()
    options = ReadOnly[CompileOptions]()
    tokenizer = ReadOnly[HFTokenizer | None](
        """The tokenizer that came with the checkpoint (from_pretrained: tokenizer.json; from_gguf:
        the file's vocabulary), or None."""
    )

    def state_dict(self) -> dict[str, np.ndarray]:
        """The weights by HF name, in HF's layouts (those from_weights takes), as the model computes
        with them, read-only: views of the arrays it reads in place, and for the others (packed
        matmul weights, and with a low-precision format the LM head's table) the values read back
        from its own storage, unpacked and dequantized: equal to the weights given in f32, their
        rounding or quantization in the other formats. (The Llama family's fused q/k/v and
        gate/up weights are split and transposed back to HF's [out, in].)"""
        views = self._compiler_weights()
        if not self._config.spec.converts:  # GPT-2: HF's own names and layouts
            return views
        hf = architecture_weights.from_compiler(self._config, views)
        for value in hf.values():
            value.flags.writeable = False
        return hf

    def _compiler_weights(self) -> dict[str, np.ndarray]:
        """The weights as the compiler's parameters (GPT-2's are HF's; the Llama family's fuse q/k/v
        and gate/up, [in, out]), read-only, as the model computes with them (see state_dict)."""
        views = {}
        for name, _ in self._compiled.supplied_parameters():
            value = self._weights.get(name)
            view = value.view() if value is not None else self._compiled.stored_weight(name)
            view.flags.writeable = False
            views[name] = view
        return views

    # -- entry points ---------------------------------------------------------------------------

    def forward(self, ids: Sequence[int]) -> np.ndarray:
        """Logits [len(ids), vocab_size] for every position of the token sequence `ids`."""
        array = self._check_ids(ids)
        self._compile_interruptibly(len(array), 0, 0)
        logits = self._compiled.forward(array)
        return logits[: len(array), : self._config.vocab_size]

    def new_cache(self, max_len: int | None = None) -> KVCache:
        """An empty KV cache for up to `max_len` positions (default: block_size). Its buffers
        reserve the whole context and use memory for the positions written, so caches of every
        length run the same compiled programs. With an attention window W it holds min(W,
        max_len) positions per layer, rolling when that is W (see KVCache)."""
        if self._config.attention_mask is not None and not _mask_expression(self._config):
            raise ValueError(
                f"a model with attention_mask={type(self._config.attention_mask).__name__}(...) has no KV cache: "
                "it runs forward() and generate(use_cache=False) only (a mask that is data, not an expression "
                "of positions)"
            )
        if self._config.attention_mask is not None:
            self._config.attention_mask.check_cache(self._config.block_size)
        max_len = self._config.block_size if max_len is None else max_len
        if (
            isinstance(max_len, bool)
            or not isinstance(max_len, (int, np.integer))
            or not 1 <= max_len <= self._config.block_size
        ):
            raise ValueError(f"max_len must be an int in [1, block_size={self._config.block_size}], got {max_len!r}")
        return KVCache(self, int(max_len))

    def prefill(self, ids: Sequence[int], cache: KVCache) -> np.ndarray:
        """Runs `ids` at the cache's next positions, storing their keys and values in `cache`;
        returns the logits [vocab_size] of the last of them."""
        return self._step(self._check_ids(ids), cache)

    def decode(self, token: int, cache: KVCache) -> np.ndarray:
        """Runs one token at position len(cache) against the cache; returns its logits [vocab_size]."""
        if isinstance(token, bool) or not isinstance(token, (int, np.integer)):
            raise TypeError(f"token must be an int, got {type(token).__name__}")
        # The one-token case of _check_ids, without building an array to check it: decode is
        # called once per generated token, and for small models these checks cost as much as
        # the compiled step.
        if not 0 <= token < self._config.vocab_size:
            raise ValueError(f"token id {int(token)} is out of range [0, vocab_size={self._config.vocab_size})")
        return self._step(np.array([token], dtype=np.int64), cache)

    def verify(self, ids: Sequence[int], cache: KVCache) -> np.ndarray:
        """prefill() that returns the logits [len(ids), vocab_size] of every one of `ids`, from one
        pass over the weights: how a speculative draft is checked. A windowed model's cache must
        hold the tokens without wrapping around."""
        return self._verify(self._check_ids(ids), cache)

    def new_block_pool(self, num_blocks: int, block_size: int = 16) -> KVBlockPool:
        """An empty paged KV cache of `num_blocks` blocks of `block_size` positions per layer, for
        `step_batch` (see KVBlockPool)."""
        for name, value in (("num_blocks", num_blocks), ("block_size", block_size)):
            if isinstance(value, bool) or not isinstance(value, (int, np.integer)) or value < 1:
                raise ValueError(f"{name} must be an int >= 1, got {value!r}")
        if self._config.attention_mask is not None:
            raise ValueError(
                "a block pool with attention_mask is not supported (batched steps are causal or sliding-window)"
            )
        return KVBlockPool(self, int(num_blocks), int(block_size))

    def step_batch(self, pool: KVBlockPool, ids, counts, starts, block_tables) -> np.ndarray:
        """One compiled step for many sequences at once over the paged KV cache `pool`.

        `ids` [T]: the new tokens of B sequences, concatenated in order; `counts` [B]: how many of
        them each sequence brings (>= 1; 1 to decode, more for a prompt or a chunk of one);
        `starts` [B]: the position of each sequence's first new token (how many of its positions
        are in the pool already); `block_tables` [B, M]: sequence b's position p lives in block
        block_tables[b, p // block_size] (entries past its last position are ignored). The new
        tokens' keys and values are written into their slots, each token attends to its own
        sequence's positions up to its own, and all matmuls run over the T tokens together.
        Returns the logits [B, vocab_size] of each sequence's last new token. Bad arguments raise
        ValueError / TypeError before anything runs (the pool is unchanged)."""
        return self._step_batch(pool, ids, counts, starts, block_tables, odd_tokens=False)

    def _step_batch(self, pool, ids, counts, starts, block_tables, *, odd_tokens: bool) -> np.ndarray:
        """step_batch; with `odd_tokens` the tokens padded to an odd count, so that each row has a
        lone decode's bits (block_pool.step_batch_exact_rows, the engine's speculative steps)."""
        if not isinstance(pool, KVBlockPool):
            raise TypeError(f"pool must be a gpt.KVBlockPool, got {type(pool).__name__}")
        if pool.model is not self:
            raise ValueError("this KVBlockPool belongs to another model; make one with model.new_block_pool()")
        args = BatchStepArguments(self._config, pool, ids, counts, starts, block_tables, odd_tokens=odd_tokens)
        logits = pool._claim.run(
            self._compiled.batch_step,
            args.ids,
            args.positions,
            args.sequences,
            args.slots,
            args.tables,
            args.last,
            pool.block_size,
            pool._key_views,
            pool._value_views,
        )
        return logits[: args.batch, : self._config.vocab_size]

    def ir(
        self,
        stage: str = "transformer",
        seq_len: int | None = None,
        entry: str = "forward",
        cache_len: int | None = None,
        target: str | None = None,
    ) -> str:
        """A compiled program after `stage`, one of gpt.STAGES: "transformer", "linalg",
        "vectorized", "bufferized", "llvm". `entry="forward"` (for `seq_len` tokens, default the
        smallest bucket) or `entry="step"`, the cached prefill/decode step (default one token,
        i.e. decode) against a cache of `cache_len` positions (default block_size), or
        `entry="verify"`, the step that returns every token's logits (`seq_len` default 2: one
        drafted token and the one before it; speculative decoding), or
        `entry="batch_step"`, the batched step over a paged KV pool (`seq_len` tokens of as many
        sequences, default 8). The GPU stages "gpu", "nvvm" and "ptx" show the kernels of every
        entry point for `target` (default "cuda:sm_90"; see GPT.export)."""
        if stage in GPU_STAGES:
            # The CUDA target compiles forward and step together: `seq_len` tokens of each.
            from gpt import gpu_export

            tokens = 1 if seq_len is None else self._check_length(seq_len)
            return gpu_export.compile_artifact(self, target or "cuda:sm_90", (tokens,), cache_len=cache_len)[stage]
        if stage not in STAGES:
            raise ValueError(f"unknown stage {stage!r}; expected one of {STAGES} or, for a GPU, {GPU_STAGES}")
        if entry == "forward":
            seq_len = self._compiled.bucket_for(1) if seq_len is None else self._check_length(seq_len)
            return self._compiled.ir(stage, seq_len)
        if entry in ("step", "verify"):
            cache_len = self._config.block_size if cache_len is None else self._check_length(cache_len)
            seq_len = (1 if entry == "step" else 2) if seq_len is None else self._check_length(seq_len)
            if seq_len > cache_len:
                raise ValueError(f"seq_len {seq_len} does not fit in cache_len {cache_len}")
            return self._compiled.ir(stage, seq_len, cache_len, every_row=entry == "verify")
        if entry == "batch_step":
            # A batch of `seq_len` tokens (default 8) of as many sequences, tables 4 blocks wide, a
            # pool of 64 blocks of 16 positions: the shapes only change the program's sizes.
            tokens = 8 if seq_len is None else self._check_length(seq_len)
            return self._compiled.batch_step_ir(stage, tokens, tokens, 4, 64, 16)
        raise ValueError(f"unknown entry point {entry!r}; expected 'forward', 'step', 'verify' or 'batch_step'")

    def export(
        self,
        path: str,
        target: str = "cuda:sm_90",
        tokens: Sequence[int] = (1, 128),
        weights: str = "f32",
        write_weights: bool = True,
        cache_len: int | None = None,
    ) -> str:
        """Compiles this model for an NVIDIA GPU and writes the artifact directory `path`
        (docs/GPU.md) that `gpt_runtime.load(path)` runs with only the CUDA driver: PTX for
        `target` ("cuda:sm_80" .. "cuda:sm_90"), forward and step programs for each count in
        `tokens` (longer inputs are padded up or split), KV caches of `cache_len` positions
        (default block_size), weights in "f32" or "bf16" (matmul weights; the rest stay f32).
        `write_weights=False` writes no weights file (the caller supplies it). The files are
        written beside `path` and renamed into place: `path` must be new, an empty directory, or
        an artifact an export wrote (replaced whole); a link at `path` is never followed. A path
        refused, or a file system failure (read-only, full), raises gpu_export.ExportError, an
        OSError naming the path, and leaves `path` as it was."""
        from gpt import gpu_export

        return gpu_export.export(self, path, target, tokens, weights, write_weights, cache_len)

    def save_object(self, path: str, seq_len: int | None = None) -> None:
        """Writes the machine code compiled for forward(seq_len tokens) to `path`: the ELF shared
        object that runs, or for a compile-only target the relocatable object (`llvm-objdump -d`
        shows either)."""
        if not isinstance(path, (str, os.PathLike)):
            raise TypeError(f"path must be a str or os.PathLike, got {type(path).__name__}")
        seq_len = self._compiled.bucket_for(1) if seq_len is None else self._check_length(seq_len)
        self._compiled.dump_forward_object(seq_len, os.fspath(path))

    def compiled_lengths(self) -> dict[int, float]:
        """{padded sequence length: seconds spent compiling it} for every forward program so far."""
        return dict(self._compiled.compiled_buckets())

    def compiled_steps(self) -> dict[tuple[int, int], float]:
        """{(tokens, cache length): seconds spent compiling it} for every cached-step program so far."""
        return dict(self._compiled.compiled_steps())

    def disk_cache_hits(self) -> int:
        """How many programs were loaded from the on-disk cache instead of being compiled."""
        return self._compiled.disk_cache_hits()

    def compile_seconds(self) -> float:
        """Total seconds this model has spent compiling."""
        return self._compiled.total_compile_seconds()

    def bucket_for(self, seq_len: int) -> int:
        """The padded length that `seq_len` tokens are compiled and run at."""
        return self._compiled.bucket_for(self._check_length(seq_len))

    # -- helpers --------------------------------------------------------------------------------

    def _check_step(self, ids: np.ndarray, cache: KVCache) -> None:
        """Refuses a cache of another kind or model, and tokens the attention mask cannot prefill there."""
        if not isinstance(cache, KVCache):
            raise TypeError(f"cache must be a gpt.KVCache, got {type(cache).__name__}")
        if cache.model is not self:
            raise ValueError("this KVCache belongs to another model; make one with model.new_cache()")
        if self._config.attention_mask is not None:
            self._config.attention_mask.check_prefill(len(cache), len(ids))

    def _step(self, ids: np.ndarray, cache: KVCache) -> np.ndarray:
        self._check_step(ids, cache)
        if cache.rolling:
            # A rolling cache takes a long prompt in chunks (KVCache.chunks); positions are
            # checked for the whole of it first, so a bad call changes nothing.
            if cache._limit is not None and len(cache) + len(ids) > cache._limit:
                return cache._run(self._compiled.step, ids)  # raises, naming the full cache
            start, logits = 0, None
            for count in cache.chunks(len(ids)):
                chunk = ids[start : start + count]
                self._compile_interruptibly(count, len(cache), cache.slots)
                logits = cache._run(self._compiled.step, chunk)
                start += count
            return logits[0, : self._config.vocab_size]
        if len(cache) + len(ids) <= cache.max_len:  # else _run raises, naming the full cache
            if len(ids) > 1 and len(cache) + len(ids) < cache.max_len:
                self._compile_decode_meanwhile(len(cache) + len(ids), cache.slots)
            self._compile_interruptibly(len(ids), len(cache), cache.slots)
        return cache._run(self._compiled.step, ids)[0, : self._config.vocab_size]

    def _compile_decode_meanwhile(self, offset: int, cache_len: int) -> None:
        """Starts compiling the decode step after a prefill (a cache of `cache_len` positions) on
        a thread of its own, if it is not compiled yet and a second core is there: a first token
        needs both programs, and each compiles on one core (an MLIRContext of its own), so the two
        compile side by side instead of one after the other. The decode call waits for it (or for
        what is left of it). Its error, if any, is left to that call, which compiles it again and
        raises it."""
        if self._options.resolved_threads() == 1 or (os.cpu_count() or 1) < 2:
            return
        if self._compiled.is_compiled_for(1, offset, cache_len):
            return

        def compile_decode() -> None:
            try:
                self._compiled.compile_for(1, offset, cache_len)
            except Exception:  # noqa: BLE001 - raised by the decode call that needs the program
                pass

        # Not a daemon, as _compile_interruptibly's: at exit Python waits for it.
        threading.Thread(target=compile_decode, name="gpt-compile-decode").start()

    def _verify(self, ids: np.ndarray, cache: KVCache) -> np.ndarray:
        self._check_step(ids, cache)
        if cache.rolling and len(cache) + len(ids) > cache.slots:
            raise ValueError(
                f"verify: {len(ids)} tokens at position {len(cache)} would wrap around the rolling cache of "
                f"{cache.slots} slots (attention_window); verify tokens while they fit, then decode"
            )
        if len(cache) + len(ids) <= cache.max_len:  # else _run raises, naming the full cache
            self._compile_interruptibly(len(ids), len(cache), cache.slots, every_row=True)

        def every_row(ids, offset, slots, keys, values):
            return self._compiled.step(ids, offset, slots, keys, values, every_row=True)

        return cache._run(every_row, ids)[:, : self._config.vocab_size]

    def _compile_interruptibly(self, count: int, offset: int, cache_len: int, every_row: bool = False) -> None:
        """Compiles the program of a call (forward: cache_len 0) on a thread of its own, if it is
        not compiled yet, and waits for it: Ctrl-C interrupts the wait at once, where a compile
        running on this thread would hold it back to the end (seconds for a large model). An
        interrupted compile goes on in the background and keeps its program (in the model and on
        disk), so the model stays whole and the next call finds it, or waits for it; a process
        that ends meanwhile finishes it first (a second Ctrl-C stops that wait)."""
        if self._compiled.is_compiled_for(count, offset, cache_len, every_row):
            return
        started = time.perf_counter()
        try:
            self._wait_for_compile(count, offset, cache_len, every_row)
        finally:
            self._compile_waits += time.perf_counter() - started

    def _wait_for_compile(self, count: int, offset: int, cache_len: int, every_row: bool) -> None:
        failure: list[BaseException] = []
        done = threading.Event()

        def compile_program() -> None:
            try:
                self._compiled.compile_for(count, offset, cache_len, every_row)
            except BaseException as error:  # raised again on the caller's thread
                failure.append(error)
            finally:
                done.set()

        # Not a daemon: at exit Python waits for it, where a daemon thread returning from the
        # compile into a finalizing interpreter would be torn down inside C++ frames (abort).
        # Waited for on an Event, not with join(): a join() that Ctrl-C interrupts marks the
        # thread as stopped while it runs (CPython 3.11), and the exit would not wait for it.
        threading.Thread(target=compile_program, name="gpt-compile").start()
        done.wait()
        if failure:
            raise failure[0]

    def _check_length(self, seq_len: int) -> int:
        if isinstance(seq_len, bool) or not isinstance(seq_len, (int, np.integer)):
            raise TypeError(f"seq_len must be an int, got {type(seq_len).__name__}")
        if not 1 <= seq_len <= self._config.block_size:
            raise ValueError(f"sequence length {seq_len} is outside [1, block_size={self._config.block_size}]")
        return int(seq_len)

    def _check_ids(self, ids) -> np.ndarray:
        return check_token_ids(ids, self._config.block_size, self._config.vocab_size)
