"""The data-parallel peer of `trainyard local --workers 2`: Hugging Face
transformers' T5ForConditionalGeneration under PyTorch DDP (gloo), one
process per rank with one intra-op thread each (Debian's python3-torch: the
same ATen and BLAS as Trainyard's LibTorch), training on the same tokenised
examples (bench/peer/examples.cc) with the same global batch.

Modes:
  recommended  each batch padded to its longest example, as users of the
               peer batch (DataCollatorForSeq2Seq); HF's Adafactor
  padded       every batch padded to the fixed feature lengths, exactly as
               Trainyard's unpacked batches; AdamW (as Trainyard's run)

Prints one JSON line (rank 0): steps/s, useful (non-padding) target
tokens/s, the exposed all-reduce time per step (the timed steps again
without gradient synchronisation, `no_sync`: the difference), and each
rank's peak RSS.

usage: ddp_peer.py --trainyard BIN --examples FILE --preset NAME --mode MODE
                   [--batch 32] [--inputs 16] [--targets 32] [--steps 20]
                   [--warmup 3] [--world 2]
"""
import argparse
import json
import os
import random
import resource
import socket
import subprocess
import time

import torch
import torch.distributed as dist
import torch.multiprocessing as mp
from torch.nn.parallel import DistributedDataParallel
from transformers import T5Config, T5ForConditionalGeneration
from transformers.optimization import Adafactor


def preset_config(trainyard, name):
    p = json.loads(subprocess.run([trainyard, "model-info", "--preset", name, "--json"], check=True,
                                  capture_output=True, text=True).stdout)
    return T5Config(vocab_size=p["vocab_size"], d_model=p["d_model"], d_kv=p["d_kv"], d_ff=p["d_ff"],
                    num_layers=p["num_encoder_layers"], num_decoder_layers=p["num_decoder_layers"],
                    num_heads=p["num_heads"],
                    feed_forward_proj="gated-gelu" if p["feed_forward"] == "GATED_GELU" else "relu",
                    tie_word_embeddings=p["tie_embeddings"], dropout_rate=0.0,
                    decoder_start_token_id=0, pad_token_id=0, eos_token_id=1)


def make_batch(examples, args):
    """Input ids, attention mask, labels (-100 on padding): fixed lengths in
    `padded` mode, the batch's longest in `recommended` mode; both cut to
    the feature lengths as Trainyard does."""
    inputs = [e["inputs"][:args.inputs] for e in examples]
    targets = [e["targets"][:args.targets] for e in examples]
    li = args.inputs if args.mode == "padded" else max(len(x) for x in inputs)
    lt = args.targets if args.mode == "padded" else max(len(x) for x in targets)
    ids = torch.zeros(len(examples), li, dtype=torch.long)
    labels = torch.full((len(examples), lt), -100, dtype=torch.long)
    for r, (x, y) in enumerate(zip(inputs, targets)):
        ids[r, :len(x)] = torch.tensor(x)
        labels[r, :len(y)] = torch.tensor(y)
    return ids, (ids != 0).long(), labels


def worker(rank, args, port, results):
    torch.set_num_threads(1)
    # Denormal floats: without flushing them, a freshly initialised HF T5
    # runs its matrix products up to 14x slower on this CPU (t5_1_1_small:
    # 23.6 s against 1.7 s per forward+backward, aten::mm 96 % of the time).
    # The peer gets the fast setting.
    torch.set_flush_denormal(True)
    os.environ["OMP_NUM_THREADS"] = "1"
    dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{port}", rank=rank, world_size=args.world)
    torch.manual_seed(args.seed)
    model = DistributedDataParallel(T5ForConditionalGeneration(preset_config(args.trainyard, args.preset)))
    if args.mode == "recommended":
        optimizer = Adafactor(model.parameters(), lr=1e-3, scale_parameter=False, relative_step=False,
                              warmup_init=False)
    else:
        optimizer = torch.optim.AdamW(model.parameters(), lr=1e-3)
    with open(args.examples) as f:
        examples = [json.loads(line) for line in f]
    random.Random(args.seed).shuffle(examples)
    per_rank = args.batch // args.world
    mine = examples[rank::args.world]
    total = args.warmup + 2 * args.steps
    if len(mine) < total * per_rank:
        raise SystemExit(f"{args.examples}: {len(mine)} examples for rank {rank}, {total * per_rank} needed")
    batches = [make_batch(mine[i * per_rank:(i + 1) * per_rank], args) for i in range(total)]

    def step(batch, sync=True):
        ids, mask, labels = batch
        optimizer.zero_grad(set_to_none=True)
        if sync:
            model(input_ids=ids, attention_mask=mask, labels=labels).loss.backward()
        else:
            with model.no_sync():
                model(input_ids=ids, attention_mask=mask, labels=labels).loss.backward()
        optimizer.step()

    for b in batches[:args.warmup]:
        step(b)
    timed = batches[args.warmup:args.warmup + args.steps]
    dist.barrier()
    start = time.perf_counter()
    for b in timed:
        step(b)
    dist.barrier()
    synced = time.perf_counter() - start
    # The same amount of work without the all-reduce: what it costs when not
    # hidden behind the backward pass.
    alone = batches[args.warmup + args.steps:]
    dist.barrier()
    start = time.perf_counter()
    for b in alone:
        step(b, sync=False)
    dist.barrier()
    unsynced = time.perf_counter() - start

    useful = torch.tensor([float(sum(int((b[2] != -100).sum()) for b in timed))])
    dist.all_reduce(useful)
    rss = torch.tensor([resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024.0])
    gathered = [torch.zeros(1) for _ in range(args.world)]
    dist.all_gather(gathered, rss)
    if rank == 0:
        results.put({
            "system": "pytorch_ddp", "mode": args.mode, "preset": args.preset, "world": args.world,
            "threads": 1, "batch": args.batch, "steps": args.steps,
            "seconds_per_step": synced / args.steps,
            "steps_per_second": args.steps / synced,
            "target_tokens_per_second": useful.item() / synced,
            "exposed_allreduce_seconds_per_step": max(0.0, (synced - unsynced) / args.steps),
            "peak_rss_mb": [round(x.item(), 1) for x in gathered],
        })
    dist.destroy_process_group()


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--trainyard", required=True)
    parser.add_argument("--examples", required=True)
    parser.add_argument("--preset", default="tiny")
    parser.add_argument("--mode", choices=["recommended", "padded"], required=True)
    parser.add_argument("--batch", type=int, default=32)
    parser.add_argument("--inputs", type=int, default=16)
    parser.add_argument("--targets", type=int, default=32)
    parser.add_argument("--steps", type=int, default=20)
    parser.add_argument("--warmup", type=int, default=3)
    parser.add_argument("--world", type=int, default=2)
    parser.add_argument("--seed", type=int, default=42)
    args = parser.parse_args()
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    results = mp.get_context("spawn").SimpleQueue()
    mp.spawn(worker, args=(args, port, results), nprocs=args.world, join=True)
    print(json.dumps(results.get()), flush=True)


if __name__ == "__main__":
    main()
