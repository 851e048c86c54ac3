"""Loads a checkpoint that Trainyard exported in Hugging Face's layout into
transformers and checks it reproduces Trainyard's logits.

usage: verify_export.py EXPORT_DIR OURS.safetensors REFERENCE.safetensors
Exit 0 if the model loads with no missing or unexpected weights and its logits
on the reference batch are within 1e-4 of Trainyard's.
"""
import sys

import torch
from safetensors.torch import load_file
from transformers import T5ForConditionalGeneration


def main(export_dir, ours_path, reference_path):
    model, info = T5ForConditionalGeneration.from_pretrained(export_dir, output_loading_info=True)
    model.eval()
    problems = {k: v for k, v in info.items() if v and k != "error_msgs"}
    if problems or info.get("error_msgs"):
        print(f"FAIL: loading {export_dir}: {info}")
        return 1
    ref = load_file(reference_path)
    ours = load_file(ours_path)["logits"]
    enc = ref["encoder_input_tokens"]
    with torch.no_grad():
        logits = model(input_ids=enc, attention_mask=(enc > 0).long(),
                       decoder_input_ids=ref["decoder_input_tokens"]).logits
    diff = (logits - ours).abs().max().item()
    print(f"exported {export_dir}: max |logits - ours| = {diff:.3g}")
    return 0 if diff <= 1e-4 else 1


if __name__ == "__main__":
    sys.exit(main(*sys.argv[1:4]))
