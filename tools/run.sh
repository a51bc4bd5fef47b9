#!/usr/bin/env bash
# The project's main job, from a fresh machine: install the pinned toolchain, build the compiler and
# the Python package, and show a transformer-dialect program after every compiler stage.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."

bash tools/setup.sh
bazel build //tools:gpt-opt //python:gpt
PYTHONPATH=bazel-bin/python python3 -m gpt stages tools/demo/attention_head.mlir
