"""A py_test that runs one pytest file against the gpt package."""

def pytest_test(name, size = "small", data = [], **kwargs):
    native.py_test(
        name = name,
        srcs = ["//tests/python:pytest_main.py", name + ".py"],
        main = "//tests/python:pytest_main.py",
        args = ["$(location %s.py)" % name],
        deps = ["//python:gpt_lib", "//tests/python:test_support"],
        data = data,
        python_version = "PY3",
        srcs_version = "PY3",
        size = size,
        **kwargs
    )
