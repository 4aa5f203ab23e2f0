"""The examples in examples/python run (each in its own interpreter)."""

from __future__ import annotations

import subprocess
import sys

import pytest

from conftest import ROOT

EXAMPLES = ROOT / "examples" / "python"


@pytest.mark.parametrize(
    "script, args",
    [("hello.py", []), ("pingpong.py", ["200"]), ("numpy_array.py", []), ("rpc_service.py", []),
     ("batches.py", ["2000"])],
)
def test_example_runs(script, args):
    done = subprocess.run(
        [sys.executable, str(EXAMPLES / script), *args], capture_output=True, text=True, timeout=120
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip()
