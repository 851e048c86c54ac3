"""Builds randomly initialised Hugging Face T5 models (a T5 v1.0 and a T5.1.1
config) and the reference outputs Trainyard must reproduce.

usage: make_reference.py OUT_DIR
For each variant NAME in (v1_0, v1_1): OUT_DIR/NAME/{config.json,
model.safetensors} from save_pretrained, and OUT_DIR/NAME/reference.safetensors
with a batch (encoder_input_tokens, decoder_input_tokens,
decoder_target_tokens), transformers' logits and loss on it, and its greedy
decoding (`greedy`, without the decoder start token, 0 after EOS).
"""
import os
import sys

import torch
from safetensors.torch import save_file
from transformers import T5Config, T5ForConditionalGeneration

VARIANTS = {
    "v1_0": dict(feed_forward_proj="relu", tie_word_embeddings=True),
    "v1_1": dict(feed_forward_proj="gated-gelu", tie_word_embeddings=False),
}


def main(out_dir):
    torch.set_num_threads(1)
    for name, variant in VARIANTS.items():
        torch.manual_seed(1234)
        config = T5Config(vocab_size=512, d_model=64, d_kv=16, d_ff=128, num_layers=2,
                          num_decoder_layers=3, num_heads=4, relative_attention_num_buckets=32,
                          relative_attention_max_distance=128, dropout_rate=0.0,
                          decoder_start_token_id=0, pad_token_id=0, eos_token_id=1, **variant)
        model = T5ForConditionalGeneration(config).eval()
        # The default N(0, 1) scale makes every logit huge; smaller weights
        # give a realistic, non-degenerate softmax.
        with torch.no_grad():
            for p in model.parameters():
                if p.dim() > 1:
                    p.mul_(0.5)
            # With tied embeddings a random model echoes its input token; a
            # small pad embedding keeps greedy decoding from echoing the
            # decoder start token (0) forever.
            model.shared.weight[0].mul_(0.1)
        path = os.path.join(out_dir, name)
        model.save_pretrained(path, safe_serialization=True)

        enc = torch.randint(2, 512, (3, 9))
        enc[1, 6:] = 0
        enc[2, 8:] = 0
        labels = torch.randint(2, 512, (3, 5))
        labels[:, -1] = 1
        decoder_input = model._shift_right(labels)
        with torch.no_grad():
            out = model(input_ids=enc, attention_mask=(enc > 0).long(),
                        decoder_input_ids=decoder_input, labels=labels)
            generated = model.generate(input_ids=enc, attention_mask=(enc > 0).long(),
                                       max_new_tokens=8, do_sample=False, num_beams=1)
        greedy = torch.zeros((3, 8), dtype=torch.long)
        greedy[:, : generated.shape[1] - 1] = generated[:, 1:]
        save_file({
            "encoder_input_tokens": enc,
            "decoder_input_tokens": decoder_input,
            "decoder_target_tokens": labels,
            "logits": out.logits.contiguous(),
            "loss": out.loss.reshape(1),
            "greedy": greedy,
        }, os.path.join(path, "reference.safetensors"))
        print(f"{name}: loss {out.loss.item():.6f}, greedy {greedy.tolist()}")


if __name__ == "__main__":
    main(sys.argv[1])
