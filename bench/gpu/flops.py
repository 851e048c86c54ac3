"""Model FLOPs of one training example of a T5 preset, counted as
bench/gpu_bench.cc counts them (the PaLM paper's appendix: 3x the forward's
matrix products, attention in full). `p` is `trainyard model-info --json`."""


def forward_flops_per_example(p, inputs, targets):
    d, hq, f, v = p["d_model"], p["num_heads"] * p["d_kv"], p["d_ff"], p["vocab_size"]
    mlp = 3 * d * f if p["feed_forward"] == "GATED_GELU" else 2 * d * f
    le, ld = p["num_encoder_layers"], p["num_decoder_layers"]
    return (2 * targets * d * v + 2 * inputs * le * (4 * d * hq + mlp) + 2 * targets * ld * (8 * d * hq + mlp)
            + 4 * hq * (le * inputs * inputs + ld * (targets * targets + targets * inputs)))


def train_flops_per_example(p, inputs, targets):
    return 3 * forward_flops_per_example(p, inputs, targets)
