"""A model's own vocabulary through Trainyard, against Hugging Face
transformers: a SentencePiece vocabulary trained here on text of our own, a
randomly initialised HF T5 saved with it as T5Tokenizer's files, converted
with `trainyard convert --from-hf` (which takes the directory's spiece.model),
then

  - `trainyard score` on the checkpoint equals transformers' log-likelihoods
    (to 1e-4), as `--vocab` given explicitly does;
  - `trainyard predict` decodes what transformers' greedy search decodes;
  - an INFERENCE job (`trainyard local`) whose task names no vocabulary scores
    its targets in the checkpoint's vocabulary, equal to transformers';
  - a FINETUNING job whose task has another vocabulary is refused, naming
    both files;
  - `trainyard convert --to-hf` writes the tokenizer back:
    `AutoTokenizer.from_pretrained` loads it (the fast tokenizer from
    tokenizer.json, the slow one from spiece.model) and tokenises as the
    original, and the exported model scores as transformers did.

Real processes, bounded waits; needs the test virtualenv (transformers,
sentencepiece).

usage: vocabulary_test.py --trainyard PATH
"""
import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
import unittest

import sentencepiece as spm
import torch
from transformers import AutoTokenizer, T5Config, T5ForConditionalGeneration, T5Tokenizer

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "testing"))
import junit  # noqa: E402  (tests/testing: each test a case in $XML_OUTPUT_FILE)

TRAINYARD = None
PIECES = 300
EXTRA_IDS = 20
VOCAB_SIZE = 384  # the model's embeddings: the pieces and the sentinels fit

EXAMPLES = [
    ("the quick brown fox", "jumps over the lazy dog"),
    ("translate to rhyme: a cat sat on the mat", "a hat that is flat"),
    ("summarize: rivers carry water from the mountains to the sea", "rivers flow seaward"),
    ("question: what colour is the sky on a clear day?", "blue, mostly"),
    ("an unseen word: zyxwvut", "quokka"),
]


def corpus():
    """Text for the vocabulary: Debian's licence texts (their licences permit
    verbatim copies; tests/workloads uses them too) and sentences of our own."""
    lines = []
    for path in ("/usr/share/common-licenses/GPL-3", "/usr/share/common-licenses/Apache-2.0"):
        with open(path) as f:
            lines += [" ".join(p.split()) for p in f.read().split("\n\n") if p.strip()]
    subjects = ["the quick fox", "a lazy dog", "the river", "a small cat", "the mountain", "our sky", "a flat hat"]
    verbs = ["jumps over", "flows to", "sits on", "looks at", "carries", "rhymes with", "summarizes"]
    objects = ["the sea", "the mat", "a brown dog", "the water", "a clear day", "the question", "blue colour"]
    for i, s in enumerate(subjects):
        for j, v in enumerate(verbs):
            for k, o in enumerate(objects):
                lines.append(f"{s} {v} {o}, mostly on day {i * 49 + j * 7 + k}.")
    return lines


def run(*args, timeout=300, cwd=None):
    started = time.time()
    r = subprocess.run([TRAINYARD, *args], capture_output=True, text=True, timeout=timeout, cwd=cwd)
    print(f"trainyard {args[0]}: exit {r.returncode} in {time.time() - started:.1f} s")
    return r


def log_likelihoods(model, tokenizer, examples):
    """Transformers' log-likelihood of each target given its input (EOS
    appended to both, as T5's tasks do)."""
    out = []
    with torch.no_grad():
        for inputs, target in examples:
            ids = tokenizer(inputs, return_tensors="pt").input_ids
            labels = tokenizer(target, return_tensors="pt").input_ids
            loss = model(input_ids=ids, labels=labels).loss.item()  # mean over the target tokens
            out.append(-loss * labels.shape[1])
    return out


class VocabularyTest(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        torch.set_num_threads(1)
        cls.dir = tempfile.mkdtemp(prefix="vocabulary-", dir=os.environ.get("TEST_TMPDIR"))
        text = os.path.join(cls.dir, "corpus.txt")
        with open(text, "w") as f:
            f.write("\n".join(corpus()) + "\n")
        cls.spm = os.path.join(cls.dir, "mine.model")
        spm.SentencePieceTrainer.train(
            input=text, model_prefix=cls.spm[: -len(".model")], vocab_size=PIECES, model_type="unigram",
            pad_id=0, eos_id=1, unk_id=2, bos_id=-1, character_coverage=1.0, minloglevel=2)

        torch.manual_seed(42)
        config = T5Config(vocab_size=VOCAB_SIZE, d_model=64, d_kv=16, d_ff=128, num_layers=2, num_decoder_layers=2,
                          num_heads=4, relative_attention_num_buckets=32, relative_attention_max_distance=128,
                          dropout_rate=0.0, feed_forward_proj="gated-gelu", tie_word_embeddings=False,
                          decoder_start_token_id=0, pad_token_id=0, eos_token_id=1)
        model = T5ForConditionalGeneration(config).eval()
        with torch.no_grad():  # a realistic, non-degenerate softmax (tests/hf/make_reference.py)
            for p in model.parameters():
                if p.dim() > 1:
                    p.mul_(0.5)
            # Decoding stays among the pieces (padding, sentinels and the
            # unused rows get logit 0, below the best piece's), so that
            # predictions are text both decoders spell alike.
            model.lm_head.weight[PIECES:] = 0
            model.lm_head.weight[0] = 0
        cls.model = model
        cls.hf = os.path.join(cls.dir, "hf")
        model.save_pretrained(cls.hf, safe_serialization=True)
        cls.tokenizer = T5Tokenizer(vocab_file=cls.spm, extra_ids=EXTRA_IDS, legacy=True)
        cls.tokenizer.save_pretrained(cls.hf)
        cls.reference = log_likelihoods(model, cls.tokenizer, EXAMPLES)
        print("transformers' log-likelihoods:", [round(x, 4) for x in cls.reference])

        cls.examples = os.path.join(cls.dir, "examples.jsonl")
        with open(cls.examples, "w") as f:
            for inputs, target in EXAMPLES:
                f.write(json.dumps({"inputs": inputs, "targets": target}) + "\n")
        cls.ckpt = os.path.join(cls.dir, "ckpt")
        r = run("convert", "--from-hf", cls.hf, "--out", cls.ckpt)
        assert r.returncode == 0, r.stdout + r.stderr
        cls.convert_output = r.stdout

    def score(self, checkpoint):
        r = run("score", "--checkpoint", checkpoint, "--examples", self.examples, "--json", "--input-length", "64",
                "--target-length", "32")
        self.assertEqual(r.returncode, 0, r.stdout + r.stderr)
        return [json.loads(line)["score"] for line in r.stdout.splitlines()]

    def assert_scores_equal(self, ours, reference):
        print("ours:", [round(x, 4) for x in ours])
        self.assertEqual(len(ours), len(reference))
        for mine, theirs in zip(ours, reference):
            self.assertAlmostEqual(mine, theirs, delta=1e-4)

    def test_convert_takes_the_directorys_spiece_model_and_score_equals_transformers(self):
        self.assertIn(f"vocabulary {self.hf}/spiece.model with {EXTRA_IDS} extra ids", self.convert_output)
        with open(os.path.join(self.ckpt, "vocabulary.model"), "rb") as a, open(self.spm, "rb") as b:
            self.assertEqual(a.read(), b.read())
        self.assert_scores_equal(self.score(self.ckpt), self.reference)

    def test_an_explicit_vocab_is_stored_and_used(self):
        bare = os.path.join(self.dir, "hf_bare")  # the model without its tokenizer files
        os.makedirs(bare, exist_ok=True)
        for name in ("config.json", "model.safetensors"):
            shutil.copy(os.path.join(self.hf, name), bare)
        r = run("convert", "--from-hf", bare, "--out", os.path.join(self.dir, "ckpt_no_vocab"))
        self.assertEqual(r.returncode, 0, r.stderr)
        self.assertIn("no vocabulary: give --vocab SPM_MODEL", r.stdout)
        given = os.path.join(self.dir, "ckpt_given")
        r = run("convert", "--from-hf", bare, "--vocab", self.spm, "--out", given)
        self.assertEqual(r.returncode, 0, r.stderr)
        self.assert_scores_equal(self.score(given), self.reference)

    def test_predict_decodes_in_the_checkpoints_vocabulary(self):
        length = 6
        r = run("predict", "--checkpoint", self.ckpt, "--examples", self.examples, "--json", "--input-length", "64",
                "--target-length", "32", "--max-decode-length", str(length))
        self.assertEqual(r.returncode, 0, r.stdout + r.stderr)
        ours = [json.loads(line) for line in r.stdout.splitlines()]
        self.assertEqual(len(ours), len(EXAMPLES))
        for (inputs, _), mine in zip(EXAMPLES, ours):
            ids = self.tokenizer(inputs, return_tensors="pt").input_ids
            with torch.no_grad():
                generated = self.model.generate(input_ids=ids, max_new_tokens=length, do_sample=False, num_beams=1)
            tokens = generated[0, 1:].tolist()
            if 1 in tokens:
                tokens = tokens[: tokens.index(1)]
            self.assertTrue(tokens and all(0 < t < PIECES for t in tokens), tokens)
            self.assertEqual(mine["prediction"], self.tokenizer.decode(tokens), (inputs, tokens))

    def local(self, name, spec):
        path = os.path.join(self.dir, name + ".json")
        with open(path, "w") as f:
            json.dump(spec, f)
        return run("local", path, "--state-dir", os.path.join(self.dir, "state-" + name), timeout=300, cwd=self.dir)

    def job_spec(self, name, kind):
        tsv = os.path.join(self.dir, "examples.tsv")
        with open(tsv, "w") as f:
            f.write("".join(f"{i}\t{t}\n" for i, t in EXAMPLES))
        config = json.load(open(os.path.join(self.hf, "config.json")))
        return {
            "name": name,
            "kind": kind,
            "model": {"config": {
                "vocab_size": config["vocab_size"], "d_model": config["d_model"], "num_heads": config["num_heads"],
                "d_kv": config["d_kv"], "d_ff": config["d_ff"], "num_encoder_layers": config["num_layers"],
                "num_decoder_layers": config["num_decoder_layers"], "feed_forward": "GATED_GELU",
                "tie_embeddings": False, "dropout_rate": 0.0}},
            "task": "mine",
            # No vocabulary: the bundled one, which the checkpoint's replaces
            # for inference and which fine-tuning may not use.
            "task_definitions": [{"name": "mine", "splits": {"train": tsv, "validation": tsv}}],
            "feature_lengths": {"inputs": 64, "targets": 32},
            "batch_size": len(EXAMPLES),  # one full batch
            "num_workers": 1,
            "output_dir": os.path.join(self.dir, "out-" + name),
            "restore": {"mode": "SPECIFIC", "path": self.ckpt},
        }

    def test_an_inference_job_scores_in_the_checkpoints_vocabulary(self):
        spec = self.job_spec("infer", "INFERENCE")
        spec["inference"] = {"split": "validation", "max_decode_length": 4}
        r = self.local("infer", spec)
        self.assertEqual(r.returncode, 0, r.stdout + r.stderr)
        with open(os.path.join(spec["output_dir"], "inference", "mine-validation.jsonl")) as f:
            lines = [json.loads(line) for line in f]
        self.assertEqual(len(lines), len(EXAMPLES), lines)
        self.assertTrue(lines[0]["input"].startswith("the quick brown fox"), lines[0])
        self.assert_scores_equal([x["target_score"] for x in lines], self.reference)

    def test_a_finetuning_job_with_another_vocabulary_is_refused_naming_both(self):
        spec = self.job_spec("finetune", "FINETUNING")
        spec["total_steps"] = 2
        r = self.local("finetune", spec)
        self.assertNotEqual(r.returncode, 0, r.stdout)
        self.assertIn("FAILED", r.stdout + r.stderr)
        self.assertIn("digits_to_words.model is not " + os.path.join(self.ckpt, "vocabulary.model"),
                      r.stdout + r.stderr)
        self.assertFalse(os.path.exists(os.path.join(spec["output_dir"], "checkpoint_2")))

    def test_to_hf_writes_a_tokenizer_that_transformers_loads(self):
        back = os.path.join(self.dir, "back")
        r = run("convert", "--checkpoint", self.ckpt, "--to-hf", back)
        self.assertEqual(r.returncode, 0, r.stdout + r.stderr)
        for name in ("spiece.model", "tokenizer.json", "tokenizer_config.json", "special_tokens_map.json"):
            self.assertTrue(os.path.exists(os.path.join(back, name)), name)
        fast = AutoTokenizer.from_pretrained(back)
        slow = AutoTokenizer.from_pretrained(back, use_fast=False)
        self.assertTrue(fast.is_fast)
        self.assertFalse(slow.is_fast)
        texts = [t for pair in EXAMPLES for t in pair] + ["two  spaces,   three", "ünïcödé ＦＵＬＬＷＩＤＴＨ"]
        for text in texts:
            want = self.tokenizer(text).input_ids
            self.assertEqual(slow(text).input_ids, want, text)
            self.assertEqual(fast(text).input_ids, want, text)
        self.assertEqual(len(fast), PIECES + EXTRA_IDS)
        self.assertEqual(fast.convert_tokens_to_ids("<extra_id_0>"), PIECES + EXTRA_IDS - 1)
        model = T5ForConditionalGeneration.from_pretrained(back).eval()
        self.assert_scores_equal(log_likelihoods(model, fast, EXAMPLES), self.reference)


def main():
    global TRAINYARD
    parser = argparse.ArgumentParser()
    parser.add_argument("--trainyard", required=True)
    args, rest = parser.parse_known_args()
    TRAINYARD = os.path.abspath(args.trainyard)
    junit.main([sys.argv[0], *rest])


if __name__ == "__main__":
    main()
