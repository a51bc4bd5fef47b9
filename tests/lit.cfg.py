# lit configuration of the gpt FileCheck tests (run through tests/run_lit.py by Bazel).
import os

import lit.formats

config.name = "gpt"
config.test_format = lit.formats.ShTest(execute_external=True)
config.suffixes = [".mlir"]
config.test_source_root = os.path.dirname(__file__)
config.test_exec_root = os.environ.get("TEST_TMPDIR", os.path.dirname(__file__))
# gpt-opt, FileCheck, not and mlir-cpu-runner come from PATH, set up by run_lit.py.
config.environment["PATH"] = os.environ["PATH"]
llvm_lib = os.environ.get("GPT_LLVM_LIB_DIR", "")
config.substitutions.append(("%mlir_runner_utils", os.path.join(llvm_lib, "libmlir_runner_utils.so")))
config.substitutions.append(("%mlir_c_runner_utils", os.path.join(llvm_lib, "libmlir_c_runner_utils.so")))
