"""Runs pytest on the test files given as arguments (the main of every Python test target)."""

import os
import subprocess
import sys

import pytest


def _preload_sanitizer_runtimes():
    """Under --config=asan (clang) the extension is instrumented but python3 is not, so the
    sanitizer runtime (ASan's, which carries UBSan's) must be loaded first: re-execute this process
    with it in LD_PRELOAD."""
    if os.environ.get("GPT_SANITIZE") != "1" or os.environ.get("GPT_SANITIZER_PRELOADED") == "1":
        return
    runtime = subprocess.check_output(["clang-19", "-print-file-name=libclang_rt.asan-x86_64.so"], text=True).strip()
    env = dict(os.environ, GPT_SANITIZER_PRELOADED="1", LD_PRELOAD=runtime)
    os.execve(sys.executable, [sys.executable] + sys.argv, env)


if __name__ == "__main__":
    _preload_sanitizer_runtimes()
    # Compiled code goes to the test's scratch space, not to ~/.cache/gpt of whoever runs the tests.
    os.environ.setdefault("GPT_CACHE_DIR", os.path.join(os.environ.get("TEST_TMPDIR", "/tmp"), "gpt-jit-cache"))
    # OpenMP's workers sleep as soon as a parallel region ends instead of spinning for 200 ms:
    # bazel runs several test processes per core, and a test spends most of its time compiling or
    # in numpy between runs, so the spinning took CPU from the other tests (test_engine_speculative
    # used 113 CPU-seconds with it, 73 without). Runs and results are the same either way.
    os.environ.setdefault("KMP_BLOCKTIME", "0")
    sys.exit(pytest.main(["-q", "-p", "no:cacheprovider"] + sys.argv[1:]))
