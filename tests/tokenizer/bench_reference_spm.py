#!/usr/bin/python3
"""Reference throughput for scripts/bench_tokenizer.sh: python sentencepiece (C++ inside)
encoding the same text as bench_tokenizer (one document per line, one warm-up pass, best of
PASSES timed passes). One thread, like bench_tokenizer: the batch encode otherwise spreads the
lines over every core.

    bench_reference_spm.py MODEL TEXT_FILE [PASSES]
"""
import sys
import time

import sentencepiece as spm


def main():
    model, text_file = sys.argv[1], sys.argv[2]
    passes = max(1, int(sys.argv[3])) if len(sys.argv) > 3 else 3
    t0 = time.perf_counter()
    sp = spm.SentencePieceProcessor(model_file=model)
    load_s = time.perf_counter() - t0
    lines = open(text_file, encoding="utf-8").read().split("\n")
    if lines and lines[-1] == "":
        lines.pop()
    best, tokens = float("inf"), 0
    for p in range(passes + 1):
        start = time.perf_counter()
        n = sum(len(ids) for ids in sp.encode(lines, num_threads=1))
        s = time.perf_counter() - start
        if p > 0:
            best = min(best, s)
        tokens = n
    print(f"tokens={tokens} seconds={best:.4f} tokens_per_s={tokens / best:.0f} load_s={load_s:.3f}")


if __name__ == "__main__":
    main()
