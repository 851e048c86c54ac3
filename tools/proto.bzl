"""C++ (and gRPC) code generation with the system protoc and grpc_cpp_plugin.

rules_proto would be downloaded; the generated code must also match the system
libprotobuf/libgrpc++ exactly, which only the system protoc guarantees.
"""

def trainyard_cc_proto(name, srcs, deps = [], grpc = False, visibility = None, grpc_visibility = None):
    """cc_library `name` with the C++ messages of `srcs`; with `grpc`, also
    cc_library `name` + "_grpc" with their services' gRPC stubs.

    The messages link protobuf only, so a library that speaks the messages
    (a driver, a worker's core) links no gRPC; only the adapters that serve
    or call a service depend on the "_grpc" target.

    `visibility` applies to the messages, `grpc_visibility` to the stubs.

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
        srcs = [o for o in outs if o.endswith(".pb.cc") and not o.endswith(".grpc.pb.cc")],
        hdrs = [o for o in outs if o.endswith(".pb.h") and not o.endswith(".grpc.pb.h")],
        # Generated code is not ours to keep warning-free.
        copts = ["-Wno-unused-parameter"],
        deps = deps + ["//third_party:protobuf"],
        visibility = visibility,
    )
    if grpc:
        native.cc_library(
            name = name + "_grpc",
            srcs = [o for o in outs if o.endswith(".grpc.pb.cc")],
            hdrs = [o for o in outs if o.endswith(".grpc.pb.h")],
            copts = ["-Wno-unused-parameter"],
            deps = [":" + name, "//third_party:grpc"],
            visibility = grpc_visibility,
        )
