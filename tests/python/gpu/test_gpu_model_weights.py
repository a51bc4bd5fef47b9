"""Artifacts without weights (`export --gpu_weights none`, format version 2) loaded with the weights
of a model file: a GGUF file (GPT-2 and llama, f32, bf16 and q8_0; llama.cpp's q/k row permutation
undone) or a HF checkpoint directory, read by gpt_runtime alone. On the stand-in driver
(fake_libcuda.c) the weights that reach the device must be, byte for byte, those of the artifact
exported with its weights from the model the CPU loads from the same file, and the emulated logits
therefore the same; a file of another model is refused by name before any driver call."""

import json
import os
import re
import shutil
import subprocess
import sys

import gguf
import numpy as np
import pytest
from safetensors.numpy import save_file

import gpt
import toy_artifact as toy
from checkpoints import hf_config as gpt2_hf_config
from checkpoints import rewrite
from gpt.gguf_file import save_gguf
from gpt_runtime import ArtifactError, ModelFileError, emulator, load
from gpt_runtime.driver import LIBRARY_ENV
from gpt_runtime.weights import WeightsFile
from perturbed_models import perturbed_model

PACKAGE_ROOT = os.path.dirname(os.path.dirname(os.path.abspath(gpt.__file__)))
T = gguf.GGMLQuantizationType
TOKENS = (1, 16)
GPT2 = gpt.GPTConfig(n_layer=2, n_head=2, n_embd=64, vocab_size=100, block_size=64)
LLAMA = dict(architecture="llama", n_layer=2, n_head=4, n_kv_head=2, n_embd=64, n_ff=96, vocab_size=96, block_size=64)


@pytest.fixture(scope="session")
def fake() -> str:
    try:
        return toy.fake_libcuda()
    except (OSError, subprocess.CalledProcessError) as error:
        pytest.skip(f"fake_libcuda.so could not be built: {error}")


@pytest.fixture
def on_fake(fake, monkeypatch) -> str:
    """The stand-in driver, its kernels no-ops that check their pointers (the numerics are the
    emulator's, from the weights read back from the device)."""
    monkeypatch.setenv(LIBRARY_ENV, fake)
    monkeypatch.setenv("FAKE_CUDA_NOOP_KERNELS", "1")
    return fake


# -- model files -----------------------------------------------------------------------------------


def random_model(config: gpt.GPTConfig, seed: int) -> gpt.GPT:
    """Random weights, biases nonzero and norm scales away from 1 (so that a bias lost shows)."""
    return perturbed_model(config, seed=seed, perturbation_seed=seed + 10)


def gpt2_gguf(path, config=GPT2, fmt="f32", seed=1) -> str:
    save_gguf(random_model(config, seed), None, path, fmt)
    return str(path)


def llama_cpp_permute(weight: np.ndarray, n_head: int) -> np.ndarray:
    """convert_hf_to_gguf.py's LlamaModel.permute: HF's rotate-half rows into interleaved pairs."""
    return (
        weight.reshape(n_head, 2, weight.shape[0] // n_head // 2, *weight.shape[1:])
        .swapaxes(1, 2)
        .reshape(weight.shape)
    )


GGUF_LLAMA_NAMES = {
    "input_layernorm.weight": "attn_norm.weight",
    "self_attn.q_proj.weight": "attn_q.weight",
    "self_attn.k_proj.weight": "attn_k.weight",
    "self_attn.v_proj.weight": "attn_v.weight",
    "self_attn.o_proj.weight": "attn_output.weight",
    "post_attention_layernorm.weight": "ffn_norm.weight",
    "mlp.gate_proj.weight": "ffn_gate.weight",
    "mlp.up_proj.weight": "ffn_up.weight",
    "mlp.down_proj.weight": "ffn_down.weight",
}


def llama_state(config: gpt.GPTConfig, seed=3) -> dict[str, np.ndarray]:
    return random_model(config, seed).state_dict()


def llama_gguf(path, config: gpt.GPTConfig, fmt=T.F32, seed=3, meta=None) -> str:
    """A `llama` GGUF file as llama.cpp's converter writes one: q/k rows permuted, no output.weight
    for a tied head; matmul weights in `fmt`, norms in F32."""
    state = llama_state(config, seed)
    writer = gguf.GGUFWriter(str(path), arch="llama")
    keys = {
        "llama.block_count": ("uint32", config.n_layer),
        "llama.context_length": ("uint32", config.block_size),
        "llama.embedding_length": ("uint32", config.n_embd),
        "llama.feed_forward_length": ("uint32", config.n_ff),
        "llama.attention.head_count": ("uint32", config.n_head),
        "llama.attention.head_count_kv": ("uint32", config.n_kv_head),
        "llama.rope.freq_base": ("float32", config.rope_base),
        "llama.attention.layer_norm_rms_epsilon": ("float32", config.layer_norm_eps),
    }
    keys.update(meta or {})
    for key, (kind, value) in keys.items():
        getattr(writer, f"add_{kind}")(key, value)
    for name, value in state.items():
        if name == "model.embed_tokens.weight":
            gguf_name = "token_embd.weight"
        elif name == "model.norm.weight":
            gguf_name = "output_norm.weight"
        elif name == "lm_head.weight":
            gguf_name = "output.weight"
        else:
            _, _, layer, rest = name.split(".", 3)
            gguf_name = f"blk.{layer}.{GGUF_LLAMA_NAMES[rest]}"
        if ".q_proj." in name:
            value = llama_cpp_permute(value, config.n_head)
        if ".k_proj." in name:
            value = llama_cpp_permute(value, config.n_kv_head)
        kind = fmt if value.ndim == 2 else T.F32
        writer.add_tensor(gguf_name, gguf.quants.quantize(value, kind), raw_dtype=kind)
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()
    return str(path)


def hf_dir(path, config: gpt.GPTConfig, state: dict, prefix: bool = True, tokenizer: bool = False) -> str:
    """A HF checkpoint directory: config.json and model.safetensors (GPT-2 names without
    "transformer." when `prefix` is False, as GPT2Model saves them)."""
    os.makedirs(path)
    if config.architecture == "gpt2":
        hf = gpt2_hf_config(config)
        if not prefix:
            state = {name.removeprefix("transformer."): value for name, value in state.items()}
    else:
        hf = dict(
            model_type="llama",
            num_hidden_layers=config.n_layer,
            hidden_size=config.n_embd,
            intermediate_size=config.n_ff,
            num_attention_heads=config.n_head,
            num_key_value_heads=config.n_kv_head,
            vocab_size=config.vocab_size,
            max_position_embeddings=config.block_size,
            rms_norm_eps=config.layer_norm_eps,
            rope_theta=config.rope_base,
            tie_word_embeddings=config.tied_head,
        )
    with open(os.path.join(path, "config.json"), "w") as f:
        json.dump(hf, f)
    save_file(
        {name: np.ascontiguousarray(value, np.float32) for name, value in state.items()}, f"{path}/model.safetensors"
    )
    if tokenizer:
        shutil.copy(toy_tokenizer(str(path)), os.path.join(path, "tokenizer.json"))
    return str(path)


def toy_tokenizer(directory: str) -> str:
    """toy_artifact's word-level tokenizer.json (its vocabulary covers the toy's ids)."""
    written = toy.write_artifact(os.path.join(directory, ".toy"), tokenizer=True)
    return os.path.join(written, "tokenizer.json")


# -- artifacts ---------------------------------------------------------------------------------------


def export_pair(model: gpt.GPT, tmp_path, dtype: str) -> tuple[str, str]:
    """The artifact with its weights and the one without, of the same model."""
    with_weights = model.export(str(tmp_path / f"with.{dtype}"), tokens=TOKENS, weights=dtype)
    without = model.export(str(tmp_path / f"without.{dtype}"), tokens=TOKENS, weights=f"none:{dtype}")
    return with_weights, without


def manifest_of(directory: str) -> dict:
    with open(os.path.join(directory, "manifest.json")) as f:
        return json.load(f)


def device_weights(model) -> dict[str, np.ndarray]:
    """Every weight buffer's bytes as they are in device memory (the fake driver's host memory)."""
    device, out = model._device, {}
    for buffer, pointer in zip(model._manifest.buffers, model._pointers, strict=True):
        if buffer.role == "weight":
            data = np.empty(buffer.bytes, np.uint8)
            device.driver.copy_to_host_async(data.ctypes.data, pointer, buffer.bytes, device.stream)
            device.driver.synchronize(device.stream)
            out[buffer.name] = data
    return out


def file_weights(directory: str) -> dict[str, np.ndarray]:
    with WeightsFile(os.path.join(directory, "weights.safetensors")) as weights:
        return {name: weights.raw(name).copy() for name in weights.tensors}


def emulated_logits(directory: str, weights: dict[str, np.ndarray], ids) -> np.ndarray:
    manifest = manifest_of(directory)
    memory = emulator.Memory(manifest, weights)
    forward = next(p for p in manifest["programs"] if p["entry"] == "forward" and p["tokens"] == TOKENS[-1])
    emulator.write_inputs(memory, forward, ids, np.arange(TOKENS[-1]))
    emulator.run_program(memory, forward)
    return emulator.read_logits(memory, forward, len(ids), manifest["vocab_size"])


def assert_same_weights_and_logits(with_weights: str, without: str, model_file: str, cpu: gpt.GPT) -> None:
    runtime = load(without, model=model_file)
    try:
        got = device_weights(runtime)
    finally:
        runtime.close()
    want = file_weights(with_weights)
    assert got.keys() == want.keys()
    for name in want:
        np.testing.assert_array_equal(got[name], want[name], err_msg=name)
    ids = [3, 1, 4, 1, 5, 9, 2, 6]
    logits = emulated_logits(without, got, ids)
    np.testing.assert_array_equal(logits, emulated_logits(with_weights, want, ids))
    expected = cpu.forward(ids)
    assert np.abs(logits - expected).max() < 0.05 * np.abs(expected).max()  # f32 and bf16 alike


# -- the export ---------------------------------------------------------------------------------------


def test_an_artifact_without_weights_holds_programs_and_the_recipes_only(tmp_path):
    model = gpt.GPT.from_gguf(gpt2_gguf(tmp_path / "m.gguf"))
    with_weights, without = export_pair(model, tmp_path, "bf16")
    assert sorted(os.listdir(without)) == ["kernels.sm_90.ptx", "manifest.json"]
    size = sum(os.path.getsize(os.path.join(without, f)) for f in os.listdir(without))
    assert size < os.path.getsize(os.path.join(with_weights, "weights.safetensors"))
    manifest = manifest_of(without)
    # Version 2, so that a runtime that reads only version 1 refuses it by the version.
    assert manifest["version"] == 2 and manifest_of(with_weights)["version"] == 1
    assert manifest["weights"]["file"] is None and manifest["weights"]["dtype"] == "bf16"
    qkv = next(b for b in manifest["buffers"] if b["name"] == "transformer.h.1.attn.c_attn.weight")
    assert qkv["dtype"] == "bf16" and qkv["layout"] == "transposed"
    # GGUF stores GPT-2's Conv1D weights [out, in], the layout the kernels read: no transpose.
    assert qkv["gguf"] == {"names": ["blk.1.attn_qkv.weight"], "transpose": False, "axis": 0, "permute_heads": [None]}


def test_export_refuses_an_unknown_weights_format(tmp_path):
    model = random_model(GPT2, 1)
    with pytest.raises(ValueError, match="unknown GPU weight format 'none:f16'; expected one of 'f32', 'bf16', 'none'"):
        model.export(str(tmp_path / "a"), tokens=TOKENS, weights="none:f16")


def test_llama_recipes_name_the_permuted_rows_and_the_fused_parts(tmp_path):
    config = gpt.GPTConfig(**LLAMA)
    model = random_model(config, 3)
    manifest = manifest_of(model.export(str(tmp_path / "a"), tokens=TOKENS, weights="none"))
    qkv = next(b for b in manifest["buffers"] if b["name"] == "model.layers.0.self_attn.qkv_proj.weight")
    assert qkv["gguf"] == {
        "names": ["blk.0.attn_q.weight", "blk.0.attn_k.weight", "blk.0.attn_v.weight"],
        "transpose": False,
        "axis": 0,
        "permute_heads": [4, 2, None],
    }
    checks = {c["key"]: c for c in manifest["weights"]["source"]["gguf"]["checks"]}
    assert checks["llama.attention.head_count_kv"] == {"key": "llama.attention.head_count_kv", "value": 2, "default": 4}


# -- loading the weights from the model file --------------------------------------------------------


@pytest.mark.parametrize("dtype", ["f32", "bf16"])
@pytest.mark.parametrize("fmt", ["f32", "q8_0"])
def test_gpt2_gguf_weights_on_the_device_equal_the_artifacts_own(tmp_path, on_fake, dtype, fmt):
    path = gpt2_gguf(tmp_path / "m.gguf", fmt=fmt)
    cpu = gpt.GPT.from_gguf(path)
    with_weights, without = export_pair(cpu, tmp_path, dtype)
    assert_same_weights_and_logits(with_weights, without, path, cpu)


@pytest.mark.parametrize("tied", [True, False])
@pytest.mark.parametrize("dtype", ["f32", "bf16"])
def test_llama_gguf_weights_on_the_device_equal_the_artifacts_own(tmp_path, on_fake, dtype, tied):
    config = gpt.GPTConfig(**LLAMA, tied_head=tied)
    path = llama_gguf(tmp_path / "m.gguf", config, fmt=T.F32 if tied else T.Q8_0)
    cpu = gpt.GPT.from_gguf(path)
    assert cpu.config.tied_head == tied
    with_weights, without = export_pair(cpu, tmp_path, dtype)
    assert_same_weights_and_logits(with_weights, without, path, cpu)


@pytest.mark.parametrize("architecture", ["gpt2", "gpt2-without-prefix", "llama"])
def test_hf_directory_weights_on_the_device_equal_the_artifacts_own(tmp_path, on_fake, architecture):
    config = GPT2 if architecture.startswith("gpt2") else gpt.GPTConfig(**LLAMA, tied_head=False)
    state = random_model(config, 4).state_dict()
    directory = hf_dir(tmp_path / "hf", config, state, prefix=architecture != "gpt2-without-prefix")
    cpu = gpt.GPT.from_pretrained(directory)
    with_weights, without = export_pair(cpu, tmp_path, "f32")
    assert_same_weights_and_logits(with_weights, without, directory, cpu)


def test_a_gguf_artifact_loads_from_the_hf_directory_of_the_same_model(tmp_path, on_fake):
    """The recipes follow the config, not the file the export read: either kind of file serves."""
    config = gpt.GPTConfig(**LLAMA)
    gguf_path = llama_gguf(tmp_path / "m.gguf", config)
    cpu = gpt.GPT.from_gguf(gguf_path)
    with_weights, without = export_pair(cpu, tmp_path, "f32")
    directory = hf_dir(tmp_path / "hf", config, llama_state(config))
    assert_same_weights_and_logits(with_weights, without, directory, cpu)


def test_the_tokenizer_comes_from_the_artifact_else_from_the_hf_directory(tmp_path, on_fake):
    pytest.importorskip("tokenizers")
    state = random_model(GPT2, 4).state_dict()
    directory = hf_dir(tmp_path / "hf", GPT2, state, tokenizer=True)
    bare = random_model(GPT2, 4)  # no tokenizer: the artifact has none
    without = bare.export(str(tmp_path / "bare"), tokens=TOKENS, weights="none")
    assert manifest_of(without)["tokenizer"] is None
    with load(without, model=directory) as runtime:
        assert runtime.tokenizer is not None and runtime.tokenizer.encode("b c d").ids == [1, 2, 3]
    # Exported from the HF directory, the artifact carries its tokenizer.json, which is the one read.
    cpu = gpt.GPT.from_pretrained(directory)
    own = cpu.export(str(tmp_path / "own"), tokens=TOKENS, weights="none")
    assert manifest_of(own)["tokenizer"] == "tokenizer.json"
    with load(own, model=gpt2_gguf(tmp_path / "m.gguf", seed=4)) as runtime:
        assert runtime.tokenizer.encode("b c d").ids == cpu.tokenizer.encode("b c d")


# -- refusals -----------------------------------------------------------------------------------------


@pytest.fixture
def gpt2_without(tmp_path) -> str:
    model = random_model(GPT2, 1)
    return model.export(str(tmp_path / "without"), tokens=TOKENS, weights="none:bf16")


def _other_head_count(tmp_path):
    path = gpt2_gguf(tmp_path / "m.gguf")
    rewrite(path, tmp_path / "heads.gguf", set_keys={"gpt2.attention.head_count": (4, gguf.GGUFValueType.UINT32)})
    return str(tmp_path / "heads.gguf")


def _llama_for_gpt2(tmp_path):
    return llama_gguf(tmp_path / "llama.gguf", gpt.GPTConfig(**dict(LLAMA, vocab_size=100, n_embd=64)))


BAD_MODEL_FILES = {
    "another n_embd": (
        lambda tmp_path: gpt2_gguf(
            tmp_path / "m.gguf", gpt.GPTConfig(n_layer=2, n_head=2, n_embd=32, vocab_size=100, block_size=64)
        ),
        "tensor 'token_embd.weight' has shape [100, 32], but the artifact expects [100, 64] (for its weight buffer "
        "'transformer.wte.weight' of shape [100, 64])",
    ),
    "a missing tensor": (
        lambda tmp_path: (
            rewrite(gpt2_gguf(tmp_path / "m.gguf"), tmp_path / "drop.gguf", drop=["blk.1.ffn_down.weight"])
            or str(tmp_path / "drop.gguf")
        ),
        "tensor 'blk.1.ffn_down.weight' is missing (the artifact's weight buffer 'transformer.h.1.mlp.c_proj.weight' "
        "reads it)",
    ),
    "another head count, same shapes": (
        _other_head_count,
        "metadata key gpt2.attention.head_count is 4, but the artifact's model has 2",
    ),
    "one layer more": (
        lambda tmp_path: gpt2_gguf(
            tmp_path / "m.gguf", gpt.GPTConfig(n_layer=3, n_head=2, n_embd=64, vocab_size=100, block_size=64)
        ),
        "tensor(s) the artifact's model does not have: blk.2.attn_norm.bias",
    ),
    "another architecture": (
        _llama_for_gpt2,
        "llama.gguf: metadata key general.architecture is 'llama', but the artifact's model has 'gpt2'",
    ),
    "not a GGUF file": (
        lambda tmp_path: (
            (tmp_path / "notes.txt").write_text("hello world, this is not a model") and str(tmp_path / "notes.txt")
        ),
        "notes.txt: not a GGUF file (it starts with b'hell', not b'GGUF')",
    ),
    "a truncated GGUF file": (
        lambda tmp_path: (
            (tmp_path / "cut.gguf").write_bytes(open(gpt2_gguf(tmp_path / "m.gguf"), "rb").read()[:5000])
            and str(tmp_path / "cut.gguf")
        ),
        "lie outside the file's 5000 bytes",
    ),
    "no such file": (lambda tmp_path: str(tmp_path / "missing.gguf"), "missing.gguf: no such model file or directory"),
    "a HF directory without config.json": (
        lambda tmp_path: os.makedirs(tmp_path / "empty") or str(tmp_path / "empty"),
        "empty: not a HF checkpoint directory: config.json is missing",
    ),
}


@pytest.mark.parametrize("case", list(BAD_MODEL_FILES))
def test_a_model_file_unlike_the_artifacts_model_is_refused_by_name_before_the_driver(
    case, tmp_path, gpt2_without, monkeypatch
):
    make, message = BAD_MODEL_FILES[case]
    path = make(tmp_path)
    monkeypatch.setenv(LIBRARY_ENV, "/nonexistent/libcuda.so.1")  # a driver call would raise NoDeviceError
    with pytest.raises(ModelFileError) as error:
        load(gpt2_without, model=path)
    assert message in str(error.value)


def test_a_tensor_of_nan_is_refused_by_name(tmp_path, on_fake, gpt2_without):
    path = gpt2_gguf(tmp_path / "m.gguf")
    bad = np.full((64,), np.nan, np.float32)
    rewrite(path, tmp_path / "nan.gguf", replace={"blk.0.attn_norm.weight": (bad, T.F32)})
    with pytest.raises(ModelFileError, match=r"nan.gguf: tensor 'blk.0.attn_norm.weight' contains NaN or infinity"):
        load(gpt2_without, model=str(tmp_path / "nan.gguf"))


def test_a_hf_config_unlike_the_artifacts_is_refused_by_key(tmp_path, monkeypatch):
    config = gpt.GPTConfig(**LLAMA)
    model = random_model(config, 3)
    without = model.export(str(tmp_path / "without"), tokens=TOKENS, weights="none")
    other = gpt.GPTConfig(**dict(LLAMA, n_kv_head=4, n_head=4))
    # Four KV heads, not two: k and v have twice the rows, named with the fused buffer they make.
    directory = hf_dir(tmp_path / "hf", other, llama_state(other))
    monkeypatch.setenv(LIBRARY_ENV, "/nonexistent/libcuda.so.1")
    message = (
        "tensors 'model.layers.0.self_attn.q_proj.weight' [64, 64], 'model.layers.0.self_attn.k_proj.weight' [64, 64], "
        "'model.layers.0.self_attn.v_proj.weight' [64, 64] make 192 rows of the artifact's weight buffer "
        "'model.layers.0.self_attn.qkv_proj.weight' (its axis 0), which has 128 (shape [128, 64])"
    )
    with pytest.raises(ModelFileError, match=re.escape(message)):
        load(without, model=directory)
    with open(os.path.join(directory, "config.json")) as f:
        hf = json.load(f)
    directory = hf_dir(tmp_path / "hf2", config, llama_state(config))
    with open(os.path.join(directory, "config.json"), "w") as f:
        json.dump(dict(hf, num_key_value_heads=2, rope_theta=500000.0), f)
    with pytest.raises(
        ModelFileError, match="config.json key rope_theta is 500000.0, but the artifact's model has 10000.0"
    ):
        load(without, model=directory)


def test_weights_and_a_model_file_do_not_mix(tmp_path, gpt2_without, monkeypatch):
    monkeypatch.setenv(LIBRARY_ENV, "/nonexistent/libcuda.so.1")
    model = random_model(GPT2, 1)
    with_weights = model.export(str(tmp_path / "with"), tokens=TOKENS)
    with pytest.raises(ValueError, match=r"holds its own weights \(weights.safetensors\); a model file"):
        load(with_weights, model=gpt2_gguf(tmp_path / "m.gguf"))
    with pytest.raises(ValueError, match=r"holds no weights \(exported with --gpu_weights none\): give the model file"):
        load(gpt2_without)


def test_the_version_and_the_weights_file_agree(tmp_path):
    def edit(directory, change):
        manifest = manifest_of(directory)
        change(manifest)
        with open(os.path.join(directory, "manifest.json"), "w") as f:
            json.dump(manifest, f)

    a = toy.write_artifact(str(tmp_path / "a"), edit=lambda m: m.update(version=2))
    with pytest.raises(ArtifactError, match="format version 2 is not supported with a weights file"):
        load(a)
    b = toy.write_artifact(str(tmp_path / "b"))
    edit(b, lambda m: m["weights"].update(file=None))
    with pytest.raises(ArtifactError, match="weights.file is null, which format version 1 does not allow"):
        load(b)


# -- the command lines --------------------------------------------------------------------------------


def run(*args, library: str, module: str = "gpt_runtime"):
    env = dict(os.environ, PYTHONPATH=PACKAGE_ROOT, FAKE_CUDA_NOOP_KERNELS="1", **{LIBRARY_ENV: library})
    return subprocess.run([sys.executable, "-m", module, *args], capture_output=True, text=True, env=env, timeout=300)


def test_cli_generates_with_model_and_refuses_a_mismatch_in_one_line(tmp_path, fake, gpt2_without):
    good = gpt2_gguf(tmp_path / "m.gguf")
    result = run(
        "generate",
        gpt2_without,
        "--model",
        good,
        "--ids",
        "1,2,3",
        "--max-new-tokens",
        "2",
        "--temperature",
        "0",
        library=fake,
    )
    assert result.returncode == 0, result.stderr
    assert "generated: 2 tokens" in result.stdout
    small = gpt2_gguf(
        tmp_path / "small.gguf", gpt.GPTConfig(n_layer=2, n_head=2, n_embd=32, vocab_size=100, block_size=64)
    )
    rows = [
        (("generate", gpt2_without, "--model", small, "--ids", "1"), "tensor 'token_embd.weight' has shape [100, 32]"),
        (("generate", gpt2_without, "--ids", "1"), "holds no weights (exported with --gpu_weights none)"),
        (("info", gpt2_without, "--model", str(tmp_path / "nothing.gguf")), "no such model file or directory"),
    ]
    for args, message in rows:
        result = run(*args, library=fake)
        assert result.returncode == 2, result.stderr
        lines = result.stderr.strip().splitlines()
        assert len(lines) == 1 and lines[0].startswith("gpt_runtime: error: ") and message in lines[0], result.stderr


def test_gpt_export_flag_writes_an_artifact_without_weights(tmp_path, fake):
    path = gpt2_gguf(tmp_path / "m.gguf")
    out = str(tmp_path / "art")
    result = run(
        "export",
        "--model",
        path,
        "--gpu_weights",
        "none:bf16",
        "--tokens",
        "1,16",
        "--out",
        out,
        library=fake,
        module="gpt",
    )
    assert result.returncode == 0, result.stderr
    assert sorted(os.listdir(out)) == ["kernels.sm_90.ptx", "manifest.json"]
    manifest = manifest_of(out)
    assert manifest["version"] == 2 and manifest["weights"]["dtype"] == "bf16"
    result = run(
        "generate", out, "--model", path, "--ids", "1,2", "--max-new-tokens", "1", "--temperature", "0", library=fake
    )
    assert result.returncode == 0, result.stderr
