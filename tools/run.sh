#!/usr/bin/env bash
# The project's main job, from a fresh machine: install the pinned toolchain, build the compiler and
# the Python package, and generate text with the embedded byte-level GPT (KV-cached, compiled for
# this CPU), printing a timing line. Extra arguments go to `python -m gpt generate`.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."

bash tools/setup.sh
bazel build //tools:gpt-opt //python:gpt
PYTHONPATH=bazel-bin/python python3 -m gpt generate --prompt "def fibonacci(n):" --max_new_tokens 200 --seed 0 "$@"
