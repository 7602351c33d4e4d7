#!/usr/bin/env python3
"""The include rules of src/ (docs/training.md, "Where things live"), checked from the sources:

1. No upward includes: a layer includes only layers below it. The order is the order in which
   src/CMakeLists.txt adds the layers (each built on those before it).
2. No include cycles inside a folder: no two modules (a header with its .cpp) include each
   other, directly or through a chain of modules of the same folder (a folder's files read as
   a stack, not a knot). zero.h including data_parallel.h while data_parallel.cpp includes
   zero.h is such a cycle.

Prints every violation on its own line and exits 1 when there is one; prints a one-line summary
and exits 0 otherwise. Usage: python3 scripts/check_includes.py [REPO_ROOT]
"""
import os
import re
import sys

from check_report import report

INCLUDE = re.compile(r'^\s*#\s*include\s+"([^"]+)"', re.M)


def layers(src):
    order = re.findall(r"^add_subdirectory\((\w+)\)", open(os.path.join(src, "CMakeLists.txt")).read(), re.M)
    return {name: rank for rank, name in enumerate(order)}


def sources(src):
    for root, _, files in os.walk(src):
        for f in files:
            if f.endswith((".h", ".cpp")):
                path = os.path.join(root, f)
                yield os.path.relpath(path, src).replace(os.sep, "/")


def main():
    root = sys.argv[1] if len(sys.argv) > 1 else os.path.join(os.path.dirname(__file__), "..")
    src = os.path.join(root, "src")
    rank = layers(src)
    files = set(sources(src))
    graph = {}
    problems = []
    for f in sorted(files):
        includes = [i for i in INCLUDE.findall(open(os.path.join(src, f), encoding="utf-8").read()) if i in files]
        graph[f] = includes
        here = f.split("/")[0]
        for i in includes:
            there = i.split("/")[0]
            if here in rank and there in rank and rank[there] > rank[here]:
                problems.append(f"upward include: src/{f} includes src/{i} ({there} is above {here})")

    # Cycles through modules of one folder: depth-first search on each folder's own subgraph of
    # modules (x.h and x.cpp are one node, x).
    module = lambda f: os.path.splitext(f)[0]
    mgraph = {}
    for f, includes in graph.items():
        mgraph.setdefault(module(f), set()).update(module(i) for i in includes if module(i) != module(f))
    graph = {m: sorted(v) for m, v in mgraph.items()}
    folders = {}
    for m in graph:
        folders.setdefault(os.path.dirname(m), set()).add(m)
    for folder, members in sorted(folders.items()):
        state = {}  # 1: on the path, 2: done

        def visit(f, path):
            state[f] = 1
            path.append(f)
            for i in graph.get(f, []):
                if i not in members:
                    continue
                if state.get(i) == 1:
                    cycle = path[path.index(i):] + [i]
                    problems.append("include cycle in src/" + folder + ": " + " -> ".join(cycle))
                elif state.get(i) is None:
                    visit(i, path)
            path.pop()
            state[f] = 2

        for f in sorted(members):
            if state.get(f) is None:
                visit(f, [])

    edges = sum(len(v) for v in graph.values())  # between modules
    return report(problems, f"include rules: {len(problems)} violation(s) in {len(files)} files",
                  f"include rules: {len(files)} files, {len(graph)} modules, {edges} module includes: no upward include, no cycle inside a folder")


if __name__ == "__main__":
    sys.exit(main())
