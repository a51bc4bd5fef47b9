"""Maps Bazel's implicit rule repositories to the offline mocks shipped by Debian's bazel-bootstrap-source."""

_PACKAGE = "bazel-bootstrap-source"

def _find_mock_root(repository_ctx):
    # Ask dpkg where the package put its mock repositories instead of hard-coding the path.
    listing = repository_ctx.execute(["dpkg-query", "-L", _PACKAGE])
    if listing.return_code == 0:
        for line in listing.stdout.splitlines():
            if line.endswith("/mock_repos"):
                return repository_ctx.path(line)
    fail("The mock rule repositories of the Debian package %s were not found; run tools/setup.sh." % _PACKAGE)

def _mock_repository_impl(repository_ctx):
    source = repository_ctx.path("%s/%s" % (_find_mock_root(repository_ctx), repository_ctx.attr.mock))
    if not source.exists:
        fail("%s is missing from %s; reinstall it with tools/setup.sh." % (source, _PACKAGE))
    for entry in source.readdir():
        repository_ctx.symlink(entry, entry.basename)

_mock_repository = repository_rule(
    implementation = _mock_repository_impl,
    attrs = {"mock": attr.string(mandatory = True)},
    local = True,
)

def bazel_mock_repositories():
    for name in ["rules_cc", "rules_java", "rules_proto", "bazel_skylib", "platforms"]:
        _mock_repository(name = name, mock = name)
