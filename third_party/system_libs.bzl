"""Repository rules that describe prebuilt C++ libraries found on the machine.

Each rule generates a BUILD file with one cc_library that adds the prefix's include
directories and links its shared libraries (with an rpath, so binaries run from
bazel-bin without LD_LIBRARY_PATH). The rules re-run when their environment
variable changes.
"""

def _fail_missing(ctx, what, path, hint):
    fail("%s: %s not found. %s" % (ctx.name, path, hint))

def _libtorch_configure_impl(ctx):
    env_var = ctx.attr.env_var
    prefix = ctx.os.environ.get(env_var, ctx.attr.default_prefix)
    if not prefix:
        # The CUDA LibTorch is optional: without it the target exists but
        # refuses to build, with the reason.
        ctx.file("BUILD.bazel", """
package(default_visibility = ["//visibility:public"])

genrule(
    name = "missing",
    outs = ["missing.h"],
    cmd = "echo '{var} is not set: run scripts/setup-libtorch-cuda.sh (it writes .bazelrc.cuda)' >&2; exit 1",
)

cc_library(name = "libtorch", hdrs = [":missing"])
""".format(var = env_var))
        ctx.file("WORKSPACE", "workspace(name = \"%s\")\n" % ctx.name)
        return
    if prefix == "/usr":
        # Debian's layout: headers in /usr/include, libraries in the multiarch dir.
        inc = ["/usr/include", "/usr/include/torch/csrc/api/include"]
        libdir = "/usr/lib/x86_64-linux-gnu"
        hint = "Install Debian's libtorch-dev (scripts/setup.sh does)."
    else:
        inc = [prefix + "/include", prefix + "/include/torch/csrc/api/include"]
        libdir = prefix + "/lib"
        hint = "%s must name a LibTorch prefix with include/ and lib/." % env_var
    if not ctx.path(libdir + "/libtorch_cpu.so").exists:
        _fail_missing(ctx, "LibTorch", libdir + "/libtorch_cpu.so", hint)
    has_cuda = ctx.path(libdir + "/libtorch_cuda.so").exists

    # Bazel only propagates include paths inside the repository, so the
    # prefix's include directories are linked in and their headers declared.
    # /usr/include itself is already on the compiler's system path (and
    # declaring all of it would mean every system header).
    # A wheel's include/ also carries the third-party headers PyTorch was
    # built with (protobuf, fmt, pybind11); those would shadow the system
    # ones Trainyard builds against, so only the rest is linked in.
    includes = []
    for i, d in enumerate(inc):
        if d == "/usr/include":
            continue
        if not ctx.path(d).exists:
            _fail_missing(ctx, "LibTorch headers", d, hint)
        if i == 0 and prefix != "/usr":
            for entry in ctx.path(d).readdir():
                if entry.basename not in ["google", "fmt", "pybind11"]:
                    ctx.symlink(entry, "include%d/%s" % (i, entry.basename))
        else:
            ctx.symlink(d, "include%d" % i)
        includes.append("include%d" % i)

    # c10d's Gloo process group is built into both Debian's and PyPI's
    # LibTorch; the flag exposes its headers (Gloo's own come from
    # libgloo-dev).
    defines = ["USE_C10D_GLOO"]
    cuda_libs = []
    if has_cuda:
        # Code that needs LibTorch's CUDA API (streams) checks this.
        defines.append("TRAINYARD_LIBTORCH_CUDA")
        cuda_libs = ["-ltorch_cuda", "-lc10_cuda"]

    # The CUDA libraries libtorch_cuda needs (cuBLAS, cuDNN, NCCL, ...) are
    # found for the link in the CUDA toolkit; at run time the GPU machine's
    # own (LD_LIBRARY_PATH or the wheel's packages).
    cuda_prefix = ctx.os.environ.get("TRAINYARD_CUDA", "/usr/local/cuda")
    rpath_link = ["-Wl,-rpath-link," + cuda_prefix + "/lib64"] if has_cuda else []
    ctx.file("BUILD.bazel", """
package(default_visibility = ["//visibility:public"])

# LibTorch from {prefix}. libtorch.so is only a shim that pulls in the real
# libraries; link them directly.
cc_library(
    name = "libtorch",
    hdrs = glob(["include*/**/*.h", "include*/**/*.hpp", "include*/**/*.cuh"]),
    includes = {includes},
    defines = {defines},
    linkopts = [
        "-L{libdir}",
        "-Wl,-rpath,{libdir}",
        "-Wl,--push-state,--no-as-needed",
        "-ltorch_cpu",
        "-lc10",
    ] + {cuda_libs} + ["-Wl,--pop-state"] + {rpath_link},
)

""".format(
        prefix = prefix,
        includes = repr(includes),
        defines = repr(defines),
        libdir = libdir,
        cuda_libs = repr(cuda_libs),
        rpath_link = repr(rpath_link),
    ))
    ctx.file("WORKSPACE", "workspace(name = \"%s\")\n" % ctx.name)
    ctx.file("prefix.bzl", "LIBTORCH_PREFIX = %r\nLIBTORCH_HAS_CUDA = %s\n" % (prefix, has_cuda))

# Two rules over one implementation, each re-run only when its own variable
# changes: switching between the default and the CUDA configuration then
# refetches (and rebuilds) nothing.
libtorch_configure = repository_rule(
    implementation = _libtorch_configure_impl,
    attrs = {
        "env_var": attr.string(default = "TRAINYARD_LIBTORCH"),
        "default_prefix": attr.string(default = "/usr"),
    },
    environ = ["TRAINYARD_LIBTORCH"],
    local = True,
)

libtorch_cuda_configure = repository_rule(
    implementation = _libtorch_configure_impl,
    attrs = {
        "env_var": attr.string(default = "TRAINYARD_LIBTORCH_CUDA"),
        "default_prefix": attr.string(default = ""),
    },
    environ = ["TRAINYARD_LIBTORCH_CUDA", "TRAINYARD_CUDA"],
    local = True,
)

def _cuda_configure_impl(ctx):
    prefix = ctx.os.environ.get("TRAINYARD_CUDA", "/usr/local/cuda")
    found = ctx.path(prefix + "/include/cuda_runtime_api.h").exists and \
            ctx.path(prefix + "/include/nccl.h").exists
    libdir = prefix + "/lib64"
    if found:
        # The headers are linked in and declared, so that every dependent
        # (LibTorch's CUDA headers included) gets the include path. Only the
        # runtime's (with crt/), NCCL's and CCCL's nv/ (cuda_fp16.h includes
        # <nv/target>): the rest of the toolkit's C++ libraries are thousands
        # of files no code here includes.
        ctx.symlink(prefix + "/include", "include")
        body = """
cc_library(
    name = "cuda",
    hdrs = glob(["include/*.h", "include/*.hpp", "include/crt/**", "include/nv/**"]),
    includes = ["include"],
    linkopts = ["-L{libdir}", "-Wl,-rpath,{libdir}", "-lcudart"],
)

cc_library(
    name = "nccl",
    linkopts = ["-L{libdir}", "-Wl,-rpath,{libdir}", "-lnccl"],
    deps = [":cuda"],
)
""".format(libdir = libdir)
    else:
        # Without a toolkit the targets exist but refuse to build, with the reason.
        body = """
genrule(
    name = "missing",
    outs = ["missing.h"],
    cmd = "echo 'CUDA toolkit with NCCL not found under {prefix} (set TRAINYARD_CUDA)' >&2; exit 1",
)

cc_library(name = "cuda", hdrs = [":missing"])

cc_library(name = "nccl", hdrs = [":missing"])
""".format(prefix = prefix)
    ctx.file("BUILD.bazel", "package(default_visibility = [\"//visibility:public\"])\n" + body)
    ctx.file("WORKSPACE", "workspace(name = \"%s\")\n" % ctx.name)

cuda_configure = repository_rule(
    implementation = _cuda_configure_impl,
    environ = ["TRAINYARD_CUDA"],
    local = True,
)
