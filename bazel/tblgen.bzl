"""TableGen macros with the interface of llvm-project's Bazel overlay (mlir/tblgen.bzl), over the system mlir-tblgen.

Keeping upstream's `td_library` / `gentbl_cc_library` signatures means moving to a source-built LLVM is a load() change.
"""

TdInfo = provider(
    doc = "TableGen sources and the include directories they need.",
    fields = {
        "transitive_sources": "depset of .td files",
        "transitive_includes": "depset of include directories (execroot-relative)",
    },
)

def _include_dirs(ctx, includes):
    # Directories are execroot-relative, so headers of external repositories resolve under external/<repo>.
    base = [p for p in [ctx.label.workspace_root, ctx.label.package] if p]
    return ["/".join(base + ([] if inc == "." else [inc])) or "." for inc in includes]

def _td_library_impl(ctx):
    return [
        DefaultInfo(files = depset(ctx.files.srcs)),
        TdInfo(
            transitive_sources = depset(ctx.files.srcs, transitive = [d[TdInfo].transitive_sources for d in ctx.attr.deps]),
            transitive_includes = depset(
                _include_dirs(ctx, ctx.attr.includes),
                transitive = [d[TdInfo].transitive_includes for d in ctx.attr.deps],
            ),
        ),
    ]

td_library = rule(
    implementation = _td_library_impl,
    doc = "A set of .td files, their include directories and the td_libraries they include.",
    attrs = {
        "srcs": attr.label_list(allow_files = [".td"]),
        "includes": attr.string_list(doc = "Include directories relative to this package."),
        "deps": attr.label_list(providers = [TdInfo]),
    },
)

def _gentbl_rule_impl(ctx):
    deps = [d[TdInfo] for d in ctx.attr.deps]
    sources = depset([ctx.file.td_file], transitive = [d.transitive_sources for d in deps])
    includes = depset(["."], transitive = [d.transitive_includes for d in deps]).to_list()
    args = ctx.actions.args()
    args.add_all(ctx.attr.opts)
    for inc in includes:
        args.add("-I", inc)
    args.add(ctx.file.td_file.path)
    args.add("-o", ctx.outputs.out)
    ctx.actions.run(
        executable = ctx.executable.tblgen,
        arguments = [args],
        inputs = sources,
        outputs = [ctx.outputs.out],
        mnemonic = "TableGen",
        progress_message = "TableGen %s -> %s" % (ctx.file.td_file.short_path, ctx.outputs.out.short_path),
    )

_gentbl_rule = rule(
    implementation = _gentbl_rule_impl,
    attrs = {
        "tblgen": attr.label(executable = True, cfg = "exec", allow_single_file = True),
        "td_file": attr.label(allow_single_file = [".td"], mandatory = True),
        "opts": attr.string_list(),
        "out": attr.output(mandatory = True),
        "deps": attr.label_list(providers = [TdInfo]),
    },
)

def gentbl_cc_library(name, tbl_outs, td_file, tblgen = "@llvm//:mlir-tblgen", deps = [], **kwargs):
    """Runs tblgen once per (opts, out) pair and wraps the outputs in a cc_library of textual headers."""
    outs = []
    for i, (opts, out) in enumerate(tbl_outs):
        _gentbl_rule(
            name = "%s_gen_%d" % (name, i),
            tblgen = tblgen,
            td_file = td_file,
            opts = opts,
            out = out,
            deps = deps,
        )
        outs.append(out)
    native.cc_library(name = name, textual_hdrs = outs, **kwargs)

def gentbl_passes(name, group, td_file = "Passes.td"):
    """A package's pass declarations (Passes.h.inc, registered as `group`) and their documentation
    (Passes.md), generated from `td_file` into the gentbl_cc_library `name`, with the td_library
    `name` + "TdFiles" of that file over MLIR's."""
    td_library(
        name = name + "TdFiles",
        srcs = [td_file],
        deps = ["@llvm//:MLIRTdFiles"],
    )
    gentbl_cc_library(
        name = name,
        tbl_outs = [
            (["-gen-pass-decls", "-name", group], "Passes.h.inc"),
            (["-gen-pass-doc"], "Passes.md"),
        ],
        td_file = td_file,
        deps = [":" + name + "TdFiles"],
    )

def pass_library(name, group, srcs, hdrs = ["Passes.h"], deps = [], **kwargs):
    """A package's passes: their declarations, generated from its Passes.td into `:PassesIncGen`
    (gentbl_passes, registered as `group`), and the cc_library `name` that defines them over MLIR,
    with `deps` besides those two."""
    gentbl_passes(name = "PassesIncGen", group = group)
    native.cc_library(
        name = name,
        srcs = srcs,
        hdrs = hdrs,
        deps = [":PassesIncGen", "@llvm//:mlir"] + deps,
        **kwargs
    )
