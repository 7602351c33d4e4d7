#!/usr/bin/env python3
"""Writes the ~1 MB mixed text scripts/bench_tokenizer.sh measures (one document per line).

Deterministic: English-like prose from a fixed word list, source code, numbers and the
multilingual/emoji lines of corpus.jsonl, interleaved by a seeded generator.

    make_bench_text.py CORPUS_JSONL OUT_TXT [SIZE_BYTES]
"""
import json
import random
import sys

WORDS = ("the of and to in is was for that with as on by at from this be are it an or which have has "
         "not but were their one all been they more its also new first two time can other after into "
         "model training data learning language tokenizer gradient batch optimizer layer attention weight "
         "during between under people system number however because through world government company "
         "Hello Python Linux GitHub Monday January I'm don't it's we've they'll she'd").split()

CODE = [
    "def forward(self, x):\\n    h = self.norm(x)\\n    return x + self.mlp(h)",
    "for (int i = 0; i < n; ++i) { sum += a[i] * b[i]; }",
    "if err != nil { return fmt.Errorf(\"read %s: %w\", path, err) }",
    "const result = items.filter((x) => x.score > 0.5).map((x) => x.id);",
    "SELECT user_id, COUNT(*) AS n FROM events GROUP BY user_id HAVING n > 10;",
    "{\"learning_rate\": 3e-4, \"batch_size\": 32, \"warmup_steps\": 1000}",
]


def main():
    corpus_path, out_path = sys.argv[1], sys.argv[2]
    size = int(sys.argv[3]) if len(sys.argv) > 3 else 1_000_000
    corpus = [json.loads(l) for l in open(corpus_path, encoding="utf-8") if l.strip()]
    multilingual = [s.replace("\n", " ") for s in corpus if any(ord(c) > 0x2000 for c in s) and s.strip()]
    rng = random.Random(42)
    lines, total = [], 0
    while total < size:
        kind = rng.random()
        if kind < 0.6:
            sentences = []
            for _ in range(rng.randint(1, 4)):
                words = [rng.choice(WORDS) for _ in range(rng.randint(6, 20))]
                words[0] = words[0].capitalize()
                sentences.append(" ".join(words) + rng.choice([".", ".", ",", "!", "?"]))
            line = " ".join(sentences)
        elif kind < 0.75:
            line = rng.choice(CODE)
        elif kind < 0.85:
            line = " ".join(str(rng.randint(0, 10 ** rng.randint(1, 9))) for _ in range(rng.randint(3, 10)))
        else:
            line = rng.choice(multilingual)
        lines.append(line)
        total += len(line.encode("utf-8")) + 1
    with open(out_path, "w", encoding="utf-8") as f:
        f.write("\n".join(lines) + "\n")


if __name__ == "__main__":
    main()
