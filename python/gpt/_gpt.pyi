"""Type stub of gpt._gpt, the pybind11 extension built from python/gpt/_gpt/*.cc."""

from collections.abc import Mapping, Sequence
from typing import Any, SupportsFloat, SupportsIndex, SupportsInt

import numpy as np
import numpy.typing as npt

from gpt.config import GPTConfig

# pybind11 accepts anything int() or float() accepts where the C++ side takes a number.
_Int = SupportsInt | SupportsIndex
_Float = SupportsFloat | SupportsIndex

STAGES: list[str]
"""The compiler stages ir() can print, in pipeline order: transformer, linalg, vectorized, bufferized, llvm."""

class CompilerError(RuntimeError):
    """An MLIR or JIT failure, carrying MLIR's diagnostics (location and message)."""

def run_pipeline(ir: str, pipeline: str, verify_each: bool = True) -> str:
    """Parse MLIR text, run a textual pass pipeline over it and return the printed result."""

def pack_panels(matrix: npt.ArrayLike, width: _Int) -> npt.NDArray[np.float32]:
    """The [N/width, K, width] column panels of a [K, N] matrix, as the runtime packs matmul weights."""

def weight_formats() -> list[tuple[str, int, int, int, bool, str, tuple[str, ...], int, int, int]]:
    """The weight-format table (cc/kernels/WeightFormats.h), a row per format in its order: (name, block_values,
    block_bytes, rows_per_word, has_mins, head_format, converts_from: the GGUF block types set_weights repacks
    into it, precision: higher is more precise, scale_rows: 16-bit scale values per block and column, code_bits:
    bits of one weight's code in the lanes (q6_k: 6, 16 codes in 3 words; q5_k, q5_0 and q5_1: 5, 32 in 5;
    rows_per_word 0))."""

def gguf_block_types() -> list[tuple[str, int, int, dict[str, int]]]:
    """The GGUF block types the loaders read (cc/kernels/BlockTranscoding.h), a row per type: (name, values:
    weights per block, bytes per block, {fp16 field name: byte offset in the block})."""

def dequantize_rows(type: str, blocks: npt.NDArray[np.uint8], threads: _Int = 0) -> npt.NDArray[np.float32]:
    """llama.cpp blocks of GGUF type `type` (a name of gguf_block_types) [..., row bytes] as float32 [..., K], bit
    for bit as gguf.quants dequantizes them, on `threads` threads (0: every core) where the type's kernel splits
    rows."""

def target_description(target_cpu: str = "host") -> dict[str, object]:
    """cpu, triple, vector_bits, vector_registers, features (those choosing instructions) and runs_here of a target."""

def tile_parameters(target_cpu: str = "host") -> dict[str, int]:
    """The tile parameters code for a target CPU is built with (panel_width, vocab_multiple, ...)."""

def release_freed_memory() -> None:
    """Returns the C heap's free pages to the system (glibc's malloc_trim), after a load's temporaries die."""

def supplied_parameters(config: GPTConfig) -> list[tuple[str, tuple[int, ...]]]:
    """(name, shape) of every weight a model of this gpt.GPTConfig takes, in order."""

DEFAULT_CACHE_MAX_BYTES: int

def compiler_identity() -> str:
    """This build of the compiler as the disk cache's keys name it."""

def compiler_loaded() -> bool:
    """Whether this process has loaded the compiler library (_gpt_compiler.so)."""

def prepare_compiler() -> None:
    """Loads the compiler library and does what a process's first compile does once."""

def disk_cache_entries(directory: str) -> list[tuple[str, int, float]]:
    """(path, bytes, last used as seconds since the epoch) of every entry, most recent first."""

def clear_disk_cache(directory: str) -> int:
    """Removes every entry and abandoned temporary; returns how many files were removed."""

def evict_disk_cache(directory: str, max_bytes: _Int) -> None:
    """Removes the least recently used entries until the rest fit in max_bytes."""

class CompiledModel:
    """A GPT's compiled entry points, called with numpy arrays (zero-copy)."""

    def __init__(
        self,
        config: GPTConfig,
        pipeline: str,
        threads: _Int,
        cache_dir: str = "",
        weights: str = "f32",
        cache_max_bytes: _Int = ...,
        target_cpu: str = "host",
        kv_cache: str = "f32",
        weight_formats: Mapping[str, str] = ...,
    ) -> None:
        """A gpt.GPTConfig's model compiled with these options (weights bound later, by set_weights);
        `weight_formats` stores the named layer matmul weights in other formats than `weights`."""
    def kv_cache_dtype(self) -> np.dtype[Any]:
        """The numpy dtype of the KV cache arrays step() and batch_step() take: float32, float16, uint16
        (bf16's bits), or int8 (q8_0's bytes)."""
    def kv_cache_row_width(self) -> int:
        """The elements of one cached key or value row (the KV cache arrays' last dim): head_size, or for
        q8_0 head_size int8 codes followed by head_size / 32 fp16 scales as bytes (head_size * 17/16)."""
    def supplied_parameters(self) -> list[tuple[str, tuple[int, ...]]]:
        """(name, shape) of every weight set_weights() takes, in its order."""

    def bucket_for(self, seq_len: _Int) -> int:
        """The padded sequence length that seq_len tokens are compiled for."""

    def set_weights(
        self,
        weights: list[npt.NDArray[np.float32] | None],
        quantized: Mapping[str, tuple[str, npt.NDArray[np.uint8] | Sequence[npt.NDArray[np.uint8]]]],
    ) -> None:
        """Binds the weights (checked here, once) for every later call; the model keeps the arrays it reads
        in place (borrowed_parameters()) alive. `quantized`: {name: (format, llama.cpp blocks [out rows,
        bytes per row], or a list of them: a fused weight's parts, rows in order)} for weights repacked
        from a file's blocks, given as None in `weights`. The format is the stored one (a block format
        of weight_formats()), a GGUF block type that exactly one stored format converts as it is
        repacked (gguf_block_types(); none now: each is a stored format), or "FORMAT:TYPE,..."
        naming each part's type. A NaN or infinite block scale raises ValueError naming the weight,
        the block and the row."""

    def borrowed_parameters(self) -> list[str]:
        """Names of the supplied weights compiled code reads in place; the others were copied (packed, converted)."""

    def packed_weights_key(self, source_key: str) -> str:
        """What the model's laid-out weights are a function of (the source's key, this compiler build, every
        parameter's format, layout and shape): the header of its packed-weights file; empty when this build
        cannot be told apart from others."""

    def bind_packed_weights(self, weights: list[npt.NDArray[np.float32] | None], path: str, source_key: str) -> bool:
        """Binds the weights from the packed-weights file at `path` (written by write_packed_weights for the
        same key) instead of laying them out: True when it did; False, binding nothing, when the file is
        absent, another key's, truncated or corrupt. Only the borrowed weights are read, the others may be None."""

    def write_packed_weights(self, path: str, source_key: str) -> None:
        """Writes the bound weights' laid-out bytes to `path` (atomically) for a later bind_packed_weights;
        raises RuntimeError naming the path when it cannot be written."""

    def stored_weight(self, name: str) -> npt.NDArray[np.float32]:
        """The values the model computes with for a weight that is not borrowed: unpacked and dequantized."""

    def stored_arguments(self) -> list[tuple[str, int, int]]:
        """(name, address, bytes) of each argument compiled code reads from the model's own storage."""

    def weight_blocks(self) -> list[tuple[int, int]]:
        """(address, bytes) of the blocks of memory the stored arguments were laid out in."""

    def forward(self, ids: npt.ArrayLike) -> npt.NDArray[np.float32]:
        """Logits [bucket_for(len(ids)), padded vocab]: rows past len(ids) and columns past vocab_size are padding."""

    def step(
        self,
        ids: npt.ArrayLike,
        offset: _Int,
        cache_len: _Int,
        keys: list[npt.NDArray[Any]],
        values: list[npt.NDArray[Any]],
        every_row: bool = False,
    ) -> npt.NDArray[np.float32]:
        """Cached step: logits [1, padded vocab] of the last of `ids` (every_row: [len(ids), padded vocab], one
        row per token, for speculative verification), which sit at positions offset.. and
        whose keys/values are written into the per-layer caches in place (arrays of kv_cache_dtype())."""

    def batch_step(
        self,
        ids: npt.ArrayLike,
        positions: npt.ArrayLike,
        sequences: npt.ArrayLike,
        slots: npt.ArrayLike,
        tables: npt.ArrayLike,
        last: npt.ArrayLike,
        block_size: _Int,
        keys: list[npt.NDArray[Any]],
        values: list[npt.NDArray[Any]],
    ) -> npt.NDArray[np.float32]:
        """Batched step over paged KV pools (padded, checked arrays): logits [len(last), padded vocab]."""
    def batch_step_ir(
        self, stage: str, tokens: _Int, batch: _Int, table_width: _Int, pool_blocks: _Int, block_size: _Int
    ) -> str:
        """The batched step's program for that shape after `stage`."""
    def compiled_batch_steps(self) -> dict[tuple[int, ...], float]:
        """{(tokens, batch, table width, pool blocks, block size): seconds} for every batched step compiled."""

    def is_compiled_for(self, count: _Int, offset: _Int, cache_len: _Int, every_row: bool = False) -> bool:
        """Whether forward(count tokens) (cache_len 0) or the step at offset against cache_len is compiled."""
    def compile_for(self, count: _Int, offset: _Int, cache_len: _Int, every_row: bool = False) -> None:
        """Compiles the program is_compiled_for() names, if it is not yet."""
    def ir(self, stage: str, seq_len: _Int, cache_len: _Int = 0, every_row: bool = False) -> str:
        """The program for seq_len tokens after `stage` (one of STAGES); the cached step when cache_len > 0."""

    def dump_forward_object(self, seq_len: _Int, path: str) -> None:
        """Writes the JIT's machine code of forward(seq_len) to an ELF object."""

    def compiled_buckets(self) -> dict[int, float]:
        """{bucket: seconds spent compiling it} for every forward bucket compiled so far."""

    def compiled_steps(self) -> dict[tuple[int, int], float]:
        """{(tokens, cache length): seconds} for every cached-step program compiled so far."""

    def disk_cache_hits(self) -> int:
        """Programs loaded from the on-disk cache instead of being compiled."""

    def total_compile_seconds(self) -> float:
        """Seconds spent compiling (or loading) every program so far."""

class CompiledFunction:
    """An imported transformer-dialect function (gpt.frontend), compiled like the entry points."""

    def __init__(
        self,
        ir: str,
        name: str,
        pipeline: str,
        threads: _Int,
        cache_dir: str,
        cache_max_bytes: _Int,
        target_cpu: str,
    ) -> None: ...
    def arguments(self) -> list[tuple[tuple[int, ...], str]]: ...
    def results(self) -> list[tuple[tuple[int, ...], str]]: ...
    def ir(self, stage: str) -> str: ...
    def compile(self) -> None: ...
    def is_compiled(self) -> bool: ...
    def compile_seconds(self) -> float: ...
    def loaded_from_disk_cache(self) -> bool: ...
    def call(self, arguments: list[npt.NDArray[Any]], results: list[npt.NDArray[Any]]) -> None: ...

def compile_gpu_artifact(
    config: Any, chip: str, tokens: Sequence[_Int], cache_length: _Int, bf16: bool, libdevice: str
) -> dict[str, str]:
    """A gpt.GPTConfig's entry points compiled for an NVIDIA GPU: {'manifest': JSON text (docs/GPU.md, without
    the config), 'ptx': the PTX module, 'gpu': the kernels before lowering, 'nvvm': after NVVM conversion}."""
