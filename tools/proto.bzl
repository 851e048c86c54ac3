"""C++ (and gRPC) code generation with the system protoc and grpc_cpp_plugin.

rules_proto would be downloaded; the generated code must also match the system
libprotobuf/libgrpc++ exactly, which only the system protoc guarantees.
"""

def trainyard_cc_proto(name, srcs, deps = [], grpc = False, visibility = None):
    """cc_library `name` with the C++ messages (and services) of `srcs`.

    Imports are relative to the workspace root: `import "proto/job.proto";`.
    `deps` are other trainyard_cc_proto targets whose .proto files are imported.
    """
    outs = []
    for src in srcs:
        base = src[:-len(".proto")]
        outs += [base + ".pb.h", base + ".pb.cc"]
        if grpc:
            outs += [base + ".grpc.pb.h", base + ".grpc.pb.cc"]
    pkg = native.package_name()
    proto_deps = [d + "_srcs" for d in deps]
    cmd = "protoc -I. --cpp_out=$(GENDIR) "
    tools = []
    if grpc:
        cmd += "--grpc_out=$(GENDIR) --plugin=protoc-gen-grpc=$$(command -v grpc_cpp_plugin) "
    cmd += " ".join([pkg + "/" + s for s in srcs])
    native.filegroup(
        name = name + "_srcs",
        srcs = srcs + proto_deps,
        visibility = visibility,
    )
    native.genrule(
        name = name + "_gen",
        srcs = srcs + proto_deps,
        outs = outs,
        cmd = cmd,
        tools = tools,
    )
    native.cc_library(
        name = name,
        srcs = [o for o in outs if o.endswith(".cc")],
        hdrs = [o for o in outs if o.endswith(".h")],
        # Generated code is not ours to keep warning-free.
        copts = ["-Wno-unused-parameter"],
        deps = deps + ["//third_party:protobuf"] + (["//third_party:grpc"] if grpc else []),
        visibility = visibility,
    )
