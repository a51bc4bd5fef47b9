"""The machine code the JIT produced for a model, disassembled, and what the host CPU supports."""

import os
import subprocess


def host_has_avx512f():
    with open("/proc/cpuinfo") as f:
        return " avx512f" in f.read()


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
