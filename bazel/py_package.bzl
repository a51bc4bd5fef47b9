"""A rule that lays a Python package out under bazel-bin, so `PYTHONPATH=bazel-bin/python` imports it."""

def _py_package_tree_impl(ctx):
    outputs = []
    for src in ctx.files.srcs + ctx.files.data:
        # Keep the path relative to this package: python/gpt/x.py -> bazel-bin/python/gpt/x.py.
        relative = src.short_path[len(ctx.label.package) + 1:] if src.short_path.startswith(ctx.label.package + "/") else src.basename
        if src.is_source:
            out = ctx.actions.declare_file(relative)
            ctx.actions.symlink(output = out, target_file = src)
            outputs.append(out)
        else:
            outputs.append(src)  # Generated files (the extension) are already in place.
    return [DefaultInfo(files = depset(outputs))]

py_package_tree = rule(
    implementation = _py_package_tree_impl,
    doc = "Copies (symlinks) package sources next to generated files under bazel-bin.",
    attrs = {
        "srcs": attr.label_list(allow_files = [".py"]),
        "data": attr.label_list(allow_files = True),
    },
)
