"""A streaming replica of a local PostgreSQL started with `python -m citerag.local_postgres DIR PORT`, for running
docs/scaling.md's topology by hand, without containers:

    python deploy/local/replica.py REPLICA_DIR REPLICA_PORT PRIMARY_PORT

Takes a base backup of the primary on 127.0.0.1:PRIMARY_PORT (pg_basebackup -R) on first start, then serves it
read-only as a hot standby, printing its URL when it accepts connections; Ctrl-C (or SIGTERM) stops it.
"""

from __future__ import annotations

import signal
import sys
from pathlib import Path

from citerag.local_postgres import LocalPostgres


def main() -> None:
    if len(sys.argv) != 4:
        sys.exit(__doc__)
    folder, port, primary_port = Path(sys.argv[1]).resolve(), int(sys.argv[2]), int(sys.argv[3])
    # Ctrl-C or SIGTERM stops the server cleanly (its postmaster runs in a session of its own), also when started
    # with `&` from a script, where the shell leaves SIGINT ignored.
    signal.signal(signal.SIGINT, signal.default_int_handler)
    signal.signal(signal.SIGTERM, signal.default_int_handler)
    # A handle on the running primary: the replica uses only its port (nothing is started or stopped there).
    primary = LocalPostgres(folder.parent, primary_port)
    replica = LocalPostgres(folder, port, primary=primary).start()
    print(replica.url("postgres"), flush=True)
    try:
        signal.pause()
    except KeyboardInterrupt:
        pass
    finally:
        replica.stop()


if __name__ == "__main__":
    main()
