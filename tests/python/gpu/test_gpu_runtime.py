"""gpt_runtime without a GPU: it imports no compiler, checks an artifact before touching the driver,
and runs toy_artifact.py's hand-made artifact on fake_libcuda.c (the driver API over host memory)
with every token known in closed form. On a machine with a GPU the end-to-end tests also run on the
real driver (the `driver` fixture's "real" case)."""

import ctypes
import gc
import importlib.util
import os
import shutil
import subprocess
import sys
import threading

import numpy as np
import pytest

import gpt_runtime
import toy_artifact as toy
from gpt_runtime import ArtifactError, CudaError, IncompatibleDeviceError, NoDeviceError
from gpt_runtime.compat import check_compute_capability, check_driver_version, parse_chip, required_driver_version
from gpt_runtime.driver import LIBRARY_ENV

PACKAGE_ROOT = os.path.dirname(os.path.dirname(os.path.abspath(gpt_runtime.__file__)))
NO_LIBRARY = "/nonexistent/libcuda.so.1"


def _real_gpu() -> bool:
    try:
        lib = ctypes.CDLL("libcuda.so.1")
    except OSError:
        return False
    count = ctypes.c_int()
    return lib.cuInit(0) == 0 and lib.cuDeviceGetCount(ctypes.byref(count)) == 0 and count.value > 0


@pytest.fixture(scope="session")
def fake() -> str:
    try:
        return toy.fake_libcuda()
    except (OSError, subprocess.CalledProcessError) as error:  # a GPU machine may have no C compiler
        pytest.skip(f"fake_libcuda.so could not be built: {error}")


@pytest.fixture
def on_fake(fake, monkeypatch) -> str:
    monkeypatch.setenv(LIBRARY_ENV, fake)
    return fake


@pytest.fixture(params=["fake", "real"])
def driver(request, monkeypatch) -> str:
    """The end-to-end tests' driver: the fake always, the machine's own when it has a GPU
    (`pytest -k real` there runs only those)."""
    if request.param == "real":
        if not _real_gpu():
            pytest.skip("no GPU on this machine")
        monkeypatch.delenv(LIBRARY_ENV, raising=False)
        return "real"
    fake = request.getfixturevalue("fake")
    monkeypatch.setenv(LIBRARY_ENV, fake)
    return fake


HAVE_TOKENIZERS = importlib.util.find_spec("tokenizers") is not None


@pytest.fixture
def artifact(tmp_path) -> str:
    return toy.write_artifact(str(tmp_path / "toy"), tokenizer=HAVE_TOKENIZERS)


def stats(fake: str) -> dict[str, int]:
    gc.collect()  # caches and models free their memory when collected
    return toy.fake_stats(fake)


# -- what gpt_runtime imports ----------------------------------------------------------------------


def test_import_loads_neither_the_gpt_extension_nor_mlir_nor_llvm():
    script = (
        "import sys, gpt_runtime, gpt_runtime.__main__\n"
        "assert not [m for m in sys.modules if m == 'gpt' or m.startswith('gpt.')], sorted(sys.modules)\n"
        "maps = open('/proc/self/maps').read()\n"
        "assert 'libMLIR' not in maps and 'libLLVM' not in maps and '_gpt' not in maps\n"
        "print('ok')\n"
    )
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(p for p in sys.path if p))
    result = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, env=env, timeout=120)
    assert result.returncode == 0 and result.stdout.strip() == "ok", result.stderr


def test_gpt_samples_with_the_runtimes_sampler():
    from gpt_runtime import sampling

    gpt_sampling = pytest.importorskip("gpt.sampling")  # absent on a GPU machine without the compiler
    assert gpt_sampling.sample is sampling.sample
    assert gpt_sampling.check_sampling_args is sampling.check_sampling_args


# -- no GPU, or the wrong one --------------------------------------------------------------------


def test_load_without_a_driver_raises_no_device_error(artifact, monkeypatch):
    monkeypatch.setenv(LIBRARY_ENV, NO_LIBRARY)
    with pytest.raises(NoDeviceError, match="no NVIDIA driver: /nonexistent/libcuda.so.1 could not be loaded"):
        gpt_runtime.load(artifact)


def test_a_driver_without_a_usable_gpu_raises_no_device_error(artifact, on_fake, monkeypatch):
    monkeypatch.setenv("FAKE_CUDA_INIT_ERROR", "100")
    with pytest.raises(NoDeviceError, match="found no usable GPU: cuInit failed: CUDA_ERROR_NO_DEVICE"):
        gpt_runtime.load(artifact)
    monkeypatch.delenv("FAKE_CUDA_INIT_ERROR")
    monkeypatch.setenv("FAKE_CUDA_DEVICES", "0")
    with pytest.raises(NoDeviceError, match="reports no GPU"):
        gpt_runtime.load(artifact)
    monkeypatch.setenv("FAKE_CUDA_DEVICES", "2")
    with pytest.raises(NoDeviceError, match="there is no GPU 2: the driver reports 2 GPU"):
        gpt_runtime.load(artifact, device=2)


@pytest.mark.parametrize(
    "ptx, driver, needed",
    [("7.0", 10020, "11.0"), ("8.0", 11080, "12.0"), ("8.5", 12040, "12.5"), ("8.7", 12060, "12.8")],
)
def test_a_driver_older_than_the_ptx_is_named_with_both_versions(ptx, driver, needed):
    with pytest.raises(IncompatibleDeviceError) as error:
        check_driver_version(ptx, driver)
    message = str(error.value)
    shown = f"{driver // 1000}.{driver % 1000 // 10}"
    assert f"PTX {ptx} needs a CUDA {needed} driver" in message and f"this driver is CUDA {shown}" in message
    check_driver_version(ptx, required_driver_version(ptx))  # the oldest that loads it passes


def test_ptx_versions_map_to_the_drivers_of_the_ptx_manual():
    assert [required_driver_version(v) for v in ("7.0", "7.8", "8.0", "8.4", "8.5", "8.7")] == [
        11000,
        11080,
        12000,
        12040,
        12050,
        12080,
    ]
    with pytest.raises(ArtifactError, match="'7.9' is not a PTX ISA version"):
        required_driver_version("7.9")


def test_compute_capability_against_the_chip():
    assert parse_chip("sm_90") == (9, 0, "") and parse_chip("sm_120") == (12, 0, "")
    assert parse_chip("sm_90a") == (9, 0, "a") and parse_chip("sm_86") == (8, 6, "")
    for chip, capability in [("sm_90", (9, 0)), ("sm_90", (10, 0)), ("sm_80", (8, 6)), ("sm_100f", (10, 3))]:
        check_compute_capability(chip, capability)
    for chip, capability, needs in [
        ("sm_90", (8, 9), "compute capability 9.0 or higher"),
        ("sm_90a", (10, 0), "exactly compute capability 9.0"),
        ("sm_100f", (12, 0), "compute capability 10.x"),
    ]:
        with pytest.raises(IncompatibleDeviceError, match=needs) as error:
            check_compute_capability(chip, capability, "GPU 0 (Old)")
        assert f"GPU 0 (Old) has compute capability {capability[0]}.{capability[1]}" in str(error.value)


def test_an_old_driver_or_gpu_is_refused_at_load_and_nothing_is_left_held(artifact, on_fake, monkeypatch):
    before = stats(on_fake)
    monkeypatch.setenv("FAKE_CUDA_DRIVER", "10020")
    with pytest.raises(IncompatibleDeviceError, match="PTX 7.0 needs a CUDA 11.0 driver"):
        gpt_runtime.load(artifact)
    monkeypatch.delenv("FAKE_CUDA_DRIVER")
    monkeypatch.setenv("FAKE_CUDA_CC", "75")
    with pytest.raises(IncompatibleDeviceError, match=r"compiled for sm_80.*GPU 0 \(Fake GPU 0.*\) has compute"):
        gpt_runtime.load(artifact)
    assert stats(on_fake)["contexts"] == before["contexts"]


# -- running the toy artifact --------------------------------------------------------------------


def test_forward_returns_each_positions_logits_cut_to_the_vocabulary(artifact, driver):
    model = gpt_runtime.load(artifact)
    for ids in ([4], [1, 2, 3, 4, 5], list(range(9)), [12] * 32):  # buckets 8, 8, 32, 32
        logits = model.forward(ids)
        assert logits.shape == (len(ids), toy.VOCAB) and logits.dtype == np.float32
        expected = np.zeros_like(logits)
        expected[np.arange(len(ids)), [toy.next_token(ids[: i + 1]) for i in range(len(ids))]] = 1
        np.testing.assert_array_equal(logits, expected)
    assert model.config == {"block_size": 32, "vocab_size": 13, "n_layer": 2, "pos_embedding": "learned"}
    model.close()


def test_prefill_in_chunks_and_decode_agree_with_forward(artifact, driver):
    model = gpt_runtime.load(artifact)
    cache = model.new_cache()
    prompt = [5, 1, 12, 0, 7, 7, 3, 9, 2, 11]  # 10 tokens: chunks of 4, 4 and 2 (step bucket 4)
    sequence = list(prompt)
    logits = model.prefill(prompt, cache)
    assert len(cache) == 10 and logits.shape == (toy.VOCAB,)
    for token in (3, 0, 12, 6):
        np.testing.assert_array_equal(logits, model.forward(sequence)[-1])
        logits = model.decode(token, cache)
        sequence.append(token)
    assert len(cache) == 14 and int(logits.argmax()) == toy.next_token(sequence)
    cache.reset()
    assert len(cache) == 0 and int(model.prefill([4], cache).argmax()) == toy.next_token([4])


def test_two_caches_do_not_share_positions(artifact, driver):
    model = gpt_runtime.load(artifact)
    a, b = model.new_cache(), model.new_cache()
    model.prefill([1, 2, 3], a)
    model.prefill([9, 9], b)
    assert int(model.decode(4, a).argmax()) == toy.next_token([1, 2, 3, 4])
    assert int(model.decode(5, b).argmax()) == toy.next_token([9, 9, 5])


def test_generate_is_the_toy_models_greedy_continuation_and_stops_at_eos(tmp_path, driver):
    model = gpt_runtime.load(toy.write_artifact(str(tmp_path / "a")))
    assert model.generate([1, 2, 3], 20) == toy.greedy([1, 2, 3], 20)
    assert model.generate([1, 2, 3], 20, stop=[5]) == toy.greedy([1, 2, 3], 20, stop={5})
    assert model.generate([0] * 30, 2) == toy.greedy([0] * 30, 2)  # to the cache's last position
    stats = model.last_generation
    assert stats.prompt_tokens == 30 and stats.generated_tokens == 2 and stats.prompt_seconds > 0
    eos = toy.greedy([1, 2, 3], 20)[4]
    with_eos = gpt_runtime.load(toy.write_artifact(str(tmp_path / "b"), toy.set_key("eos_token_id", eos)))
    assert with_eos.generate([1, 2, 3], 20) == toy.greedy([1, 2, 3], 20, stop={eos})
    assert with_eos.generate([1, 2, 3], 20, eos=False) == toy.greedy([1, 2, 3], 20)
    # A chat model's several end-of-generation tokens: any of them stops.
    early = toy.greedy([1, 2, 3], 20)[2]
    several = gpt_runtime.load(toy.write_artifact(str(tmp_path / "c"), toy.set_key("eos_token_ids", [eos, early])))
    assert several.eos_token_ids == (eos, early)
    assert several.generate([1, 2, 3], 20) == toy.greedy([1, 2, 3], 20, stop={early})


def test_sampling_is_reproducible_with_a_seed(artifact, driver):
    model = gpt_runtime.load(artifact)
    # The toy's logits are one-hot: at temperature 3 every token has some chance.
    a = model.generate([1, 2], 25, temperature=3.0, seed=11)
    assert a == model.generate([1, 2], 25, temperature=3.0, seed=11)
    assert a != toy.greedy([1, 2], 25)
    assert list(model.generate([1, 2], 25, temperature=3.0, seed=11, stream=True)) == a


def test_graphs_are_captured_once_per_program_and_cache_then_replayed(artifact, on_fake):
    model = gpt_runtime.load(artifact)
    before = stats(on_fake)
    model.generate([1, 2, 3], 10)  # the step programs of 4 tokens (the prompt) and of 1
    assert model.last_generation.capture_seconds > 0
    model.generate([4, 5, 6, 7, 8], 10)  # the prompt in chunks of 4 and 1: nothing new to capture
    assert model.last_generation.capture_seconds == 0
    after = stats(on_fake)
    assert after["graphs_made"] - before["graphs_made"] == 2
    assert after["graph_launches"] - before["graph_launches"] == (1 + 9) + (2 + 9)
    plain = gpt_runtime.load(artifact, graphs=False)
    middle = stats(on_fake)
    assert plain.generate([4, 5, 6, 7, 8], 10) == toy.greedy([4, 5, 6, 7, 8], 10)
    assert stats(on_fake)["graphs_made"] == middle["graphs_made"]


def test_bad_use_raises_value_error_and_changes_nothing(artifact, driver):
    model, other = gpt_runtime.load(artifact), gpt_runtime.load(artifact)
    cache = model.new_cache(max_len=5)
    model.prefill([1, 2, 3, 4], cache)
    with pytest.raises(ValueError, match="KV cache is full: 4 \\+ 2 tokens exceed max_len=5"):
        model.prefill([1, 2], cache)
    with pytest.raises(ValueError, match="belongs to another model"):
        other.decode(1, cache)
    with pytest.raises(ValueError, match=r"token id 13 is out of range \[0, vocab_size=13\)"):
        model.decode(13, cache)
    with pytest.raises(ValueError, match="token id -1 is out of range"):
        model.prefill([1, -1], cache)
    with pytest.raises(TypeError, match="token must be an int"):
        model.decode(1.0, cache)
    with pytest.raises(TypeError, match="cache must be a gpt_runtime.Cache"):
        model.decode(1, object())
    with pytest.raises(ValueError, match="33 tokens is longer than block_size=32"):
        model.forward([1] * 33)
    with pytest.raises(ValueError, match=r"max_len must be an int in \[1, 32\]"):
        model.new_cache(max_len=33)
    with pytest.raises(ValueError, match="exceed the 32 positions"):
        model.generate([1] * 30, 3)
    with pytest.raises(ValueError, match="temperature"):
        model.generate([1], 3, temperature=-1.0)
    assert len(cache) == 4 and int(model.decode(5, cache).argmax()) == toy.next_token([1, 2, 3, 4, 5])
    with pytest.raises(ValueError, match="KV cache is full"):
        model.decode(5, cache)
    cache.close()
    with pytest.raises(ValueError, match="this Cache is closed"):
        model.decode(1, cache)
    model.close()
    with pytest.raises(ValueError, match="this model is closed"):
        model.forward([1])


def test_memory_comes_back_when_caches_and_models_go(artifact, on_fake):
    before = stats(on_fake)
    model = gpt_runtime.load(artifact)
    loaded = stats(on_fake)
    assert loaded["allocations"] - before["allocations"] == 5  # 2 weights, inputs, scratch, logits
    cache = model.new_cache()
    model.prefill([1, 2, 3], cache)
    assert stats(on_fake)["allocations"] - loaded["allocations"] == 4  # 2 layers x key, value
    del cache
    assert stats(on_fake)["allocations"] == loaded["allocations"]
    assert stats(on_fake)["graphs"] == loaded["graphs"]
    model.generate([1], 3)
    del model
    after = stats(on_fake)
    assert {k: after[k] for k in ("allocations", "bytes", "graphs", "modules", "contexts")} == {
        k: before[k] for k in ("allocations", "bytes", "graphs", "modules", "contexts")
    }


def test_out_of_memory_at_load_names_the_buffer_and_frees_the_rest(artifact, on_fake, monkeypatch):
    before = stats(on_fake)
    monkeypatch.setenv("FAKE_CUDA_MEMORY", str(before["bytes"] + 100))  # room for the weights, not the inputs
    with pytest.raises(CudaError, match="CUDA_ERROR_OUT_OF_MEMORY.*\n.*1024 bytes for input buffer 'inputs'") as error:
        gpt_runtime.load(artifact)
    assert error.value.call == "cuMemAlloc" and error.value.name == "CUDA_ERROR_OUT_OF_MEMORY"
    after = stats(on_fake)
    assert (after["allocations"], after["modules"], after["contexts"]) == (
        before["allocations"],
        before["modules"],
        before["contexts"],
    )


def test_a_ptx_the_driver_refuses_reports_ptxas_log(tmp_path, on_fake):
    with open(toy.PTX) as f:
        ptx = f.read() + "\n// FAKE_PTXAS_ERROR\n"
    with pytest.raises(CudaError, match="cuModuleLoadDataEx failed: CUDA_ERROR_INVALID_PTX.*\nptxas: ptxas fatal"):
        gpt_runtime.load(toy.write_artifact(str(tmp_path / "a"), ptx=ptx))


def test_calls_from_another_thread_make_the_context_current(artifact, driver):
    model = gpt_runtime.load(artifact)
    cache = model.new_cache()
    results = []
    thread = threading.Thread(target=lambda: results.append(model.generate([3, 1], 5)))
    thread.start()
    thread.join()
    model.prefill([2], cache)  # and back on this thread
    assert results == [toy.greedy([3, 1], 5)]


def _ptxas() -> str | None:
    """ptxas of the pinned nvidia-cuda-nvcc-cu12 wheel, found as gpt.cuda_tools finds it but without
    importing gpt (whose extension a GPU machine may not load), else one on PATH."""
    try:
        spec = importlib.util.find_spec("nvidia.cuda_nvcc")
    except ModuleNotFoundError:
        spec = None
    for directory in spec.submodule_search_locations if spec and spec.submodule_search_locations else []:
        if os.access(os.path.join(directory, "bin", "ptxas"), os.X_OK):
            return os.path.join(directory, "bin", "ptxas")
    return shutil.which("ptxas")


def test_the_toy_ptx_assembles_for_the_gpus_it_names():
    ptxas = _ptxas()
    if ptxas is None:
        pytest.skip("ptxas (nvidia-cuda-nvcc-cu12) is not installed")
    for arch in ("sm_80", "sm_90"):
        result = subprocess.run([ptxas, f"-arch={arch}", toy.PTX, "-o", os.devnull], capture_output=True, text=True)
        assert result.returncode == 0, result.stderr


def test_an_exported_model_binds_and_launches_its_programs_on_the_fake_driver(tmp_path, on_fake, monkeypatch):
    """The compiler's real artifact (gpt's GPT.export, when this gpt has it) through the whole runtime
    on the fake driver, whose no-op kernels check only that every pointer argument is live: the
    manifest, weights, buffers, caches, chunks and graphs, not the numerics (those need a GPU)."""
    gpt = pytest.importorskip("gpt")
    from gpt.weights import random_weights

    if not hasattr(gpt.GPT, "export"):
        pytest.skip("this gpt has no GPT.export")
    config = gpt.GPTConfig(n_layer=2, n_head=2, n_embd=64, vocab_size=100, block_size=64)
    directory = str(tmp_path / "exported")
    gpt.GPT.from_weights(config, random_weights(config, seed=1)).export(directory, target="cuda:sm_90", tokens=(1, 16))
    monkeypatch.setenv("FAKE_CUDA_NOOP_KERNELS", "1")
    before = stats(on_fake)
    model = gpt_runtime.load(directory)
    assert model.forward(list(range(16))).shape == (16, 100)
    cache = model.new_cache()
    assert model.prefill(list(range(40)), cache).shape == (100,)  # chunks of 16, 16 and 8
    assert model.decode(7, cache).shape == (100,) and len(cache) == 41
    assert len(model.generate([1, 2, 3], 5, eos=False)) == 5
    del cache, model
    after = stats(on_fake)
    assert after["allocations"] == before["allocations"] and after["graphs"] == before["graphs"]
    assert after["launches"] > before["launches"]


# -- the command line ------------------------------------------------------------------------------


def run_cli(*args, library: str):
    env = dict(os.environ, PYTHONPATH=PACKAGE_ROOT, **{LIBRARY_ENV: library})
    return subprocess.run(
        [sys.executable, "-m", "gpt_runtime", *args], capture_output=True, text=True, env=env, timeout=120
    )


def test_cli_generates_from_ids_and_from_a_prompt(artifact, fake):
    result = run_cli(
        "generate", artifact, "--ids", "1,2,3", "--max-new-tokens", "6", "--temperature", "0", library=fake
    )
    assert result.returncode == 0, result.stderr
    expected = toy.greedy([1, 2, 3], 6)
    assert f"new token ids: {','.join(map(str, expected))}" in result.stdout
    timing = result.stdout.strip().splitlines()[-1]
    assert timing.startswith("[gpt_runtime] prompt: 3 tokens,") and "generated: 6 tokens" in timing
    assert "ms/token" in timing and "Fake GPU 0" in timing and "sm_90" in timing
    if not HAVE_TOKENIZERS:
        return
    result = run_cli(
        "generate", artifact, "--prompt", "b c d", "--max-new-tokens", "4", "--temperature", "0", library=fake
    )
    assert result.returncode == 0, result.stderr
    words = [toy.WORDS[t] for t in [1, 2, 3] + toy.greedy([1, 2, 3], 4)]
    assert result.stdout.splitlines()[0] == " ".join(words)


def test_cli_reports_errors_in_one_line(artifact, tmp_path):
    result = run_cli("generate", artifact, "--ids", "1", library=NO_LIBRARY)
    assert result.returncode == 2 and result.stderr.startswith("gpt_runtime: error: no NVIDIA driver")
    assert "Traceback" not in result.stderr
    result = run_cli("info", str(tmp_path), library=NO_LIBRARY)
    assert result.returncode == 2 and "manifest.json: missing" in result.stderr
