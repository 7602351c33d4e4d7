#!/usr/bin/python3
"""Fixture step: writes a reproducible corpus of random strings for the golden tests.

    make_fuzz_corpus.py OUT_JSONL [COUNT]

Each string joins 1-12 random parts: runs of code points drawn from every character assigned
in Unicode 14 below U+30000 (letters, marks, digits, symbols, whitespace of all scripts),
special-token text, ASCII words, contractions and space runs. Unicode 14 is the version of
Oniguruma 6.9.8's tables (what the Rust tokenizers crate and ctune run); newer characters are
classified differently by the JavaScript reference (see test_pre_tokenizers.cpp). A fixed seed
and /usr/bin/python3's unicodedata make the output identical on every run.
"""
import json
import os
import random
import sys
import unicodedata

SPECIAL = ["<|begin_of_text|>", "<|eot_id|>", "<|im_start|>", "<|im_end|>", "<s>", "</s>", "<unk>", "<think>",
           "'s", "'LL", "'ve", "\n", "\r\n", "\t", "\n\n", "1234567", "\u2581", "\u00a0", "\u3000"]
WORDS = ["hello", "World", "the", "don't", "x", "42", "3.14", "e\u0301", "\u00e9", "\U0001F44D\U0001F3FD", "\u4f60\u597d"]


def main():
    out_path = sys.argv[1]
    count = int(sys.argv[2]) if len(sys.argv) > 2 else 5000
    pool = [c for c in range(0x20, 0x30000)
            if unicodedata.category(chr(c)) not in ("Cn", "Cs", "Co")]
    rng = random.Random(7)
    os.makedirs(os.path.dirname(os.path.abspath(out_path)), exist_ok=True)
    with open(out_path, "w", encoding="utf-8") as f:
        for _ in range(count):
            parts = []
            for _ in range(rng.randint(1, 12)):
                r = rng.random()
                if r < 0.35:
                    parts.append("".join(chr(rng.choice(pool)) for _ in range(rng.randint(1, 4))))
                elif r < 0.55:
                    parts.append(rng.choice(SPECIAL))
                elif r < 0.8:
                    parts.append(rng.choice(WORDS))
                else:
                    parts.append(" " * rng.randint(1, 3))
            f.write(json.dumps("".join(parts)) + "\n")


if __name__ == "__main__":
    main()
