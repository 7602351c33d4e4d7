#!/usr/bin/python3
"""Fixture step for the SentencePiece golden test.

Trains two small models with `spm_train` (deterministic: fixed training text derived from the
corpus, one thread, no input shuffling) and writes reference ids computed by the sentencepiece
Python module (Debian's python3-sentencepiece, hence /usr/bin/python3):

    spm_reference.py CORPUS_JSONL OUT_DIR [SPM_TRAIN]

OUT_DIR/bpe.model      BPE, vocab 2000, Llama-2 settings: identity normalisation, no whitespace
                       folding, split digits, byte fallback (lossless)
OUT_DIR/unigram.model  Unigram, vocab 1500, default nmt_nfkc normalisation, byte fallback, a pad
                       piece (not lossless)
OUT_DIR/<model>.json   {"ids": [[...] per corpus string], "lossless": bool}

Like Hugging Face's slow LlamaTokenizer, text is first split on the model's control and unknown
pieces (leftmost-longest); those map to their ids and every other segment is encoded by
SentencePiece on its own. Models are retrained only when the training text changes.
"""
import json
import os
import random
import subprocess
import sys
import unicodedata

import sentencepiece as spm

MODELS = {
    "bpe": ["--model_type=bpe", "--vocab_size=2000", "--normalization_rule_name=identity",
            "--remove_extra_whitespaces=false", "--split_digits=true", "--allow_whitespace_only_pieces=true"],
    "unigram": ["--model_type=unigram", "--vocab_size=1500", "--pad_id=3"],
}


def training_text(corpus):
    """~5000 lines of words recombined from the corpus, control characters removed."""
    words = []
    for s in corpus:
        clean = "".join(c for c in s if unicodedata.category(c) != "Cc" or c in " \t")
        words += clean.split()
    rng = random.Random(1234)
    lines = [" ".join(rng.choice(words) for _ in range(rng.randint(3, 12))) for _ in range(5000)]
    lines += [s.replace("\n", " ").replace("\r", " ") for s in corpus if s.strip()]
    return "\n".join(lines) + "\n"


def split_special(text, specials):
    """Leftmost-longest split on special piece strings: [(is_special, str)]."""
    out, start, i = [], 0, 0
    while i < len(text):
        best = None
        for p in specials:
            if text.startswith(p, i) and (best is None or len(p) > len(best)):
                best = p
        if best is None:
            i += 1
            continue
        if i > start:
            out.append((False, text[start:i]))
        out.append((True, best))
        i += len(best)
        start = i
    if start < len(text):
        out.append((False, text[start:]))
    return out


def main():
    corpus_path, out_dir = sys.argv[1], sys.argv[2]
    spm_train = sys.argv[3] if len(sys.argv) > 3 else "spm_train"
    corpus = [json.loads(l) for l in open(corpus_path, encoding="utf-8") if l.strip()]
    os.makedirs(out_dir, exist_ok=True)
    train_path = os.path.join(out_dir, "train.txt")
    text = training_text(corpus)
    stale = not os.path.exists(train_path) or open(train_path, encoding="utf-8").read() != text
    if stale:
        with open(train_path, "w", encoding="utf-8") as f:
            f.write(text)
    for name, args in MODELS.items():
        prefix = os.path.join(out_dir, name)
        if stale or not os.path.exists(prefix + ".model"):
            cmd = [spm_train, f"--input={train_path}", f"--model_prefix={prefix}", "--byte_fallback=true",
                   "--num_threads=1", "--shuffle_input_sentence=false", "--character_coverage=0.9995",
                   "--minloglevel=1"] + args
            subprocess.run(cmd, check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        sp = spm.SentencePieceProcessor(model_file=prefix + ".model")
        specials = {sp.id_to_piece(i): i for i in range(sp.get_piece_size())
                    if sp.is_control(i) or sp.is_unknown(i)}
        ids = []
        for s in corpus:
            row = []
            for is_special, seg in split_special(s, list(specials)):
                row += [specials[seg]] if is_special else sp.encode(seg)
            ids.append(row)
        with open(prefix + ".json.tmp", "w") as f:
            json.dump({"ids": ids}, f)
        os.replace(prefix + ".json.tmp", prefix + ".json")
        print(f"{name}: {len(corpus)} strings, vocab {sp.get_piece_size()} -> {prefix}.json")


if __name__ == "__main__":
    main()
