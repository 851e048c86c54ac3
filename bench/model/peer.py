"""The peer of bench/model_bench.cc: the same T5 preset as Hugging Face
transformers' T5ForConditionalGeneration in PyTorch eager (Debian's
python3-torch: the same ATen and BLAS as Trainyard's LibTorch), the same
batch, steps and threads. Prints the same JSON lines.

usage: peer.py --preset NAME [--batch 8] [--inputs 128] [--targets 64]
               [--steps 5] [--warmup 1] [--decode_length 64] [--threads 1]
"""
import argparse
import json
import subprocess
import time

import torch
from transformers import T5Config, T5ForConditionalGeneration


def preset_config(name):
    # One source of truth: Trainyard's own preset table.
    out = subprocess.run([ARGS.trainyard, "model-info", "--preset", name, "--json"],
                         check=True, capture_output=True, text=True).stdout
    p = json.loads(out)
    return T5Config(vocab_size=p["vocab_size"], d_model=p["d_model"], d_kv=p["d_kv"],
                    d_ff=p["d_ff"], num_layers=p["num_encoder_layers"],
                    num_decoder_layers=p["num_decoder_layers"], num_heads=p["num_heads"],
                    feed_forward_proj="gated-gelu" if p["feed_forward"] == "GATED_GELU" else "relu",
                    tie_word_embeddings=p["tie_embeddings"], dropout_rate=0.0,
                    decoder_start_token_id=0, pad_token_id=0, eos_token_id=1)


def main():
    torch.set_num_threads(ARGS.threads)
    config = preset_config(ARGS.preset)
    model = T5ForConditionalGeneration(config)
    torch.manual_seed(0)
    b, li, lt = ARGS.batch, ARGS.inputs, ARGS.targets
    enc = torch.randint(2, config.vocab_size, (b, li))
    labels = torch.randint(2, config.vocab_size, (b, lt))

    def step():
        model.zero_grad(set_to_none=True)
        model(input_ids=enc, labels=labels).loss.backward()

    for _ in range(ARGS.warmup):
        step()
    start = time.perf_counter()
    for _ in range(ARGS.steps):
        step()
    seconds = (time.perf_counter() - start) / ARGS.steps
    print(json.dumps({"system": "pytorch_eager", "preset": ARGS.preset, "measure": "train_fwd_bwd",
                      "batch": b, "inputs": li, "targets": lt, "threads": ARGS.threads,
                      "seconds_per_step": seconds, "tokens_per_second": b * (li + lt) / seconds}),
          flush=True)
    if ARGS.decode_length > 0:
        n = ARGS.decode_length
        # Greedy, then sampling (temperature 1, no top-k), as model_bench.
        for measure, sample in (("greedy_decode", False), ("sample_decode", True)):
            kwargs = dict(max_new_tokens=n, min_new_tokens=n, do_sample=sample, num_beams=1)
            if sample:
                kwargs.update(top_k=0, temperature=1.0)
            with torch.no_grad():
                model.generate(input_ids=enc, **kwargs)  # warm-up
                start = time.perf_counter()
                model.generate(input_ids=enc, **kwargs)
                seconds = time.perf_counter() - start
            print(json.dumps({"system": "pytorch_eager", "preset": ARGS.preset,
                              "measure": measure, "batch": b, "inputs": li,
                              "decode_length": n, "threads": ARGS.threads, "seconds": seconds,
                              "tokens_per_second": b * n / seconds}), flush=True)

if __name__ == "__main__":
    parser = argparse.ArgumentParser()
    parser.add_argument("--preset", default="tiny")
    parser.add_argument("--batch", type=int, default=8)
    parser.add_argument("--inputs", type=int, default=128)
    parser.add_argument("--targets", type=int, default=64)
    parser.add_argument("--steps", type=int, default=5)
    parser.add_argument("--warmup", type=int, default=1)
    parser.add_argument("--decode_length", type=int, default=64)
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--trainyard", default="bazel-bin/client/trainyard")
    ARGS = parser.parse_args()
    main()
