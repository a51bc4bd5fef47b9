"""Bazel test driver: runs LLVM's lit on the .mlir files given, with gpt-opt and the LLVM tools on PATH."""

import os
import subprocess
import sys


def main(argv):
    # Bazel runs tests from the runfiles root of this workspace; tools sit at fixed places there.
    root = os.getcwd()
    tool_dirs = [os.path.join(root, "tools"), os.path.join(root, "external", "llvm", "bin")]
    env = dict(os.environ)
    env["PATH"] = os.pathsep.join(tool_dirs + [env.get("PATH", "")])
    env["GPT_LLVM_LIB_DIR"] = os.path.join(root, "external", "llvm", "lib")
    lit = os.path.join(root, "external", "llvm", "build", "utils", "lit", "lit.py")
    tests = [os.path.join(root, t) for t in argv[1:]]
    return subprocess.call([sys.executable, lit, "-v", "--no-progress-bar"] + tests, env=env)


if __name__ == "__main__":
    sys.exit(main(sys.argv))
