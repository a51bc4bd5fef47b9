"""Repository rule that finds the system LLVM/MLIR through llvm-config and checks its exact version."""

def _llvm_configure_impl(repository_ctx):
    want = repository_ctx.attr.expected_version
    major = want.split(".")[0]
    llvm_config = repository_ctx.which("llvm-config-" + major)
    if llvm_config == None:
        fail("llvm-config-%s not found on PATH: install LLVM/MLIR %s with tools/setup.sh." % (major, want))
    result = repository_ctx.execute([llvm_config, "--version"])
    have = result.stdout.strip()
    if result.return_code != 0 or have != want:
        fail("gpt needs LLVM/MLIR exactly %s, but %s reports '%s'." % (want, llvm_config, have))
    prefix = repository_ctx.execute([llvm_config, "--prefix"]).stdout.strip()
    for sub in ["include", "lib", "bin", "build"]:
        repository_ctx.symlink(prefix + "/" + sub, sub)
    for required in ["lib/libMLIR.so", "lib/libLLVM.so", "bin/mlir-tblgen", "bin/FileCheck", "include/mlir/IR/OpBase.td", "build/utils/lit/lit.py", "lib/libomp.so", "bin/clang", "bin/ld.lld", "lib/libLLVMSupport.a", "lib/libLLVMTargetParser.a"]:
        if not repository_ctx.path(required).exists:
            fail("%s/%s is missing: install libmlir-19-dev, mlir-19-tools, llvm-19-tools, libomp-19-dev, clang-19 and lld-19 (tools/setup.sh)." % (prefix, required))
    # The rpath lets binaries and the Python extension find libMLIR.so at run time without LD_LIBRARY_PATH.
    repository_ctx.template("BUILD.bazel", repository_ctx.attr._build_template, {"%{libdir}": prefix + "/lib", "%{bindir}": prefix + "/bin"})

llvm_configure = repository_rule(
    implementation = _llvm_configure_impl,
    attrs = {
        "expected_version": attr.string(mandatory = True),
        "_build_template": attr.label(default = "//third_party:llvm.BUILD"),
    },
    environ = ["PATH"],
    local = True,
)
