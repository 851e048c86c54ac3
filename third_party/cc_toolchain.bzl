"""The C++ toolchain: Bazel's own configuration of the local compiler, less
clang's system module map.

For clang, Bazel's cc_configure (@local_config_cc) writes a module map that
lists every header under the compiler's system include directories and makes
it an input of every compilation. Any Debian package that adds or removes a
header (a -dev package installed for the tests, the headers an image has and
its host has not) then changes the cache key of every action, so neither a
clone on the same machine nor an image build can reuse objects compiled
elsewhere. The map only serves the layering_check feature, which this
project does not use (tools/check_layering.sh checks the layers). This
repository is @local_config_cc with the map left out; .bazelrc selects it.
"""

def _impl(ctx):
    build = ctx.path(Label("@local_config_cc//:BUILD"))
    for entry in build.dirname.readdir():
        if entry.basename not in ["BUILD", "WORKSPACE", "module.modulemap"]:
            ctx.symlink(entry, entry.basename)
    text = ctx.read(build)
    line = '    module_map = ":module.modulemap",\n'
    ctx.file("BUILD", text.replace(line, ""))
    ctx.file("WORKSPACE", "workspace(name = \"%s\")\n" % ctx.name)

cc_toolchain_without_module_map = repository_rule(
    implementation = _impl,
    doc = "@local_config_cc without clang's system module map.",
)
