"""The import rules of CONTRIBUTING.md, enforced.

- `collectors/` (the agent and the exporters, installed on every compute node) never imports the
  dashboard stack: dash, plotly, pandas, numpy, nor anything under `dashboard`.
- `dashboard/analysis/` (diagnosis, planner, simulator: pure functions) never imports dash or plotly.
- `dashboard/datasource/` (the data layer: plain frozen records for the pages) never imports dash or
  plotly either: figures and components are the pages' business.
- No module imports a `_private` name from another package (a folder of its own).

Each rule is checked twice: on the source (every import statement, also those inside functions,
with the file and line in the message) and by importing every module of the room in a fresh
interpreter where the forbidden packages are absent, which also catches indirect imports.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

from tests.support import blocked_imports

REPO = Path(__file__).resolve().parent.parent

# room -> top-level packages it must never import
RULES = {
    "collectors": {"dash", "plotly", "pandas", "numpy", "dashboard"},
    "dashboard/analysis": {"dash", "plotly"},
    "dashboard/datasource": {"dash", "plotly"},
}
CHECKED_FOR_PRIVATE = ("collectors", "dashboard", "bench", "tests")


def python_files(room: str) -> list[Path]:
    return sorted(p for p in (REPO / room).rglob("*.py") if ".venv" not in p.parts)


def module_name(path: Path) -> str:
    parts = list(path.relative_to(REPO).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def package_of(path: Path, repo: Path = REPO) -> str:
    return ".".join(path.parent.relative_to(repo).parts)


def imports(path: Path, repo: Path = REPO):
    """(line, absolute module, imported names) for every import statement in the file."""
    tree = ast.parse(path.read_text(), str(path))
    package = package_of(path, repo)
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for alias in node.names:
                yield node.lineno, alias.name, ()
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = package.split(".")[: len(package.split(".")) - (node.level - 1)]
                module = ".".join(base + ([node.module] if node.module else []))
            else:
                module = node.module or ""
            yield node.lineno, module, tuple(a.name for a in node.names)


def target_package(module: str, repo: Path = REPO) -> str:
    """The package (folder) a module lives in: the module itself when it is a package."""
    if (repo / Path(*module.split("."))).is_dir():
        return module
    return module.rpartition(".")[0] or module


@pytest.mark.parametrize("room", sorted(RULES))
def test_rooms_do_not_import_forbidden_packages_in_source(room):
    forbidden = RULES[room]
    bad = [f"{path.relative_to(REPO)}:{line} imports {module}"
           for path in python_files(room)
           for line, module, _ in imports(path)
           if module.partition(".")[0] in forbidden]
    assert not bad, f"{room}/ must not import {sorted(forbidden)}:\n" + "\n".join(bad)


@pytest.mark.parametrize("room", sorted(RULES))
def test_rooms_import_without_forbidden_packages(room):
    modules = [module_name(p) for p in python_files(room)]
    code = ("import importlib, sys, traceback\n"
            "failed = []\n"
            "for m in sys.argv[1:]:\n"
            "    try:\n"
            "        importlib.import_module(m)\n"
            "    except Exception:\n"
            "        failed.append(m + ': ' + traceback.format_exc().strip().splitlines()[-1])\n"
            "print('\\n'.join(failed))\n"
            "sys.exit(1 if failed else 0)\n")
    res = blocked_imports.run(RULES[room], code, *modules)
    assert res.returncode == 0, (f"{room}/ modules need {sorted(RULES[room])}:\n{res.stdout}{res.stderr[-3000:]}")
    assert len(modules) > 5  # the room was found


def test_no_private_names_imported_across_packages():
    bad = []
    for room in CHECKED_FOR_PRIVATE:
        for path in python_files(room):
            here = package_of(path)
            for line, module, names in imports(path):
                private = [n for n in names if n.startswith("_") and not n.startswith("__")]
                # the project's own packages only (a driver of a third-party tool may reach into it)
                ours = module.split(".")[0] in ("collectors", "dashboard", "tests", "bench")
                if private and ours and target_package(module) != here:
                    bad.append(f"{path.relative_to(REPO)}:{line} from {module} import {', '.join(private)}")
    assert not bad, "private names imported from another package (make them public there):\n" + "\n".join(bad)


def test_the_private_rule_can_fail(tmp_path):
    """The checker resolves relative imports and tells a sibling module from another package."""
    (tmp_path / "a" / "b").mkdir(parents=True)
    module = tmp_path / "a" / "b" / "m.py"
    module.write_text("from ..c import _x\nfrom .n import _y\nfrom a.d import _z\nfrom . import _w\n")
    (tmp_path / "a" / "c.py").write_text("")
    here = package_of(module, tmp_path)
    got = [(name, target_package(name, tmp_path) != here) for _, name, _ in imports(module, tmp_path)]
    assert got == [("a.c", True), ("a.b.n", False), ("a.d", True), ("a.b", False)]
