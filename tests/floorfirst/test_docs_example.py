"""docs/python-api.md's example runs as written (its first ```python block), so the page can't rot."""

import re
from pathlib import Path

DOC = Path(__file__).resolve().parents[2] / "docs" / "python-api.md"


def example() -> str:
    blocks = re.findall(r"^```python\n(.*?)^```", DOC.read_text(), re.S | re.M)
    assert blocks, "docs/python-api.md has no ```python block"
    return blocks[0]


def test_the_python_api_example_runs(capsys):
    exec(compile(example(), str(DOC), "exec"), {"__name__": "docs_python_api_example"})
    out = capsys.readouterr().out
    assert "best by floor_max:" in out and "switch_throughput" in out and "cant_decide" in out
