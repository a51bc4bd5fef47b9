"""GPT.export to a CUDA artifact (docs/GPU.md), checked without a GPU: ptxas from the pinned
nvidia-cuda-nvcc-cu12 wheel assembles the PTX for its chip (so no extern is left unresolved), the
manifest passes gpt_runtime's validation and covers every parameter, the weights file holds the
model's weights exactly (bf16: rounded to nearest even, computed here independently), and
gpt_runtime.load refuses to run without a device."""

import ctypes
import json
import os
import re
import shutil
import struct
import subprocess

import numpy as np
import pytest

import gpt
import gpt_runtime
from gpt import cuda_tools
from perturbed_models import perturbed_model

SIZES = {
    # One head of 32, a vocabulary under one 64-wide tile.
    "tiny": dict(n_layer=1, n_head=1, n_embd=32, vocab_size=50, block_size=64),
    "small": dict(n_layer=2, n_head=4, n_embd=128, vocab_size=512, block_size=256),
    # Vocabulary and width that are not multiples of 64.
    "odd": dict(n_layer=3, n_head=6, n_embd=192, vocab_size=1000, block_size=512),
    # The device check's model, exported as it is there: without weights (498 MB in f32).
    "gpt2-small": dict(n_layer=12, n_head=12, n_embd=768, vocab_size=50257, block_size=1024),
}
WITH_WEIGHTS = sorted(set(SIZES) - {"gpt2-small"})
TOKENS = (1, 16)


def model_for(size):
    return perturbed_model(gpt.GPTConfig(**SIZES[size]), seed=3, perturbation_seed=7)


@pytest.fixture(scope="module")
def models():
    return {size: model_for(size) for size in SIZES}


@pytest.fixture(scope="module")
def exported(models, tmp_path_factory):
    """(size, weights) -> artifact directory, exported once per module."""
    cache = {}

    def get(size, weights):
        if (size, weights) not in cache:
            directory = str(tmp_path_factory.mktemp(f"{size}-{weights}") / "artifact")
            write = size in WITH_WEIGHTS
            models[size].export(directory, target="cuda:sm_90", tokens=TOKENS, weights=weights, write_weights=write)
            cache[size, weights] = directory
        return cache[size, weights]

    return get


def read_manifest(directory):
    with open(os.path.join(directory, "manifest.json"), encoding="utf-8") as f:
        return json.load(f)


def read_safetensors(path):
    """{name: (dtype, shape, raw bytes)}, parsed here from the format's definition (8-byte
    little-endian header length, JSON header, data), not by the code under test."""
    with open(path, "rb") as f:
        data = f.read()
    (length,) = struct.unpack("<Q", data[:8])
    header = json.loads(data[8 : 8 + length])
    header.pop("__metadata__", None)
    body = data[8 + length :]
    tensors = {}
    for name, entry in header.items():
        begin, end = entry["data_offsets"]
        tensors[name] = (entry["dtype"], tuple(entry["shape"]), body[begin:end])
    return tensors


def bf16_round_to_nearest_even(values):
    """The bf16 bits of float32 values, rounded to nearest even (no NaNs among weights)."""
    bits = np.ascontiguousarray(values, np.float32).view(np.uint32).astype(np.uint64)
    return ((bits + 0x7FFF + ((bits >> 16) & 1)) >> 16).astype(np.uint16)


def ptxas(ptx_path, chip, tmp_path):
    """Assembles the module as a whole program: an unresolved extern (a libdevice __nv_* call
    left unlinked) is fatal there, as it is in the driver's JIT."""
    result = subprocess.run(
        [cuda_tools.ptxas_path(), f"-arch={chip}", ptx_path, "-o", str(tmp_path / f"module.{chip}.cubin")],
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert result.returncode == 0, f"ptxas -arch={chip} {ptx_path} failed:\n{result.stderr[-4000:]}"


# A kernel calling libdevice's expf, left unlinked, and the same with the function defined.
_EXTERN_PTX = """.version 8.0
.target sm_90
.address_size 64
DECLARATION
.visible .entry exp_in_place(.param .u64 p)
{
  .reg .f32 %f<3>;
  .reg .b64 %rd<2>;
  ld.param.u64 %rd1, [p];
  ld.global.f32 %f1, [%rd1];
  {
    .param .b32 param0;
    st.param.f32 [param0+0], %f1;
    .param .b32 retval0;
    call.uni (retval0), __nv_expf, (param0);
    ld.param.f32 %f2, [retval0+0];
  }
  st.global.f32 [%rd1], %f2;
  ret;
}
"""
_EXTERN = ".extern .func (.param .b32 func_retval0) __nv_expf(.param .b32 x);"
_DEFINED = (
    ".func (.param .b32 func_retval0) __nv_expf(.param .b32 x)\n"
    "{ .reg .f32 %a; ld.param.f32 %a, [x]; st.param.f32 [func_retval0+0], %a; ret; }"
)


def module_path(directory):
    return os.path.join(directory, read_manifest(directory)["target"]["module"])


def weight_buffers(manifest):
    return {b["name"]: b for b in manifest["buffers"] if b["role"] == "weight"}


# -- PTX --------------------------------------------------------------------------------------------


@pytest.mark.parametrize("weights", ["f32", "bf16"])
@pytest.mark.parametrize("size", sorted(SIZES))
def test_ptxas_assembles_sm_90(exported, size, weights, tmp_path):
    directory = exported(size, weights)
    manifest = read_manifest(directory)
    assert manifest["target"]["chip"] == "sm_90"
    assert manifest["target"]["module"] == "kernels.sm_90.ptx"
    with open(module_path(directory), encoding="utf-8") as f:
        ptx = f.read()
    assert re.search(r"^\s*\.target\s+sm_90\b", ptx, re.M), "the module's .target is not sm_90"
    version = re.search(r"^\s*\.version\s+(\d+\.\d+)", ptx, re.M)
    assert version and version.group(1) == manifest["target"]["ptx_version"]
    assert not re.search(r"\.extern\s+\.func", ptx), "the PTX declares extern functions (libdevice not linked?)"
    ptxas(module_path(directory), "sm_90", tmp_path)


def test_ptxas_refuses_an_unresolved_extern(tmp_path):
    """What the assembly tests rely on: ptxas, as the driver's JIT, fails on a libdevice call
    left unlinked, and accepts the same module once the function is defined."""
    unlinked, linked = tmp_path / "unlinked.ptx", tmp_path / "linked.ptx"
    unlinked.write_text(_EXTERN_PTX.replace("DECLARATION", _EXTERN))
    linked.write_text(_EXTERN_PTX.replace("DECLARATION", _DEFINED))
    ptxas(str(linked), "sm_90", tmp_path)
    with pytest.raises(AssertionError, match="Unresolved extern function '__nv_expf'"):
        ptxas(str(unlinked), "sm_90", tmp_path)


def test_sm_80_export_assembles_for_sm_80(models, tmp_path):
    directory = str(tmp_path / "artifact")
    models["odd"].export(directory, target="cuda:sm_80", tokens=TOKENS, weights="bf16", write_weights=False)
    manifest = read_manifest(directory)
    assert manifest["target"]["chip"] == "sm_80"
    assert manifest["target"]["module"] == "kernels.sm_80.ptx"
    with open(module_path(directory), encoding="utf-8") as f:
        assert re.search(r"^\s*\.target\s+sm_80\b", f.read(), re.M)
    ptxas(module_path(directory), "sm_80", tmp_path)


def test_every_launched_kernel_is_an_entry_of_the_module(exported):
    directory = exported("small", "f32")
    with open(module_path(directory), encoding="utf-8") as f:
        entries = set(re.findall(r"\.entry\s+([A-Za-z_$%][A-Za-z0-9_$]*)", f.read()))
    launched = {launch["kernel"] for p in read_manifest(directory)["programs"] for launch in p["launches"]}
    assert launched and launched <= entries, f"launched but not in the PTX: {sorted(launched - entries)}"


# -- manifest -------------------------------------------------------------------------------------


@pytest.mark.parametrize("weights", ["f32", "bf16"])
@pytest.mark.parametrize("size", sorted(SIZES))
def test_manifest_passes_runtime_validation(exported, size, weights):
    from gpt_runtime.manifest import load_manifest

    directory = exported(size, weights)
    weights_file = os.path.join(directory, read_manifest(directory)["weights"]["file"])
    if size not in WITH_WEIGHTS:  # load_manifest wants the file to exist; load() reads it
        with open(weights_file, "wb"):
            pass
    try:
        load_manifest(directory)
    finally:
        if size not in WITH_WEIGHTS:
            os.remove(weights_file)


def test_manifest_validation_rejects_a_broken_manifest(exported, tmp_path):
    """The validation above is not vacuous: the same manifest with a launch naming a kernel the
    PTX lacks is refused."""
    from gpt_runtime.errors import ArtifactError
    from gpt_runtime.manifest import load_manifest

    directory = str(tmp_path / "broken")
    shutil.copytree(exported("tiny", "f32"), directory)
    manifest = read_manifest(directory)
    manifest["programs"][0]["launches"][0]["kernel"] = "no_such_kernel"
    with open(os.path.join(directory, "manifest.json"), "w", encoding="utf-8") as f:
        json.dump(manifest, f)
    with pytest.raises(ArtifactError, match="no_such_kernel"):
        load_manifest(directory)


@pytest.mark.parametrize("size", sorted(SIZES))
def test_manifest_config_programs_and_cache(models, exported, size):
    manifest = read_manifest(exported(size, "f32"))
    config = models[size].config
    assert manifest["format"] == "gpt.gpu-artifact" and manifest["version"] == 1
    for field in ("n_layer", "n_head", "n_embd", "vocab_size", "block_size"):
        assert manifest["config"][field] == getattr(config, field), field
    assert manifest["vocab_size"] == config.vocab_size
    assert manifest["weights"]["dtype"] == "f32"
    programs = {(p["entry"], p["tokens"]) for p in manifest["programs"]}
    assert {t for _, t in programs} == set(TOKENS)
    assert ("step", 1) in programs and ("forward", max(TOKENS)) in programs
    for program in manifest["programs"]:
        logits = program["logits"]
        assert logits["rows"] == (1 if program["entry"] == "step" else program["tokens"])
        assert logits["row_stride"] >= config.vocab_size
        assert manifest["buffers"][logits["buffer"]]["role"] == "output"
    assert manifest["cache"]["length"] == config.block_size
    assert len(manifest["cache"]["layers"]) == config.n_layer
    for layer in manifest["cache"]["layers"]:
        for index in (layer["key"], layer["value"]):
            assert manifest["buffers"][index]["role"] == "cache"


# -- weights --------------------------------------------------------------------------------------


def expected_stored(name, value, buffer):
    """The model's parameter as the artifact stores it: as given, or transposed where the kernels
    read a matmul weight [N, K] (GPT-2's Conv1D weights are [K, N])."""
    layout = buffer.get("layout", "as_given")
    assert layout in ("as_given", "transposed"), (name, layout)
    stored = np.ascontiguousarray(value.T) if layout == "transposed" else value
    assert tuple(buffer["shape"]) == stored.shape, (name, buffer["shape"], layout, value.shape)
    return stored


@pytest.mark.parametrize("weights", ["f32", "bf16"])
@pytest.mark.parametrize("size", sorted(SIZES))
def test_weight_buffers_cover_every_parameter(models, exported, size, weights):
    manifest = read_manifest(exported(size, weights))
    buffers = weight_buffers(manifest)
    parameters = models[size].state_dict()
    assert sorted(buffers) == sorted(parameters)
    for name, value in parameters.items():
        buffer = buffers[name]
        dtype = buffer.get("dtype", manifest["weights"]["dtype"])
        stored = expected_stored(name, value, buffer)
        if weights == "f32":
            assert dtype == "f32", name
        elif value.ndim == 2 and not name.endswith("wpe.weight"):
            # The matmul weights and the token embedding (the LM head); norm scales, biases and
            # the position table may stay f32.
            assert dtype == "bf16", f"{name} is {dtype} in a bf16 artifact"
        assert buffer["bytes"] == stored.size * (2 if dtype == "bf16" else 4), name


@pytest.mark.parametrize("weights", ["f32", "bf16"])
@pytest.mark.parametrize("size", WITH_WEIGHTS)
def test_weights_file_holds_the_models_weights(models, exported, size, weights):
    directory = exported(size, weights)
    manifest = read_manifest(directory)
    assert manifest["weights"]["dtype"] == weights
    tensors = read_safetensors(os.path.join(directory, manifest["weights"]["file"]))
    buffers = weight_buffers(manifest)
    assert sorted(tensors) == sorted(buffers)
    for name, value in models[size].state_dict().items():
        dtype, shape, raw = tensors[name]
        buffer = buffers[name]
        want = expected_stored(name, np.asarray(value, np.float32), buffer)
        assert shape == want.shape, name
        assert len(raw) == buffer["bytes"], name
        if buffer.get("dtype", manifest["weights"]["dtype"]) == "bf16":
            assert dtype == "BF16", name
            got = np.frombuffer(raw, np.uint16).reshape(shape)
            np.testing.assert_array_equal(got, bf16_round_to_nearest_even(want), err_msg=name)
        else:
            assert dtype == "F32", name
            got = np.frombuffer(raw, np.uint32).reshape(shape)
            np.testing.assert_array_equal(got, want.view(np.uint32), err_msg=f"{name} is not bit-exact")


def test_bf16_rounding_reference():
    """The rounding the test holds the export to: to nearest, ties to even, on the bits."""
    values = np.array([1.0, 1 + 2**-8, 1 + 3 * 2**-8, 1 + 2**-8 + 2**-20, -2.5, 1 - 2**-10], np.float32)
    widened = bf16_round_to_nearest_even(values).astype(np.uint32) << 16
    # 1 + 2^-8 is halfway between 1 and 1 + 2^-7: the tie goes to the even 1.0, and 1 + 3 2^-8 to
    # the even 1 + 2^-6; just above a half rounds up; 1 - 2^-10 rounds up across the binade.
    want = np.array([1.0, 1.0, 1 + 2**-6, 1 + 2**-7, -2.5, 1.0], np.float32)
    np.testing.assert_array_equal(widened.view(np.float32), want)


def test_write_weights_false_writes_manifest_and_ptx_only(models, tmp_path):
    directory = str(tmp_path / "artifact")
    models["tiny"].export(directory, target="cuda:sm_90", tokens=TOKENS, weights="f32", write_weights=False)
    assert sorted(os.listdir(directory)) == ["kernels.sm_90.ptx", "manifest.json"]
    assert weight_buffers(read_manifest(directory))


# -- the runtime here, and bad targets -------------------------------------------------------------


def _have_a_driver():
    try:
        ctypes.CDLL("libcuda.so.1")
    except OSError:
        return False
    return True


@pytest.mark.skipif(_have_a_driver(), reason="this machine has a CUDA driver")
def test_runtime_load_raises_no_device_error_here(exported):
    with pytest.raises(gpt_runtime.NoDeviceError):
        gpt_runtime.load(exported("tiny", "f32"))


@pytest.mark.parametrize("target", ["cuda:sm_20", "cuda:sm_75", "rocm:gfx90a", "cuda:", "sm_90"])
def test_bad_target_is_a_value_error_naming_it(models, tmp_path, target):
    directory = tmp_path / "artifact"
    # Quoted, as the project's messages quote a bad value: the target, or its chip after "cuda:".
    named = "|".join(f"'{re.escape(part)}'" for part in {target, target.removeprefix("cuda:")} if part)
    with pytest.raises(ValueError, match=named):
        models["tiny"].export(str(directory), target=target, tokens=TOKENS, weights="f32")
    assert not directory.exists() or not os.listdir(directory)


@pytest.mark.parametrize("weights", ["f16", "q8_0", "F32"])
def test_bad_weight_format_is_a_value_error_naming_it(models, tmp_path, weights):
    with pytest.raises(ValueError, match=f"'{weights}'"):
        models["tiny"].export(str(tmp_path / "artifact"), target="cuda:sm_90", tokens=TOKENS, weights=weights)
