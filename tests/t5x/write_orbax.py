"""Writes a T5X checkpoint in Orbax's format, as T5X's
OrbaxCheckpointManagerInterface saves one (t5x/checkpoints.py): an Orbax
CheckpointManager over MODEL_DIR with step prefix "checkpoint" and a `state`
item saved by Orbax's PyTreeCheckpointHandler, holding the train state's
state dict ({"target": params, "state": {"step", "param_states"}}), from a
Hugging Face T5 model. The parameters, under T5X's names and layouts, and
T5X Adafactor's statistics for each (as write_t5x.py makes them: factored
v_row/v_col or a full v, the unused slots zeros of shape [1], random
positive values) and the step (an int32 scalar).

usage: write_orbax.py HF_DIR MODEL_DIR STEP [--bfloat16] [--no-ocdbt] [--zarr3]
  --bfloat16: parameters saved as bfloat16 (T5X's save_dtype)
  --no-ocdbt: PyTreeCheckpointHandler(use_ocdbt=False), a zarr directory per
              leaf; by default use_ocdbt=True, as T5X saves
  --zarr3:    PyTreeCheckpointHandler(use_zarr3=True), zarr v3 arrays (sharded,
              as Orbax writes them); by default zarr v2, Orbax's default
"""
import os
import sys

import ml_dtypes
import numpy as np
import orbax.checkpoint as ocp
from safetensors.numpy import load_file

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from write_t5x import put, t5x_names  # noqa: E402


def state_dict(hf_dir, step, bfloat16):
    hf = load_file(os.path.join(hf_dir, "model.safetensors"))
    rng = np.random.default_rng(step + 1)
    target, param_states = {}, {}
    for hf_name, (path, transpose) in sorted(t5x_names(hf).items(), key=lambda kv: kv[1][0]):
        param = hf[hf_name].astype(np.float32)
        if transpose:
            param = np.ascontiguousarray(param.T)
        put(target, path, param.astype(ml_dtypes.bfloat16) if bfloat16 else param)
        # t5x/adafactor.py: factored when rank >= 2 and the second-largest
        # dimension is >= 128 (v_row drops the largest dimension, v_col the
        # second-largest); the unused slots are zeros of shape [1].
        one = np.zeros((1,), np.float32)
        state = {"v_row": one, "v_col": one, "v": one, "m": one}
        shape = param.shape
        order = np.argsort(shape)
        if len(shape) >= 2 and shape[order[-2]] >= 128:
            state["v_row"] = rng.uniform(0.1, 1.0, np.delete(shape, order[-1])).astype(np.float32)
            state["v_col"] = rng.uniform(0.1, 1.0, np.delete(shape, order[-2])).astype(np.float32)
        else:
            state["v"] = rng.uniform(0.1, 1.0, shape).astype(np.float32)
        put(param_states, path, state)
    return {"target": target, "state": {"param_states": param_states, "step": np.asarray(step, np.int32)}}


def main(hf_dir, model_dir, step, bfloat16=False, ocdbt=True, zarr3=False):
    state = state_dict(hf_dir, step, bfloat16)
    manager = ocp.CheckpointManager(
        os.path.abspath(model_dir),
        item_handlers={"state": ocp.PyTreeCheckpointHandler(use_ocdbt=ocdbt, use_zarr3=zarr3)},
        options=ocp.CheckpointManagerOptions(step_prefix="checkpoint", enable_async_checkpointing=False))
    manager.save(step, args=ocp.args.Composite(state=ocp.args.PyTreeSave(state)), force=True)
    manager.wait_until_finished()
    manager.close()
    final = os.path.join(model_dir, f"checkpoint_{step}", "state")
    has_manifest = os.path.exists(os.path.join(final, "manifest.ocdbt"))
    if has_manifest != ocdbt:
        print(f"FAIL: {final}: manifest.ocdbt {'present' if has_manifest else 'missing'} with use_ocdbt={ocdbt}")
        return 1
    print(f"wrote {final} (use_ocdbt={ocdbt}, use_zarr3={zarr3}){' (bfloat16)' if bfloat16 else ''}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1], sys.argv[2], int(sys.argv[3]), "--bfloat16" in sys.argv[4:],
                  "--no-ocdbt" not in sys.argv[4:], "--zarr3" in sys.argv[4:]))
