"""A numpy array shared by two processes, without copies.

    python examples/python/numpy_array.py

The parent makes a SharedArray of 1,000,000 float64 and views it with
numpy; a child process (spawn) opens the same array, views it too and scales
it in place under the array's lock. The parent sees the result in its own
view: both views are the same shared memory.
"""

import multiprocessing
import os

import numpy as np

import tachyon

NAME = f"numpy-py-{os.getpid()}"
N = 1_000_000


def worker(name: str) -> None:
    arr = tachyon.SharedArray(name, create=False, dtype="float64")
    view = np.asarray(arr)  # no copy: a view of shared memory
    with arr.lock():  # exclusive, across processes
        view *= 2.0
    print(f"child {os.getpid()} doubled {len(view)} elements in place")


def main() -> None:
    arr = tachyon.SharedArray(NAME, N, "float64")  # removed when the last user closes it
    view = np.asarray(arr)
    with arr.lock():
        view[:] = np.arange(N, dtype=np.float64)
    child = multiprocessing.get_context("spawn").Process(target=worker, args=(NAME,))
    child.start()
    child.join(timeout=60)
    with arr.read_lock():
        print(f"parent sees sum {view.sum():.0f} (expected {float(N * (N - 1)):.0f})")
        assert view[-1] == 2.0 * (N - 1)


if __name__ == "__main__":
    main()
