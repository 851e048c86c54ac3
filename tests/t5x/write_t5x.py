"""Writes a T5X checkpoint, laid out as T5X's Checkpointer writes one
(t5x/checkpoints.py, format version 3), from a Hugging Face T5 model: the
parameters under T5X's names and layouts (t5x/examples/t5/network.py: dense
kernels [in, out], one relative-position table [heads, buckets] per stack,
logits_dense for T5.1.1), T5X Adafactor's statistics for each (factored
v_row/v_col when the second-largest dimension is at least 128, else v; the
unused slots zeros of shape [1]; random positive values), and the step.

Parameters and full-size v go to TensorStore (zarr, gzip) in
checkpoint_<step>/<dotted name>/; v_row, v_col, the [1] slots and the step are
inline flax arrays (msgpack ext 1 of [shape, dtype, bytes]). The directory is
written as checkpoint_<step>.tmp-<time> and renamed when complete.

usage: write_t5x.py HF_DIR MODEL_DIR STEP [--bfloat16]
  --bfloat16: parameters saved as bfloat16 (T5X's save_dtype)
"""
import os
import re
import sys
import time

import ml_dtypes
import msgpack
import numpy as np
import tensorstore as ts
from safetensors.numpy import load_file

# T5X picks chunks of at most 64 MiB; this test picks small ones so that every
# array has several.
CHUNK_ELEMENTS = 2048


def t5x_names(hf):
    """HF T5 tensor name -> (T5X path, transpose), as HF's converter maps them."""
    out = {}
    att = {"q": "query", "k": "key", "v": "value", "o": "out"}
    for name in hf:
        m = re.fullmatch(r"(encoder|decoder)\.block\.(\d+)\.layer\.(\d)\.(.*)\.weight", name)
        if name == "shared.weight":
            out[name] = ("token_embedder/embedding", False)
        elif name == "lm_head.weight":
            out[name] = ("decoder/logits_dense/kernel", True)
        elif name in ("encoder.final_layer_norm.weight", "decoder.final_layer_norm.weight"):
            stack = name.split(".")[0]
            out[name] = (f"{stack}/{stack}_norm/scale", False)
        elif m:
            stack, i, sub, rest = m.group(1), m.group(2), int(m.group(3)), m.group(4)
            layer = f"{stack}/layers_{i}"
            if rest.endswith("relative_attention_bias"):
                out[name] = (f"{stack}/relpos_bias/rel_embedding", True)
                continue
            if stack == "encoder":
                norms = {0: "pre_attention_layer_norm", 1: "pre_mlp_layer_norm"}
                blocks = {"SelfAttention": "attention"}
            else:
                norms = {0: "pre_self_attention_layer_norm", 1: "pre_cross_attention_layer_norm",
                         2: "pre_mlp_layer_norm"}
                blocks = {"SelfAttention": "self_attention", "EncDecAttention": "encoder_decoder_attention"}
            if rest == "layer_norm":
                out[name] = (f"{layer}/{norms[sub]}/scale", False)
            elif rest.startswith("DenseReluDense."):
                out[name] = (f"{layer}/mlp/{rest.split('.')[1]}/kernel", True)
            else:
                block, proj = rest.split(".")
                out[name] = (f"{layer}/{blocks[block]}/{att[proj]}/kernel", True)
        # encoder/decoder.embed_tokens: copies of shared.weight
    return out


def choose_chunks(shape):
    """T5X's _choose_chunk_shape: shrink the largest dimension (the first of
    equal ones) to its next smaller divisor until the chunk is small enough."""
    divisors = [[d for d in range(1, n + 1) if n % d == 0] for n in shape]
    chunk, at = list(shape), [len(d) - 1 for d in divisors]
    while chunk and int(np.prod(chunk)) > CHUNK_ELEMENTS:
        i = max(range(len(chunk)), key=lambda k: (chunk[k], -k))
        at[i] -= 1
        chunk[i] = divisors[i][at[i]]
    return chunk


def flax_array(a):
    return msgpack.ExtType(1, msgpack.packb([list(a.shape), a.dtype.name, a.tobytes()], use_bin_type=True))


def stored(tmp_dir, name, a):
    """Writes `a` with TensorStore's zarr driver; the spec T5X keeps in the msgpack."""
    chunks = choose_chunks(a.shape)
    dtype = "bfloat16" if a.dtype == ml_dtypes.bfloat16 else a.dtype.str
    t = ts.open({"driver": "zarr", "kvstore": {"driver": "file", "path": os.path.join(tmp_dir, name)},
                 "metadata": {"shape": list(a.shape), "chunks": chunks, "compressor": {"id": "gzip"}, "dtype": dtype}},
                create=True).result()
    t.write(a).result()
    return {"driver": "zarr", "dtype": a.dtype.name, "kvstore": {"driver": "file", "path": name + "/"},
            "metadata": {"chunks": chunks, "compressor": {"id": "gzip", "level": 1}, "shape": list(a.shape)}}


def put(tree, path, value):
    keys = path.split("/")
    for k in keys[:-1]:
        tree = tree.setdefault(k, {})
    tree[keys[-1]] = value


def main(hf_dir, model_dir, step, bfloat16=False):
    hf = load_file(os.path.join(hf_dir, "model.safetensors"))
    names = t5x_names(hf)
    final = os.path.join(model_dir, f"checkpoint_{step}")
    tmp = f"{final}.tmp-{int(time.time())}"
    os.makedirs(tmp)
    rng = np.random.default_rng(step)
    target, param_states = {}, {}
    one = np.zeros((1,), np.float32)
    for hf_name, (path, transpose) in sorted(names.items(), key=lambda kv: kv[1][0]):
        param = hf[hf_name].astype(np.float32)
        if transpose:
            param = np.ascontiguousarray(param.T)
        saved = param.astype(ml_dtypes.bfloat16) if bfloat16 else param
        put(target, path, stored(tmp, "target." + path.replace("/", "."), saved))
        # t5x/adafactor.py: factored when rank >= 2 and the second-largest
        # dimension is >= 128; v_row drops the largest dimension, v_col the
        # second-largest (np.argsort order).
        state = {"v_row": flax_array(one), "v_col": flax_array(one), "v": flax_array(one), "m": flax_array(one)}
        shape = param.shape
        order = np.argsort(shape)
        if len(shape) >= 2 and shape[order[-2]] >= 128:
            d1, d0 = order[-2], order[-1]
            state["v_row"] = flax_array(rng.uniform(0.1, 1.0, np.delete(shape, d0)).astype(np.float32))
            state["v_col"] = flax_array(rng.uniform(0.1, 1.0, np.delete(shape, d1)).astype(np.float32))
        else:
            v = rng.uniform(0.1, 1.0, shape).astype(np.float32)
            state["v"] = stored(tmp, "state.param_states." + path.replace("/", ".") + ".v", v)
        put(param_states, path, state)
    tree = {"version": 3,
            "optimizer": {"state": {"param_states": param_states,
                                    "step": flax_array(np.asarray(step, np.int32))},
                          "target": target}}
    with open(os.path.join(tmp, "checkpoint"), "wb") as f:
        f.write(msgpack.packb(tree, use_bin_type=True))
    os.rename(tmp, final)
    print(f"wrote {final}: {len(names)} parameters{' (bfloat16)' if bfloat16 else ''}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1], sys.argv[2], int(sys.argv[3]), "--bfloat16" in sys.argv[4:]))
