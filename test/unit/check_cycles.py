#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0
"""The file-level dependency graph of a static library, from its objects: for each object, the global symbols it
defines and the ones it uses (nm); file A depends on file B when A uses a symbol that B alone defines (a symbol
several objects define, an inline function's or a template's copy, says nothing of a file). Its strongly connected
components of more than one file are the import circles; each must be one that the "## Cycles" section of the given
design document declares, and each declared one (of the checked folder) must exist, so that the document stays
true. A circle found is printed with one path around it and the symbols on each step.

  check_cycles.py --source-root . --subdir src --declared-in docs/design.md build/src/libfccl_internal.a

--subdir is the folder of the meson.build that builds the library: Meson names an object after its source's path
below that folder ('core/comm/init.c' -> 'core_comm_init.c.o'), which is how objects are mapped back to files.
A declaration is a bullet of that section whose backquoted paths, before its first colon, are the circle's files:
  - `src/base/debug.c` `src/base/param.c`: why the circle is there.
"""
import argparse
import collections
import os
import re
import subprocess
import sys

SOURCE_SUFFIXES = (".c", ".cu", ".cc", ".cpp")
# nm's letters for a symbol an object defines (global), and for one it uses without defining.
DEFINED = set("TDBRGSVWCiu")
USED = set("Uwv")


def source_names(root, subdir):
    """Meson's object name of each source below root/subdir -> the source's path relative to root."""
    names = {}
    base = os.path.join(root, subdir)
    for folder, _, files in os.walk(base):
        for name in files:
            if not name.endswith(SOURCE_SUFFIXES):
                continue
            relative = os.path.relpath(os.path.join(folder, name), base)
            mangled = relative.replace(os.sep, "_") + ".o"
            path = os.path.join(subdir, relative) if subdir != "." else relative
            if mangled in names:
                sys.exit("check_cycles: %s and %s map to the same object name %s" % (names[mangled], path, mangled))
            names[mangled] = path
    return names


def read_symbols(nm, archives, names):
    """{file: set of symbols it defines}, {file: set of symbols it uses}."""
    defines = collections.defaultdict(set)
    uses = collections.defaultdict(set)
    for archive in archives:
        out = subprocess.run([nm, "-A", archive], capture_output=True, text=True)
        if out.returncode != 0:
            sys.exit("check_cycles: %s -A %s failed: %s" % (nm, archive, out.stderr.strip()))
        for line in out.stdout.splitlines():
            # "archive:member:ADDRESS T name" or "archive:member:                 U name" (a thin archive's member
            # is a path; an object file given directly has no member part)
            where, _, entry = line.rpartition(":")
            parts = entry.split()
            if len(parts) < 2:
                continue
            kind, symbol = parts[-2], parts[-1]
            member = os.path.basename(where.split(":")[-1])
            if member not in names:
                sys.exit("check_cycles: object %s of %s is named after no source below %s" %
                         (member, archive, "the folder given (--subdir)"))
            source = names[member]
            if kind in DEFINED:
                defines[source].add(symbol)
            elif kind in USED:
                uses[source].add(symbol)
    return defines, uses


def build_graph(defines, uses):
    """{file: {file it depends on: sorted symbols}}."""
    owners = collections.defaultdict(list)
    for source, symbols in defines.items():
        for symbol in symbols:
            owners[symbol].append(source)
    graph = {source: collections.defaultdict(list) for source in set(defines) | set(uses)}
    for source, symbols in uses.items():
        for symbol in sorted(symbols):
            owner = owners.get(symbol)
            if owner and len(owner) == 1 and owner[0] != source:
                graph[source][owner[0]].append(symbol)
    return graph


def strongly_connected(graph):
    """Tarjan's algorithm, iterative: the components of more than one file, each a sorted list."""
    index, low, on_stack, stack, found = {}, {}, set(), [], []
    counter = 0
    for start in sorted(graph):
        if start in index:
            continue
        work = [(start, iter(sorted(graph[start])))]
        index[start] = low[start] = counter
        counter += 1
        stack.append(start)
        on_stack.add(start)
        while work:
            node, children = work[-1]
            child = next(children, None)
            if child is not None:
                if child not in index:
                    index[child] = low[child] = counter
                    counter += 1
                    stack.append(child)
                    on_stack.add(child)
                    work.append((child, iter(sorted(graph.get(child, {})))))
                elif child in on_stack:
                    low[node] = min(low[node], index[child])
                continue
            work.pop()
            if work:
                parent = work[-1][0]
                low[parent] = min(low[parent], low[node])
            if low[node] == index[node]:
                component = []
                while True:
                    member = stack.pop()
                    on_stack.discard(member)
                    component.append(member)
                    if member == node:
                        break
                if len(component) > 1:
                    found.append(sorted(component))
    return sorted(found)


def one_circle(graph, component):
    """A shortest path from the component's first file back to itself, inside the component."""
    members = set(component)
    start = component[0]
    previous = {}
    queue = collections.deque([start])
    while queue:
        node = queue.popleft()
        for child in sorted(graph[node]):
            if child not in members:
                continue
            if child == start:
                path = [node]
                while path[-1] != start:
                    path.append(previous[path[-1]])
                return [start] + list(reversed(path[:-1])) + [start]
            if child not in previous:
                previous[child] = node
                queue.append(child)
    return component + [start]


def describe(graph, component):
    circle = one_circle(graph, component)
    lines = ["  files: " + " ".join(component), "  one way around:"]
    lines.append("    " + circle[0])
    for source, target in zip(circle, circle[1:]):
        symbols = graph[source][target]
        shown = ", ".join(symbols[:4]) + (", ..." if len(symbols) > 4 else "")
        lines.append("    -> %s (uses %s)" % (target, shown))
    return "\n".join(lines)


def declared_cycles(document):
    """The circles the '## Cycles' section of document declares, each a sorted list of paths."""
    cycles, inside = [], False
    with open(document, encoding="utf-8") as text:
        for line in text:
            if line.startswith("## "):
                inside = line.strip() == "## Cycles"
                continue
            if inside and line.startswith("- "):
                head = line.split(":", 1)[0]
                paths = re.findall(r"`([^`]+)`", head)
                if len(paths) > 1:
                    cycles.append(sorted(paths))
    if not cycles:
        sys.exit("check_cycles: %s has no '## Cycles' section declaring a circle (a bullet '- `a.c` `b.c`: why')" %
                 document)
    return cycles


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--nm", default="nm")
    parser.add_argument("--source-root", required=True, help="the project's source folder")
    parser.add_argument("--subdir", required=True, help="the folder of the meson.build that builds the archives")
    parser.add_argument("--declared-in", help="a Markdown document with a '## Cycles' section (default: none allowed)")
    parser.add_argument("archives", nargs="+")
    args = parser.parse_args()

    names = source_names(args.source_root, args.subdir)
    defines, uses = read_symbols(args.nm, args.archives, names)
    graph = build_graph(defines, uses)
    found = strongly_connected(graph)
    prefix = args.subdir.rstrip("/") + "/"
    declared = [c for c in declared_cycles(args.declared_in) if all(p.startswith(prefix) for p in c)] \
        if args.declared_in else []
    edges = sum(len(targets) for targets in graph.values())
    print("%d files of %s, %d dependencies between them; circles declared for them: %d" %
          (len(graph), args.subdir, edges, len(declared)))

    problems = 0
    for component in found:
        if component in declared:
            print("declared circle, found as declared:\n" + describe(graph, component))
            continue
        problems += 1
        print("UNDECLARED circle (break it, or declare it in %s's '## Cycles' with the reason):\n%s" %
              (args.declared_in or "a design document", describe(graph, component)))
    for cycle in declared:
        if cycle not in found:
            problems += 1
            print("DECLARED circle not found as declared (the files of one circle are exactly its component): " +
                  " ".join(cycle))
    if problems:
        print("%d problem(s)" % problems)
        return 1
    print("no circles but the declared ones")
    return 0


if __name__ == "__main__":
    sys.exit(main())
