"""The on-disk object cache: a second model (as a second process would) loads compiled code
instead of compiling it, gets identical results, and survives a damaged cache."""

import dataclasses
import gc
import os
import struct
import subprocess
import sys
import time

import numpy as np
import pytest

import gpt
from machine_code import host_is_a_named_cpu
from shapes import NANO, config, exercising_weights, token_ids

MAGIC = b"GPTJIT2\n"
TRAILER = 32 + 32 + 8 + len(MAGIC)  # after the shared object: key digest, its digest, its size, magic
# tests/python, the helper modules' directory, for the child processes' imports.
TESTS = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
CFG = config(NANO)
WEIGHTS = exercising_weights(CFG)


def is_entry(data):
    """An entry as the cache writes it: a shared object the dynamic loader maps, then the trailer."""
    return data[:4] == b"\x7fELF" and data[16] == 3 and data[-len(MAGIC) :] == MAGIC  # e_type ET_DYN


def model(cache_dir, **options):
    return gpt.GPT.from_weights(CFG, WEIGHTS, gpt.CompileOptions(cache_dir=str(cache_dir), **options))


def test_second_model_loads_instead_of_compiling(tmp_path):
    ids = token_ids(CFG, 20)
    first = model(tmp_path)
    expected = first.forward(ids)
    cache = first.new_cache(64)
    first.prefill(ids, cache)
    expected_decode = first.decode(7, cache)
    assert first.disk_cache_hits() == 0
    files = sorted(os.listdir(tmp_path))
    assert len(files) == 3 and all(f.endswith(".gptjit") for f in files)  # forward, prefill step, decode step

    second = model(tmp_path)
    np.testing.assert_array_equal(second.forward(ids), expected)
    cache = second.new_cache(64)
    second.prefill(ids, cache)
    np.testing.assert_array_equal(second.decode(7, cache), expected_decode)
    assert second.disk_cache_hits() == 3
    assert sorted(os.listdir(tmp_path)) == files


def test_programs_loaded_after_a_shared_entry_is_dropped_are_their_own(tmp_path):
    """Two models load one entry, which the dynamic loader maps once. After the first model dies the
    second still runs it, and a program loaded later (here from memory, with another epsilon) is
    never mistaken for it: the name the loader knows a program by stays taken while it is loaded."""
    ids = token_ids(CFG, 5)
    other_config = dataclasses.replace(CFG, layer_norm_eps=0.5)
    reference = gpt.GPT.from_weights(other_config, WEIGHTS, gpt.CompileOptions(disk_cache=False)).forward(ids)
    first, second = model(tmp_path), model(tmp_path)
    expected = first.forward(ids)
    np.testing.assert_array_equal(second.forward(ids), expected)
    assert second.disk_cache_hits() == 1
    del first
    gc.collect()
    later = gpt.GPT.from_weights(other_config, WEIGHTS, gpt.CompileOptions(disk_cache=False))
    np.testing.assert_array_equal(later.forward(ids), reference)
    np.testing.assert_array_equal(second.forward(ids), expected)


def test_another_process_loads_it_without_the_compiler(tmp_path):
    """A process whose programs all come from the cache never loads the compiler library, nor
    MLIR and LLVM's shared libraries (cc/runtime/ProgramCompiler.h)."""
    ids = token_ids(CFG, 12)
    expected = model(tmp_path).forward(ids)
    np.save(tmp_path / "ids.npy", ids)
    script = f"""
import numpy as np, gpt, sys
sys.path.insert(0, {TESTS!r})
from shapes import NANO, config, exercising_weights
cfg = config(NANO)
m = gpt.GPT.from_weights(cfg, exercising_weights(cfg), gpt.CompileOptions(cache_dir={str(tmp_path)!r}))
np.save({str(tmp_path / "out.npy")!r}, m.forward(np.load({str(tmp_path / "ids.npy")!r})))
mapped = open("/proc/self/maps").read()
print(m.disk_cache_hits(), gpt._gpt.compiler_loaded(), "libMLIR" in mapped, "libLLVM" in mapped)
"""
    package = os.path.dirname(os.path.dirname(os.path.abspath(gpt.__file__)))
    result = subprocess.run(
        [sys.executable, "-c", script],
        capture_output=True,
        text=True,
        timeout=300,
        env=dict(os.environ, PYTHONPATH=package),
    )
    assert result.returncode == 0, result.stderr
    # Under GPT_TARGET_CPU=<cpu> "host" is a named CPU, whose features only the compiler library
    # knows: the programs still come from the cache.
    compiler = str(host_is_a_named_cpu())
    assert result.stdout.split() == ["1", compiler, compiler, compiler]
    np.testing.assert_array_equal(np.load(tmp_path / "out.npy"), expected)


def test_damaged_entry_is_recompiled(tmp_path):
    ids = token_ids(CFG, 5)
    expected = model(tmp_path).forward(ids)
    (entry,) = os.listdir(tmp_path)
    (tmp_path / entry).write_bytes(b"not an object file")
    again = model(tmp_path)
    np.testing.assert_array_equal(again.forward(ids), expected)
    assert again.disk_cache_hits() == 0
    assert is_entry((tmp_path / entry).read_bytes())  # rewritten


def test_keys_separate_options_and_disk_cache_can_be_off(tmp_path):
    # 100 tokens (bucket 128): enough work that 2 threads split the matmuls, so the programs differ.
    ids = token_ids(CFG, 100)
    model(tmp_path, threads=1).forward(ids)
    model(tmp_path, threads=2).forward(ids)
    model(tmp_path, pipeline="fused").forward(ids)
    assert len(os.listdir(tmp_path)) == 3
    off = tmp_path / "off"
    gpt.GPT.from_weights(CFG, WEIGHTS, gpt.CompileOptions(cache_dir=str(off), disk_cache=False)).forward(ids)
    assert not off.exists()


def test_keys_separate_configurations_of_the_same_shapes(tmp_path):
    """The key is every input of the builder, not only the shapes: a model whose configuration differs
    in one constant (the LayerNorm epsilon) must not load the other's program."""
    ids = token_ids(CFG, 5)
    wide_eps = dataclasses.replace(CFG, layer_norm_eps=0.5)
    expected = gpt.GPT.from_weights(wide_eps, WEIGHTS, gpt.CompileOptions(disk_cache=False)).forward(ids)
    model(tmp_path).forward(ids)
    other = gpt.GPT.from_weights(wide_eps, WEIGHTS, gpt.CompileOptions(cache_dir=str(tmp_path)))
    np.testing.assert_array_equal(other.forward(ids), expected)
    assert other.disk_cache_hits() == 0 and len(os.listdir(tmp_path)) == 2
    assert not np.allclose(expected, model(tmp_path).forward(ids), atol=1e-3)  # the constant matters


def test_keys_separate_masks_given_as_data(tmp_path):
    """A mask given as data is a constant of the forward program: two layouts of packed documents
    with the same shapes must not share an entry (the key writes the mask's bytes whole)."""
    ids = token_ids(CFG, 20)
    half = CFG.block_size // 2
    configs = [
        dataclasses.replace(CFG, attention_mask=gpt.masks.Document([0] * split + [1] * (CFG.block_size - split)))
        for split in (half, 5)
    ]
    expected = gpt.GPT.from_weights(configs[1], WEIGHTS, gpt.CompileOptions(disk_cache=False)).forward(ids)
    gpt.GPT.from_weights(configs[0], WEIGHTS, gpt.CompileOptions(cache_dir=str(tmp_path))).forward(ids)
    other = gpt.GPT.from_weights(configs[1], WEIGHTS, gpt.CompileOptions(cache_dir=str(tmp_path)))
    np.testing.assert_array_equal(other.forward(ids), expected)
    assert other.disk_cache_hits() == 0 and len(os.listdir(tmp_path)) == 2


def gnu_build_id(path):
    """The GNU build id of an ELF64 little-endian file, read from its section headers' notes
    (independently of the compiler's own reader, which walks the loaded program headers)."""
    data = open(path, "rb").read()
    assert data[:4] == b"\x7fELF" and data[4] == 2 and data[5] == 1
    (shoff,) = struct.unpack_from("<Q", data, 0x28)
    shentsize, shnum = struct.unpack_from("<HH", data, 0x3A)
    for index in range(shnum):
        kind, _, _, offset, size = struct.unpack_from("<IQQQQ", data, shoff + index * shentsize + 4)
        if kind != 7:  # SHT_NOTE
            continue
        position = offset
        while position + 12 <= offset + size:
            namesz, descsz, note_type = struct.unpack_from("<III", data, position)
            name_at = position + 12
            desc_at = name_at + (namesz + 3) // 4 * 4
            if note_type == 3 and data[name_at : name_at + namesz] == b"GNU\0":
                return data[desc_at : desc_at + descsz].hex()
            position = desc_at + (descsz + 3) // 4 * 4
    return None


def test_keys_name_the_compilers_build():
    """A program is loaded only by the build that compiled it: the key carries the GNU build ids of
    the runtime extension (which calls programs) and of the compiler library (which makes them),
    each changing with any change of its code."""
    runtime = gnu_build_id(gpt._gpt.__file__)
    compiler = gnu_build_id(os.path.join(os.path.dirname(gpt._gpt.__file__), "_gpt_compiler.so"))
    assert runtime and len(runtime) >= 32 and compiler and len(compiler) >= 32 and runtime != compiler
    assert gpt.disk_cache.compiler_identity() == f"build-id:{runtime} compiler-build-id:{compiler}"


def entry_after_one_forward(cache_dir, ids):
    expected = model(cache_dir).forward(ids)
    (entry,) = os.listdir(cache_dir)
    return cache_dir / entry, expected


def assert_recompiled(cache_dir, ids, expected):
    again = model(cache_dir)
    np.testing.assert_array_equal(again.forward(ids), expected)
    assert again.disk_cache_hits() == 0


def test_flipped_bits_in_the_object_are_detected(tmp_path):
    ids = token_ids(CFG, 5)
    entry, expected = entry_after_one_forward(tmp_path, ids)
    data = bytearray(entry.read_bytes())
    rng = np.random.default_rng(0)
    for position in rng.integers(64, len(data) - TRAILER, size=8):  # past the ELF header: other code
        data[position] ^= 1 << int(rng.integers(0, 8))
    entry.write_bytes(bytes(data))
    assert_recompiled(tmp_path, ids, expected)


def test_another_programs_entry_at_the_path_is_detected(tmp_path):
    # A valid entry of bucket 16 in bucket 8's place: loading it would overflow the buffers.
    ids = token_ids(CFG, 5)
    entry, expected = entry_after_one_forward(tmp_path / "eight", ids)
    other, _ = entry_after_one_forward(tmp_path / "sixteen", token_ids(CFG, 12))
    entry.write_bytes(other.read_bytes())
    assert_recompiled(tmp_path / "eight", ids, expected)


def test_truncated_and_empty_entries_are_recompiled(tmp_path):
    ids = token_ids(CFG, 5)
    entry, expected = entry_after_one_forward(tmp_path, ids)
    whole = entry.read_bytes()
    for damaged in (whole[: len(whole) // 2], whole[-TRAILER:], whole[:-TRAILER], b""):
        entry.write_bytes(damaged)
        assert_recompiled(tmp_path, ids, expected)


def test_fifo_and_symlink_at_the_path_are_not_opened(tmp_path):
    ids = token_ids(CFG, 5)
    entry, expected = entry_after_one_forward(tmp_path, ids)
    entry.unlink()
    os.mkfifo(entry)  # opening it for reading would block forever
    assert_recompiled(tmp_path, ids, expected)
    assert entry.is_file() and is_entry(entry.read_bytes())  # replaced by a real entry
    entry.unlink()
    entry.symlink_to("/dev/zero")  # reading it would never end
    assert_recompiled(tmp_path, ids, expected)


def test_entries_and_directory_are_private(tmp_path):
    cache_dir = tmp_path / "created" / "here"
    entry, _ = entry_after_one_forward(cache_dir, token_ids(CFG, 5))
    assert entry.stat().st_mode & 0o777 == 0o600
    assert cache_dir.stat().st_mode & 0o077 == 0
    assert not [f for f in os.listdir(cache_dir) if ".tmp." in f]  # no temporary left behind


def test_a_directory_others_can_write_is_refused(tmp_path):
    shared = tmp_path / "shared"
    shared.mkdir()
    shared.chmod(0o777)
    with pytest.raises(gpt.CompilerError, match=f"{shared} is writable by other users"):
        model(shared).forward([1, 2, 3])
    assert os.listdir(shared) == []  # nothing loaded, nothing written


def test_an_unwritable_cache_costs_only_speed(tmp_path):
    blocker = tmp_path / "file"
    blocker.write_text("a file where the cache directory would be")
    ids = token_ids(CFG, 5)
    expected = model(tmp_path / "ok").forward(ids)
    np.testing.assert_array_equal(model(blocker / "cache").forward(ids), expected)


def test_save_object_reports_write_errors(tmp_path):
    m = model(tmp_path)
    with pytest.raises(RuntimeError, match="cannot write /dev/full: No space left on device"):
        m.save_object("/dev/full")
    with pytest.raises(RuntimeError, match="cannot create .*/missing/forward.o: No such file or directory"):
        m.save_object(str(tmp_path / "missing" / "forward.o"))
    m.save_object(str(tmp_path / "forward.o"))
    assert (tmp_path / "forward.o").read_bytes()[:4] == b"\x7fELF"


def test_save_object_of_a_loaded_program_writes_what_was_loaded(tmp_path):
    model(tmp_path).forward([1, 2, 3])
    loaded = model(tmp_path)
    loaded.forward([1, 2, 3])
    assert loaded.disk_cache_hits() == 1
    (entry,) = [f for f in os.listdir(tmp_path) if f.endswith(".gptjit")]
    (tmp_path / entry).write_bytes(b"changed since")
    loaded.save_object(str(tmp_path / "forward.o"))
    assert (tmp_path / "forward.o").read_bytes()[:4] == b"\x7fELF"


# -- bounded size, least recently used first --------------------------------------------------


def entry_names(cache_dir):
    return {os.path.basename(e.path) for e in gpt.disk_cache.entries(cache_dir)}


def test_the_cache_evicts_the_least_recently_used_entry_beyond_its_cap(tmp_path):
    lengths = {"a": 5, "b": 12, "c": 20}  # buckets 8, 16, 32: three programs
    sizes, names = {}, {}
    for label, length in lengths.items():  # the entries' sizes, learned in a cache of their own
        before = entry_names(tmp_path / "sizes")
        model(tmp_path / "sizes").forward(token_ids(CFG, length))
        (names[label],) = entry_names(tmp_path / "sizes") - before
        sizes[label] = os.path.getsize(tmp_path / "sizes" / names[label])
    # Room for a and c, not for b as well.
    cap = sizes["a"] + sizes["c"] + sizes["b"] // 2
    bounded = tmp_path / "bounded"
    model(bounded, cache_max_bytes=cap).forward(token_ids(CFG, lengths["a"]))
    time.sleep(0.05)
    model(bounded, cache_max_bytes=cap).forward(token_ids(CFG, lengths["b"]))
    time.sleep(0.05)
    reader = model(bounded, cache_max_bytes=cap)
    reader.forward(token_ids(CFG, lengths["a"]))  # a load is a use: a is now more recent than b
    assert reader.disk_cache_hits() == 1
    time.sleep(0.05)
    model(bounded, cache_max_bytes=cap).forward(token_ids(CFG, lengths["c"]))
    assert entry_names(bounded) == {names["a"], names["c"]}
    assert sum(e.bytes for e in gpt.disk_cache.entries(bounded)) <= cap
    listed = gpt.disk_cache.entries(bounded)
    assert [os.path.basename(e.path) for e in listed] == [names["c"], names["a"]]  # most recent first


def test_an_entry_larger_than_the_cap_is_kept_until_the_next_write(tmp_path):
    ids = token_ids(CFG, 5)
    expected = model(tmp_path, cache_max_bytes=1).forward(ids)
    assert len(gpt.disk_cache.entries(tmp_path)) == 1  # the newest entry survives its own write
    model(tmp_path, cache_max_bytes=1).forward(token_ids(CFG, 12))
    assert len(gpt.disk_cache.entries(tmp_path)) == 1  # ... and goes with the next
    np.testing.assert_array_equal(model(tmp_path, cache_max_bytes=1).forward(ids), expected)


def test_abandoned_temporaries_are_removed_and_fresh_ones_kept(tmp_path):
    model(tmp_path).forward(token_ids(CFG, 5))
    (entry,) = os.listdir(tmp_path)
    stale = tmp_path / (entry + ".tmp.99999.0")  # a writer that died two hours ago
    stale.write_bytes(b"partial")
    os.utime(stale, (time.time() - 7200, time.time() - 7200))
    fresh = tmp_path / (entry + ".tmp.99999.1")  # a write in progress in another process
    fresh.write_bytes(b"partial")
    model(tmp_path).forward(token_ids(CFG, 12))
    assert not stale.exists() and fresh.exists()
    assert gpt.disk_cache.clear(tmp_path) == 3  # two entries and the fresh temporary
    assert os.listdir(tmp_path) == []


def test_cache_max_bytes_is_checked():
    for bad in (0, -1, True, 1.5, 2**64):
        with pytest.raises(ValueError, match="cache_max_bytes must be None or a positive int"):
            gpt.CompileOptions(cache_max_bytes=bad)


def run_cli(*arguments):
    package = os.path.dirname(os.path.dirname(os.path.abspath(gpt.__file__)))
    return subprocess.run(
        [sys.executable, "-m", "gpt", *arguments],
        capture_output=True,
        text=True,
        timeout=120,
        env=dict(os.environ, PYTHONPATH=package),
    )


def test_the_command_line_lists_and_clears_the_cache(tmp_path):
    model(tmp_path).forward(token_ids(CFG, 5))
    model(tmp_path).forward(token_ids(CFG, 12))
    listed = run_cli("cache", "--list", f"--cache_dir={tmp_path}")
    assert listed.returncode == 0, listed.stderr
    for name in entry_names(tmp_path):
        assert name in listed.stdout
    assert "2 programs" in listed.stdout
    cleared = run_cli("cache", "--clear", f"--cache_dir={tmp_path}")
    assert cleared.returncode == 0, cleared.stderr
    assert f"removed 2 files from {tmp_path}" in cleared.stdout
    assert os.listdir(tmp_path) == []
    neither = run_cli("cache", f"--cache_dir={tmp_path}")
    assert neither.returncode != 0 and "cache takes one of --list or --clear" in neither.stderr


# -- several processes, one cache ---------------------------------------------------------------

RACER = """
import sys, numpy as np, gpt
sys.path.insert(0, {tests!r})
from machine_code import host_is_a_named_cpu
from shapes import NANO, config, exercising_weights, token_ids
cfg = config(NANO)
options = gpt.CompileOptions(cache_dir=sys.argv[1], cache_max_bytes=int(sys.argv[2]))
m = gpt.GPT.from_weights(cfg, exercising_weights(cfg), options)
for length in (5, 12, 20):
    np.save(f"{{sys.argv[3]}}.{{length}}.npy", m.forward(token_ids(cfg, length)))
"""


@pytest.mark.parametrize("cap", [gpt.CompileOptions().resolved_cache_max_bytes(), 1], ids=["roomy", "evicting"])
def test_processes_compiling_into_one_empty_cache_all_get_correct_logits(tmp_path, cap):
    # Three processes at once fill (or, with a 1-byte cap, keep evicting each other's entries
    # from) a cache that starts empty, five times over; every one computes the right logits.
    reference = gpt.GPT.from_weights(CFG, WEIGHTS, gpt.CompileOptions(disk_cache=False))
    expected = {length: reference.forward(token_ids(CFG, length)) for length in (5, 12, 20)}
    script = RACER.format(tests=TESTS)
    package = os.path.dirname(os.path.dirname(os.path.abspath(gpt.__file__)))
    for round_ in range(5):
        cache_dir = tmp_path / f"round{round_}"
        racers = [
            subprocess.Popen(
                [sys.executable, "-c", script, str(cache_dir), str(cap), str(tmp_path / f"out{round_}.{i}")],
                stderr=subprocess.PIPE,
                text=True,
                env=dict(os.environ, PYTHONPATH=package),
            )
            for i in range(3)
        ]
        for racer in racers:
            _, stderr = racer.communicate(timeout=300)
            assert racer.returncode == 0, stderr
        for i in range(3):
            for length, logits in expected.items():
                np.testing.assert_array_equal(np.load(tmp_path / f"out{round_}.{i}.{length}.npy"), logits)
        assert not [f for f in os.listdir(cache_dir) if ".tmp." in f]


def cached_programs(cache_dir) -> dict[str, bytes]:
    return {name: (cache_dir / name).read_bytes() for name in os.listdir(cache_dir) if name.endswith(".gptjit")}


def test_programs_compiled_at_the_same_time_are_those_compiled_one_after_the_other(tmp_path):
    """Programs of different shapes compile at the same time, each with a compiler (an MLIRContext)
    of its own, and the programs so compiled are, byte for byte, those compiled one after the
    other. Callers of one shape wait for its compile in flight instead of compiling it again (each
    compile has a compiler of its own, so nothing else would stop them)."""
    import threading

    ids = token_ids(CFG, 20)
    at_once = model(tmp_path / "at_once")
    together = threading.Barrier(4)

    def compile_step(tokens, offset):
        together.wait()
        at_once._compiled.compile_for(tokens, offset, CFG.block_size)

    shapes = [(len(ids), 0)] * 3 + [(1, len(ids))]  # three callers of the prefill, one of decode
    threads = [threading.Thread(target=compile_step, args=shape) for shape in shapes]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert set(at_once.compiled_steps()) == {(32, CFG.block_size), (1, CFG.block_size)}
    cache = at_once.new_cache(64)
    prefill_logits = at_once.prefill(ids, cache)
    decode_logits = at_once.decode(7, cache)
    compiled = {(32, CFG.block_size), (1, CFG.block_size)}
    assert set(at_once.compiled_steps()) == compiled  # the calls compiled nothing more

    one_by_one = model(tmp_path / "one_by_one")
    one_by_one._compiled.compile_for(len(ids), 0, CFG.block_size)
    one_by_one._compiled.compile_for(1, len(ids), CFG.block_size)
    cache = one_by_one.new_cache(64)
    np.testing.assert_array_equal(one_by_one.prefill(ids, cache), prefill_logits)
    np.testing.assert_array_equal(one_by_one.decode(7, cache), decode_logits)
    assert cached_programs(tmp_path / "at_once") == cached_programs(tmp_path / "one_by_one")
    assert len(cached_programs(tmp_path / "at_once")) == 2


@pytest.mark.skipif((os.cpu_count() or 1) < 2, reason="the decode step compiles ahead only on a second core")
def test_a_prefill_compiles_its_decode_step_meanwhile_and_the_decode_call_waits_for_it(tmp_path):
    """A first token needs the prefill's program and the decode step's: the prefill starts the
    decode step's compile on a second thread while it compiles its own, and the decode call waits
    for that compile instead of starting another. generate() counts only the time it waited for
    compiles, so its prompt and decode times stay the calls' own."""
    ids = token_ids(CFG, 20)
    ahead = model(tmp_path / "ahead")
    cache = ahead.new_cache(64)
    prefill_logits = ahead.prefill(ids, cache)
    deadline = time.monotonic() + 300  # generous: the decode step compiles in the background
    while not ahead._compiled.is_compiled_for(1, len(ids), CFG.block_size) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert ahead._compiled.is_compiled_for(1, len(ids), CFG.block_size), "the prefill did not compile the decode step"
    decode_logits = ahead.decode(7, cache)
    assert set(ahead.compiled_steps()) == {(32, CFG.block_size), (1, CFG.block_size)}

    # One thread: nothing compiles ahead, and the programs compute the same.
    alone = model(tmp_path / "alone", threads=1)
    cache = alone.new_cache(64)
    np.testing.assert_array_equal(alone.prefill(ids, cache), prefill_logits)
    assert set(alone.compiled_steps()) == {(32, CFG.block_size)}
    np.testing.assert_array_equal(alone.decode(7, cache), decode_logits)

    fresh = model(tmp_path / "generate")
    fresh.generate(ids, 4)
    stats = fresh.last_generation
    assert min(stats.prompt_seconds, stats.generate_seconds) > 0
    assert 0 < stats.compile_seconds <= fresh.compile_seconds()
