"""Imports flow one way (DESIGN.md): targets/ imports nothing else of the project; passes/ and
runtime/ import targets/ but not each other or tools/; analyses import no rewrite pass or
planner. Lazy imports count."""

import ast
from collections.abc import Iterator
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parent.parent
FOLDERS = ("passes", "runtime", "targets", "tools")
FORBIDDEN = {
    "targets": {"passes", "runtime", "tools"},
    "passes": {"runtime", "tools"},
    "runtime": {"passes", "tools"},
}
ANALYSIS_MAY_IMPORT = (
    "tvm_chiplet.passes.analysis", "tvm_chiplet.passes.attrs", "tvm_chiplet.targets",
)


def project_imports(folder: Path) -> Iterator[tuple[str, str]]:
    """``("file:line", module)`` for every absolute import of ``tvm_chiplet`` under ``folder``."""
    for path in sorted(folder.rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            if isinstance(node, ast.Import):
                names = [alias.name for alias in node.names]
            elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
                names = [node.module]
            else:
                continue
            for name in names:
                if name.split(".")[0] == "tvm_chiplet":
                    yield f"{path.relative_to(folder.parent)}:{node.lineno}", name


def back_edges(repo: Path) -> list[str]:
    """``file:line src -> module`` for every import of a project folder that ``FORBIDDEN`` bars."""
    return [
        f"{where} {src} -> {name}"
        for src, barred in FORBIDDEN.items()
        for where, name in project_imports(repo / src)
        if len(name.split(".")) > 1 and name.split(".")[1] in barred
    ]


def test_no_folder_imports_against_the_flow():
    assert back_edges(REPO) == []


def test_analyses_import_no_rewrite_pass_or_planner():
    bad = [f"{where} {name}" for where, name in project_imports(REPO / "passes" / "analysis")
           if not name.startswith(ANALYSIS_MAY_IMPORT)]
    assert bad == []


@pytest.mark.parametrize(("folder", "module"), [
    ("targets", "tvm_chiplet.passes.attrs"),
    ("passes", "tvm_chiplet.runtime.device"),
    ("runtime", "tvm_chiplet.tools.frontends"),
])
def test_a_back_edge_is_found_even_inside_a_function(tmp_path, folder, module):
    for name in FOLDERS:
        (tmp_path / name).mkdir()
    (tmp_path / folder / "late.py").write_text(f"def f():\n    import {module}\n")
    assert back_edges(tmp_path) == [f"{folder}/late.py:2 {folder} -> {module}"]
