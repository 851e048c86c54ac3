"""Checks a Trainyard checkpoint imported from a T5X one, tensor by tensor:
every T5X parameter (read back with TensorStore and msgpack, as T5X reads
it; from an Orbax-format checkpoint_<step>, its `state` item restored with
Orbax's PyTreeCheckpointer) is the Trainyard parameter of the same name in Trainyard's layout (dense
kernels [out, in]: transposed), bit for bit; every Adafactor statistic is the
slot that keeps the same dimension of the parameter; the step is T5X's; and
nothing else is in the checkpoint.

usage: compare.py T5X_STEP_DIR TRAINYARD_CHECKPOINT_DIR
"""
import json
import os
import re
import sys

import ml_dtypes  # noqa: F401  (bfloat16 arrays)
import msgpack
import numpy as np
import tensorstore as ts
from safetensors.numpy import load_file


def read_orbax(item_dir):
    import orbax.checkpoint as ocp

    tree = ocp.PyTreeCheckpointer().restore(os.path.abspath(item_dir))
    flat = {}

    def walk(node, path):
        if isinstance(node, dict):
            for k, v in node.items():
                walk(v, f"{path}/{k}" if path else k)
        elif node is not None:
            flat[path] = np.asarray(node)

    walk(tree, "")
    return flat


def read_t5x(step_dir):
    if os.path.exists(os.path.join(step_dir, "state", "_METADATA")):
        return read_orbax(os.path.join(step_dir, "state"))

    def ext(code, data):
        shape, dtype, raw = msgpack.unpackb(data, raw=False)
        dtype = ml_dtypes.bfloat16 if dtype == "bfloat16" else np.dtype(dtype)
        return np.frombuffer(raw, dtype).reshape(shape)

    with open(os.path.join(step_dir, "checkpoint"), "rb") as f:
        tree = msgpack.unpackb(f.read(), ext_hook=ext, raw=False)
    flat = {}

    def walk(node, path):
        if isinstance(node, dict) and {"driver", "kvstore", "metadata"} <= node.keys():
            spec = {"driver": "zarr", "kvstore": {"driver": "file",
                                                   "path": os.path.join(step_dir, node["kvstore"]["path"])}}
            flat[path] = ts.open(spec, open=True).result().read().result()
        elif isinstance(node, dict):
            for k, v in node.items():
                walk(v, f"{path}/{k}" if path else k)
        elif node is not None:
            flat[path] = np.asarray(node)

    walk(tree["optimizer"], "")
    return flat


def our_name(path):
    """T5X parameter path -> (Trainyard name, transposed)."""
    fixed = {"token_embedder/embedding": "token_embedder.weight",
             "encoder/relpos_bias/rel_embedding": "encoder_relpos.rel_embedding",
             "decoder/relpos_bias/rel_embedding": "decoder_relpos.rel_embedding",
             "encoder/encoder_norm/scale": "encoder_norm.scale",
             "decoder/decoder_norm/scale": "decoder_norm.scale"}
    if path in fixed:
        return fixed[path], False
    if path == "decoder/logits_dense/kernel":
        return "logits_dense.weight", True
    m = re.fullmatch(r"(encoder|decoder)/layers_(\d+)/(.*)/(kernel|scale)", path)
    assert m, path
    rest = m.group(3).replace("/", ".")
    kernel = m.group(4) == "kernel"
    return f"{m.group(1)}_layers.{m.group(2)}.{rest}.{'weight' if kernel else 'scale'}", kernel


def main(step_dir, ours_dir):
    t5x = read_t5x(step_dir)
    params = load_file(os.path.join(ours_dir, "params.safetensors"))
    opt = load_file(os.path.join(ours_dir, "optimizer.safetensors"))
    meta = json.load(open(os.path.join(ours_dir, "metadata.json")))
    problems, seen_params, seen_opt = [], set(), set()
    for path, value in t5x.items():
        if not path.startswith("target/"):
            continue
        p = path[len("target/"):]
        name, transposed = our_name(p)
        want = value.astype(np.float32)
        if transposed:
            want = want.T
        seen_params.add(name)
        if name not in params:
            problems.append(f"{name}: missing")
        elif params[name].shape != want.shape or not np.array_equal(params[name], want):
            problems.append(f"{name}: differs from T5X's {p}")
        # Adafactor: T5X's v_row keeps dimension argsort(shape)[-2] of its
        # parameter, v_col argsort(shape)[-1]; ours keep the same of ours,
        # sorted stably. Dimension k of T5X's is 1 - k of ours when transposed.
        states = {s: t5x.get(f"state/param_states/{p}/{s}") for s in ("v_row", "v_col", "v", "m")}
        factored = states["v_row"] is not None and states["v_row"].shape != (1,)
        if factored:
            d1, d0 = np.argsort(value.shape)[-2:]
            ours_shape = want.shape
            od1, od0 = np.argsort(ours_shape, kind="stable")[-2:]
            as_t5x = (lambda k: 1 - k) if transposed else (lambda k: k)
            expect = {"v_row": states["v_row"] if as_t5x(od1) == d1 else states["v_col"],
                      "v_col": states["v_row"] if as_t5x(od0) == d1 else states["v_col"]}
        else:
            expect = {"v": states["v"].T if transposed else states["v"]}
        for slot, value_t5x in expect.items():
            key = f"{name}/{slot}"
            seen_opt.add(key)
            if key not in opt:
                problems.append(f"{key}: missing")
            elif opt[key].shape != value_t5x.shape or not np.array_equal(opt[key], value_t5x):
                problems.append(f"{key}: differs from T5X's statistic")
    problems += [f"{n}: not a T5X parameter" for n in params if n not in seen_params]
    problems += [f"{n}: not a T5X statistic" for n in opt if n not in seen_opt]
    step = int(t5x["state/step"])
    if meta["step"] != step:
        problems.append(f"step {meta['step']}, T5X's {step}")
    for p in problems:
        print("FAIL:", p)
    print(f"{len(seen_params)} parameters and {len(seen_opt)} Adafactor statistics compared, step {step}: "
          f"{len(problems)} problem(s)")
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1], sys.argv[2]))
