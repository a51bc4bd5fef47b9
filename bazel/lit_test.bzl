"""One Bazel test per .mlir file (as llvm-project's overlay does), each run by lit."""

def glob_lit_tests(exclude = [], data = []):
    for src in native.glob(["*.mlir"], exclude = exclude):
        native.py_test(
            name = src + ".test",
            srcs = ["//tests:run_lit.py"],
            main = "//tests:run_lit.py",
            args = ["$(location %s)" % src],
            data = [
                src,
                "//tests:lit.cfg.py",
                "//tools:gpt-opt",
                "@llvm//:FileCheck",
                "@llvm//:lit",
                "@llvm//:not",
            ] + data,
            python_version = "PY3",
            srcs_version = "PY3",
            size = "small",
        )
