#!/usr/bin/env bash
# The device check (docs/GPU.md): runs on a lent GPU machine, which has Python with torch, numpy
# and transformers but no LLVM/MLIR and no Bazel. Checks the artifacts that tools/gpu/gpu_prepare.py
# made on the build machine and that the call carried (logits and greedy tokens against the CPU
# model's and HF transformers', prefill/decode timings against HF eager on the same GPU), with
# gpt_runtime from python/ and never the compiler. Writes $OUT/device_check.log and, with timings,
# $OUT/device_check.md. Exits 0 when every check passed, 1 when one failed, 3 with no CUDA device,
# 124 when the time limit (GPU_CHECK_SECONDS, default 285) ran out; the log is written either way.
#
#   here:       PYTHONPATH=bazel-bin/python python3 tools/gpu/gpu_prepare.py --out build/gpu_check
#   there:      bash tools/device_check.sh [ARTIFACTS] [gpu_check.py options: --skip-timing, --only NAME,...]
set -uo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."

artifacts=build/gpu_check
if [[ $# -gt 0 && "$1" != -* ]]; then
  artifacts="$1"
  shift
fi
out="${OUT:-build/device_check}"
mkdir -p "$out"
seconds="${GPU_CHECK_SECONDS:-285}"

# What gpu_check.py cannot say about itself once it is killed: the limit, in the same log.
GPU_CHECK_COMMAND="bash tools/device_check.sh $artifacts $*" PYTHONPATH=python PYTHONUNBUFFERED=1 \
  timeout -k 10 "$seconds" python3 tools/gpu/gpu_check.py --artifacts "$artifacts" --out "$out" \
  --budget "$((seconds - 35))" "$@"
status=$?
if [[ "$status" == 124 || "$status" == 137 ]]; then
  echo "FAIL device_check.sh: killed after ${seconds} s (GPU_CHECK_SECONDS)" | tee -a "$out/device_check.log"
  status=124
fi
exit "$status"
