"""Runs optax.adafactor for 20 steps on seeded random parameters and
gradients, and saves every step's parameters for the C++ Adafactor to match.

usage: make_reference.py OUT.safetensors
Parameters cover each Adafactor case: factored 2-D (both orders of the two
dimensions), a 3-D tensor (the two largest dimensions factored), a matrix too
small to factor, and a vector. Two configurations: T5X's defaults
(`default/...`), and momentum 0.9 with weight decay 1e-3 and clipping 0.5
(`momentum/...`).
"""
import sys

import jax
import jax.numpy as jnp
import numpy as np
import optax
from safetensors.numpy import save_file

jax.config.update("jax_enable_x64", False)
SHAPES = {"wide": (130, 260), "tall": (300, 128), "cube": (3, 140, 150),
          "small": (64, 32), "vector": (200,)}
STEPS = 20


def run(prefix, tx, out):
    rng = np.random.default_rng(7)
    params = {k: rng.standard_normal(s).astype(np.float32) for k, s in SHAPES.items()}
    for k, v in params.items():
        out[f"{prefix}/init/{k}"] = v.copy()
    state = tx.init(params)
    for step in range(STEPS):
        grads = {k: (rng.standard_normal(s) * (1 + step % 3)).astype(np.float32)
                 for k, s in SHAPES.items()}
        for k, v in grads.items():
            out[f"{prefix}/grad{step}/{k}"] = v
        updates, state = tx.update(grads, state, params)
        params = optax.apply_updates(params, updates)
        for k, v in params.items():
            out[f"{prefix}/param{step}/{k}"] = np.asarray(v, dtype=np.float32)


def main(path):
    out = {}
    run("default", optax.adafactor(learning_rate=0.01), out)
    run("momentum", optax.adafactor(learning_rate=0.01, momentum=0.9, weight_decay_rate=1e-3,
                                    clipping_threshold=0.5), out)
    save_file(out, path)


if __name__ == "__main__":
    main(sys.argv[1])
