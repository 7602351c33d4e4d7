#!/usr/bin/env python3
"""The README stays a front door (issue 64), checked from the files:

1. README.md is at most 15 KiB (15360 bytes); what does not fit lives in docs/.
2. Every file in docs/ is named in README.md (its documentation index).
3. The Layout table names every top-level folder of src/, and every `src/...` folder it names
   exists.

Prints every violation on its own line and exits 1 when there is one; prints a one-line summary
and exits 0 otherwise. Usage: python3 scripts/check_readme.py [REPO_ROOT]
"""
import os
import re
import sys

LIMIT = 15360


def main():
    root = sys.argv[1] if len(sys.argv) > 1 else os.path.join(os.path.dirname(__file__), "..")
    readme = open(os.path.join(root, "README.md"), encoding="utf-8").read()
    size = len(readme.encode("utf-8"))
    problems = []
    if size > LIMIT:
        problems.append(f"README.md is {size} bytes, over {LIMIT}: move a section into docs/")
    docs = sorted(os.listdir(os.path.join(root, "docs")))
    for name in docs:
        if f"docs/{name}" not in readme:
            problems.append(f"docs/{name} is not named in README.md's documentation index")
    named = set(re.findall(r"^\| `src/([\w]+)`", readme, re.M))
    folders = {d for d in os.listdir(os.path.join(root, "src")) if os.path.isdir(os.path.join(root, "src", d))}
    for d in sorted(folders - named):
        problems.append(f"src/{d} is missing from README.md's Layout table")
    for d in sorted(named - folders):
        problems.append(f"README.md's Layout table names src/{d}, which does not exist")
    for p in problems:
        print(p)
    if problems:
        return 1
    print(f"README.md: {size} bytes (limit {LIMIT}), names all {len(docs)} files of docs/ and all {len(folders)} folders of src/")
    return 0


if __name__ == "__main__":
    sys.exit(main())
