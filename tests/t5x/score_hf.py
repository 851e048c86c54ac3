"""The model imported from T5X, handed back to transformers: its Hugging
Face export holds the tensors of the model the T5X checkpoint was made from
(bfloat16-rounded when T5X saved bfloat16), and scores every example as
`trainyard score` did on the imported checkpoint (sum of the target tokens'
log-probabilities, EOS included; SentencePiece tokens as Trainyard's
vocabulary makes them).

usage: score_hf.py EXPORTED_HF_DIR ORIGINAL_HF_DIR SPM_MODEL OURS.jsonl [--bfloat16]
"""
import json
import sys

import sentencepiece
import torch
from safetensors.torch import load_file
from transformers import T5ForConditionalGeneration


def main(exported, original, spm, ours_path, bfloat16):
    problems = []
    a, b = load_file(f"{exported}/model.safetensors"), load_file(f"{original}/model.safetensors")
    for name, t in a.items():
        want = b[name].to(torch.bfloat16).to(torch.float32) if bfloat16 else b[name]
        if not torch.equal(t, want):
            problems.append(f"{name}: the export differs from the original model's tensor")
    model = T5ForConditionalGeneration.from_pretrained(exported).eval()
    sp = sentencepiece.SentencePieceProcessor(model_file=spm)
    worst = 0.0
    lines = [json.loads(line) for line in open(ours_path)]
    for e in lines:
        inputs = torch.tensor([sp.encode(e["input"]) + [1]])
        targets = torch.tensor([sp.encode(e["target"]) + [1]])
        with torch.no_grad():
            logits = model(input_ids=inputs, labels=targets).logits
        score = torch.log_softmax(logits.double(), -1).gather(-1, targets.unsqueeze(-1)).sum().item()
        worst = max(worst, abs(score - e["score"]))
        if abs(score - e["score"]) > 1e-4 * max(1.0, abs(score)):
            problems.append(f"{e['input']!r} -> {e['target']!r}: transformers {score:.6f}, trainyard {e['score']:.6f}")
    for p in problems:
        print("FAIL:", p)
    print(f"{len(a)} tensors and {len(lines)} scores compared (max |difference| {worst:.3g}): {len(problems)} problem(s)")
    return 1 if problems or not lines else 0


if __name__ == "__main__":
    sys.exit(main(*sys.argv[1:5], "--bfloat16" in sys.argv[5:]))
