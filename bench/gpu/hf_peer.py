"""The peer of bench/gpu_bench on one GPU: Hugging Face transformers'
T5ForConditionalGeneration training step (float32 parameters, bfloat16
autocast, torch.optim.AdamW with fused=True), on fixed-shape random batches
of the same size and lengths, timed after warm-up steps with the device
synchronised. Model FLOPs and MFU are counted exactly as gpu_bench counts
them (bench/gpu_bench.cc).

Prints one JSON line.
usage: hf_peer.py --preset PRESET.json [--batch 64] [--inputs 512]
                  [--targets 128] [--steps 20] [--warmup 3] [--peak-tflops 989]
"""
import argparse
import json
import os
import sys
import time

import torch
from transformers import T5Config, T5ForConditionalGeneration

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from flops import train_flops_per_example  # noqa: E402


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--preset", required=True)
    parser.add_argument("--batch", type=int, default=64)
    parser.add_argument("--inputs", type=int, default=512)
    parser.add_argument("--targets", type=int, default=128)
    parser.add_argument("--steps", type=int, default=20)
    parser.add_argument("--warmup", type=int, default=3)
    parser.add_argument("--peak-tflops", type=float, default=989.0)
    args = parser.parse_args()
    p = json.load(open(args.preset))
    config = T5Config(vocab_size=p["vocab_size"], d_model=p["d_model"], d_kv=p["d_kv"], d_ff=p["d_ff"],
                      num_layers=p["num_encoder_layers"], num_decoder_layers=p["num_decoder_layers"],
                      num_heads=p["num_heads"],
                      feed_forward_proj="gated-gelu" if p["feed_forward"] == "GATED_GELU" else "relu",
                      tie_word_embeddings=p["tie_embeddings"], dropout_rate=0.0,
                      decoder_start_token_id=0, pad_token_id=0, eos_token_id=1)
    torch.manual_seed(0)
    device = torch.device("cuda", 0)
    model = T5ForConditionalGeneration(config).to(device)
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-4, fused=True)
    g = torch.Generator().manual_seed(1)
    ids = torch.randint(2, p["vocab_size"], (args.batch, args.inputs), generator=g).to(device)
    labels = torch.randint(2, p["vocab_size"], (args.batch, args.targets), generator=g).to(device)

    def step():
        with torch.autocast("cuda", dtype=torch.bfloat16):
            loss = model(input_ids=ids, labels=labels).loss
        loss.backward()
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)
        return loss

    for _ in range(args.warmup):
        step()
    torch.cuda.synchronize()
    start = time.perf_counter()
    for _ in range(args.steps):
        loss = step()
    torch.cuda.synchronize()
    seconds = time.perf_counter() - start
    examples = args.batch * args.steps / seconds
    flops = train_flops_per_example(p, args.inputs, args.targets) * examples
    print(json.dumps({"system": "hf_transformers", "torch": torch.__version__,
                      "parameters": sum(x.numel() for x in model.parameters()), "batch": args.batch,
                      "inputs": args.inputs, "targets": args.targets, "steps": args.steps,
                      "seconds_per_step": seconds / args.steps,
                      "tokens_per_second": examples * (args.inputs + args.targets),
                      "target_tokens_per_second": examples * args.targets, "model_tflops": flops / 1e12,
                      "mfu": flops / (args.peak_tflops * 1e12), "loss": loss.item()}), flush=True)


if __name__ == "__main__":
    main()
