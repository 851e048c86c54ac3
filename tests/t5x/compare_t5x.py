"""Checks a T5X checkpoint written by `trainyard convert --to-t5x` against the
T5X checkpoint it came from (through `--from-t5x`), both read as T5X's
Checkpointer reads one (t5x/checkpoints.py, restore and _read_ts): the
`checkpoint` msgpack with flax's ext arrays, each TensorStore spec made a
ts.Spec, its chunks and compressor dropped, its kvstore path joined to the
checkpoint directory, and opened; then each stored array is opened a second
time with the whole spec, which TensorStore checks against the array's
`.zarray`.

Every leaf of optimizer.target and optimizer.state (the parameters, Adafactor's
v_row, v_col, v and m, the unused [1] slots, the step) must be in both, of the
same dtype and shape, with the same bytes; stored with TensorStore in one
exactly when in the other, under the same dotted name; the version must be 3;
and the model directory must hold only checkpoint_<step> (no temporary
directory).

usage: compare_t5x.py ORIGINAL_STEP_DIR EXPORTED_MODEL_DIR
"""
import os
import sys

import ml_dtypes
import msgpack
import numpy as np
import tensorstore as ts


def read(step_dir):
    """{path: (array, stored dotted name or None)} and the version."""
    def ext(code, data):
        assert code == 1, f"ext {code}"
        shape, dtype, raw = msgpack.unpackb(data, raw=False)
        dtype = ml_dtypes.bfloat16 if dtype == "bfloat16" else np.dtype(dtype)
        return np.frombuffer(raw, dtype).reshape(shape)

    with open(os.path.join(step_dir, "checkpoint"), "rb") as f:
        tree = msgpack.unpackb(f.read(), ext_hook=ext, raw=False)
    flat = {}

    def walk(node, path):
        if isinstance(node, dict) and {"driver", "kvstore", "metadata"} <= node.keys():
            spec = ts.Spec(node).to_json()
            name = spec["kvstore"]["path"]
            del spec["metadata"]["chunks"]
            del spec["metadata"]["compressor"]
            spec["kvstore"]["path"] = os.path.join(step_dir, name)
            array = ts.open(spec, open=True).result().read().result()
            whole = dict(node, kvstore=dict(node["kvstore"], path=os.path.join(step_dir, name)))
            again = ts.open(whole, open=True).result().read().result()
            assert np.array_equal(array, again), path
            flat[path] = (array, name.rstrip("/"))
        elif isinstance(node, dict):
            for k, v in node.items():
                walk(v, f"{path}/{k}" if path else k)
        else:
            flat[path] = (np.asarray(node), None)

    walk(tree["optimizer"], "")
    return flat, tree["version"]


def main(original_dir, model_dir):
    want, _ = read(original_dir)
    step = int(want["state/step"][0])
    problems = []
    entries = sorted(os.listdir(model_dir))
    if entries != [f"checkpoint_{step}"]:
        problems.append(f"{model_dir} holds {entries}, not only checkpoint_{step}")
    got, version = read(os.path.join(model_dir, f"checkpoint_{step}"))
    if version != 3:
        problems.append(f"version {version}")
    for path in sorted(set(want) | set(got)):
        if path not in got:
            problems.append(f"{path}: missing")
            continue
        if path not in want:
            problems.append(f"{path}: not in the original")
            continue
        (a, a_name), (b, b_name) = want[path], got[path]
        if a.dtype != b.dtype or a.shape != b.shape or a.tobytes() != b.tobytes():
            problems.append(f"{path}: {b.dtype}{list(b.shape)} differs from the original's {a.dtype}{list(a.shape)}")
        if a_name != b_name:
            problems.append(f"{path}: stored as {b_name}, the original as {a_name}")
    for p in problems:
        print("FAIL:", p)
    stored = sum(1 for _, name in got.values() if name)
    print(f"{len(got)} leaves compared ({stored} in TensorStore), step {step}: {len(problems)} problem(s)")
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1], sys.argv[2]))
