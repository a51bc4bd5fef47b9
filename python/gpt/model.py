"""GPT: a GPT-2-style model whose forward pass is compiled by the gpt compiler for this CPU."""

from typing import Mapping, Optional, Sequence

import numpy as np

from gpt import _gpt
from gpt.config import CompileOptions, GPTConfig
from gpt.weights import load_pretrained, random_weights, validate_weights

STAGES = tuple(_gpt.STAGES)


class GPT:
    """Construct with GPT.random, GPT.from_weights or GPT.from_pretrained."""

    def __init__(self, config: GPTConfig, weights: Mapping[str, np.ndarray], options: Optional[CompileOptions] = None):
        if not isinstance(config, GPTConfig):
            raise TypeError(f"config must be a gpt.GPTConfig, got {type(config).__name__}")
        options = options if options is not None else CompileOptions()
        if not isinstance(options, CompileOptions):
            raise TypeError(f"options must be a gpt.CompileOptions, got {type(options).__name__}")
        self._config = config
        self._options = options
        self._weights = validate_weights(config, weights)
        self._compiled = _gpt.CompiledModel(
            n_layer=config.n_layer, n_head=config.n_head, n_embd=config.n_embd, vocab_size=config.vocab_size,
            block_size=config.block_size, rope=config.pos_embedding == "rope",
            layer_norm_eps=float(config.layer_norm_eps), pipeline=options.pipeline,
            threads=options.resolved_threads())
        self._arguments = self._arrange_arguments()

    # -- constructors ---------------------------------------------------------------------------

    @classmethod
    def random(cls, config: GPTConfig, seed: int = 0, options: Optional[CompileOptions] = None) -> "GPT":
        """GPT-2 initialisation, deterministic in `seed`."""
        return cls(config, random_weights(config, seed), options)

    @classmethod
    def from_weights(cls, config: GPTConfig, weights: Mapping[str, np.ndarray],
                     options: Optional[CompileOptions] = None) -> "GPT":
        """Weights by HF GPT-2 parameter name (Conv1D layout: c_attn.weight is [n_embd, 3 n_embd])."""
        return cls(config, weights, options)

    @classmethod
    def from_pretrained(cls, path: str, options: Optional[CompileOptions] = None) -> "GPT":
        """A HF GPT-2 directory with config.json and model.safetensors; no network access."""
        config, weights = load_pretrained(path)
        return cls(config, weights, options)

    # -- properties -----------------------------------------------------------------------------

    @property
    def config(self) -> GPTConfig:
        return self._config

    @property
    def options(self) -> CompileOptions:
        return self._options

    def state_dict(self) -> dict:
        """The weights by HF name (read-only views)."""
        views = {}
        for name, value in self._weights.items():
            view = value.view()
            view.flags.writeable = False
            views[name] = view
        return views

    # -- entry points ---------------------------------------------------------------------------

    def forward(self, ids: Sequence[int]) -> np.ndarray:
        """Logits [len(ids), vocab_size] for every position of the token sequence `ids`."""
        ids = self._check_ids(ids)
        logits = self._compiled.forward(ids, self._arguments)
        return logits[: len(ids), : self._config.vocab_size]

    def ir(self, stage: str = "transformer", seq_len: Optional[int] = None) -> str:
        """The forward program for `seq_len` tokens (default: the smallest bucket) after `stage`,
        one of gpt.STAGES: "transformer", "linalg", "vectorized", "bufferized", "llvm"."""
        if stage not in STAGES:
            raise ValueError(f"unknown stage {stage!r}; expected one of {STAGES}")
        seq_len = self._compiled.bucket_for(1) if seq_len is None else self._check_length(seq_len)
        return self._compiled.ir(stage, seq_len)

    def compiled_lengths(self) -> dict:
        """{padded sequence length: seconds spent compiling it} for everything compiled so far."""
        return dict(self._compiled.compiled_buckets())

    def bucket_for(self, seq_len: int) -> int:
        """The padded length that `seq_len` tokens are compiled and run at."""
        return self._compiled.bucket_for(self._check_length(seq_len))

    # -- helpers --------------------------------------------------------------------------------

    def _arrange_arguments(self):
        """The weight arrays in the order the compiled entry points take them."""
        arguments = []
        for name, shape in self._compiled.parameter_specs():
            if name == "lm_head.weight_t":
                # The tied embedding, transposed once to [n_embd, padded vocab] for the LM head matmul.
                head = np.zeros(shape, np.float32)
                head[:, : self._config.vocab_size] = self._weights["transformer.wte.weight"].T
                arguments.append(head)
            else:
                arguments.append(self._weights[name])
        return arguments

    def _check_length(self, seq_len: int) -> int:
        if isinstance(seq_len, bool) or not isinstance(seq_len, (int, np.integer)):
            raise TypeError(f"seq_len must be an int, got {type(seq_len).__name__}")
        if not 1 <= seq_len <= self._config.block_size:
            raise ValueError(f"sequence length {seq_len} is outside [1, block_size={self._config.block_size}]")
        return int(seq_len)

    def _check_ids(self, ids) -> np.ndarray:
        array = np.asarray(ids)
        if array.ndim != 1:
            raise ValueError(f"ids must be a 1-D sequence of token ids, got shape {array.shape}")
        if array.size == 0:
            raise ValueError("ids must contain at least one token")
        if not np.issubdtype(array.dtype, np.integer):
            raise TypeError(f"token ids must be integers, got dtype {array.dtype}")
        if array.size > self._config.block_size:
            raise ValueError(f"sequence of {array.size} tokens is longer than block_size={self._config.block_size}")
        bad = (array < 0) | (array >= self._config.vocab_size)
        if bad.any():
            raise ValueError(f"token id {int(array[bad][0])} is out of range [0, vocab_size={self._config.vocab_size})")
        return np.ascontiguousarray(array, dtype=np.int64)
