#!/usr/bin/env python3
"""Writes the quickstart's bundled data (deterministic; stdlib only):

  pretrain.jsonl / pretrain_eval.jsonl   short English-like stories ({"text": ...}) that teach a
                                         tiny random model spelling, words and sentence shape
  task_train.jsonl / task_eval.jsonl     an instruction task the pretrained model cannot do:
                                         say who a sentence mentions, "person", "animal", "both"
                                         or "nobody" ({"instruction", "output"}); the 200 eval
                                         sentences never occur in the task's training set
  pref_train.jsonl / pref_eval.jsonl     the task as preference pairs for DPO (TRL's conversational
                                         form): the right answer chosen, a plausible wrong one
                                         rejected; the eval pairs are the task's 200 held-out sentences
  kto_train.jsonl / kto_eval.jsonl       the same pairs unpaired for KTO (TRL's unpaired preference
                                         format: each chosen completion labelled true, each rejected
                                         one false), shuffled
  grpo_train.jsonl                       the task's training sentences as prompts for GRPO (a user
                                         turn, and the answer in a field the reward reads)

Usage: make_quickstart_data.py OUT_DIR
"""
import json
import os
import random
import re
import sys

NAMES = ["Anna", "Ben", "Clara", "David", "Emma", "Felix", "Grace", "Henry", "Iris", "Jack", "Lena", "Max", "Nora", "Oscar"]
ANIMALS = ["cat", "dog", "fox", "bird", "horse", "rabbit", "mouse", "owl", "bear", "duck", "goat", "sheep", "frog", "wolf"]
ADJECTIVES = ["small", "big", "red", "brown", "quiet", "happy", "old", "young", "clever", "lazy", "brave", "tired",
              "green", "yellow", "gentle", "curious"]
PLACES = ["garden", "forest", "river", "market", "school", "kitchen", "village", "meadow", "library", "harbor",
          "bridge", "castle", "station", "orchard"]
VERBS = ["found", "saw", "followed", "painted", "carried", "visited", "watched", "cleaned", "opened", "closed",
         "helped", "called", "built", "cooked"]
OBJECTS = ["apple", "basket", "letter", "window", "lantern", "blanket", "bottle", "candle", "ladder", "pencil",
           "pillow", "ribbon", "wagon", "kettle", "mirror", "button"]
TIMES = ["In the morning", "At noon", "In the evening", "At night", "On Monday", "After lunch", "Before dinner",
         "One day", "Later", "Soon"]
WEATHER = ["sunny", "cold", "windy", "warm", "rainy", "cloudy", "quiet", "bright"]


def invented_word(rng):
    consonants, vowels = "bcdfghjklmnpqrstvwxyz", "aeiou"
    return "".join(rng.choice(consonants if i % 2 == 0 else vowels) for i in range(rng.randint(3, 8)))


def sentence(rng):
    n, a, p, v, o = rng.choice(NAMES), rng.choice(ANIMALS), rng.choice(PLACES), rng.choice(VERBS), rng.choice(OBJECTS)
    adj = rng.choice(ADJECTIVES)
    forms = [
        f"{rng.choice(TIMES)}, {n} {v} a {adj} {o} near the {p}.",
        f"The {adj} {a} {v} the {o} in the {p}.",
        f"{n} and the {a} went to the {p}.",
        f"It was {rng.choice(WEATHER)} at the {p}, so {n} stayed home.",
        f"{n} said: \"I like the {adj} {o}.\"",
        f"There is a {adj} {a} in the {p}, and it has a {o}.",
        f"Where is the {o}? It is in the {p}.",
        f"{n} has {rng.randint(2, 9)} {o}s and {rng.randint(2, 9)} {a}s.",
    ]
    # Copying: a new word written and read back, so the model learns to repeat what it saw
    # (the induction behaviour every language model acquires); and capital letters in signs.
    w = invented_word(rng)
    forms += [
        f"{n} wrote \"{w}\" on the {o}, and {rng.choice(NAMES)} read \"{w}\" aloud.",
        f"The word was \"{w}\", so {n} said \"{w}\" again.",
        f"The sign at the {p} said \"{invented_word(rng).upper()}\".",
    ]
    return rng.choice(forms)


def story(rng):
    return " ".join(sentence(rng) for _ in range(rng.randint(2, 4)))


def who(s):
    """The task's answer: which kinds of actors the sentence mentions."""
    w = set(re.findall(r"[A-Za-z]+", s))
    person = any(n in w for n in NAMES)
    animal = any(a in w or a + "s" in w for a in ANIMALS)
    return "both" if person and animal else "person" if person else "animal" if animal else "nobody"


def task_rows(rng, count):
    rows, seen = [], set()
    while len(rows) < count:
        s = sentence(rng)
        if s not in seen:
            seen.add(s)
            rows.append({"instruction": f"Who is in this sentence? {s}", "output": who(s)})
    return rows


def wrong_answer(rng, right):
    """A plausible wrong answer: one that shares an actor with the right one where possible."""
    near = {"both": ["person", "animal"], "person": ["both", "nobody"], "animal": ["both", "nobody"],
            "nobody": ["person", "animal"]}
    return rng.choice(near[right])


def pairs(rng, rows):
    return [{"prompt": [{"role": "user", "content": r["instruction"]}],
             "chosen": [{"role": "assistant", "content": r["output"]}],
             "rejected": [{"role": "assistant", "content": wrong_answer(rng, r["output"])}]} for r in rows]


def unpaired(rng, pair_rows):
    """The pairs as TRL's unpaired preference format (its unpair_preference_dataset): each pair's
    chosen completion labelled true and its rejected one false, shuffled, because KTO pairs each
    record with its neighbours in the file's order for its KL rows (ctune reads the file in order)."""
    rows = []
    for p in pair_rows:
        rows.append({"prompt": p["prompt"], "completion": p["chosen"], "label": True})
        rows.append({"prompt": p["prompt"], "completion": p["rejected"], "label": False})
    rng.shuffle(rows)
    return rows


def write(path, rows):
    with open(path, "w", encoding="utf-8") as f:
        for r in rows:
            f.write(json.dumps(r, ensure_ascii=False) + "\n")


def main():
    out = sys.argv[1]
    os.makedirs(out, exist_ok=True)
    rng = random.Random(2026)
    write(os.path.join(out, "pretrain.jsonl"), [{"text": story(rng)} for _ in range(6000)])
    write(os.path.join(out, "pretrain_eval.jsonl"), [{"text": story(rng)} for _ in range(200)])
    rows = task_rows(rng, 3000)
    write(os.path.join(out, "task_eval.jsonl"), rows[:200])    # sentences never seen in task training
    write(os.path.join(out, "task_train.jsonl"), rows[200:])
    # Its own generator, so the files above stay byte for byte what they were.
    prng = random.Random(2027)
    pref_eval, pref_train = pairs(prng, rows[:200]), pairs(prng, rows[200:1400])
    write(os.path.join(out, "pref_eval.jsonl"), pref_eval)
    write(os.path.join(out, "pref_train.jsonl"), pref_train)
    # The same pairs unpaired for KTO, from a generator of their own.
    krng = random.Random(2028)
    write(os.path.join(out, "kto_eval.jsonl"), unpaired(krng, pref_eval))
    write(os.path.join(out, "kto_train.jsonl"), unpaired(krng, pref_train))
    write(os.path.join(out, "grpo_train.jsonl"),
          [{"prompt": [{"role": "user", "content": r["instruction"]}], "answer": r["output"]} for r in rows[200:]])


if __name__ == "__main__":
    main()
