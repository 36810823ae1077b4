"""The house rules of the Rust workspace that the compiler does not enforce, held by a test
(issue 54): no circle of more than two modules inside any crate, no source file over 1,000
lines (test modules aside), the engine's operators and Ballista in crates of their own, and a
README a newcomer reads in minutes. `scripts/layout-check.py` measures; this asserts."""
from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]


def layout() -> dict:
    out = subprocess.run([sys.executable, str(REPO / "scripts" / "layout-check.py"), "--json"],
                         capture_output=True, text=True, check=False, timeout=60)
    return json.loads(out.stdout)


def test_no_crate_has_a_circle_of_more_than_two_modules() -> None:
    report = layout()
    assert "quiver-query" in report["crates"], report["crates"].keys()
    wide = {crate: [c for c in facts["circles"] if len(c) > 2]
            for crate, facts in report["crates"].items()}
    assert not any(wide.values()), wide


def test_the_engine_has_few_imports_running_back_up_and_the_binary_only_wires() -> None:
    """Issue 54's sizes: at most 6 imports inside the engine crate that run from a lower module
    back up (16 before the redesign), at most 8,000 lines in it, at most 1,500 in the binary
    (its tests included)."""
    crates = layout()["crates"]
    assert crates["quiver-query"]["imports_back_up"] <= 6, crates["quiver-query"]
    assert crates["quiver-query"]["lines"] <= 8000, crates["quiver-query"]
    assert crates["quiver-server"]["lines"] <= 1500, crates["quiver-server"]


def test_no_source_file_is_over_a_thousand_lines_test_modules_aside() -> None:
    assert layout()["long_files"] == []


def test_the_check_sees_a_circle_where_there_is_one(tmp_path: Path) -> None:
    """The checker's own power: three modules importing one another in a ring are found."""
    check = _load_checker()
    src = tmp_path / "src"
    src.mkdir()
    (src / "lib.rs").write_text("mod a;\nmod b;\nmod c;\n")
    (src / "a.rs").write_text("use crate::b::B;\npub struct A;\n")
    (src / "b.rs").write_text("use crate::c::C;\npub struct B;\n")
    (src / "c.rs").write_text("// use crate::z::Z; (a comment is no import)\nuse crate::a::A;\n"
                              "pub struct C;\n#[cfg(test)]\nmod tests { use crate::b::B; }\n")
    assert check.circles(check.module_graph(src)) == [["a", "b", "c"]]
    counts = check.import_counts(src)
    assert check.imports_back_up(counts, ["a", "b", "c"]) == 1
    (src / "b.rs").write_text("use crate::c::C;\nuse crate::a::{X, Y};\npub struct B;\n")
    assert check.imports_back_up(check.import_counts(src), ["a", "b", "c"]) == 1
    (src / "b.rs").write_text("use crate::c::C;\npub struct B;\n")
    (src / "c.rs").write_text("pub struct C;\n")
    assert check.circles(check.module_graph(src)) == []


def _load_checker():
    import importlib.util
    spec = importlib.util.spec_from_file_location("layout_check",
                                                  REPO / "scripts" / "layout-check.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_operators_and_ballista_live_below_the_engine() -> None:
    """The operators' crate does not depend on the engine, and only quiver-distributed links
    Ballista (read from each crate's [dependencies])."""
    def dependencies(crate: str) -> set[str]:
        text = (REPO / "crates" / crate / "Cargo.toml").read_text()
        section = re.search(r"^\[dependencies\]\n(.*?)(?:^\[|\Z)", text, re.MULTILINE | re.DOTALL)
        return {line.split("=")[0].strip() for line in section.group(1).splitlines()
                if "=" in line and not line.lstrip().startswith("#")}

    assert "quiver-query" not in dependencies("quiver-exec")
    assert "quiver-query" not in dependencies("quiver-distributed")
    assert "quiver-query" not in dependencies("quiver-governance")
    for crate in (p.name for p in (REPO / "crates").iterdir() if (p / "Cargo.toml").exists()):
        ballista = {d for d in dependencies(crate) if d.startswith("ballista")}
        assert crate == "quiver-distributed" or not ballista, (crate, ballista)


def test_the_readme_is_a_page_a_newcomer_reads() -> None:
    assert len((REPO / "README.md").read_text().splitlines()) <= 400
