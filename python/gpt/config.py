"""Model and compiler configuration: GPTConfig and CompileOptions."""

import dataclasses
import math
import os
from collections.abc import Mapping

from gpt import _gpt, architectures
from gpt.masks import AttentionMask, Causal, SlidingWindow
from gpt_runtime.read_only import ReadOnly

PIPELINES = ("baseline", "fused", "vectorized", "default")
# Weight formats, named as llama.cpp names them: the compiler's table (cc/kernels/WeightFormats.h).
WEIGHT_FORMATS = tuple(row[0] for row in _gpt.weight_formats())
# Formats the KV cache's keys and values are stored in (llama.cpp's -ctk/-ctv).
KV_CACHE_FORMATS = ("f32", "bf16", "f16", "q8_0")
POS_EMBEDDINGS = ("learned", "rope")
ROPE_LAYOUTS = ("half", "interleaved")
# The most threads compiled code may use. OpenMP starts every thread of a parallel region, and
# past the cores they only take turns: measured on 2 cores with a 2-layer model, a forward call
# is 200x slower on 256 threads and 10,000x slower on 4,096; 20,000 ran for minutes and 100,000
# aborted the process inside libomp (OMP Error #34). Four per core leaves room to try
# oversubscription; the floor of 256 lets a small machine compile for a large one.
MAX_THREADS = max(256, 4 * (os.cpu_count() or 1))
# The packed-weight cache's default size: an 8B model's Q4_K_M weights (5.7 GiB) twice over and more.
DEFAULT_WEIGHT_CACHE_MAX_BYTES = 16 << 30
# Each dimension of a model fits a 32-bit index, so that their products (sizes in elements) stay
# far inside int64.
MAX_DIMENSION = 2**31 - 1


@dataclasses.dataclass(frozen=True)
class RopeScaling:
    """Llama 3's rotary frequency scaling (HF `rope_scaling` with rope_type "llama3"): with
    `theta_i` the unscaled frequency and wavelength `w = 2 pi / theta_i`, frequencies of
    wavelength above `original_max_position_embeddings / low_freq_factor` are divided by `factor`,
    those below `original_max_position_embeddings / high_freq_factor` kept, and those between
    interpolated smoothly (transformers' _compute_llama3_parameters)."""

    factor: float
    low_freq_factor: float
    high_freq_factor: float
    original_max_position_embeddings: int

    def __post_init__(self):
        for name in ("factor", "low_freq_factor", "high_freq_factor"):
            value = getattr(self, name)
            if (
                isinstance(value, bool)
                or not isinstance(value, (int, float))
                or not (math.isfinite(value) and value > 0)
            ):
                raise ValueError(f"RopeScaling.{name} must be a positive number, got {value!r}")
            object.__setattr__(self, name, float(value))
        if self.high_freq_factor <= self.low_freq_factor:
            raise ValueError(
                f"RopeScaling.high_freq_factor ({self.high_freq_factor}) must be larger than "
                f"low_freq_factor ({self.low_freq_factor})"
            )
        original = self.original_max_position_embeddings
        if isinstance(original, bool) or not isinstance(original, int) or not 0 < original <= MAX_DIMENSION:
            raise ValueError(f"RopeScaling.original_max_position_embeddings must be a positive int, got {original!r}")


@dataclasses.dataclass(frozen=True)
class GPTConfig:
    """Shape of a GPT (nanoGPT's names). `pos_embedding="rope"` replaces the learned position
    table with rotary embedding on q and k (GPT-NeoX rotate-half, base 10000, unless rope_base,
    rope_layout, rope_scaling say otherwise).
    `architecture` picks the model family (gpt.architectures: "gpt2", "llama", "qwen2", "phi3"): its
    norm, MLP, biases, default positions and parameter names; `n_kv_head` < n_head is
    grouped-query attention (each key/value head serves n_head / n_kv_head query heads, and the
    KV cache holds n_kv_head heads), `n_ff` the MLP's width (default 4 n_embd), `tied_head=False`
    an LM head of its own. gpt/architectures.py lists every field. The None defaults are resolved
    in __post_init__ (n_kv_head = n_head, n_ff = 4 n_embd, pos_embedding the architecture's), so
    `dataclasses.replace` keeps them: give n_kv_head and n_ff again when changing n_head or n_embd.
    `attention_window=W` makes attention a sliding window: key j is visible from query i iff
    i - W < j <= i (None: full causal attention); the KV cache then holds W positions per layer
    and rolls, so that with rotary positions generation may go on past block_size.
    `attention_mask` takes any mask of gpt.masks (strided, fixed, prefix-LM, documents, block
    patterns, a gpt.masks.Expression of one's own); the masks that are expressions of positions
    (strided, fixed, prefix-LM, an Expression that sees no later key) run with a KV cache too, the
    others forward() (and generate(use_cache=False)) only."""

    n_layer: int
    n_head: int
    n_embd: int
    vocab_size: int
    block_size: int
    # None: the architecture's ("learned" for gpt2, "rope" for llama and qwen2).
    pos_embedding: str | None = None
    layer_norm_eps: float = 1e-5
    attention_window: int | None = None
    # A gpt.masks mask; Causal() and SlidingWindow(W) become None and attention_window=W.
    attention_mask: AttentionMask | None = None
    architecture: str = "gpt2"
    n_kv_head: int | None = None  # None: n_head
    n_ff: int | None = None  # None: 4 * n_embd
    tied_head: bool = True
    rope_base: float = 10000.0
    rope_layout: str = "half"
    rope_scaling: RopeScaling | None = None
    # The width of an attention head; None: n_embd / n_head. Any other width is allowed (Gemma,
    # Qwen3, Mistral-Nemo): q is n_head heads of it and the output projection [n_head * head_dim,
    # n_embd]. Left None when not given, so that dataclasses.replace with another n_embd or n_head
    # keeps meaning n_embd / n_head.
    head_dim: int | None = None
    # The scale of q.k in attention; None: head_size ** -0.5 (Gemma: query_pre_attn_scalar ** -0.5).
    attention_scale: float | None = None
    # Each layer's sliding window (0: full causal attention), Gemma 3's local and global layers;
    # None: every layer attention_window's. The windowed layers' rope base is rope_local_base (None:
    # rope_base), without rope_scaling; the KV cache then holds every position of every layer.
    layer_windows: tuple[int, ...] | None = None
    rope_local_base: float | None = None
    # v's projection as a matmul of its own instead of a part of the fused q/k/v one: the same
    # numbers, in two matmuls. GPT.from_gguf sets it where the file's v is in another block type
    # than q and k (llama.cpp's Q4_K_M gives half the layers a Q6_K v), so that each is kept in its
    # own format instead of all three in the most precise one.
    separate_v_proj: bool = False

    def __post_init__(self):
        spec = architectures.get(self.architecture)
        # In this order: an error names the first thing wrong.
        self._fill_defaults(spec)
        self._check_dimensions()
        self._check_heads_and_positions(spec)
        self._check_rope()
        self._check_layer_attention()
        self._check_norm_and_window()
        self._normalize_attention_mask()

    def _fill_defaults(self, spec) -> None:
        """The fields left None that take a default: the architecture's positions, n_kv_head = n_head
        and n_ff = 4 n_embd."""
        if self.pos_embedding is None:
            object.__setattr__(self, "pos_embedding", spec.positions)
        if self.n_kv_head is None:
            object.__setattr__(self, "n_kv_head", self.n_head)
        if self.n_ff is None and isinstance(self.n_embd, int) and not isinstance(self.n_embd, bool):
            object.__setattr__(self, "n_ff", 4 * self.n_embd)

    def _check_dimensions(self) -> None:
        for name in ("n_layer", "n_head", "n_embd", "vocab_size", "block_size", "n_kv_head", "n_ff"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int) or value <= 0:
                raise ValueError(f"GPTConfig.{name} must be a positive int, got {value!r}")
            if value > MAX_DIMENSION:
                raise ValueError(f"GPTConfig.{name}={value} is larger than {MAX_DIMENSION}")
        head_dim = self.head_dim
        if head_dim is not None and (isinstance(head_dim, bool) or not isinstance(head_dim, int) or head_dim <= 0):
            raise ValueError(f"GPTConfig.head_dim must be None or a positive int, got {head_dim!r}")
        if head_dim is not None and head_dim > MAX_DIMENSION:
            raise ValueError(f"GPTConfig.head_dim={head_dim} is larger than {MAX_DIMENSION}")
        if head_dim is None and self.n_embd % self.n_head:
            raise ValueError(
                f"GPTConfig.n_embd ({self.n_embd}) must be divisible by n_head ({self.n_head}), or head_dim given"
            )

    def _check_heads_and_positions(self, spec) -> None:
        if self.pos_embedding not in POS_EMBEDDINGS:
            raise ValueError(f"GPTConfig.pos_embedding must be one of {POS_EMBEDDINGS}, got {self.pos_embedding!r}")
        if self.n_head % self.n_kv_head:
            raise ValueError(
                f"GPTConfig.n_kv_head ({self.n_kv_head}) must divide n_head ({self.n_head}): each key/value head "
                f"serves n_head / n_kv_head query heads"
            )
        if self.pos_embedding == "rope" and self.head_size % 2:
            raise ValueError(f"rope needs an even head size, got {self.head_size}")
        if spec.rope_only and self.pos_embedding != "rope":
            raise ValueError(
                f"architecture {self.architecture!r} has rotary positions only, "
                f"got pos_embedding={self.pos_embedding!r}"
            )
        if not isinstance(self.separate_v_proj, bool):
            raise ValueError(f"GPTConfig.separate_v_proj must be a bool, got {self.separate_v_proj!r}")
        if self.separate_v_proj and not any(p.apart for p in spec.parameters):
            raise ValueError(
                f"architecture {self.architecture!r} has no v projection to set apart (separate_v_proj): "
                "its checkpoints hold q, k and v as one tensor"
            )

    def _check_norm_and_window(self) -> None:
        """tied_head, layer_norm_eps and attention_window."""
        if not isinstance(self.tied_head, bool):
            raise ValueError(f"GPTConfig.tied_head must be a bool, got {self.tied_head!r}")
        if isinstance(self.layer_norm_eps, bool) or not (
            isinstance(self.layer_norm_eps, (int, float)) and self.layer_norm_eps > 0
        ):
            raise ValueError(f"GPTConfig.layer_norm_eps must be a positive number, got {self.layer_norm_eps!r}")
        window = self.attention_window
        if window is not None and (isinstance(window, bool) or not isinstance(window, int) or window < 1):
            raise ValueError(f"GPTConfig.attention_window must be None or an int >= 1, got {window!r}")
        if window is not None and window > MAX_DIMENSION:
            raise ValueError(f"GPTConfig.attention_window={window} is larger than {MAX_DIMENSION}")

    def _check_rope(self) -> None:
        base = self.rope_base
        if isinstance(base, bool) or not isinstance(base, (int, float)) or not (math.isfinite(base) and base > 1):
            raise ValueError(f"GPTConfig.rope_base must be a finite number > 1, got {base!r}")
        object.__setattr__(self, "rope_base", float(base))
        if self.rope_layout not in ROPE_LAYOUTS:
            raise ValueError(f"GPTConfig.rope_layout must be one of {ROPE_LAYOUTS}, got {self.rope_layout!r}")
        if self.rope_scaling is not None and not isinstance(self.rope_scaling, RopeScaling):
            raise ValueError(
                "GPTConfig.rope_scaling must be None or a gpt.config.RopeScaling, "
                f"got {type(self.rope_scaling).__name__}"
            )
        rope_fields = (self.rope_base, self.rope_layout, self.rope_scaling) != (10000.0, "half", None)
        if self.pos_embedding != "rope" and rope_fields:
            raise ValueError("GPTConfig.rope_base, rope_layout and rope_scaling apply to pos_embedding='rope' only")

    def _check_layer_attention(self) -> None:
        """attention_scale, layer_windows and rope_local_base (Gemma 3's per-layer attention)."""
        scale = self.attention_scale
        if scale is not None and (
            isinstance(scale, bool) or not isinstance(scale, (int, float)) or not (math.isfinite(scale) and scale > 0)
        ):
            raise ValueError(f"GPTConfig.attention_scale must be None or a positive number, got {scale!r}")
        if scale is not None:
            object.__setattr__(self, "attention_scale", float(scale))
        base = self.rope_local_base
        if base is not None:
            if isinstance(base, bool) or not isinstance(base, (int, float)) or not (math.isfinite(base) and base > 1):
                raise ValueError(f"GPTConfig.rope_local_base must be None or a finite number > 1, got {base!r}")
            if self.pos_embedding != "rope" or self.layer_windows is None:
                raise ValueError("GPTConfig.rope_local_base applies to rope models with layer_windows only")
            object.__setattr__(self, "rope_local_base", float(base))
        windows = self.layer_windows
        if windows is None:
            return
        if not isinstance(windows, (tuple, list)) or len(windows) != self.n_layer:
            raise ValueError(
                f"GPTConfig.layer_windows must be a tuple of n_layer ({self.n_layer}) windows, got {windows!r}"
            )
        for window in windows:
            if isinstance(window, bool) or not isinstance(window, int) or not 0 <= window <= MAX_DIMENSION:
                raise ValueError(f"GPTConfig.layer_windows holds ints >= 1 (or 0 for full attention), got {window!r}")
        if self.attention_window is not None or self.attention_mask is not None:
            raise ValueError("GPTConfig.layer_windows excludes attention_window and attention_mask: give one")
        object.__setattr__(self, "layer_windows", tuple(windows))

    def _normalize_attention_mask(self) -> None:
        """Checks attention_mask; the masks the compiler knows in closed form become None (causal)
        and attention_window (a sliding window), which prefill and decode support too."""
        mask = self.attention_mask
        if mask is None:
            return
        if not isinstance(mask, AttentionMask):
            raise ValueError(f"GPTConfig.attention_mask must be a gpt.masks mask or None, got {type(mask).__name__}")
        if self.attention_window is not None:
            raise ValueError("GPTConfig.attention_mask and attention_window exclude each other: give one")
        mask.check(self.block_size)
        if isinstance(mask, Causal):
            object.__setattr__(self, "attention_mask", None)
        elif isinstance(mask, SlidingWindow):
            object.__setattr__(self, "attention_mask", None)
            object.__setattr__(self, "attention_window", mask.window)

    @property
    def head_size(self) -> int:
        """The width of an attention head: head_dim, or n_embd / n_head where it is None."""
        return self.head_dim if self.head_dim is not None else self.n_embd // self.n_head

    @property
    def spec(self) -> "architectures.Architecture":
        """The architecture's spec (gpt.architectures)."""
        return architectures.ARCHITECTURES[self.architecture]

    norm = ReadOnly[str](""" "layer" (LayerNorm) or "rms" (RMSNorm), with eps layer_norm_eps.""", of="spec")
    mlp = ReadOnly[str](
        """ "gelu" (GPT-2's), "swiglu" (down(silu(gate) * up)) or "geglu" (down(gelu(gate) * up)).""", of="spec"
    )
    bias = ReadOnly[bool]("Whether every linear and norm has a bias (GPT-2).", of="spec")
    qkv_bias = ReadOnly[bool]("Whether the q, k and v projections have biases (GPT-2, Qwen2).", of="spec")

    @property
    def unbounded_positions(self) -> bool:
        """Whether a cached generation may go on past block_size: rotary positions (no table to
        run out of) and a window that a rolling cache of at most block_size slots holds."""
        return (
            self.pos_embedding == "rope"
            and self.attention_window is not None
            and (self.attention_window <= self.block_size)
        )

    def compiler_mask(self) -> tuple[bytes, str, bool]:
        """The attention mask as the compiler takes it (cc/builder/GPTConfig.h): the
        [block_size, block_size] bytes of a mask that is no expression of positions (else b""),
        its expression ("" when none), and whether it lets a query see a later key."""
        mask = self.attention_mask
        if mask is None:
            return b"", "", False
        expression = mask.expression() or ""
        dense = b""
        if not expression:
            import numpy as np

            dense = np.ascontiguousarray(mask.dense(self.block_size), dtype=np.uint8).tobytes()
        return dense, expression, mask.looks_ahead(self.block_size)


@dataclasses.dataclass(frozen=True)
class CompileOptions:
    """How models are compiled. `pipeline` is one of "baseline" (scalar loops, the unoptimized
    reference), "fused", "vectorized" or "default" (the fastest correct one); `threads=None`
    means all cores, and `threads` is at most `gpt.config.MAX_THREADS`. Compiled code is also
    kept on disk, so that the next process loads it instead of compiling: in `cache_dir` (default
    `$GPT_CACHE_DIR`, else `~/.cache/gpt/jit`), unless `disk_cache=False`; the cache keeps at
    most `cache_max_bytes` (default 512 MiB), evicting the least recently used programs beyond it
    (`python -m gpt cache --list/--clear` manages it). A model loaded from a file (from_gguf,
    from_pretrained) also keeps its weights there as it lays them out (gpt.weight_cache), so that
    the next load of the same file reads them instead of repacking: at most
    `weight_cache_max_bytes` of them (default $GPT_WEIGHT_CACHE_MAX_BYTES, else 16 GiB; 0 is off),
    the least recently used evicted first. A first load writes them in the background, while the
    first token compiles and runs; the process waits for that write at exit.
    `weights` is the format matmul weights (and the LM head) are stored and
    streamed in, one of WEIGHT_FORMATS, as llama.cpp names them: "f32", "bf16" (each weight rounded
    to nearest even) and llama.cpp's block formats, codes with fp16 scales per block along K (each
    format's block and lanes: `_gpt.weight_formats()`, cc/kernels/WeightFormats.h; its numbers:
    docs/USAGE.md). The K-quants need an n_embd and n_ff that are multiples of 256. Weights are
    converted once, at load, and multiplied with the CPU's dot-product instructions where it has
    them (`vdpbf16ps`, `vpdpbusd`): bf16 rounds the activations a matmul reads to bf16, and the
    block formats quantize them per block of 32 to int8, as llama.cpp does; accumulation is f32 (exact
    i32 within a block). On a CPU with AMX (Sapphire Rapids and later) bf16 prefill (16 or more rows, in
    multiples of 16) multiplies on AMX tiles (`tdpbf16ps`) instead, the same bf16 products summed in
    another order, and q8_0 prefill sums its blocks with `tdpbssd` (the same integers, so the same
    logits); the process asks Linux for the tiles' state once, and where that is refused, or
    `GPT_NO_AMX=1` is set, code that runs here is compiled without AMX. Low-precision formats need a
    vectorized pipeline, the block formats an n_embd that is a multiple of 32, and bf16 an even n_embd.
    `weights="auto"`, the default, keeps each matmul weight of a GGUF file (GPT.from_gguf) in the
    format nearest its own type, as llama.cpp computes each tensor in its own (gpt.kept_formats: a
    Q4_K_M file's q4_K tensors as q4_k, its q6_K ones as q6_k, its q5_0 ones as q5_0, a fused weight
    with parts of q4_K and q6_K as q8_0); the model's options then say what it chose:
    `weights` the format most weights are in, and `weight_formats` the others, as {compiler
    parameter name: format} (also settable by hand). Any other model, and a GGUF file compiled by
    the "baseline" or "fused" pipeline, takes "auto" as "f32"; weights="f32" widens a GGUF file's
    blocks to float32 (four times a 4-bit file's memory, and its decode as many times slower).
    `kv_cache` is the format the KV cache stores keys and values in, as llama.cpp's -ctk/-ctv:
    "auto", the default: "f16" for a GGUF file (GPT.from_gguf), as llama.cpp and this package's
    command line store their caches, and "f32" for any other model, the exact numerics of the
    implementations it is compared with; "f32";
    "f16" or "bf16", half the bytes (each new key and value rounded to nearest even when it is
    written; attention widens them back and computes in f32; `model.new_cache()` then holds float16,
    or uint16 arrays of bf16's bits); "q8_0", 34 bytes per 32 values (17/32 of f16's): each key
    and value row stored as llama.cpp's block_q8_0, per block of 32 values int8 codes
    round_even(x * 127 / max|x|) and one fp16 scale max|x| / 127, an error of at most half a step
    (max|x| / 254) per value, which attention dequantizes before it computes in f32 (head_dim must
    be a multiple of 32; `model.new_cache()` then holds int8 arrays whose rows are head_size codes
    followed by head_size / 32 fp16 scales as bytes). GPU artifacts (`model.export`) keep f32 caches
    whatever it says.
    `target_cpu` is the CPU compiled code is specialised for: "host" (this machine's CPU and
    features), an LLVM x86-64 CPU name ("haswell", "znver3", "alderlake", "skylake-avx512",
    "znver4", "sapphirerapids", ...) or "aarch64:<cpu>" ("aarch64:neoverse-v1",
    "aarch64:apple-m1"). A named CPU's code uses that CPU's own features, whatever this machine
    has: where this machine has them all, the model runs here; otherwise it is compile-only
    (`model.ir(...)`, `model.save_object(...)`), and running it raises ValueError naming what
    this machine lacks. Where the environment sets `GPT_TARGET_CPU` to a CPU name, "host" means
    that CPU: a machine runs the code another machine kind would get (an AVX-512 host testing the
    AVX2 code of `GPT_TARGET_CPU=haswell`); `gpt._gpt.target_description()` shows what "host" is."""

    pipeline: str = "default"
    threads: int | None = None
    cache_dir: str | None = None
    disk_cache: bool = True
    weights: str = "auto"
    cache_max_bytes: int | None = None
    target_cpu: str = "host"
    kv_cache: str = "auto"
    weight_formats: Mapping[str, str] | tuple[tuple[str, str], ...] = ()
    weight_cache_max_bytes: int | None = None

    def __post_init__(self):
        if self.pipeline not in PIPELINES:
            raise ValueError(f"CompileOptions.pipeline must be one of {PIPELINES}, got {self.pipeline!r}")
        if self.threads is not None and (
            isinstance(self.threads, bool) or not isinstance(self.threads, int) or self.threads < 1
        ):
            raise ValueError(f"CompileOptions.threads must be None or a positive int, got {self.threads!r}")
        if self.threads is not None and self.threads > MAX_THREADS:
            raise ValueError(
                f"CompileOptions.threads={self.threads} is more than MAX_THREADS={MAX_THREADS} "
                f"(4 per core on this machine's {os.cpu_count()} cores, at least 256)"
            )
        if not isinstance(self.disk_cache, bool):
            raise ValueError(f"CompileOptions.disk_cache must be a bool, got {self.disk_cache!r}")
        if self.cache_dir is not None and not isinstance(self.cache_dir, (str, os.PathLike)):
            raise ValueError(f"CompileOptions.cache_dir must be None or a path, got {self.cache_dir!r}")
        if self.cache_max_bytes is not None and (
            isinstance(self.cache_max_bytes, bool)
            or not isinstance(self.cache_max_bytes, int)
            or not 1 <= self.cache_max_bytes < 2**63
        ):
            raise ValueError(
                f"CompileOptions.cache_max_bytes must be None or a positive int, got {self.cache_max_bytes!r}"
            )
        if not isinstance(self.target_cpu, str) or not self.target_cpu:
            raise ValueError(f"CompileOptions.target_cpu must be 'host' or a CPU name, got {self.target_cpu!r}")
        if self.weights not in (*WEIGHT_FORMATS, "auto"):
            raise ValueError(f"CompileOptions.weights must be one of {(*WEIGHT_FORMATS, 'auto')}, got {self.weights!r}")
        self._normalize_weight_formats()
        if self.weight_cache_max_bytes is not None and (
            isinstance(self.weight_cache_max_bytes, bool)
            or not isinstance(self.weight_cache_max_bytes, int)
            or not 0 <= self.weight_cache_max_bytes < 2**63
        ):
            raise ValueError(
                "CompileOptions.weight_cache_max_bytes must be None or an int >= 0 (0: off), "
                f"got {self.weight_cache_max_bytes!r}"
            )
        if self.kv_cache not in (*KV_CACHE_FORMATS, "auto"):
            raise ValueError(
                f"CompileOptions.kv_cache must be one of {(*KV_CACHE_FORMATS, 'auto')}, got {self.kv_cache!r}"
            )
        # "auto" is resolved where the weights are known (GPT.from_gguf: a non-vectorized pipeline
        # takes a file's values in f32 there), so it asks for no pipeline here.
        low_precision = self.weights not in ("f32", "auto") or any(fmt != "f32" for _, fmt in self.weight_formats)
        if low_precision and self.pipeline in ("baseline", "fused"):
            raise ValueError(
                f"CompileOptions.weights={self.weights!r} needs a vectorized pipeline ('vectorized' or 'default'), "
                f"got pipeline={self.pipeline!r}"
            )

    def _normalize_weight_formats(self) -> None:
        """`weight_formats` as sorted (name, format) pairs: the options stay hashable and compare
        equal whatever order the mapping had."""
        given = self.weight_formats
        pairs = list(given.items()) if isinstance(given, Mapping) else given
        try:
            pairs = [(name, fmt) for name, fmt in pairs]
        except (TypeError, ValueError):
            raise ValueError(
                f"CompileOptions.weight_formats must map parameter names to formats, got {given!r}"
            ) from None
        for name, fmt in pairs:
            if not isinstance(name, str) or fmt not in WEIGHT_FORMATS:
                raise ValueError(
                    f"CompileOptions.weight_formats maps parameter names to one of {WEIGHT_FORMATS}, "
                    f"got {name!r}: {fmt!r}"
                )
        object.__setattr__(self, "weight_formats", tuple(sorted(dict(pairs).items())))

    def resolved_weights(self) -> str:
        """The format of weights given as float arrays (GPT(...), random, from_pretrained): `weights`,
        with "auto", a GGUF file's own formats (which from_gguf resolves tensor by tensor), as "f32"."""
        return "f32" if self.weights == "auto" else self.weights

    def resolved_kv_cache(self) -> str:
        """The KV cache format of a model not loaded from a GGUF file: `kv_cache`, with "auto" as
        "f32" (GPT.from_gguf takes it as "f16", as llama.cpp stores its cache)."""
        return "f32" if self.kv_cache == "auto" else self.kv_cache

    def resolved_threads(self) -> int:
        return self.threads or os.cpu_count() or 1

    def resolved_cache_max_bytes(self) -> int:
        from gpt import _gpt  # the default is the C++ cache's

        return self.cache_max_bytes if self.cache_max_bytes is not None else _gpt.DEFAULT_CACHE_MAX_BYTES

    def resolved_weight_cache_max_bytes(self) -> int:
        """The packed-weight cache's size (gpt.weight_cache): `weight_cache_max_bytes`, else
        $GPT_WEIGHT_CACHE_MAX_BYTES, else DEFAULT_WEIGHT_CACHE_MAX_BYTES; 0 is off."""
        if self.weight_cache_max_bytes is not None:
            return self.weight_cache_max_bytes
        chosen = os.environ.get("GPT_WEIGHT_CACHE_MAX_BYTES", "")
        if chosen.isdigit():
            return int(chosen)
        return DEFAULT_WEIGHT_CACHE_MAX_BYTES

    def resolved_cache_dir(self) -> str:
        """The disk-cache directory, or "" when the disk cache is off."""
        if not self.disk_cache:
            return ""
        chosen = self.cache_dir or os.environ.get("GPT_CACHE_DIR")
        if chosen:
            return os.path.expanduser(os.fspath(chosen))  # "~/x" is the home's x, not ./~/x
        return os.path.join(os.path.expanduser("~"), ".cache", "gpt", "jit")
