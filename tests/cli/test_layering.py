"""The package layering DESIGN.md §2 draws: nothing imports cli, the planner never imports the
runtime, and runtime_policy never imports executor (checked on the source, so a lazy import inside
a function counts too)."""

import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
FORBIDDEN = {"planner": ("cli", "calibration", "runtime_policy", "executor"), "calibration": ("cli", "executor"),
             "runtime_policy": ("cli", "executor"), "executor": ("cli",)}


def imported_packages(path: Path) -> set[str]:
    out = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            out.update(a.name.split(".")[0] for a in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            out.add(node.module.split(".")[0])
    return out


@pytest.mark.parametrize("package", sorted(FORBIDDEN))
def test_package_does_not_import_what_sits_above_it(package):
    bad = {str(p.relative_to(ROOT)): sorted(imported_packages(p) & set(FORBIDDEN[package]))
           for p in (ROOT / package).rglob("*.py")}
    assert not {k: v for k, v in bad.items() if v}
