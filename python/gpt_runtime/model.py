"""gpt_runtime.load: an artifact directory on a GPU, with gpt.GPT's inference API (forward,
new_cache, prefill, decode, generate, last_generation) over the manifest's programs."""

import contextlib
import dataclasses
import os
import threading
import weakref
from collections.abc import Iterable, Iterator, Sequence
from typing import Any

import numpy as np

from .artifact_files import read_bytes
from .cache import Cache
from .device import Device
from .errors import ArtifactError, ModelFileError
from .manifest import MAX_TOKENIZER_BYTES, Manifest, Program, load_manifest
from .model_weights import ModelWeights, model_file_inside
from .program import BoundProgram, graphs_default
from .read_only import ReadOnly
from .sampling import check_sampling_args, check_token_ids, sample
from .timing import step_timer
from .weights import WeightsFile, check_weights, read_header


@dataclasses.dataclass(frozen=True)
class GenerationStats:
    """Token counts and timings of one generate() run, as gpt.GenerationStats: `prompt_seconds` is
    the prefill, `generate_seconds` every later step; neither counts `capture_seconds`, the CUDA
    graphs recorded on first use (this runtime's counterpart of compiling)."""

    prompt_tokens: int
    generated_tokens: int
    prompt_seconds: float
    generate_seconds: float
    capture_seconds: float

    @property
    def compile_seconds(self) -> float:
        """gpt.GenerationStats' name for the one-time work, so that tools read both alike."""
        return self.capture_seconds

    @property
    def prompt_tokens_per_second(self) -> float:
        return self.prompt_tokens / self.prompt_seconds if self.prompt_seconds else float("inf")

    @property
    def decode_seconds_per_token(self) -> float:
        """generate_seconds over the decode steps run: the last token sampled is never decoded."""
        steps = self.generated_tokens - 1
        return self.generate_seconds / steps if steps > 0 else float("nan")


def load(directory: str, device: int = 0, graphs: bool | None = None, model: str | None = None) -> "Model":
    """The artifact in `directory` (docs/GPU.md) on GPU `device`. The manifest and the weights'
    header are checked first (ArtifactError), then the driver and the GPU (NoDeviceError,
    IncompatibleDeviceError). `graphs=False` (or GPT_RUNTIME_GRAPHS=0) launches each kernel
    on every run instead of replaying CUDA graphs: for debugging.

    `model`: for an artifact without weights (exported with `--gpu_weights none`), the GGUF file or
    HF checkpoint directory they are read from, checked against the manifest before the driver
    (ModelFileError naming the tensor or key). An artifact with its own weights refuses a `model`
    (ValueError): its weights are the ones its programs were checked with."""
    manifest = load_manifest(directory)
    if manifest.weights_path is not None:
        if model is not None:
            raise ValueError(
                f"{directory} holds its own weights ({os.path.basename(manifest.weights_path)}); a model file "
                "(model=, --model) is only for an artifact exported without them (--gpu_weights none)"
            )
        tensors = read_header(manifest.weights_path)
        check_weights(manifest, tensors)
        weights = WeightsFile(manifest.weights_path, tensors)
    else:
        if model is None:
            raise ValueError(
                f"{directory} holds no weights (exported with --gpu_weights none): give the model file they are "
                "read from, load(..., model=FILE.gguf or HF_DIR) or --model"
            )
        weights = ModelWeights(manifest, model)
    try:
        return Model(manifest, weights, device, graphs_default() if graphs is None else bool(graphs))
    finally:
        weights.close()


class Model:
    """Made by gpt_runtime.load. One call at a time runs on the GPU (the programs share their
    input, scratch and output buffers); calls from several threads wait for each other."""

    def __init__(self, manifest: Manifest, weights: "WeightsFile | ModelWeights", ordinal: int, graphs: bool):
        self._manifest = manifest
        self._graphs = graphs
        self._lock = threading.Lock()
        self._device = device = Device(manifest, ordinal)
        self._finalizer = weakref.finalize(self, _close_quietly, device)
        try:
            self._pointers = self._allocate_and_upload(weights)
        except BaseException:
            self.close()
            raise
        self._forward: dict[int, BoundProgram] = {}
        self._steps = manifest.programs_of("step")
        self._forwards = manifest.programs_of("forward")
        config = manifest.config
        self._block_size = config["block_size"]
        self._rope = config.get("pos_embedding") == "rope"
        # Learned positions index a table of block_size rows; rotary ones have no table.
        length = manifest.cache_length or 0
        self._cache_limit = length if self._rope else min(length, self._block_size)
        self._generation: dict[str, Any] | None = None
        self._generation_cache: Cache | None = None
        self._tokenizer = None
        # The artifact's tokenizer.json, else a HF model directory's (the one the weights came from).
        self._tokenizer_path, self._tokenizer_error = manifest.tokenizer_path, ArtifactError
        if self._tokenizer_path is None and isinstance(weights, ModelWeights) and os.path.isdir(weights.path):
            self._tokenizer_path = model_file_inside(weights.path, "tokenizer.json")
            self._tokenizer_error = ModelFileError
        self._captured = 0.0  # seconds spent capturing graphs, over the model's life

    def _allocate_and_upload(self, weights) -> list[int | None]:
        """Every buffer but the caches (new_cache allocates those), the weights copied in (from the
        artifact's weights file, or made one at a time from the model file)."""
        device, pointers = self._device, []
        made = isinstance(weights, ModelWeights)
        for buffer in self._manifest.buffers:
            if buffer.role == "cache":
                pointers.append(None)
                continue
            pointer = device.alloc(buffer.bytes, f"for {buffer.role} buffer {buffer.name!r}")
            pointers.append(pointer)
            if buffer.role == "weight":
                data = weights.raw(buffer.name)
                device.driver.copy_to_device_async(pointer, data.ctypes.data, data.nbytes, device.stream)
                if made:  # an array made for this copy: it must outlive the copy, and nothing else holds it
                    device.driver.synchronize(device.stream)
                del data
        # Before the mapping closes: an async copy from pageable memory may still read it.
        device.driver.synchronize(device.stream)
        return pointers

    # -- properties -------------------------------------------------------------------------------

    @property
    def config(self) -> dict[str, Any]:
        """The model's gpt.GPTConfig fields, from the manifest (a copy)."""
        return dict(self._manifest.config)

    vocab_size = ReadOnly[int](of="_manifest")
    eos_token_id = ReadOnly[int | None](of="_manifest")
    eos_token_ids = ReadOnly[tuple[int, ...]](
        "Every end-of-generation token of the manifest (eos_token_id and eos_token_ids).", of="_manifest"
    )
    compute_capability = ReadOnly[tuple[int, int]](of="_device")
    driver_version = ReadOnly[int](of="_device")
    jit_seconds = ReadOnly[float]("Seconds the driver took to JIT-compile the PTX at load.", of="_device")

    @property
    def device_name(self) -> str:
        return self._device.name

    @property
    def max_len(self) -> int:
        """Positions a cache holds at most: the artifact's cache length, and for learned positions
        at most block_size (0 for an artifact without a cache)."""
        return self._cache_limit

    @property
    def tokenizer(self):
        """The artifact's tokenizer.json as a `tokenizers.Tokenizer` (that package is needed only
        here); for an artifact without one whose weights came from a HF directory, that directory's
        tokenizer.json; else None."""
        path, error_type = self._tokenizer_path, self._tokenizer_error
        if self._tokenizer is None and path is not None:
            from tokenizers import Tokenizer

            # Read here, bounded, as a regular file (load checked it lies inside the artifact or the
            # model directory), rather than by Tokenizer.from_file, which would open whatever the
            # path is by then.
            text = read_bytes(path, MAX_TOKENIZER_BYTES, "tokenizer.json", error_type)
            try:
                self._tokenizer = Tokenizer.from_str(text.decode("utf-8"))
            except UnicodeDecodeError as error:
                raise error_type(f"{path}: not UTF-8 text (byte {error.start})") from None
            except (KeyboardInterrupt, SystemExit):
                raise
            except BaseException as error:  # noqa: B036 -- tokenizers' Rust panics are pyo3 PanicException, a BaseException
                raise error_type(f"{path}: not a tokenizer the tokenizers package reads: {error}") from None
        return self._tokenizer

    @property
    def last_generation(self) -> GenerationStats | None:
        """Token counts and timings of the last generate() run (so far, while a stream is being
        consumed); None before the first."""
        return None if self._generation is None else GenerationStats(**self._generation)

    def close(self) -> None:
        """Frees the GPU memory, graphs and context now (else at garbage collection); caches of
        this model cannot be used after."""
        self._finalizer()

    def __enter__(self) -> "Model":
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    # -- entry points -----------------------------------------------------------------------------

    def forward(self, ids: Sequence[int]) -> np.ndarray:
        """Logits [len(ids), vocab_size] for every position of `ids`, without a cache."""
        array = self._check_ids(ids)
        count = len(array)
        program = self._smallest(self._forwards, count, "forward")
        inputs = self._inputs(program, array, np.arange(program.tokens, dtype=np.int64), 0)
        with self._running():
            bound = self._forward.get(program.tokens)
            if bound is None:
                bound = BoundProgram(self._device, program, self._pointers, self._graphs)
                self._forward[program.tokens] = bound
            logits, captured = bound.run(inputs, count, self.vocab_size)
            self._captured += captured
        return logits

    def new_cache(self, max_len: int | None = None) -> Cache:
        """An empty KV cache for up to `max_len` positions (default: as many as the artifact's
        cache buffers hold, at most block_size for learned positions). Its buffers are always the
        artifact's full cache length: max_len only bounds what it accepts."""
        if not self._steps:
            raise ValueError("this artifact has no step programs (no KV cache): it runs forward() only")
        limit = self._cache_limit
        max_len = limit if max_len is None else max_len
        if isinstance(max_len, bool) or not isinstance(max_len, (int, np.integer)) or not 1 <= max_len <= limit:
            raise ValueError(f"max_len must be an int in [1, {limit}] (the artifact's cache), got {max_len!r}")
        with self._running():
            return Cache(self, int(max_len))

    def prefill(self, ids: Sequence[int], cache: Cache) -> np.ndarray:
        """Runs `ids` at the cache's next positions, storing their keys and values in `cache`;
        returns the logits [vocab_size] of the last of them. More tokens than the largest step
        program takes run in several chunks."""
        return self._step(self._check_ids(ids), cache)

    def decode(self, token: int, cache: Cache) -> np.ndarray:
        """Runs one token at position len(cache); returns its logits [vocab_size]."""
        if isinstance(token, bool) or not isinstance(token, (int, np.integer)):
            raise TypeError(f"token must be an int, got {type(token).__name__}")
        if not 0 <= token < self.vocab_size:
            raise ValueError(f"token id {int(token)} is out of range [0, vocab_size={self.vocab_size})")
        return self._step(np.array([token], dtype=np.int64), cache)

    def generate(
        self,
        ids: Sequence[int],
        max_new_tokens: int,
        temperature: float = 0.0,
        top_k: int | None = None,
        top_p: float | None = None,
        seed: int | None = None,
        stop: Iterable[int] | None = None,
        eos: bool = True,
        stream: bool = False,
    ) -> list[int] | Iterator[int]:
        """Continues `ids` by up to `max_new_tokens` tokens and returns the new ones (an iterator
        over them with `stream=True`), sampled as gpt.GPT.generate samples. A token in `stop`,
        or with `eos` an end-of-generation token of the manifest (eos_token_id, eos_token_ids),
        ends generation and is not returned.
        Arguments are checked before anything runs."""
        prompt = self._check_ids(ids)
        if isinstance(max_new_tokens, bool) or not isinstance(max_new_tokens, (int, np.integer)) or max_new_tokens < 0:
            raise ValueError(f"max_new_tokens must be an int >= 0, got {max_new_tokens!r}")
        if not self._steps:
            raise ValueError("this artifact has no step programs (no KV cache), so it cannot generate")
        if len(prompt) + max_new_tokens > self._cache_limit:
            raise ValueError(
                f"{len(prompt)} prompt tokens + max_new_tokens={max_new_tokens} exceed the {self._cache_limit} "
                f"positions of the artifact's KV cache"
            )
        check_sampling_args(temperature, top_k, top_p)
        stop_ids = set(int(t) for t in self._check_ids(list(stop))) if stop else set()
        if eos:
            stop_ids.update(self.eos_token_ids)
        tokens = self._generate(
            prompt, int(max_new_tokens), float(temperature), top_k, top_p, np.random.default_rng(seed), stop_ids
        )
        return tokens if stream else list(tokens)

    # -- helpers ----------------------------------------------------------------------------------

    @contextlib.contextmanager
    def _running(self) -> Iterator[None]:
        """Holds the model for one run, its context current on this thread."""
        with self._lock:
            if self._device.closed:
                raise ValueError("this model is closed")
            self._device.make_current()
            yield

    def _step(self, ids: np.ndarray, cache: Cache) -> np.ndarray:
        if not isinstance(cache, Cache):
            raise TypeError(f"cache must be a gpt_runtime.Cache, got {type(cache).__name__}")
        if cache.model is not self:
            raise ValueError("this Cache belongs to another model; make one with model.new_cache()")
        if cache.closed:
            raise ValueError("this Cache is closed")
        if len(cache) + len(ids) > cache.max_len:
            raise ValueError(f"KV cache is full: {len(cache)} + {len(ids)} tokens exceed max_len={cache.max_len}")
        chunk = self._steps[-1].tokens
        logits, start = None, 0
        with self._running():
            while start < len(ids):
                piece = ids[start : start + chunk]
                program = self._smallest(self._steps, len(piece), "step")
                offset = len(cache)
                positions = offset + np.arange(program.tokens, dtype=np.int64)
                if not self._rope:
                    # Padding rows past the last position read the table's last row, not past it.
                    np.minimum(positions, self._block_size - 1, out=positions)
                inputs = self._inputs(program, piece, positions, offset)
                logits, captured = cache._program(program, self._graphs).run(inputs, 1, self.vocab_size)
                self._captured += captured
                cache._length += len(piece)
                start += len(piece)
        return logits[0]

    def _inputs(self, program: Program, ids: np.ndarray, positions: np.ndarray, offset: int) -> dict[str, Any]:
        padded = np.zeros(program.tokens, np.int64)  # padding tokens (id 0) come after the real ones
        padded[: len(ids)] = ids
        return {"token_ids": padded, "positions": positions, "last_row": len(ids) - 1, "cache_offset": offset}

    @staticmethod
    def _smallest(programs: list[Program], count: int, entry: str) -> Program:
        for program in programs:
            if program.tokens >= count:
                return program
        sizes = ", ".join(str(p.tokens) for p in programs) or "none"
        raise ValueError(f"{count} tokens do not fit any {entry} program of the artifact (tokens: {sizes})")

    def _check_ids(self, ids) -> np.ndarray:
        return check_token_ids(ids, self._block_size, self.vocab_size)

    def _generate(self, ids, max_new_tokens, temperature, top_k, top_p, rng, stop_ids):
        stats = self._generation = dict(
            prompt_tokens=len(ids), generated_tokens=0, prompt_seconds=0.0, generate_seconds=0.0, capture_seconds=0.0
        )
        if max_new_tokens == 0:
            return
        # One cache for every generate(): its step graphs are captured once per model.
        if self._generation_cache is None or self._generation_cache.closed:
            self._generation_cache = self.new_cache()
        cache = self._generation_cache
        cache.reset()

        timed = step_timer(stats, "capture_seconds", lambda: self._captured)

        logits = timed("prompt_seconds", self.prefill, ids, cache)
        for step in range(max_new_tokens):
            token = sample(logits, temperature, top_k, top_p, rng)
            if token in stop_ids:
                return
            stats["generated_tokens"] += 1
            yield token
            if step + 1 == max_new_tokens:
                return
            logits = timed("generate_seconds", self.decode, token, cache)


def _close_quietly(device: Device) -> None:
    # A finalizer (garbage collection, interpreter exit): there is no caller to raise to, and at
    # exit the driver may be tearing the context down already.
    try:
        device.close()
    except Exception:
        pass
