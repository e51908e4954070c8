"""The contracts page is generated from the schemas and must be current; the walkthrough's
commands and pictures exist."""

from __future__ import annotations

import importlib.util
import json
import re

from tests.agent.contracts import ROOT, SCHEMAS


def _render_docs():
    spec = importlib.util.spec_from_file_location("render_docs", SCHEMAS / "render_docs.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def test_contracts_reference_is_generated_from_the_current_schemas():
    r = _render_docs()
    assert set(r.ORDER) == {p.name.removesuffix(".schema.json") for p in SCHEMAS.glob("*.schema.json")}
    text = r.DOC.read_text()
    assert r.updated(text) == text, "docs/json-contracts.md is stale: run python schemas/render_docs.py"
    for name in r.ORDER:
        const = json.loads((SCHEMAS / f"{name}.schema.json").read_text())["properties"]["schema"]["const"]
        assert f"`{const}`" in text


def test_walkthrough_pictures_exist_and_are_linked():
    text = (ROOT / "docs" / "walkthrough.md").read_text()
    images = re.findall(r"!\[[^\]]*\]\((img/[^)]+\.png)\)", text)
    assert len(images) >= 3
    for img in images:
        assert (ROOT / "docs" / img).stat().st_size > 10_000, img


def test_docs_a_clone_can_follow():
    """No link leaves the repository (a clone has no ../shared), and installs are from the clone."""
    docs = [ROOT / "README.md", ROOT / "skills" / "floor-first" / "SKILL.md", *(ROOT / "docs").glob("*.md")]
    for doc in docs:
        text = doc.read_text()
        assert "../shared" not in text, doc
        for target in re.findall(r"\]\(([^)#]+)[^)]*\)", text):
            if not target.startswith(("http://", "https://")):
                assert (doc.parent / target).resolve().is_relative_to(ROOT) and (doc.parent / target).exists(), (doc, target)
        assert "floorfirst[" not in text, f"{doc}: the project is not on the package index; pip install '.[extra]'"
