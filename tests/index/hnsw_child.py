"""Another process on a collection's HNSW index, for tests/index/test_hnsw_background.py:

    python hnsw_child.py persist INDEX MODEL   # load, catch up and save (a graph due is built inside the save)
    python hnsw_child.py hang INDEX MODEL      # save with the graph built in the background; once the build has
                                               # written its file, print "held NAME" and wait to be killed
"""

from __future__ import annotations

import sys
import threading
import time
from pathlib import Path

from citerag.index import hnsw_build, sync
from citerag.store.sqlite import SqliteStore


class Held(threading.Event):
    """The build's gate (hnsw_build.release), cleared: `reached` is set once the build waits at it, its file
    written and fsynced."""

    reached = threading.Event()

    def wait(self, timeout: float | None = None) -> bool:
        self.reached.set()
        return super().wait(timeout)


def main() -> None:
    mode, root, model = sys.argv[1], Path(sys.argv[2]), sys.argv[3]
    store = SqliteStore(root)
    directory = sync.index_dir(root, model, "hnsw")
    gate = Held()
    if mode == "hang":
        hnsw_build.SYNC_BUILD_ROWS = 0
        hnsw_build.release = gate
    indexes = sync.persist(sync.load(directory, model, "hnsw"), store)
    if mode == "hang":
        build = hnsw_build.current(directory)
        assert build is not None and build.running
        gate.reached.wait()
        print(f"held {build.name}", flush=True)  # the save returned and the build's file is complete
        time.sleep(600)  # killed before
    print(f"saved {indexes.token}", flush=True)


if __name__ == "__main__":
    main()
