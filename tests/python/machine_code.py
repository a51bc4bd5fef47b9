"""The machine code the JIT produced for a model, disassembled, and what the code for the host may
use."""

import os
import subprocess

from gpt import _gpt


def host_code_may_use(feature):
    """Whether code compiled for target_cpu="host" may use `feature` (LLVM's name: "avx512f",
    "avx512bf16", "avx512vnni"): the host's CPU, or the one GPT_TARGET_CPU names instead."""
    return feature in _gpt.target_description("host")["features"]


def host_is_a_named_cpu():
    """Whether GPT_TARGET_CPU makes "host" a named CPU, whose features only LLVM's target registry
    (in the compiler library) knows: then every process that builds a model loads the compiler."""
    return os.environ.get("GPT_TARGET_CPU", "") not in ("", "host")


def objdump():
    # In Bazel the tool comes from the @llvm repository; outside, from llvm-19-tools on PATH.
    for candidate in ("external/llvm/bin/llvm-objdump", "/usr/lib/llvm-19/bin/llvm-objdump"):
        if os.path.exists(candidate):
            return candidate
    return "llvm-objdump-19"


def disassemble(model, tmp_path, pipeline_seq_len=64):
    path = tmp_path / "forward.o"
    model.save_object(path, pipeline_seq_len)
    assert path.stat().st_size > 0
    return subprocess.run(
        [objdump(), "-d", "--no-show-raw-insn", str(path)], capture_output=True, text=True, check=True
    ).stdout


def function_bodies(disassembly):
    """{function name: its instructions (mnemonic and operands)} of `llvm-objdump -d` text."""
    bodies, name = {}, None
    for line in disassembly.splitlines():
        if line.endswith(">:"):
            name = line.split("<", 1)[1][:-2]
            bodies[name] = []
        elif name and "\t" in line and line.strip():
            bodies[name].append(line.split("\t", 1)[1].strip())
    return bodies
