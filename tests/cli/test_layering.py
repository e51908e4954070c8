"""The package layering DESIGN.md §2 draws: nothing imports cli (the public API, floorfirst, sits
below it), the planner never imports the runtime, and runtime_policy never imports executor (checked on the source, so a lazy import inside
a function counts too)."""

import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
FORBIDDEN = {"planner": ("cli", "calibration", "runtime_policy", "executor"), "calibration": ("cli", "executor"),
             "runtime_policy": ("cli", "executor"), "executor": ("cli",), "floorfirst": ("cli",)}


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


def test_commands_are_registered_once_per_process():
    """main() used to register every command again on each call (the 200th call took 3 s)."""
    from cli.main import _register_all, app

    _register_all()
    n = len(app.registered_commands)
    for _ in range(3):
        _register_all()
    assert len(app.registered_commands) == n and len({c.name for c in app.registered_commands}) == n


def test_the_layout_registry_scans_its_package_once():
    """Registry.discover imports the package's modules on the first call only (it was every
    Deployment.attention_layout access), and still returns an entry registered after the scan."""
    from unittest import mock

    from planner.layouts.base import _ATTN, attention_layouts

    attention_layouts()
    with mock.patch("importlib.import_module") as imported:
        for _ in range(5):
            attention_layouts()
    assert imported.call_count == 0

    class Late:
        name = "late-toy"

    _ATTN.register(Late)
    try:
        assert attention_layouts()["late-toy"] is Late
    finally:
        _ATTN.unregister("late-toy")
