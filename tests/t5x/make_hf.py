"""Random T5 models in Hugging Face's layout, the source of the T5X
checkpoints the import test writes: a T5 1.0 (relu, tied embeddings) and a
T5.1.1 (gated GELU, separate lm_head) config whose attention kernels are
square and large enough (128) for Adafactor to factor them.

usage: make_hf.py OUT_DIR    (writes OUT_DIR/v1_0 and OUT_DIR/v1_1)
"""
import os
import sys

import torch
from transformers import T5Config, T5ForConditionalGeneration


def main(out):
    for name, ffn, tied in (("v1_0", "relu", True), ("v1_1", "gated-gelu", False)):
        torch.manual_seed(7 if tied else 11)
        config = T5Config(vocab_size=512, d_model=128, d_kv=32, d_ff=256, num_layers=2, num_decoder_layers=2,
                          num_heads=4, relative_attention_num_buckets=32, relative_attention_max_distance=128,
                          dropout_rate=0.0, feed_forward_proj=ffn, tie_word_embeddings=tied,
                          decoder_start_token_id=0, pad_token_id=0, eos_token_id=1)
        model = T5ForConditionalGeneration(config)
        # Layer-norm scales away from their initial ones, so that a scale
        # put in the wrong place shows.
        with torch.no_grad():
            for n, p in model.named_parameters():
                if "layer_norm" in n:
                    p.uniform_(0.5, 1.5)
        model.save_pretrained(os.path.join(out, name), safe_serialization=True)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1]))
