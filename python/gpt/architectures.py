"""Architectures: one spec per model family (what it computes) and one parameter table (what it
takes, by HF and GGUF name), as vLLM's model registry and llama.cpp's llama-arch tables do.

Adding an architecture is one `Architecture` entry here (plus its tests); the compiler builds any
combination of the spec's pieces (cc/builder/GPTBuilder.cpp composes norm, MLP and attention).

GPTConfig's fields (gpt.GPTConfig; every default is GPT-2's, so existing callers are unchanged):

    n_layer, n_head, n_embd, vocab_size, block_size   # as before
    architecture: str = "gpt2"            # "gpt2" | "llama" | "qwen2" | "phi3" | "gemma3": a key of ARCHITECTURES
    head_dim: int | None = None           # None: n_embd / n_head; q is n_head heads of head_size
    pos_embedding: str | None = None      # "learned" | "rope"; None: the architecture's positions
    layer_norm_eps: float = 1e-5          # the eps of every norm (LayerNorm or RMSNorm)
    n_kv_head: int | None = None          # grouped-query attention; None: n_head (divides n_head)
    n_ff: int | None = None               # MLP width; None: 4 * n_embd
    tied_head: bool = True                # False: the LM head is a weight of its own
    rope_base: float = 10000.0            # theta_i = rope_base ** (-2 i / head_size)
    rope_layout: str = "half"             # "half" (NeoX/HF rotate-half) | "interleaved" (pairs)
    rope_scaling: RopeScaling | None = None   # Llama-3 frequency scaling (gpt.config.RopeScaling)
    attention_window, attention_mask      # as before
    attention_scale: float | None = None  # the q.k scale; None: head_size ** -0.5
    layer_windows: tuple[int, ...] | None = None  # each layer's window (0: full); Gemma 3's pattern
    rope_local_base: float | None = None  # the rope base of the windowed layers; None: rope_base
    separate_v_proj: bool = False         # v's projection a matmul of its own (a spec with v_proj)

and, read from the architecture's spec (properties, not fields): `config.norm` ("layer" |
"rms"), `config.mlp` ("gelu" | "swiglu" | "geglu"), `config.bias` (every linear and norm has a bias),
`config.qkv_bias` (q, k and v have one), `config.spec` (the Architecture). After
`__post_init__` the None fields hold their resolved values (n_kv_head, n_ff, pos_embedding).

The tables below give each parameter's HF name, its GGUF name (with "{i}" for the layer) and its
HF shape; `hf_shapes(config)` and `gguf_names(config)` expand them. `gpt.GPT.from_weights(config,
weights)` takes a dict keyed by the HF names, in HF's layout (a Linear's weight is [out, in]);
gpt/architecture_weights.py's `to_compiler(config, weights)` turns it into the compiler's parameters
(cc/builder/Parameters.cpp: matmul weights [in, out], q/k/v and gate/up fused into one matmul each)
and its `from_compiler` back.
A GGUF tensor's numpy shape is `gguf_shape(parameter, config)`: the HF shape, transposed where
the parameter's `gguf_transposed` says (GPT-2's Conv1D weights, which GGUF stores [out, in]).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from typing import Protocol


class ModelConfig(Protocol):
    """What this module reads of a gpt.GPTConfig. Duck-typed: gpt/config.py imports this module
    (GPTConfig.spec is one of its Architectures), so this one imports nothing of gpt's."""

    n_layer: int
    n_embd: int
    n_ff: int
    n_head: int
    n_kv_head: int
    head_size: int
    vocab_size: int
    block_size: int
    pos_embedding: str
    tied_head: bool
    norm: str
    mlp: str
    bias: bool
    qkv_bias: bool
    separate_v_proj: bool
    spec: Architecture


Shape = Callable[[ModelConfig], tuple]


@dataclasses.dataclass(frozen=True)
class Parameter:
    """One HF parameter: where it is in HF and GGUF files, its HF shape, and which compiler
    parameter it is or is part of.

    `compiler` is the compiler's parameter name (with "{i}"); `part` is the index of this
    parameter among the parts fused into it (concatenated along the output dimension, in the
    table's order), None when the compiler takes it alone. `linear` says the HF tensor is a
    Linear's [out, in] weight, which the compiler takes as [in, out]. `present` says whether a
    config has it at all (biases, the untied head)."""

    hf: str
    gguf: str
    shape: Shape
    compiler: str
    part: int | None = None
    linear: bool = False
    gguf_transposed: bool = False
    present: Callable[[ModelConfig], bool] = lambda config: True
    # What the compiler's parameter adds to HF's: Gemma's RMSNorm computes x * (1 + w), and the
    # compiler's x * w' takes w' = 1 + w, folded in at load (to_compiler; from_compiler takes it off).
    shift: float = 0.0
    # The compiler parameter it is alone, instead of `compiler`'s part, in a config that asks for it
    # (GPTConfig.separate_v_proj: v's projection as a matmul of its own); "" where it is never apart.
    apart: str = ""

    @property
    def per_layer(self) -> bool:
        return "{i}" in self.hf


@dataclasses.dataclass(frozen=True)
class CompilerNames:
    """The compiler's parameter names, the one table of them: the binding hands them to the C++
    config (cc/builder/GPTConfig.h ParameterNames), whose parameter table (Parameters.cpp) names
    a layer's weights `layer` + part + ".weight" / ".bias" and the model's part + ".weight" /
    ".bias"; the Parameter rows below name their compiler parameter with `names(part)`."""

    layer: str  # with "{i}" for the layer
    attn_norm: str
    qkv: str  # q, k and v fused, [d, q + 2 kv]
    attn_out: str
    mlp_norm: str
    mlp_up: str  # GELU's up, or SwiGLU's gate and up fused, [d, 2 ff]
    mlp_down: str
    token_embedding: str
    position_embedding: str
    final_norm: str
    head: str
    # The norms some architectures add ("" where one has none): RMSNorm over each q and k head
    # before rope, and each branch's output normed before the residual add (Gemma's sandwich).
    q_norm: str = ""
    k_norm: str = ""
    post_attn_norm: str = ""
    post_mlp_norm: str = ""
    # v's projection as a matmul of its own, where a config asks for one (GPTConfig.separate_v_proj;
    # "" where the architecture's v is never apart from q and k).
    v_proj: str = ""

    def __call__(self, part: str, kind: str = "weight") -> str:
        """The compiler's name of `part`'s weight (or bias, kind="bias"), with "{i}" for a layer's."""
        name = f"{getattr(self, part)}.{kind}"
        return name if part in _MODEL_PARTS else self.layer + name


_MODEL_PARTS = ("token_embedding", "position_embedding", "final_norm", "head")

# GPT-2's parameters are HF's GPT2LMHeadModel's, taken as they are.
GPT2_NAMES = CompilerNames(
    layer="transformer.h.{i}.",
    attn_norm="ln_1",
    qkv="attn.c_attn",
    attn_out="attn.c_proj",
    mlp_norm="ln_2",
    mlp_up="mlp.c_fc",
    mlp_down="mlp.c_proj",
    token_embedding="transformer.wte",
    position_embedding="transformer.wpe",
    final_norm="transformer.ln_f",
    head="lm_head",
)
# The Llama family's: HF's LlamaForCausalLM names, q/k/v and gate/up fused as vLLM's qkv_proj and
# gate_up_proj (Phi-3's own checkpoints store them so).
LLAMA_NAMES = CompilerNames(
    layer="model.layers.{i}.",
    attn_norm="input_layernorm",
    qkv="self_attn.qkv_proj",
    attn_out="self_attn.o_proj",
    mlp_norm="post_attention_layernorm",
    mlp_up="mlp.gate_up_proj",
    mlp_down="mlp.down_proj",
    token_embedding="model.embed_tokens",
    position_embedding="model.embed_positions",
    final_norm="model.norm",
    head="lm_head",
    v_proj="self_attn.v_proj",
)


@dataclasses.dataclass(frozen=True)
class Architecture:
    """What a model family computes, and the parameters it takes.

    norm: "layer" (LayerNorm, weight and bias) or "rms" (RMSNorm, weight only).
    mlp: "gelu" (up, tanh GELU, down), "swiglu" (down(silu(gate) * up)) or "geglu" (down(gelu(gate) * up),
      tanh GELU: Gemma's gelu_pytorch_tanh).
    bias: every linear and norm has a bias (GPT-2); qkv_bias: the q, k, v projections have one.
    positions: the positions a config of it gets by default; `rope_only` forbids learned ones.
    gguf_rope_layout: the rope layout of this architecture's GGUF files: llama.cpp's converter
      permutes a `llama` file's q/k rows into interleaved pairs (its rope mode NORM), and leaves
      `qwen2`'s in HF's rotate-half order (mode NEOX).
    hf_model_types / hf_architectures: config.json's `model_type` and `architectures` it reads.
    compiler: the compiler's parameter names (CompilerNames) it is built with.
    gguf_architecture: general.architecture of its GGUF files (llama.cpp's name).
    embedding_scale: the token embeddings are multiplied by sqrt(n_embd) (Gemma)."""

    name: str
    norm: str
    mlp: str
    bias: bool
    qkv_bias: bool
    positions: str
    rope_only: bool
    gguf_rope_layout: str
    hf_model_types: tuple[str, ...]
    hf_architectures: tuple[str, ...]
    compiler: CompilerNames
    parameters: tuple[Parameter, ...]
    gguf_architecture: str
    embedding_scale: bool = False

    @property
    def compiler_names(self) -> str:
        """ "gpt2" for GPT-2's compiler names, "llama" for the Llama family's: which GGUF recipes
        gpt.gpu_export writes."""
        return "gpt2" if self.compiler == GPT2_NAMES else "llama"

    @property
    def converts(self) -> bool:
        """Whether HF weights become the compiler's parameters by a conversion (Linear weights
        transposed, parts fused: to_compiler), not as they are (GPT-2's)."""
        return any(p.linear or p.part is not None or p.hf != p.compiler or p.shift for p in self.parameters)


def _d(c: ModelConfig) -> int:
    return c.n_embd


def _q(c: ModelConfig) -> int:
    """The width of the queries (and of the attention output projection's input)."""
    return c.n_head * c.head_size


def _kv(c: ModelConfig) -> int:
    return c.n_kv_head * c.head_size


def _untied(c: ModelConfig) -> bool:
    return not c.tied_head


def _learned(c: ModelConfig) -> bool:
    return c.pos_embedding == "learned"


def _qkv_bias(c: ModelConfig) -> bool:
    return c.qkv_bias


def _same(hf: str, gguf: str, shape: Shape, **kwargs) -> Parameter:
    """A parameter the compiler takes by its HF name (GPT-2's, and the norms of every family)."""
    return Parameter(hf, gguf, shape, hf, **kwargs)


_G = GPT2_NAMES
# GPT-2: HF's GPT2LMHeadModel names (Conv1D weights [in, out], which the compiler takes as they
# are) and llama.cpp's `gpt2` GGUF names (those weights stored [out, in]). q, k and v come fused
# in c_attn: [d, q + 2 kv] (q = n_head heads, kv = n_kv_head heads of head_size).
_GPT2 = (
    _same(_G("token_embedding"), "token_embd.weight", lambda c: (c.vocab_size, _d(c))),
    _same(_G("position_embedding"), "position_embd.weight", lambda c: (c.block_size, _d(c)), present=_learned),
    _same(_G("attn_norm"), "blk.{i}.attn_norm.weight", lambda c: (_d(c),)),
    _same(_G("attn_norm", "bias"), "blk.{i}.attn_norm.bias", lambda c: (_d(c),)),
    _same(_G("qkv"), "blk.{i}.attn_qkv.weight", lambda c: (_d(c), _q(c) + 2 * _kv(c)), gguf_transposed=True),
    _same(_G("qkv", "bias"), "blk.{i}.attn_qkv.bias", lambda c: (_q(c) + 2 * _kv(c),)),
    _same(_G("attn_out"), "blk.{i}.attn_output.weight", lambda c: (_q(c), _d(c)), gguf_transposed=True),
    _same(_G("attn_out", "bias"), "blk.{i}.attn_output.bias", lambda c: (_d(c),)),
    _same(_G("mlp_norm"), "blk.{i}.ffn_norm.weight", lambda c: (_d(c),)),
    _same(_G("mlp_norm", "bias"), "blk.{i}.ffn_norm.bias", lambda c: (_d(c),)),
    _same(_G("mlp_up"), "blk.{i}.ffn_up.weight", lambda c: (_d(c), c.n_ff), gguf_transposed=True),
    _same(_G("mlp_up", "bias"), "blk.{i}.ffn_up.bias", lambda c: (c.n_ff,)),
    _same(_G("mlp_down"), "blk.{i}.ffn_down.weight", lambda c: (c.n_ff, _d(c)), gguf_transposed=True),
    _same(_G("mlp_down", "bias"), "blk.{i}.ffn_down.bias", lambda c: (_d(c),)),
    _same(_G("final_norm"), "output_norm.weight", lambda c: (_d(c),)),
    _same(_G("final_norm", "bias"), "output_norm.bias", lambda c: (_d(c),)),
    _same(_G("head"), "output.weight", lambda c: (c.vocab_size, _d(c)), present=_untied),
)

_L = LLAMA_NAMES
# The Llama family's parameters that every member has as Llama does: embedding, norms, output
# projection, down projection, head (HF Linear weights [out, in]; GGUF stores them [out, in] too).
_LLAMA_EMBEDDING = _same(_L("token_embedding"), "token_embd.weight", lambda c: (c.vocab_size, _d(c)))
_LLAMA_ATTN_NORM = _same(_L("attn_norm"), "blk.{i}.attn_norm.weight", lambda c: (_d(c),))
_LLAMA_ATTN_OUT = Parameter(
    _L("attn_out"), "blk.{i}.attn_output.weight", lambda c: (_d(c), _q(c)), _L("attn_out"), linear=True
)
_LLAMA_MLP_NORM = _same(_L("mlp_norm"), "blk.{i}.ffn_norm.weight", lambda c: (_d(c),))
_LLAMA_MLP_DOWN = Parameter(
    _L("mlp_down"), "blk.{i}.ffn_down.weight", lambda c: (_d(c), c.n_ff), _L("mlp_down"), linear=True
)
_LLAMA_TAIL = (
    _same(_L("final_norm"), "output_norm.weight", lambda c: (_d(c),)),
    _same(_L("head"), "output.weight", lambda c: (c.vocab_size, _d(c)), present=_untied),
)

# Llama (and Qwen2, which adds q/k/v biases): HF's LlamaForCausalLM names; llama.cpp's `llama` /
# `qwen2` GGUF names. The compiler fuses q, k and v into one [d, q + 2 kv] matmul and gate and up
# into one [d, 2 n_ff], so that each runs as one matmul over the activations.
_QKV, _QKV_BIAS, _GATE_UP = _L("qkv"), _L("qkv", "bias"), _L("mlp_up")
_LLAMA = (
    _LLAMA_EMBEDDING,
    _LLAMA_ATTN_NORM,
    Parameter(
        "model.layers.{i}.self_attn.q_proj.weight", "blk.{i}.attn_q.weight", lambda c: (_q(c), _d(c)), _QKV, 0, True
    ),
    Parameter(
        "model.layers.{i}.self_attn.k_proj.weight", "blk.{i}.attn_k.weight", lambda c: (_kv(c), _d(c)), _QKV, 1, True
    ),
    Parameter(
        "model.layers.{i}.self_attn.v_proj.weight",
        "blk.{i}.attn_v.weight",
        lambda c: (_kv(c), _d(c)),
        _QKV,
        2,
        True,
        apart=_L("v_proj"),
    ),
    Parameter(
        "model.layers.{i}.self_attn.q_proj.bias",
        "blk.{i}.attn_q.bias",
        lambda c: (_q(c),),
        _QKV_BIAS,
        0,
        present=_qkv_bias,
    ),
    Parameter(
        "model.layers.{i}.self_attn.k_proj.bias",
        "blk.{i}.attn_k.bias",
        lambda c: (_kv(c),),
        _QKV_BIAS,
        1,
        present=_qkv_bias,
    ),
    Parameter(
        "model.layers.{i}.self_attn.v_proj.bias",
        "blk.{i}.attn_v.bias",
        lambda c: (_kv(c),),
        _QKV_BIAS,
        2,
        present=_qkv_bias,
        apart=_L("v_proj", "bias"),
    ),
    _LLAMA_ATTN_OUT,
    _LLAMA_MLP_NORM,
    Parameter(
        "model.layers.{i}.mlp.gate_proj.weight", "blk.{i}.ffn_gate.weight", lambda c: (c.n_ff, _d(c)), _GATE_UP, 0, True
    ),
    Parameter(
        "model.layers.{i}.mlp.up_proj.weight", "blk.{i}.ffn_up.weight", lambda c: (c.n_ff, _d(c)), _GATE_UP, 1, True
    ),
    _LLAMA_MLP_DOWN,
    *_LLAMA_TAIL,
)

# Phi-3 (Phi3ForCausalLM): Llama's computation, its checkpoints already fused as the compiler
# fuses them: qkv_proj [q + 2 kv, d] (q, then k, then v) and gate_up_proj [2 n_ff, d] (gate, then
# up), transposed whole. llama.cpp's `phi3` GGUF files keep them fused too: attn_qkv, and ffn_up
# holding gate and up (convert_hf_to_gguf.py, Phi3MiniModel), in HF's rotate-half order.
_PHI3 = (
    _LLAMA_EMBEDDING,
    _LLAMA_ATTN_NORM,
    Parameter(_QKV, "blk.{i}.attn_qkv.weight", lambda c: (_q(c) + 2 * _kv(c), _d(c)), _QKV, linear=True),
    _LLAMA_ATTN_OUT,
    _LLAMA_MLP_NORM,
    Parameter(_GATE_UP, "blk.{i}.ffn_up.weight", lambda c: (2 * c.n_ff, _d(c)), _GATE_UP, linear=True),
    _LLAMA_MLP_DOWN,
    *_LLAMA_TAIL,
)

# Gemma 3 (Gemma3ForCausalLM's text model): Llama's q/k/v, o and gate/up/down projections, an
# RMSNorm over each q and k head (q_norm, k_norm), and four norms a layer: input_layernorm before
# attention, post_attention_layernorm after it (before the residual add), pre_feedforward_layernorm
# and post_feedforward_layernorm around the MLP. Every norm computes x * (1 + w): the compiler takes
# 1 + w (shift). llama.cpp's `gemma3` GGUF names; its converter stores the norms as 1 + w already.
GEMMA3_NAMES = dataclasses.replace(
    LLAMA_NAMES,
    mlp_norm="pre_feedforward_layernorm",
    q_norm="self_attn.q_norm",
    k_norm="self_attn.k_norm",
    post_attn_norm="post_attention_layernorm",
    post_mlp_norm="post_feedforward_layernorm",
)
_M = GEMMA3_NAMES


def _gemma_norm(part: str, gguf: str, shape: Shape) -> Parameter:
    return _same(_M(part), gguf, shape, shift=1.0)


_GEMMA3 = (
    _LLAMA_EMBEDDING,
    _gemma_norm("attn_norm", "blk.{i}.attn_norm.weight", lambda c: (_d(c),)),
    *(p for p in _LLAMA if p.compiler == _QKV),  # q, k and v, fused as Llama's
    _gemma_norm("q_norm", "blk.{i}.attn_q_norm.weight", lambda c: (c.head_size,)),
    _gemma_norm("k_norm", "blk.{i}.attn_k_norm.weight", lambda c: (c.head_size,)),
    _LLAMA_ATTN_OUT,
    _gemma_norm("post_attn_norm", "blk.{i}.post_attention_norm.weight", lambda c: (_d(c),)),
    _gemma_norm("mlp_norm", "blk.{i}.ffn_norm.weight", lambda c: (_d(c),)),
    *(p for p in _LLAMA if p.compiler == _GATE_UP),
    _LLAMA_MLP_DOWN,
    _gemma_norm("post_mlp_norm", "blk.{i}.post_ffw_norm.weight", lambda c: (_d(c),)),
    _gemma_norm("final_norm", "output_norm.weight", lambda c: (_d(c),)),
    _LLAMA_TAIL[1],  # an untied head (Gemma's is tied)
)

_LLAMA_SPEC = Architecture(
    name="llama",
    norm="rms",
    mlp="swiglu",
    bias=False,
    qkv_bias=False,
    positions="rope",
    rope_only=True,
    gguf_rope_layout="interleaved",
    hf_model_types=("llama",),
    hf_architectures=("LlamaForCausalLM",),
    compiler=LLAMA_NAMES,
    parameters=_LLAMA,
    gguf_architecture="llama",
)

ARCHITECTURES: dict[str, Architecture] = {
    "gpt2": Architecture(
        name="gpt2",
        norm="layer",
        mlp="gelu",
        bias=True,
        qkv_bias=True,
        positions="learned",
        rope_only=False,
        gguf_rope_layout="half",
        hf_model_types=("gpt2",),
        hf_architectures=("GPT2LMHeadModel",),
        compiler=GPT2_NAMES,
        parameters=_GPT2,
        gguf_architecture="gpt2",
    ),
    "llama": _LLAMA_SPEC,
    # Llama with q/k/v biases; llama.cpp's converter leaves qwen2's q/k rows unpermuted.
    "qwen2": dataclasses.replace(
        _LLAMA_SPEC,
        name="qwen2",
        qkv_bias=True,
        gguf_rope_layout="half",
        hf_model_types=("qwen2",),
        hf_architectures=("Qwen2ForCausalLM",),
        gguf_architecture="qwen2",
    ),
    "phi3": dataclasses.replace(
        _LLAMA_SPEC,
        name="phi3",
        gguf_rope_layout="half",
        hf_model_types=("phi3",),
        hf_architectures=("Phi3ForCausalLM",),
        parameters=_PHI3,
        gguf_architecture="phi3",
    ),
    # Gemma 3's text model: GeGLU, the sandwich and q/k norms (GEMMA3_NAMES), embeddings times
    # sqrt(n_embd); its head_dim, attention_scale and per-layer windows and rope bases are config
    # fields (GPTConfig.head_dim, attention_scale, layer_windows, rope_local_base).
    "gemma3": dataclasses.replace(
        _LLAMA_SPEC,
        name="gemma3",
        mlp="geglu",
        gguf_rope_layout="half",
        hf_model_types=("gemma3_text",),
        hf_architectures=("Gemma3ForCausalLM",),
        compiler=GEMMA3_NAMES,
        parameters=_GEMMA3,
        gguf_architecture="gemma3",
        embedding_scale=True,
    ),
}


def get(name: str) -> Architecture:
    """The architecture called `name`; ValueError naming the known ones otherwise."""
    if not isinstance(name, str) or name not in ARCHITECTURES:
        raise ValueError(f"unknown architecture {name!r}; known: {', '.join(ARCHITECTURES)}")
    return ARCHITECTURES[name]


def layer_name(pattern: str, layer: int | None) -> str:
    """A table name with its "{i}" filled in for `layer` (model-level names, layer None, as they are)."""
    return pattern if layer is None else pattern.replace("{i}", str(layer))


def compiler_name(parameter: Parameter, config: ModelConfig) -> str:
    """The compiler parameter (with "{i}") that `parameter` is, or is a part of, in `config`: its
    own where the config sets it apart (GPTConfig.separate_v_proj), else `parameter.compiler`."""
    return parameter.apart if parameter.apart and config.separate_v_proj else parameter.compiler


def compiler_groups(config: ModelConfig) -> dict[str, list[tuple[Parameter, int | None]]]:
    """Each compiler parameter of `config` (its name, layer filled in) -> the HF parameters and
    layers it is made of, in part order (q, k, v of a fused qkv; one for the others)."""
    groups: dict[str, list[tuple[Parameter, int | None]]] = {}
    for p, i in parameters(config):
        groups.setdefault(layer_name(compiler_name(p, config), i), []).append((p, i))
    return groups


def parameters(config: ModelConfig) -> list[tuple[Parameter, int | None]]:
    """(parameter, layer) for every HF parameter a model of `config` takes, in table order
    (layer-major within the per-layer parameters); layer is None for model-level ones."""
    head, per_layer, tail = [], [], []
    for p in config.spec.parameters:
        if p.per_layer:
            per_layer.append(p)
        elif p.present(config):
            # Model-level parameters before the layers' (embeddings) and after them (final norm, head).
            (tail if per_layer else head).append((p, None))
    layers = [(p, i) for i in range(config.n_layer) for p in per_layer if p.present(config)]
    return head + layers + tail


def hf_shapes(config: ModelConfig) -> dict[str, tuple]:
    """HF name -> HF shape of every parameter a model of `config` takes (what from_weights and
    from_pretrained expect)."""
    return {layer_name(p.hf, i): tuple(p.shape(config)) for p, i in parameters(config)}


def gguf_names(config: ModelConfig) -> dict[str, str]:
    """GGUF tensor name -> HF name, for every parameter of `config`."""
    return {layer_name(p.gguf, i): layer_name(p.hf, i) for p, i in parameters(config)}


def gguf_shape(parameter: Parameter, config: ModelConfig) -> tuple:
    """The numpy shape of `parameter`'s GGUF tensor (its ne reversed)."""
    shape = tuple(parameter.shape(config))
    return shape[::-1] if parameter.gguf_transposed else shape
