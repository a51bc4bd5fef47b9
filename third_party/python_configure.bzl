"""Repository rule that finds the Python and pybind11 headers of the python3 on PATH."""

_QUERY = """
import sys, sysconfig
try:
    import pybind11
except ImportError:
    sys.exit("pybind11 is not installed for " + sys.executable + ": run tools/setup.sh")
print(sysconfig.get_paths()["include"])
print(pybind11.get_include())
print(sys.executable)
"""

def _python_configure_impl(repository_ctx):
    python = repository_ctx.which("python3")
    if python == None:
        fail("python3 not found on PATH.")
    result = repository_ctx.execute([python, "-c", _QUERY])
    if result.return_code != 0:
        fail("Could not locate the Python headers: " + result.stderr)
    python_include, pybind11_include, executable = result.stdout.strip().splitlines()
    repository_ctx.symlink(python_include, "python_include")
    repository_ctx.symlink(pybind11_include, "pybind11_include")
    repository_ctx.file("BUILD.bazel", """# Python and pybind11 headers of {python}, found by python_configure.
package(default_visibility = ["//visibility:public"])

cc_library(
    name = "python_headers",
    hdrs = glob(["python_include/**/*.h"]),
    includes = ["python_include"],
)

cc_library(
    name = "pybind11",
    hdrs = glob(["pybind11_include/**/*.h"]),
    includes = ["pybind11_include"],
    deps = [":python_headers"],
)
""".format(python = executable))

python_configure = repository_rule(
    implementation = _python_configure_impl,
    environ = ["PATH"],
    local = True,
)
