#!/usr/bin/env python3
"""The include rules of src/ (docs/training.md, "Where things live"), checked from the sources:

1. No upward includes: a layer includes only layers below it. The order is the order in which
   src/CMakeLists.txt adds the layers (each built on those before it).
2. Rooms that stack: a layer whose CMakeLists.txt declares `set(CTUNE_ROOMS a b c ...)` (bottom
   to top) keeps its folders ("rooms") in that order: a file includes only its own room and the
   rooms before it, and every room of the layer is in the list (a new room must take a place).
3. No include cycles inside a folder: no two modules (a header with its .cpp) include each
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


def rooms(src, layer):
    """The declared order of a layer's rooms, bottom first, or None when it declares none."""
    path = os.path.join(src, layer, "CMakeLists.txt")
    found = re.search(r"^set\(CTUNE_ROOMS\s+([^)]*)\)", open(path).read(), re.M) if os.path.exists(path) else None
    return {name: rank for rank, name in enumerate(found.group(1).split())} if found else None


def room_problems(src, rank, graph):
    problems = []
    for layer in rank:
        order = rooms(src, layer)
        if order is None:
            continue
        present = {d for d in os.listdir(os.path.join(src, layer)) if os.path.isdir(os.path.join(src, layer, d))}
        for d in sorted(present - set(order)):
            problems.append(f"room src/{layer}/{d} is not in {layer}'s CTUNE_ROOMS (src/{layer}/CMakeLists.txt)")
        for f, includes in graph.items():
            parts = f.split("/")
            if parts[0] != layer or len(parts) < 3:
                continue
            for i in includes:
                there = i.split("/")
                if there[0] == layer and len(there) >= 3 and order.get(there[1], -1) > order.get(parts[1], -1):
                    problems.append(f"upward include: src/{f} includes src/{i} ({layer}/{there[1]} is above {layer}/{parts[1]})")
    return problems


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

    problems += room_problems(src, rank, graph)

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
                  f"include rules: {len(files)} files, {len(graph)} modules, {edges} module includes: no upward include between layers or rooms, no cycle inside a folder")


if __name__ == "__main__":
    sys.exit(main())
