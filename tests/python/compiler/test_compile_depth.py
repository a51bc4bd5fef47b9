"""Depth costs one call per layer: the machine code of forward and of the cached step is one entry
function calling the shared block function once per layer, with no wrapper that takes every
layer's weights (and caches) in a single call.

Such a call (the C interface wrapper calling the entry point with 5+ scalars per weight) made
compile time grow with the square of n_layer: SelectionDAG's store combining is quadratic in the
stack arguments of one call (tools/bench/bench_compile.py measures the compile times). This checks the
structure, not a time: the same function symbols at every depth, one external, one call per layer.
"""

import re
import subprocess

import pytest

import gpt
from machine_code import objdump


def objects_by_entry(cache_dir):
    """{entry point name: ELF object bytes} of the programs in a disk cache directory."""
    objects = {}
    for path in cache_dir.rglob("*"):
        if path.is_file() and b"\x7fELF" in (data := path.read_bytes()):
            elf = data[data.index(b"\x7fELF") :]
            for entry in ("forward", "step"):
                if f"_mlir__mlir_ciface_{entry}".encode() in elf:
                    objects[entry] = elf
    return objects


def function_symbols(path):
    """{name: True for a global, False for a local} of the object's function symbols."""
    table = subprocess.run([objdump(), "-t", str(path)], capture_output=True, text=True, check=True).stdout
    symbols = {}
    for line in table.splitlines():
        fields = line.split()
        if " F " in line and len(fields) >= 5:
            symbols[fields[-1]] = fields[1] == "g"
    return symbols


def call_count(path, function):
    """How many call instructions `function`'s machine code has. In the large code model a call
    goes through a register (`callq *%r13`), so the count is what tells the callees apart."""
    asm = subprocess.run(
        [objdump(), "-d", "--no-show-raw-insn", str(path)], capture_output=True, text=True, check=True
    ).stdout
    body = asm.split(f"<{function}>:\n", 1)[1].split("\n\n", 1)[0]
    return len(re.findall(r"\tcall", body))


def compiled(tmp_path, n_layer):
    cfg = gpt.GPTConfig(n_layer=n_layer, n_head=1, n_embd=8, vocab_size=64, block_size=16)
    cache_dir = tmp_path / f"cache{n_layer}"
    model = gpt.GPT.random(cfg, seed=0, options=gpt.CompileOptions(threads=1, cache_dir=str(cache_dir)))
    model.forward([1, 2, 3])
    model.decode(1, model.new_cache())
    paths = {}
    for entry, elf in objects_by_entry(cache_dir).items():
        paths[entry] = tmp_path / f"{entry}{n_layer}.o"
        paths[entry].write_bytes(elf)
    assert set(paths) == {"forward", "step"}
    return paths


@pytest.fixture(scope="module")
def depths(tmp_path_factory):
    tmp_path = tmp_path_factory.mktemp("depth")
    return {n_layer: compiled(tmp_path, n_layer) for n_layer in (2, 5)}


@pytest.mark.parametrize("entry, block", [("forward", "gpt_block"), ("step", "gpt_block_cached")])
def test_one_entry_function_calls_the_block_once_per_layer(depths, entry, block):
    packed = f"_mlir__mlir_ciface_{entry}"
    for paths in depths.values():
        symbols = function_symbols(paths[entry])
        # Only the packed entry is external; the entry point and its C interface wrapper (whose
        # call to it took every layer's weights) are inlined into it, not kept beside it.
        assert [name for name, external in symbols.items() if external] == [packed], symbols
        assert entry not in symbols and f"_mlir_ciface_{entry}" not in symbols, symbols
        assert block in symbols, "the layers no longer share one block function"
    # Nothing else grows with depth: the same functions at 2 and at 5 layers, and 3 more layers
    # are 3 more calls (of the block; a layer inlined would be none).
    assert set(function_symbols(depths[2][entry])) == set(function_symbols(depths[5][entry]))
    assert call_count(depths[5][entry], packed) - call_count(depths[2][entry], packed) == 3
