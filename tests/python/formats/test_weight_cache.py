"""The packed-weight cache (gpt/weight_cache.py, cc/runtime/PackedWeights.cpp): the second load of
a model file reads the weights the first laid out, computes exactly what a fresh load computes, and
passes over an entry that is corrupt, truncated, another file's or another build's."""

import dataclasses
import importlib.util
import os
import subprocess
import sys

import numpy as np
import pytest

import gpt
from machine_code import host_is_a_named_cpu

spec = importlib.util.spec_from_file_location("make_gguf", os.path.join("tools", "dev", "make_gguf.py"))
make_gguf = importlib.util.module_from_spec(spec)
spec.loader.exec_module(make_gguf)

# Rows that tile Q4_K's super-blocks; 4 layers, so that a Q4_K_M file has Q6_K and Q4_K layers.
SHAPE = make_gguf.Shape(4, 256, 4, 2, 512, 320, 256, 10000.0, True, None)
IDS = [3, 14, 15, 92, 65, 35, 89, 79]


def write_file(directory, fmt: str, seed: int = 0, **shape) -> str:
    path = str(directory / f"tiny-{seed}.{fmt}.gguf")
    make_gguf.write(path, dataclasses.replace(SHAPE, **shape), fmt, seed=seed)
    return path


def load(path: str, cache_dir, **options) -> gpt.GPT:
    return gpt.GPT.from_gguf(path, gpt.CompileOptions(weights="auto", cache_dir=str(cache_dir), **options))


def packed_entries(cache_dir) -> list[str]:
    gpt.weight_cache.wait()  # a load writes its entry in the background
    where = os.path.join(cache_dir, "weights")
    return sorted(os.path.join(where, n) for n in os.listdir(where) if n.endswith(".packed"))


def logits(model: gpt.GPT) -> np.ndarray:
    return np.asarray(model.forward(IDS))


@pytest.mark.parametrize("fmt", ["q4_k_m", "q8_0", "f16"])
def test_the_second_load_reads_the_first_ones_packed_weights_and_computes_the_same(tmp_path, fmt):
    path = write_file(tmp_path, fmt)
    first = load(path, tmp_path / "cache")
    assert not first._packed_weights_hit
    [entry] = packed_entries(tmp_path / "cache")
    expected = logits(first)
    second = load(path, tmp_path / "cache")
    assert second._packed_weights_hit
    # Bit for bit: the same bytes in the same layout, through the same programs.
    np.testing.assert_array_equal(logits(second), expected)
    for name, value in first.state_dict().items():
        np.testing.assert_array_equal(second.state_dict()[name], value, err_msg=name)
    assert packed_entries(tmp_path / "cache") == [entry]


def test_a_corrupt_or_truncated_entry_is_passed_over_and_replaced(tmp_path):
    path = write_file(tmp_path, "q8_0")
    expected = logits(load(path, tmp_path / "cache"))
    [entry] = packed_entries(tmp_path / "cache")
    with open(entry, "rb") as f:
        good = f.read()
    for damaged in (
        good[:-1000] + bytes([good[-1000] ^ 0x10]) + good[-999:],  # one bit of a weight flipped
        good[: len(good) // 2],  # truncated
        good[:100] + b"X" + good[101:],  # the header changed
    ):
        with open(entry, "wb") as f:
            f.write(damaged)
        model = load(path, tmp_path / "cache")
        assert not model._packed_weights_hit
        np.testing.assert_array_equal(logits(model), expected)
        gpt.weight_cache.wait()  # the rewrite runs in the background
        with open(entry, "rb") as f:
            assert f.read() == good  # rewritten whole by the load that passed it over


def test_another_file_or_format_is_another_entry(tmp_path):
    first_path = write_file(tmp_path, "q8_0", seed=0)
    first = logits(load(first_path, tmp_path / "cache"))
    # The same name, size and shapes with other weights: the modification time tells it apart.
    os.replace(write_file(tmp_path, "q8_0", seed=1), first_path)
    changed = load(first_path, tmp_path / "cache")
    assert not changed._packed_weights_hit
    assert not np.array_equal(logits(changed), first)
    assert len(packed_entries(tmp_path / "cache")) == 2
    as_f32 = gpt.GPT.from_gguf(first_path, gpt.CompileOptions(weights="f32", cache_dir=str(tmp_path / "cache")))
    assert not as_f32._packed_weights_hit
    assert len(packed_entries(tmp_path / "cache")) == 3


def test_entries_beyond_the_size_are_evicted_least_recently_used_first(tmp_path):
    a, b = write_file(tmp_path, "q8_0", seed=0), write_file(tmp_path, "q8_0", seed=1)
    load(a, tmp_path / "cache")
    [entry_a] = packed_entries(tmp_path / "cache")
    size = os.path.getsize(entry_a)
    model = load(b, tmp_path / "cache", weight_cache_max_bytes=size + size // 2)
    assert not model._packed_weights_hit
    [entry_b] = packed_entries(tmp_path / "cache")
    assert entry_b != entry_a
    # An entry larger than the whole cache is never written.
    load(a, tmp_path / "cache", weight_cache_max_bytes=size // 2)
    assert packed_entries(tmp_path / "cache") == [entry_b]


def test_the_cache_off_writes_nothing_and_an_unwritable_one_fails_no_load(tmp_path):
    path = write_file(tmp_path, "q8_0")
    expected = logits(load(path, tmp_path / "fresh", disk_cache=False))
    load(path, tmp_path / "off", weight_cache_max_bytes=0)
    assert not os.path.exists(tmp_path / "off" / "weights")
    # "weights" is a file where the directory would go: the load warns and computes as ever.
    (tmp_path / "blocked").mkdir()
    (tmp_path / "blocked" / "weights").write_text("")
    with pytest.warns(RuntimeWarning, match="the packed weights were not cached"):
        model = load(path, tmp_path / "blocked")
    np.testing.assert_array_equal(logits(model), expected)
    # A weights directory that others may write is neither read nor written: its entries could be
    # anyone's.
    load(path, tmp_path / "shared")
    os.chmod(tmp_path / "shared" / "weights", 0o777)
    with pytest.warns(RuntimeWarning, match="only it may write"):
        model = load(path, tmp_path / "shared")
    assert not model._packed_weights_hit


def test_too_little_disk_skips_the_write_with_a_warning_and_fails_no_load(tmp_path, monkeypatch):
    """An entry that would leave less than the margin free is not written, and the load says why
    (a later start would otherwise repack again without a word)."""
    import collections

    path = write_file(tmp_path, "q8_0")
    expected = logits(load(path, tmp_path / "fresh", disk_cache=False))
    usage = collections.namedtuple("usage", "total used free")
    monkeypatch.setattr(gpt.weight_cache.shutil, "disk_usage", lambda where: usage(2**40, 2**40, 2**20))
    with pytest.warns(RuntimeWarning, match=r"the packed weights were not cached: their [0-9.]+ GiB would leave less"):
        model = load(path, tmp_path / "full")
    np.testing.assert_array_equal(logits(model), expected)
    assert packed_entries(tmp_path / "full") == []


def test_weight_cache_max_bytes_is_checked():
    for bad in (-1, 1.5, True, "1"):
        with pytest.raises(ValueError, match="CompileOptions.weight_cache_max_bytes must be None or an int >= 0"):
            gpt.CompileOptions(weight_cache_max_bytes=bad)


def test_cache_list_and_clear_name_the_packed_weights(tmp_path):
    path = write_file(tmp_path, "q8_0")
    load(path, tmp_path / "cache")
    [entry] = packed_entries(tmp_path / "cache")
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(sys.path))

    def cli(*args):
        return subprocess.run([sys.executable, "-m", "gpt", "cache", *args], capture_output=True, text=True, env=env)

    listed = cli("--list", "--cache_dir", str(tmp_path / "cache"))
    assert listed.returncode == 0, listed.stderr
    assert os.path.basename(entry) in listed.stdout
    assert f"1 packed weights, {os.path.getsize(entry) / 2**20:.2f} MiB" in listed.stdout
    cleared = cli("--clear", "--cache_dir", str(tmp_path / "cache"))
    assert cleared.returncode == 0 and f"removed 1 files from {tmp_path / 'cache' / 'weights'}" in cleared.stdout
    assert packed_entries(tmp_path / "cache") == []


@pytest.mark.parametrize("fmt", ["q4_k_m", "q8_0"])
def test_no_load_copies_q_k_blocks_to_undo_their_permutation_and_a_miss_works_out_the_key_once(
    tmp_path, fmt, monkeypatch
):
    """A `llama` file's q/k blocks are never un-permuted in a copy: set_weights reads their rows in
    the model's order (a miss), a hit reads none; the entry's key is asked of the compiled model
    once per load, not in bind and again in store."""
    from gpt import gguf_llama

    path = write_file(tmp_path, fmt)
    unpermuted, keys = [], []
    unpermute_rows, packed_weights_key = gguf_llama.unpermute_rows, gpt._gpt.CompiledModel.packed_weights_key

    def counted_unpermute(weight, n_head):
        unpermuted.append(weight.shape)
        return unpermute_rows(weight, n_head)

    def counted_key(compiled, source):
        keys.append(source)
        return packed_weights_key(compiled, source)

    monkeypatch.setattr(gguf_llama, "unpermute_rows", counted_unpermute)
    monkeypatch.setattr(gpt._gpt.CompiledModel, "packed_weights_key", counted_key)
    first = load(path, tmp_path / "cache")
    assert not first._packed_weights_hit
    assert unpermuted == []
    assert len(keys) == 1
    unpermuted.clear()
    keys.clear()
    second = load(path, tmp_path / "cache")
    assert second._packed_weights_hit
    assert unpermuted == []
    assert len(keys) == 1
    np.testing.assert_array_equal(logits(second), logits(first))


def test_a_first_load_returns_and_runs_while_its_entry_is_written(tmp_path, monkeypatch):
    """The entry is written on a thread of its own: the load and the first token do not wait for a
    gigabyte to reach the disk, and a later load of the same process waits for the write."""
    import threading

    path = write_file(tmp_path, "q8_0")
    release, started = threading.Event(), threading.Event()
    write_packed_weights = gpt._gpt.CompiledModel.write_packed_weights

    def held_write(compiled, where, source):
        started.set()
        release.wait(10)  # a load that waits for the write would wait this long, then fail below
        write_packed_weights(compiled, where, source)

    monkeypatch.setattr(gpt._gpt.CompiledModel, "write_packed_weights", held_write)
    first = load(path, tmp_path / "cache")
    expected = logits(first)
    assert started.is_set() and not release.is_set()
    where = tmp_path / "cache" / "weights"
    assert not [name for name in os.listdir(where) if name.endswith(".packed")]
    release.set()
    second = load(path, tmp_path / "cache")  # waits for the write in flight, then reads it
    assert second._packed_weights_hit
    np.testing.assert_array_equal(logits(second), expected)


@pytest.mark.skipif(not hasattr(os, "SCHED_IDLE"), reason="SCHED_IDLE is Linux's")
def test_the_entry_is_written_at_idle_priority_and_the_model_keeps_its_own(tmp_path, monkeypatch):
    """The write runs only on cores the model leaves idle (SCHED_IDLE, its thread alone): the first
    token's compiles must not share their cores with a gigabyte's copy into the page cache."""
    path = write_file(tmp_path, "q8_0")
    policies = []
    write_packed_weights = gpt._gpt.CompiledModel.write_packed_weights

    def observed_write(compiled, where, source):
        policies.append(os.sched_getscheduler(0))  # 0: the calling thread (Linux)
        write_packed_weights(compiled, where, source)

    monkeypatch.setattr(gpt._gpt.CompiledModel, "write_packed_weights", observed_write)
    load(path, tmp_path / "cache")
    assert packed_entries(tmp_path / "cache")
    assert policies == [os.SCHED_IDLE]
    assert os.sched_getscheduler(0) == os.SCHED_OTHER


CHILD_KILLED_MID_WRITE = """
import resource, signal, sys, threading
import numpy as np
import gpt
signal.signal(signal.SIGXFSZ, signal.SIG_DFL)  # Python ignores it: the write would only fail
release = threading.Event()
write_packed_weights = gpt._gpt.CompiledModel.write_packed_weights
def held_write(compiled, where, source):
    release.wait(10)
    # A file-size limit kills the process (SIGXFSZ) in the middle of the entry's temporary.
    resource.setrlimit(resource.RLIMIT_FSIZE, (4096, resource.RLIM_INFINITY))
    write_packed_weights(compiled, where, source)
gpt._gpt.CompiledModel.write_packed_weights = held_write
model = gpt.GPT.from_gguf(sys.argv[1], gpt.CompileOptions(weights="auto", cache_dir=sys.argv[2]))
np.save(sys.argv[3], np.asarray(model.forward(%r)))
print("first token before the write", flush=True)
release.set()
"""


def test_a_process_killed_mid_write_leaves_no_entry_a_later_load_would_use(tmp_path):
    path = write_file(tmp_path, "q4_k_m")
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(sys.path))
    child = subprocess.run(
        [sys.executable, "-c", CHILD_KILLED_MID_WRITE % IDS, path, str(tmp_path / "cache"), str(tmp_path / "first")],
        capture_output=True,
        text=True,
        env=env,
        timeout=300,
    )
    assert child.returncode != 0, "the write was to be killed"
    assert "first token before the write" in child.stdout, child.stderr
    names = os.listdir(tmp_path / "cache" / "weights")
    assert [name for name in names if ".packed.tmp-" in name], names  # killed inside the temporary
    assert not [name for name in names if name.endswith(".packed")], names
    later = load(path, tmp_path / "cache")
    assert not later._packed_weights_hit
    np.testing.assert_array_equal(logits(later), np.load(tmp_path / "first.npy"))
    [entry] = packed_entries(tmp_path / "cache")
    assert load(path, tmp_path / "cache")._packed_weights_hit


CHILD_LOADS = """
import sys, threading
import gpt
model = gpt.GPT.from_gguf(sys.argv[1], gpt.CompileOptions(weights="auto", cache_dir=sys.argv[2]))
for thread in threading.enumerate():
    if thread.name == "gpt-prepare-compiler":
        thread.join()
gpt.weight_cache.wait()
print(model._packed_weights_hit, gpt._gpt.compiler_loaded(), model.compile_seconds() == 0)
"""


def test_a_first_load_loads_the_compiler_beside_itself_and_a_load_from_the_cache_does_not(tmp_path):
    """A first load of a file (its packed weights not in the cache) compiles its first token's
    programs next: it loads the compiler library meanwhile, before any compile. A load whose
    weights come from the cache leaves the compiler unloaded (its programs are likely cached too)."""
    path = write_file(tmp_path, "q8_0")
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(sys.path))
    runs = [
        subprocess.run(
            [sys.executable, "-c", CHILD_LOADS, path, str(tmp_path / "cache")],
            capture_output=True,
            text=True,
            env=env,
            timeout=300,
        )
        for _ in range(2)
    ]
    for run in runs:
        assert run.returncode == 0, run.stderr
    # Under GPT_TARGET_CPU=<cpu> every load loads the compiler (machine_code.host_is_a_named_cpu).
    named = str(host_is_a_named_cpu())
    assert runs[0].stdout.split() == ["False", "True", "True"]
    assert runs[1].stdout.split() == ["True", named, "True"]
