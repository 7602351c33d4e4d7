#!/usr/bin/env python3
"""Differential run of the template engine against Python's Jinja2 (the engine's reference,
configured as transformers configures it, as tests/template/make_snippets.py does): random
expressions, loops and namespace updates over fixed chat-like variables, each rendered by both.
Prints every template whose outcomes differ, then a count:
  DIFF     both rendered, different text (a generator's or iterator's repr on Jinja2's side is
           skipped: Jinja2's lazy filters print as <generator object ...>, ctune's are lists)
  ERRDIFF  one rendered and the other refused (ctune refuses some things Jinja2 lets through:
           unsupported filters, subscripting an int; docs/chat-templates.md lists them)
  CRASH    anything but a TemplateError escaped the engine (always a bug)
A finding becomes a snippet in make_snippets.py. Run through scripts/fuzz.sh jinja2 [COUNT] [SEED].
usage: jinja2_diff.py RENDER_LINES_BINARY COUNT SEED"""
import json
import pathlib
import random
import re
import subprocess
import sys

# Jinja2 as the snippets' generator configures it (one configuration for both).
sys.path.insert(0, str(pathlib.Path(__file__).resolve().parent.parent / "template"))
from make_snippets import NOW, env  # noqa: E402

VARS = {"x": 7, "y": -3, "f": 2.5, "s": "Héllo, World  ", "e": "", "l": [3, 1, 2], "w": ["b", "a", "c"],
        "d": {"a": 1, "b": "two"}, "n": None, "t": True,
        "messages": [{"role": "system", "content": "Be nice."}, {"role": "user", "content": "Hi é 😀"},
                     {"role": "assistant", "content": " ok \n"}]}
LITERALS = ["0", "1", "-2", "3.5", "1e3", "'a'", "'xYz'", "''", "'é😀'", "none", "true", "false", "[1, 2]",
            "['q', 'p']", "{'k': 1}", "(1, 'b')", "[]",
            # number-like strings for int/float (Python's int() and float() rules, docs/chat-templates.md)
            "' 12 '", "'0x1A'", "'1_000'", "'-3.5e2'", "'inf'", "'nan'", "'１２'", "'010'", "'0b11'", "'1__2'", "'.5'"]
NAMES = ["x", "y", "f", "s", "e", "l", "w", "d", "n", "t", "messages", "messages[0]", "messages[-1]['content']",
         "messages[1].role", "undefined_v"]
FILTERS = ["length", "upper", "lower", "trim", "join", "join(', ')", "first", "last", "list", "sort", "unique", "tojson",
           "string", "int", "float", "int(0, 16)", "int(9, 0)", "float(1)", "abs", "round", "round(1)", "items", "dictsort", "map(attribute='role')", "select",
           "reject", "selectattr('role')", "indent(2)", "capitalize", "title", "wordcount", "reverse", "sum", "min", "max",
           "default('D')", "default(x, true)", "replace('l', 'L')", "batch(2)|list", "trim('H')", "format(1)", "count",
           "e", "escape", "safe", "attr('role')", "rejectattr('role', 'eq', 'user')|list"]
METHODS = ["split()", "split(',')", "strip()", "lstrip()", "rstrip(' ')", "startswith('H')", "endswith(' ')", "find('l')",
           "rfind('l')", "replace('l', '_')", "upper()", "lower()", "title()", "capitalize()", "count('l')", "keys()|list",
           "items()|list", "values()|list", "get('a')", "get('z', 5)", "format(1, 2)", "isdigit()", "isalpha()",
           "islower()", "splitlines()", "join(['1', '2'])", "index('l')", "zfill(8)", "center(10, '*')", "ljust(6)",
           "rjust(6)", "partition(',')", "swapcase()"]
TESTS = ["defined", "undefined", "none", "string", "number", "integer", "float", "odd", "even", "divisibleby 2",
         "in [1, 2, 3]", "sequence", "mapping", "iterable", "lower", "upper", "true", "false", "eq 7", "gt 2", "boolean",
         "callable", "sameas none"]
OPERATORS = ["+", "-", "*", "/", "//", "%", "**", "~", "and", "or", "==", "!=", "<", ">=", "in", "not in"]
SUBSCRIPTS = ["0", "-1", "1:", "::-1", ":2", "x", '"a"']


# Each compound form with the cumulative probability that picks it (below 0.25: a leaf).
FORMS = [
    (0.45, lambda sub, rng: f"({sub()} {rng.choice(OPERATORS)} {sub()})"),
    (0.65, lambda sub, rng: f"({sub()})|{rng.choice(FILTERS)}"),
    (0.75, lambda sub, rng: f"({sub()}).{rng.choice(METHODS)}"),
    (0.82, lambda sub, rng: f"({sub()} is {'not ' if rng.random() < 0.3 else ''}{rng.choice(TESTS)})"),
    (0.88, lambda sub, rng: f"({sub()})[{rng.choice(SUBSCRIPTS)}]"),
    (0.94, lambda sub, rng: f"({sub()} if {sub()} else {sub()})"),
    (1.00, lambda sub, rng: f"not {sub()}"),
]


def expression(rng, depth):
    r = rng.random()
    if depth <= 0 or r < 0.25:
        return rng.choice(LITERALS + NAMES)
    form = next(build for upto, build in FORMS if r < upto)
    return form(lambda: expression(rng, depth - 1), rng)


def template(rng):
    r = rng.random()
    if r < 0.6:
        return "{{ " + expression(rng, 3) + " }}"
    if r < 0.8:
        over = rng.choice(["messages", "l", "w", "s", "d", "range(3)"])
        body = expression(rng, 2).replace("x", "m")
        return "{% for m in " + over + " %}{{ " + body + " }}{{ loop.index }}{% if loop.last %}!{% endif %}{% endfor %}"
    update = expression(rng, 2).replace("x", "ns.v")
    return ("{% set ns = namespace(v=" + expression(rng, 1) + ") %}{% for i in range(2) %}{% set ns.v = " + update +
            " %}{% endfor %}{{ ns.v }}")


def main():
    binary, count, seed = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
    rng = random.Random(seed)
    engine = subprocess.Popen([binary], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    tally = {"same text": 0, "both refused": 0, "DIFF": 0, "ERRDIFF": 0, "CRASH": 0}
    for _ in range(count):
        source = template(rng)
        try:
            want = {"text": env.from_string(source).render(**VARS)}
        except Exception as e:  # noqa: BLE001 - any Jinja2 failure is a refusal
            want = {"error": f"{type(e).__name__}: {e}"}
        engine.stdin.write(json.dumps({"template": source, "vars": VARS, "now": NOW}) + "\n")
        engine.stdin.flush()
        got = json.loads(engine.stdout.readline())
        if "crash" in got:
            kind = "CRASH"
        elif "text" in want and "text" in got:
            if want["text"] == got["text"] or re.search(r" at 0x[0-9a-f]+>", want["text"]):
                tally["same text"] += 1
                continue
            kind = "DIFF"
        elif "error" in want and "error" in got:
            tally["both refused"] += 1
            continue
        else:
            kind = "ERRDIFF"
        tally[kind] += 1
        print(kind, repr(source), "| jinja2:", repr(want)[:200], "| ctune:", repr(got)[:200], flush=True)
    print(", ".join(f"{k} {v}" for k, v in tally.items()))
    return 1 if tally["CRASH"] else 0


if __name__ == "__main__":
    sys.exit(main())
