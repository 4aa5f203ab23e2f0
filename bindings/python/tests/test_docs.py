"""docs/python.md's quick start runs as written."""

from __future__ import annotations

import re
import subprocess
import sys

from conftest import ROOT


def test_quick_start_runs(tmp_path):
    text = (ROOT / "docs" / "python.md").read_text()
    after = text.split("<!-- quickstart", 1)[1]
    code = re.search(r"```python\n(.*?)```", after, re.S).group(1)
    script = tmp_path / "quickstart.py"
    script.write_text(code)
    done = subprocess.run([sys.executable, str(script)], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "got b'hello'"


def test_batching_example_runs(tmp_path):
    text = (ROOT / "docs" / "python.md").read_text()
    after = text.split("<!-- batching", 1)[1]
    code = re.search(r"```python\n(.*?)```", after, re.S).group(1)
    script = tmp_path / "batching.py"
    script.write_text(code)
    done = subprocess.run([sys.executable, str(script)], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    assert done.stdout.split() == ["received", "1000", "messages"]


def test_groups_example_runs(tmp_path):
    text = (ROOT / "docs" / "python.md").read_text()
    after = text.split("<!-- groups", 1)[1]
    code = re.search(r"```python\n(.*?)```", after, re.S).group(1)
    script = tmp_path / "groups.py"
    script.write_text(code)
    done = subprocess.run([sys.executable, str(script)], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    assert done.stdout.split() == ["each", "group", "received", "100", "messages"]
