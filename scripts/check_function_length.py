#!/usr/bin/env python3
"""No function in src/ is longer than 120 lines (issue 64), checked from the sources.

The count method: a definition starts on a line at column 0 (its first signature line, after
any `template <...>` line) and ends at its closing brace at column 0; its length counts both
lines. Lines inside a body are not read (a raw string at column 0 is not a definition). A
column-0 block whose text before its `{` has no `(`, ends with `=` (an initialiser), or names a
namespace, class, struct, enum, union or `extern "C"` is not a function and is not counted.
Member functions defined inside a class body are indented and so are not counted.

Prints every offender as FILE:LINE: NAME is N lines (limit 120) and exits 1 when there is one;
prints a one-line summary and exits 0 otherwise.
Usage: python3 scripts/check_function_length.py [REPO_ROOT]
"""
import os
import re
import sys

from check_report import report

LIMIT = 120
NOT_A_FUNCTION = re.compile(r"^(namespace\b|extern\b|((typedef|template\s*<.*>)\s+)?(class|struct|enum|union)\b)")
OPENS_SCOPE = re.compile(r"^(namespace|extern)\b")
# Literals and comments, dropped before braces are counted on a line.
LITERALS = re.compile(r'"(\\.|[^"\\])*"|\'(\\.|[^\'\\])*\'|//.*$|/\*.*?\*/')


def code(line):
    return LITERALS.sub("", line)


def starts_top_level(line):
    return line[:1] not in ("", " ", "\t", "#", "}") and not line.startswith(("//", "/*", "*"))


def definitions(lines):
    """Yields (first line, last line, header text) of each column-0 block that has a body."""
    i = 0
    while i < len(lines):
        line = lines[i]
        if not starts_top_level(line) or line.startswith("template") and code(line).rstrip().endswith(">"):
            i += 1
            continue
        start, header, depth = i, "", 0
        # The header runs to the line holding the opening brace; a `;` first ends a declaration.
        while i < len(lines):
            text = code(lines[i])
            header += " " + text.strip()
            depth += text.count("{") - text.count("}")
            if "{" in text or text.rstrip().endswith(";"):
                break
            i += 1
        if "{" not in header or OPENS_SCOPE.match(header.strip()):
            i += 1  # a declaration, or a namespace whose definitions are read one by one
            continue
        if depth <= 0:  # opened and closed on its own lines: `int f() { return 1; }`
            yield start, i, header
            i += 1
            continue
        i += 1
        while i < len(lines) and not lines[i].startswith("}"):
            i += 1
        yield start, i, header
        i += 1


def is_function(header):
    before = header.split("{", 1)[0].strip()
    return "(" in before and not before.endswith("=") and not NOT_A_FUNCTION.match(before)


def name_of(header):
    before = header.split("(", 1)[0].split()
    return before[-1] if before else "?"


def main():
    root = sys.argv[1] if len(sys.argv) > 1 else os.path.join(os.path.dirname(__file__), "..")
    src = os.path.join(root, "src")
    problems, count = [], 0
    for folder, _, files in sorted(os.walk(src)):
        for f in sorted(files):
            if not f.endswith((".h", ".cpp", ".cu")):
                continue
            path = os.path.join(folder, f)
            lines = open(path, encoding="utf-8").read().split("\n")
            for first, last, header in definitions(lines):
                if not is_function(header):
                    continue
                count += 1
                length = last - first + 1
                if length > LIMIT:
                    rel = os.path.relpath(path, root).replace(os.sep, "/")
                    problems.append(f"{rel}:{first + 1}: {name_of(header)} is {length} lines (limit {LIMIT})")
    return report(problems, f"function length: {len(problems)} function(s) over {LIMIT} lines of {count} in src/",
                  f"function length: {count} functions in src/, none over {LIMIT} lines")


if __name__ == "__main__":
    sys.exit(main())
