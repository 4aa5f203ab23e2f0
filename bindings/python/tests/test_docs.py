"""docs/python.md's examples run as written."""

from __future__ import annotations

import re
import subprocess
import sys

from conftest import ROOT


def run_block(tmp_path, marker: str) -> str:
    """Runs the first python block after `<!-- marker` in docs/python.md
    as a script; its standard output."""
    text = (ROOT / "docs" / "python.md").read_text()
    after = text.split(f"<!-- {marker}", 1)[1]
    code = re.search(r"```python\n(.*?)```", after, re.S).group(1)
    script = tmp_path / f"{marker}.py"
    script.write_text(code)
    done = subprocess.run([sys.executable, str(script)], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    return done.stdout


def test_quick_start_runs(tmp_path):
    assert run_block(tmp_path, "quickstart").strip() == "got b'hello'"


def test_batching_example_runs(tmp_path):
    assert run_block(tmp_path, "batching").split() == ["received", "1000", "messages"]


def test_groups_example_runs(tmp_path):
    assert run_block(tmp_path, "groups").split() == ["each", "group", "received", "100", "messages"]


def test_into_example_runs(tmp_path):
    assert run_block(tmp_path, "into").split() == ["614400", "7"]
