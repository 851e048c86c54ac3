"""evaluation/metric_fns against sacrebleu (corpus BLEU, its default 13a
tokenisation and exp smoothing) and rouge-score (ROUGE-1/2/L F-measures,
no stemming) on corpora with punctuation, numbers, dashes, quotes, entities,
non-ASCII text and empty predictions."""
import argparse
import json
import os
import random
import subprocess
import sys
import unittest

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "testing"))
import junit  # noqa: E402  (tests/testing: each test a case in $XML_OUTPUT_FILE)

import sacrebleu
from rouge_score import rouge_scorer

TOOL = None

WORDS = ["the", "cat", "sat", "on", "a", "mat", "dog", "ran", "fast", "and", "slow", "Über", "naïve", "café",
         "3.14", "1,000", "5-6", "well-known", "don't", "(maybe)", "\"quoted\"", "&amp;", "x/y", "end.", "A,",
         "e-mail", "100%", "$5", "C++", "#tag", "@home", "semi;colon", "q?", "wow!", "日本語", "—dash"]


def corpus(seed, n):
    rng = random.Random(seed)
    rows = []
    for _ in range(n):
        target = " ".join(rng.choice(WORDS) for _ in range(rng.randint(1, 14)))
        words = target.split()
        mode = rng.random()
        if mode < 0.1:
            prediction = ""
        elif mode < 0.3:
            prediction = target
        else:
            prediction = " ".join(w if rng.random() < 0.6 else rng.choice(WORDS)
                                  for w in words + ([rng.choice(WORDS)] if rng.random() < 0.5 else []))
        rows.append({"target": target, "prediction": prediction})
    return rows


def ours(rows):
    out = subprocess.run([TOOL], input="".join(json.dumps(r) + "\n" for r in rows), capture_output=True,
                         text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    return json.loads(out.stdout)


class MetricParityTest(unittest.TestCase):
    def test_bleu_and_rouge_match_the_reference_implementations(self):
        scorer = rouge_scorer.RougeScorer(["rouge1", "rouge2", "rougeL"], use_stemmer=False)
        for seed, n in [(1, 1), (2, 5), (3, 50), (4, 200)]:
            rows = corpus(seed, n)
            got = ours(rows)
            refs = [r["target"] for r in rows]
            preds = [r["prediction"] for r in rows]
            bleu = sacrebleu.corpus_bleu(preds, [refs]).score
            print(f"seed {seed}, {n} rows: bleu ours {got['bleu']:.6f} sacrebleu {bleu:.6f}")
            self.assertAlmostEqual(got["bleu"], bleu, delta=1e-9 + 1e-9 * abs(bleu))
            for key in ("rouge1", "rouge2", "rougeL"):
                want = 100 * sum(scorer.score(t, p)[key].fmeasure for t, p in zip(refs, preds)) / n
                self.assertAlmostEqual(got[key], want, delta=1e-9, msg=f"seed {seed} {key}")

    def test_tokenisation_edge_cases_match_sacrebleu(self):
        for target, prediction in [("Hello, world.", "Hello, world."), ("3.14 and 1,000", "3.14 and 1,000 ."),
                                   ("pages 5-6", "pages 5 - 6"), ("&quot;x&quot; &lt; y", "\"x\" < y"),
                                   ("a-b. c,d", "a-b . c , d")]:
            got = ours([{"target": target, "prediction": prediction}])
            bleu = sacrebleu.corpus_bleu([prediction], [[target]]).score
            self.assertAlmostEqual(got["bleu"], bleu, delta=1e-9, msg=f"{target!r} / {prediction!r}")


def main():
    global TOOL
    parser = argparse.ArgumentParser()
    parser.add_argument("--tool", required=True)
    args, rest = parser.parse_known_args()
    TOOL = args.tool
    junit.main([sys.argv[0], *rest])


if __name__ == "__main__":
    main()
