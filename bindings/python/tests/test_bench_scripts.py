"""The benchmark scripts run (with tiny counts) and clean up after
themselves: they are not run otherwise by the test suite, and a script
that no longer runs is found here rather than by the next person who
measures with it. Their figures are not checked: timing is not tested."""

from __future__ import annotations

import os
import pathlib
import subprocess
import sys

import pytest

BENCH = pathlib.Path(__file__).resolve().parents[1] / "bench"


def _regions(stem: str) -> set[str]:
    return {n for n in os.listdir("/dev/shm") if stem in n}


@pytest.mark.parametrize(
    "script, args, stem",
    [
        ("bench.py", ["--rounds", "200", "--messages", "2000", "--runs", "1", "--size", "4096"], "bench-py-"),
        ("large.py", ["--rounds", "50", "--runs", "1", "--sizes", "1,65536,1048576"], "bench-large-"),
        ("into.py", ["--rounds", "50", "--runs", "1", "--size", "65536"], "bench-into-"),
    ],
)
def test_bench_script_runs(script, args, stem):
    before = _regions(stem)
    out = subprocess.run(
        [sys.executable, str(BENCH / script), *args], capture_output=True, text=True, timeout=300
    )
    assert out.returncode == 0, out.stderr
    assert "ratios" in out.stdout and "tachyon" in out.stdout, out.stdout
    if script == "large.py":
        assert "tachyon RpcBuffer into" in out.stdout, out.stdout
    assert _regions(stem) == before  # every region it made is removed
