"""Runs pytest on the test files given as arguments (the main of every Python test target)."""

import os
import subprocess
import sys

import pytest


def _preload_sanitizer_runtimes():
    """Under --config=asan the extension is instrumented but python3 is not, so the sanitizer
    runtimes must be loaded first: re-execute this process with them in LD_PRELOAD."""
    if os.environ.get("GPT_SANITIZE") != "1" or os.environ.get("GPT_SANITIZER_PRELOADED") == "1":
        return
    libs = [
        subprocess.check_output(["gcc", f"-print-file-name={name}"], text=True).strip()
        for name in ("libasan.so", "libubsan.so")
    ]
    env = dict(os.environ, GPT_SANITIZER_PRELOADED="1", LD_PRELOAD=":".join(libs))
    os.execve(sys.executable, [sys.executable] + sys.argv, env)


if __name__ == "__main__":
    _preload_sanitizer_runtimes()
    # Compiled code goes to the test's scratch space, not to ~/.cache/gpt of whoever runs the tests.
    os.environ.setdefault("GPT_CACHE_DIR", os.path.join(os.environ.get("TEST_TMPDIR", "/tmp"), "gpt-jit-cache"))
    sys.exit(pytest.main(["-q", "-p", "no:cacheprovider"] + sys.argv[1:]))
