"""GPU artifacts as files from strangers (issue 43): every size, count and launch dimension of a
manifest bounded before any driver call, with the field named; only regular files inside the
artifact read, each with a size bound; deep nesting and long numbers refused as ArtifactError;
PTX scanned in linear time; and `python -m gpt_runtime` answering every error in one line."""

import json
import os
import subprocess
import sys

import pytest

import gpt_runtime
import toy_artifact as toy
from gpt_runtime import ArtifactError
from gpt_runtime.__main__ import main
from gpt_runtime.driver import LIBRARY_ENV
from gpt_runtime.manifest import MAX_BUFFER_BYTES, MAX_MANIFEST_BYTES, MAX_PTX_BYTES, SCHEMA, max_shared_bytes
from gpt_runtime.weights import read_header

PACKAGE_ROOT = os.path.dirname(os.path.dirname(os.path.abspath(gpt_runtime.__file__)))
TESTS = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))  # tests/python: the helper modules
NO_LIBRARY = "/nonexistent/libcuda.so.1"
# What a hang would need to be caught as one: far past what each case takes (well under a second).
HANG_SECONDS = 120


@pytest.fixture(autouse=True)
def no_driver(monkeypatch):
    """Every check here comes before the driver: a driver call would raise NoDeviceError instead."""
    monkeypatch.setenv(LIBRARY_ENV, NO_LIBRARY)


def _extra_programs(count: int):
    def edit(m):
        m["programs"] += [m["programs"][0]] * count

    return edit


def _args(count: int):
    def edit(m):
        m["programs"][0]["launches"][0]["args"] = [{"i64": 0}] * count

    return edit


STEP = 2  # programs[2]: the 1-token step program; programs[3] the 4-token one
KIB = 1024
BOUNDS = {
    "2^40 bytes of shared memory": (
        toy.set_key("programs.0.launches.0.shared_bytes", 2**40),
        "programs[0].launches[0].shared_bytes = 1099511627776, more than the 166912 bytes of shared memory a "
        "block can have on sm_80",
    ),
    "sm_80's limit plus one KiB of shared memory": (
        toy.set_key("programs.1.launches.1.shared_bytes", 164 * KIB),
        "programs[1].launches[1].shared_bytes = 167936, more than the 166912 bytes",
    ),
    "a 2^62-byte buffer": (toy.set_key("buffers.7.bytes", 2**62), "buffers[7].bytes: must be <= 1099511627776"),
    "buffers of more than 1 TiB together": (
        lambda m: [toy.set_key(f"buffers.{i}.bytes", 2**39)(m) for i in (7, 8)],
        "buffers: 1099511629318 bytes in all, more than any GPU has",
    ),
    "an input buffer of 2^39 bytes": (
        toy.set_key("buffers.2.bytes", 2**39),
        "buffers[2].bytes: input buffer 'inputs' has 549755813888 bytes, but the largest program's inputs in it "
        "have 512",
    ),
    "a cache.length its buffers do not hold": (
        toy.set_key("cache.length", 64),
        "cache.layers[0].key: buffer 3 ('cache.0.key') has 128 bytes, not a whole number of float32 rows of "
        "cache.length 64",
    ),
    "a cache.length of 2^40": (
        toy.set_key("cache.length", 2**40),
        "not a whole number of float32 rows of cache.length",
    ),
    "one cache buffer for two layers": (
        toy.set_key("cache.layers.1.key", toy.KEY0),
        "cache.layers[1].key is buffer 3, which cache.layers[0].key is too",
    ),
    "a step program longer than the cache": (
        toy.set_key("cache.length", 2),
        f"programs[{STEP + 1}].tokens: a step program of 4 tokens, more than cache.length 2",
    ),
    "a block of 128 along z": (
        toy.set_key("programs.0.launches.0.block", [1, 1, 128]),
        "programs[0].launches[0].block[2] = 128, more than CUDA's 64",
    ),
    "a grid of 70000 along y": (
        toy.set_key("programs.0.launches.0.grid", [1, 70000, 1]),
        "programs[0].launches[0].grid[1] = 70000, more than CUDA's 65535",
    ),
    "600 kernel arguments": (
        _args(600),
        "programs[0].launches[0].args: 600 arguments of 8 bytes, more than the 4096 bytes of parameters a kernel "
        "of PTX 7.0 for sm_80 can take",
    ),
    "300 programs": (_extra_programs(296), "programs: expected at most 256 items, got 300"),
    "a config nested 100 deep": (
        toy.set_key("config.extra", json.loads("[" * 100 + "]" * 100)),
        "manifest.json: the manifest nests deeper than 64 levels (at config.extra[0]",
    ),
}


@pytest.mark.parametrize("case", BOUNDS)
def test_every_size_count_and_dimension_is_bounded_naming_the_field(case, tmp_path):
    edit, message = BOUNDS[case]
    directory = toy.write_artifact(str(tmp_path / "a"), edit)
    with pytest.raises(ArtifactError) as error:
        gpt_runtime.load_manifest(directory)  # what `info` prints from, before gpt_runtime.load
    assert message in str(error.value)
    assert str(error.value).startswith(directory)
    with pytest.raises(ArtifactError):
        gpt_runtime.load(directory)


def test_shared_memory_is_bounded_by_the_chips_opt_in_limit(tmp_path, monkeypatch):
    # The CUDA Programming Guide's per-block maxima with the opt-in the runtime makes past 48 KiB.
    assert max_shared_bytes("sm_90") == max_shared_bytes("sm_90a") == 227 * KIB
    assert max_shared_bytes("sm_80") == 163 * KIB and max_shared_bytes("sm_86") == 99 * KIB
    assert max_shared_bytes("sm_75") == 64 * KIB and max_shared_bytes("sm_61") == 48 * KIB
    assert max_shared_bytes("sm_200") == 227 * KIB  # newer than the table: the most any GPU gives
    # Up to the limit loads (and the runtime opts the kernel in), on the fake driver.
    monkeypatch.setenv(LIBRARY_ENV, toy.fake_libcuda())
    directory = toy.write_artifact(str(tmp_path / "a"), toy.set_key("programs.0.launches.0.shared_bytes", 163 * KIB))
    with gpt_runtime.load(directory) as model:
        assert model.forward([1, 2]).shape == (2, toy.VOCAB)


def test_the_schemas_buffer_bound_is_the_runtimes():
    with open(SCHEMA) as f:
        assert json.load(f)["$defs"]["bytes"]["maximum"] == MAX_BUFFER_BYTES


# -- files: regular, inside the artifact, bounded ---------------------------------------------------


def _replace(path: str, make) -> None:
    os.remove(path)
    make(path)


def test_a_file_linked_out_of_the_artifact_is_refused_and_one_linked_inside_is_read(tmp_path, monkeypatch):
    outside = tmp_path / "outside.ptx"
    outside.write_text(open(toy.PTX).read())
    cases = {
        "manifest.json": ("/dev/zero", "manifest.json: leads outside the artifact directory"),
        "kernels.sm_80.ptx": ("/dev/zero", "kernels.sm_80.ptx: target.module leads outside the artifact directory"),
        "weights.safetensors": (str(outside), "weights.file leads outside the artifact directory"),
    }
    for name, (target, message) in cases.items():
        directory = toy.write_artifact(str(tmp_path / name))
        _replace(os.path.join(directory, name), lambda path, target=target: os.symlink(target, path))
        with pytest.raises(ArtifactError, match=message):
            gpt_runtime.load(directory)
    directory = toy.write_artifact(str(tmp_path / "tokenizer"), toy.set_key("tokenizer", "tokenizer.json"))
    os.symlink("/etc/passwd", os.path.join(directory, "tokenizer.json"))
    with pytest.raises(ArtifactError, match="tokenizer.json: tokenizer leads outside the artifact directory"):
        gpt_runtime.load_manifest(directory)
    directory = toy.write_artifact(str(tmp_path / "inside"))
    os.rename(os.path.join(directory, "weights.safetensors"), os.path.join(directory, "stored.safetensors"))
    os.symlink("stored.safetensors", os.path.join(directory, "weights.safetensors"))
    monkeypatch.setenv(LIBRARY_ENV, toy.fake_libcuda())
    with gpt_runtime.load(directory) as model:
        assert int(model.forward([1, 2])[-1].argmax()) == toy.next_token([1, 2])


def _in_subprocess(code: str, *args: str) -> subprocess.CompletedProcess:
    """`code` run by a fresh interpreter, so that a hang is a timeout and not a stuck test run."""
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([PACKAGE_ROOT, TESTS]), **{LIBRARY_ENV: NO_LIBRARY})
    return subprocess.run(
        [sys.executable, "-c", code, *args], capture_output=True, text=True, env=env, timeout=HANG_SECONDS
    )


LOAD = (
    "import sys, gpt_runtime\n"
    "try:\n"
    "    gpt_runtime.load(sys.argv[1])\n"
    "except Exception as error:\n"
    "    print(type(error).__name__ + ':', error)\n"
)


def test_a_fifo_is_refused_without_waiting_for_a_writer(tmp_path):
    for name in ("manifest.json", "kernels.sm_80.ptx", "weights.safetensors"):
        directory = toy.write_artifact(str(tmp_path / name))
        _replace(os.path.join(directory, name), os.mkfifo)
        result = _in_subprocess(LOAD, directory)
        assert result.returncode == 0, result.stderr
        assert f"ArtifactError: {directory}/{name}: not a regular file (a FIFO, a device or a directory)" in (
            result.stdout
        )


def test_files_over_their_bound_are_refused_before_they_are_read(tmp_path):
    for name, bound, message in (
        ("manifest.json", MAX_MANIFEST_BYTES, "bytes, more than a manifest can have"),
        ("kernels.sm_80.ptx", MAX_PTX_BYTES, "bytes, more than a PTX module can have"),
    ):
        directory = toy.write_artifact(str(tmp_path / name))
        with open(os.path.join(directory, name), "ab") as f:
            f.truncate(bound + 1)  # sparse: no disk, and no time to write
        with pytest.raises(ArtifactError, match=f"{name}: {bound + 1} {message}"):
            gpt_runtime.load(directory)


def test_weights_must_tile_the_file_without_spare_bytes(tmp_path):
    directory = toy.write_artifact(str(tmp_path / "a"))
    with open(os.path.join(directory, "weights.safetensors"), "ab") as f:
        f.write(b"\0" * 1000)
    with pytest.raises(ArtifactError, match="the tensors declare 6 data bytes, but the file has 1006 after its header"):
        gpt_runtime.load(directory)
    gap = {
        "a": {"dtype": "U8", "shape": [2], "data_offsets": [0, 2]},
        "b": {"dtype": "U8", "shape": [2], "data_offsets": [3, 5]},
    }
    path = _header_file(tmp_path, json.dumps(gap).encode(), b"12345")
    with pytest.raises(ArtifactError, match="tensor 'b' starts at data byte 3, but the tensors before it end at 2"):
        read_header(path)


def _header_file(tmp_path, header: bytes, data: bytes = b"") -> str:
    path = tmp_path / "w.safetensors"
    path.write_bytes(len(header).to_bytes(8, "little") + header + data)
    return str(path)


def test_a_dtype_of_any_json_type_is_an_artifact_error(tmp_path):
    """The loader fuzzer's finding: a dtype that is an object or a list was looked up in a dict and
    raised TypeError (unhashable) instead of naming the tensor."""
    for dtype in ({}, [], None, 3, "Q4"):
        header = json.dumps({"w": {"dtype": dtype, "shape": [2], "data_offsets": [0, 2]}}).encode()
        with pytest.raises(ArtifactError, match=r"tensor 'w': unknown dtype"):
            read_header(_header_file(tmp_path, header, b"\0\0"))


# -- nesting, long numbers, and scanning time -------------------------------------------------------


def test_deep_nesting_and_long_numbers_are_artifact_errors(tmp_path):
    directory = toy.write_artifact(str(tmp_path / "a"))
    manifest = os.path.join(directory, "manifest.json")
    for text, message in (
        ("[" * 100000 + "]" * 100000, "the manifest nests deeper than 64 levels"),
        ('{"version": ' + "1" * 5000 + "}", "not readable as JSON: Exceeds the limit"),
    ):
        with open(manifest, "w") as f:
            f.write(text)
        with pytest.raises(ArtifactError, match=message):
            gpt_runtime.load_manifest(directory)
    deep = b'{"__metadata__": ' + b"[" * 100000 + b"]" * 100000 + b"}"
    with pytest.raises(ArtifactError, match="the safetensors header nests deeper than 64 levels"):
        read_header(_header_file(tmp_path, deep))
    many = {"w": {"dtype": "U8", "shape": [10**4000] * 3000, "data_offsets": [0, 1]}}
    script = "import sys; from gpt_runtime.weights import read_header\ntry:\n    read_header(sys.argv[1])\n"
    script += "except ValueError as error:\n    print(error)\n"
    result = _in_subprocess(script, _header_file(tmp_path, json.dumps(many).encode(), b"1"))
    assert "a shape of 3000 dimensions, or a size of 2^63 or more, is not a tensor's shape" in result.stdout


def test_a_hostile_ptx_module_is_scanned_in_linear_time(tmp_path):
    ptx = open(toy.PTX).read()
    for name, text in (
        # Each .entry without a ")": a regex looking for one rescanned the rest of the module each time.
        ("unclosed entries", ptx + ".entry a(\n" * 400_000),
        # Blank lines before the header: ^\s* rescanned the rest of the run from every line start.
        ("blank lines", "\n" * 4_000_000 + ptx),
    ):
        directory = toy.write_artifact(str(tmp_path / name.replace(" ", "_")), ptx=text)
        result = _in_subprocess(LOAD, directory)
        assert result.returncode == 0, (name, result.stderr)
        assert result.stdout.startswith("NoDeviceError: no NVIDIA driver"), result.stdout  # checks passed


# -- python -m gpt_runtime --------------------------------------------------------------------------


def run_cli(*args: str) -> subprocess.CompletedProcess:
    env = dict(os.environ, PYTHONPATH=PACKAGE_ROOT, **{LIBRARY_ENV: NO_LIBRARY})
    return subprocess.run(
        [sys.executable, "-m", "gpt_runtime", *args], capture_output=True, text=True, env=env, timeout=HANG_SECONDS
    )


def test_cli_errors_are_one_line_with_status_2_and_debug_shows_the_traceback(tmp_path):
    directory = toy.write_artifact(str(tmp_path / "a"))
    _replace(os.path.join(directory, "manifest.json"), os.mkfifo)
    result = run_cli("info", directory)
    assert result.returncode == 2
    refusal = f"{directory}/manifest.json: not a regular file (a FIFO, a device or a directory); refused"
    assert result.stderr == f"gpt_runtime: error: {refusal}\n"
    for debug in (["--debug", "info", directory], ["info", directory, "--debug"]):
        result = run_cli(*debug)
        lines = result.stderr.splitlines()
        assert result.returncode == 2 and lines[0] == "Traceback (most recent call last):"
        assert lines[-1].startswith(f"gpt_runtime: error: {directory}/manifest.json: not a regular file")
    plain = toy.write_artifact(str(tmp_path / "plain"))
    for args, message in (
        (["generate", plain, "--ids", "1"], "gpt_runtime: error: no NVIDIA driver"),
        (["info", str(tmp_path / "none")], "gpt_runtime: error: " + str(tmp_path / "none") + ": not a directory"),
    ):
        result = run_cli(*args)
        assert result.returncode == 2 and result.stderr.startswith(message), result.stderr
        assert len(result.stderr.splitlines()) == 1 and "Traceback" not in result.stderr


def test_cli_names_an_internal_error_as_one(capsys, monkeypatch):
    import gpt_runtime.__main__ as cli

    def broken(args):
        raise KeyError("slot")

    monkeypatch.setattr(cli, "_info", broken)
    assert main(["info", "x"]) == 2
    assert capsys.readouterr().err == (
        "gpt_runtime: error: internal error: KeyError: 'slot' (--debug shows the traceback)\n"
    )
