"""gpt_runtime's checks of an artifact before it touches the driver: manifests that are wrong (each
refused with an ArtifactError naming the file and the field), unreadable directories and PTX, the
JSON schema against the runtime's validator, and the safetensors reader against the files the
safetensors package writes. Running artifacts is test_gpu_runtime.py's."""

import json

import numpy as np
import pytest

import gpt_runtime
import toy_artifact as toy
from gpt_runtime import ArtifactError
from gpt_runtime.driver import LIBRARY_ENV
from gpt_runtime.weights import WeightsFile, read_header

NO_LIBRARY = "/nonexistent/libcuda.so.1"  # any driver call would raise NoDeviceError


STEP = 2  # programs[2] is the 1-token step program
BAD_MANIFESTS = {
    "a newer format version": (toy.set_key("version", 3), "format version 3 is not supported"),
    "another format": (toy.set_key("format", "onnx"), "format is 'onnx', expected 'gpt.gpu-artifact'"),
    "a buffer index out of range": (
        toy.set_key("programs.0.inputs.token_ids.buffer", 99),
        "programs[0].inputs.token_ids is buffer 99, but there are 9 buffers",
    ),
    "an input past its buffer's end": (
        toy.set_key("programs.0.inputs.positions.offset", toy.INPUT_BYTES - 8),
        "programs[0].inputs.positions: 64 bytes at offset 1016 run past the end of buffer 2 ('inputs', 1024 bytes)",
    ),
    "overlapping inputs": (toy.set_key("programs.0.inputs.positions.offset", 8), "token_ids and positions overlap"),
    "a misaligned input": (toy.set_key("programs.0.inputs.positions.offset", 68), "offset 68 is not a multiple of 8"),
    "a kernel not in the PTX": (
        toy.set_key("programs.1.launches.1.kernel", "toy_missing"),
        "programs[1].launches[1]: kernel 'toy_missing' is not an .entry of the PTX module",
    ),
    "a launch short of an argument": (
        lambda m: m["programs"][0]["launches"][0]["args"].pop(),
        "kernel 'toy_store' takes parameters of [8, 8, 8, 8, 8] bytes in the PTX, but the launch passes 4 arguments",
    ),
    "logits past their buffer": (
        toy.set_key("programs.1.logits.offset", 4),
        "programs[1].logits: 32 x 16 float32 at offset 4 run past the end of buffer 8",
    ),
    "logits narrower than the vocabulary": (
        toy.set_key("programs.0.logits.row_stride", 12),
        "row_stride 12 is less than",
    ),
    "logits in an input buffer": (toy.set_key("programs.0.logits.buffer", 2), "whose role is 'input', not 'output'"),
    "a forward program with a cache": (
        toy.set_key("programs.0.launches.0.args.2", {"buffer": toy.KEY0, "offset": 0}),
        "a forward program uses cache buffer 3",
    ),
    "a kernel argument past its buffer": (
        toy.set_key("programs.0.launches.0.args.2", {"buffer": toy.SCRATCH, "offset": 4 * toy.BLOCK_SIZE}),
        "offset 128 is past the end of buffer 7",
    ),
    "a step program without last_row": (
        toy.delete_key(f"programs.{STEP}.inputs.last_row"),
        f"programs[{STEP}].inputs: missing required field 'last_row'",
    ),
    "a grid of two dimensions": (toy.set_key("programs.0.launches.0.grid", [1, 1]), "grid: expected at least 3 items"),
    "a block of 2048 threads": (toy.set_key("programs.0.launches.0.block", [2048, 1, 1]), "a block of 2048 threads"),
    "an unknown field": (toy.set_key("target.arch", "x"), "target: unknown field 'arch'"),
    "a size that is not an integer": (
        toy.set_key("buffers.0.bytes", 4.0),
        "buffers[0].bytes: expected integer, got 4.0",
    ),
    "a file outside the artifact": (toy.set_key("target.module", "../kernels.ptx"), "does not match"),
    "a missing PTX file": (
        toy.set_key("target.module", "kernels.sm_90.ptx"),
        "target.module names 'kernels.sm_90.ptx', which is missing",
    ),
    "a PTX version the module does not have": (
        toy.set_key("target.ptx_version", "8.0"),
        "target.ptx_version is 8.0, but the PTX module says .version 7.0",
    ),
    "a chip the module does not have": (toy.set_key("target.chip", "sm_90"), "PTX module says .target sm_80"),
    "an unknown PTX version": (toy.set_key("target.ptx_version", "7.9"), "'7.9' is not a PTX ISA version"),
    "a step program without a cache": (toy.set_key("cache", None), "is a step program, but the manifest has no cache"),
    "a cache layer on a scratch buffer": (
        toy.set_key("cache.layers.0.key", toy.SCRATCH),
        "cache.layers[0].key is buffer 7",
    ),
    "two programs of one bucket": (toy.set_key("programs.1.tokens", 8), "are both forward programs of 8 tokens"),
    "a forward bucket past block_size": (toy.set_key("programs.1.tokens", 64), "more than block_size 32"),
    "an eos past the vocabulary": (
        toy.set_key("eos_token_id", 13),
        "end-of-generation token 13 (eos_token_id[s]) is not",
    ),
    "an eos of several past the vocabulary": (toy.set_key("eos_token_ids", [1, 20]), "end-of-generation token 20"),
    "a duplicate buffer name": (toy.set_key("buffers.1.name", "shift"), "are both named 'shift'"),
    "a weight the file lacks": (toy.set_key("buffers.0.name", "bias"), "no tensor 'bias' (weight buffer 0"),
    "a weight of the wrong size": (
        toy.set_key("buffers.0.bytes", 8),
        "tensor 'shift' has 4 bytes, but its buffer 0 has 8",
    ),
    "a weight of the wrong dtype": (
        toy.set_key("buffers.1.dtype", "f32"),
        "tensor 'shift_bf16' is BF16, but its buffer 1 is f32",
    ),
    "a weight of the wrong shape": (
        toy.set_key("buffers.0.shape", [1, 1]),
        "has shape [1], but its buffer 0 has shape [1, 1]",
    ),
    "a missing weights file": (
        toy.set_key("weights.file", "model.safetensors"),
        "weights.file names 'model.safetensors'",
    ),
}


@pytest.mark.parametrize("case", BAD_MANIFESTS)
def test_a_bad_manifest_raises_artifact_error_naming_the_problem_before_the_driver(case, tmp_path, monkeypatch):
    edit, message = BAD_MANIFESTS[case]
    directory = toy.write_artifact(str(tmp_path / "bad"), edit)
    monkeypatch.setenv(LIBRARY_ENV, NO_LIBRARY)  # any driver call would raise NoDeviceError instead
    with pytest.raises(ArtifactError) as error:
        gpt_runtime.load(directory)
    assert message in str(error.value)
    assert str(error.value).startswith(directory)  # names the file


def test_unreadable_artifacts_raise_artifact_error(tmp_path, monkeypatch):
    monkeypatch.setenv(LIBRARY_ENV, NO_LIBRARY)
    with pytest.raises(ArtifactError, match="not a directory"):
        gpt_runtime.load(str(tmp_path / "nothing"))
    with pytest.raises(ArtifactError, match="manifest.json: missing"):
        gpt_runtime.load(str(tmp_path))
    (tmp_path / "manifest.json").write_text("{")
    with pytest.raises(ArtifactError, match="not readable as JSON"):
        gpt_runtime.load(str(tmp_path))
    toy.write_artifact(str(tmp_path), ptx="// no directives\n.entry toy_store(\n.entry toy_logits(\n")
    with pytest.raises(ArtifactError, match="no .version or .target directive"):
        gpt_runtime.load(str(tmp_path))


def test_a_kernel_parameter_that_is_not_8_bytes_is_refused(tmp_path, monkeypatch):
    with open(toy.PTX) as f:
        ptx = f.read().replace(".param .u64 toy_store_rows", ".param .u32 toy_store_rows")
    monkeypatch.setenv(LIBRARY_ENV, NO_LIBRARY)
    with pytest.raises(ArtifactError, match=r"'toy_store' takes parameters of \[8, 8, 8, 4, 8\] bytes"):
        gpt_runtime.load(toy.write_artifact(str(tmp_path / "a"), ptx=ptx))


def test_the_schema_is_valid_json_schema_and_agrees_with_the_runtimes_validator(tmp_path):
    jsonschema = pytest.importorskip("jsonschema")
    from gpt_runtime.manifest import SCHEMA

    with open(SCHEMA) as f:
        schema = json.load(f)
    jsonschema.Draft202012Validator.check_schema(schema)
    validator = jsonschema.Draft202012Validator(schema)
    validator.validate(toy.manifest())
    for case in ("a grid of two dimensions", "an unknown field", "a step program without last_row", "another format"):
        m = toy.manifest()
        BAD_MANIFESTS[case][0](m)
        assert not validator.is_valid(m), case


def _safetensors_header_file(tmp_path, header: bytes, data: bytes = b"", length: int | None = None) -> str:
    path = tmp_path / "w.safetensors"
    path.write_bytes((len(header) if length is None else length).to_bytes(8, "little") + header + data)
    return str(path)


def test_the_safetensors_reader_matches_files_the_safetensors_package_writes(tmp_path):
    save_file = pytest.importorskip("safetensors.numpy").save_file

    rng = np.random.default_rng(0)
    tensors = {
        "a": rng.standard_normal((3, 5)).astype(np.float32),
        "b": rng.standard_normal(7).astype(np.float16),
        "c": np.arange(6, dtype=np.int64).reshape(2, 3),
        "empty": np.zeros((0, 4), np.float32),
    }
    save_file(tensors, str(tmp_path / "n.safetensors"))
    with WeightsFile(str(tmp_path / "n.safetensors")) as weights:
        for name, value in tensors.items():
            read = weights.tensor(name)
            assert read.dtype == value.dtype and read.shape == value.shape
            assert read.tobytes() == value.tobytes()


def test_the_safetensors_reader_reads_bf16_as_its_bits(tmp_path):
    torch = pytest.importorskip("torch")
    save_file = pytest.importorskip("safetensors.torch").save_file

    value = torch.randn(4, 6, generator=torch.Generator().manual_seed(0)).to(torch.bfloat16)
    save_file({"w": value, "x": torch.ones(2)}, str(tmp_path / "t.safetensors"))
    header = read_header(str(tmp_path / "t.safetensors"))
    assert header["w"].dtype == "BF16" and header["w"].shape == (4, 6) and header["w"].nbytes == 48
    with WeightsFile(str(tmp_path / "t.safetensors")) as weights:
        bits = weights.tensor("w")
        assert bits.dtype == np.uint16
        np.testing.assert_array_equal(bits, value.view(torch.int16).numpy().view(np.uint16))
        np.testing.assert_array_equal(weights.tensor("x"), np.ones(2, np.float32))


@pytest.mark.parametrize(
    "header, data, length, message",
    [
        (b"", b"", 0, "not a readable safetensors file"),
        (b"{}", b"", 1000, "header length 1000 does not fit"),
        (b"[]", b"", None, "not a JSON object"),
        (b'{"w": {"dtype": "F32", "shape": [2], "data_offsets": [0, 8]}}', b"1234", None, "not a range inside"),
        (b'{"w": {"dtype": "F32", "shape": [3], "data_offsets": [0, 8]}}', b"12345678", None, "has 12"),
        (b'{"w": {"dtype": "Q4", "shape": [2], "data_offsets": [0, 8]}}', b"12345678", None, "unknown dtype 'Q4'"),
        (b'{"w": {"dtype": "F32", "shape": [-2], "data_offsets": [0, 8]}}', b"12345678", None, "not a list of sizes"),
    ],
)
def test_a_malformed_safetensors_header_raises_artifact_error(tmp_path, header, data, length, message):
    with pytest.raises(ArtifactError, match=message):
        read_header(_safetensors_header_file(tmp_path, header, data, length))
    (tmp_path / "short.safetensors").write_bytes(b"\x01\x00")
    with pytest.raises(ArtifactError, match="too short"):
        read_header(str(tmp_path / "short.safetensors"))
