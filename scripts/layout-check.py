#!/usr/bin/env python3
"""The house rules of the Rust workspace that the compiler does not check, measured:

- module circles: inside each crate, the modules that import one another in a circle (a
  strongly connected component of the `use crate::` / `super::` graph, doc comments and test
  modules aside); none may hold more than two files;
- imports that run back up: the fewest imports (`use` paths) that must go for the modules
  of each circle to stack in layers, each importing only from below (issue 54: at most 6 in
  the engine crate);
- long files: no Rust source file under `crates/*/src` over 1,000 lines, test modules aside
  (a `#[cfg(test)]` module at the end of a file, or a `tests.rs` / `*_tests.rs` file);
- line counts per crate (all lines, and without test modules), for the record.

    scripts/layout-check.py            # prints the report; exit 1 if a rule is broken
    scripts/layout-check.py --json     # the same as JSON (tests/python/test_layout.py reads it)
"""
from __future__ import annotations

import itertools
import json
import re
import sys
from collections import defaultdict
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
MAX_CIRCLE_FILES = 2
MAX_FILE_LINES = 1000


def is_test_file(path: Path) -> bool:
    return path.name == "tests.rs" or path.name.endswith("_tests.rs")


def without_tests(text: str) -> str:
    """The text before a file's test module (`#[cfg(test)]` at the start of a line)."""
    match = re.search(r"^#\[cfg\(test\)\]", text, re.MULTILINE)
    return text if match is None else text[: match.start()]


def module_name(src: Path, path: Path) -> str:
    parts = list(path.relative_to(src).with_suffix("").parts)
    if parts[-1] == "mod":
        parts.pop()
    if parts in (["lib"], ["main"]):
        return "crate"
    return "::".join(parts)


def module_graph(src: Path) -> dict[str, set[str]]:
    """Which module of the crate rooted at `src` imports which (test code and comments aside)."""
    edges: dict[str, set[str]] = defaultdict(set)
    for (module, target), _ in import_counts(src).items():
        edges[module].add(target)
    return edges


def import_counts(src: Path) -> dict[tuple[str, str], int]:
    """How many import paths each module of the crate rooted at `src` names in each other one."""
    texts = {}
    for path in src.rglob("*.rs"):
        if is_test_file(path):
            continue
        texts[module_name(src, path)] = without_tests(path.read_text())
    modules = set(texts)
    counts: dict[tuple[str, str], int] = defaultdict(int)
    for module, text in texts.items():
        code = "\n".join(line for line in text.splitlines()
                         if not line.lstrip().startswith("//"))
        paths = []
        for found in re.findall(r"crate::((?:[a-z_0-9]+::)*[a-z_0-9]+|\{[^}]*\})", code):
            if found.startswith("{"):
                paths.extend(p for p in re.split(r"[,{}\s]+", found) if p)
            else:
                paths.append(found)
        parent = module.rsplit("::", 1)[0] if "::" in module else ""
        for sibling in re.findall(r"super::([a-z_0-9]+)", code):
            paths.append(f"{parent}::{sibling}" if parent else sibling)
        for path in paths:
            segments = path.split("::")
            for end in range(len(segments), 0, -1):
                target = "::".join(segments[:end])
                if target in modules:
                    if target != module and not module.startswith(target + "::"):
                        counts[(module, target)] += 1
                    break
    return counts


def circles(edges: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected components of more than one module (Tarjan)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []
    counter = [0]
    nodes = set(edges) | {t for targets in edges.values() for t in targets}

    def visit(node: str) -> None:
        index[node] = low[node] = counter[0]
        counter[0] += 1
        stack.append(node)
        on_stack.add(node)
        for target in edges.get(node, ()):
            if target not in index:
                visit(target)
                low[node] = min(low[node], low[target])
            elif target in on_stack:
                low[node] = min(low[node], index[target])
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

    sys.setrecursionlimit(10_000)
    for node in sorted(nodes):
        if node not in index:
            visit(node)
    return found


def imports_back_up(counts: dict[tuple[str, str], int], circle: list[str]) -> int:
    """The fewest import paths inside `circle` that run back up, over every order of its
    modules in layers (exhaustive up to 7 modules; above that, the order they were listed in,
    an upper bound)."""
    inside = {pair: n for pair, n in counts.items() if pair[0] in circle and pair[1] in circle}

    def upward(order: tuple[str, ...]) -> int:
        layer = {module: i for i, module in enumerate(order)}
        return sum(n for (a, b), n in inside.items() if layer[b] > layer[a])

    if len(circle) > 7:
        return upward(tuple(circle))
    return min(upward(order) for order in itertools.permutations(circle))


def report() -> dict:
    crates = {}
    long_files = []
    for src in sorted(REPO.glob("crates/*/src")):
        crate = src.parent.name
        total = without = 0
        for path in src.rglob("*.rs"):
            text = path.read_text()
            lines = text.count("\n")
            total += lines
            if is_test_file(path):
                continue
            code = without_tests(text).count("\n")
            without += code
            if code > MAX_FILE_LINES:
                long_files.append({"file": str(path.relative_to(REPO)), "lines": code})
        counts = import_counts(src)
        found = circles(module_graph(src))
        crates[crate] = {
            "lines": total,
            "lines_without_tests": without,
            "circles": found,
            "imports_back_up": sum(imports_back_up(counts, circle) for circle in found),
        }
    return {"crates": crates, "long_files": long_files}


def main() -> int:
    result = report()
    if "--json" in sys.argv:
        print(json.dumps(result, indent=2))
    else:
        for crate, facts in result["crates"].items():
            print(f"{crate:22} {facts['lines']:6} lines ({facts['lines_without_tests']} without tests),"
                  f" {facts['imports_back_up']} imports back up")
            for circle in facts["circles"]:
                print(f"    circle of {len(circle)}: {', '.join(circle)}")
        for long in result["long_files"]:
            print(f"long file: {long['file']} ({long['lines']} lines without tests)")
    broken = result["long_files"] or any(
        len(circle) > MAX_CIRCLE_FILES
        for facts in result["crates"].values() for circle in facts["circles"])
    return 1 if broken else 0


if __name__ == "__main__":
    sys.exit(main())
