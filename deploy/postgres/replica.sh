#!/usr/bin/env bash
# The streaming replica. On its first start, a base backup of the primary (pg_basebackup -R also writes the
# standby settings, primary_conninfo included); then PostgreSQL as a read-only hot standby replaying the
# primary's WAL. Arguments are PostgreSQL's (-c ...): a standby needs max_connections and the other sizing
# settings at least as large as the primary's, so compose passes both the same ones.
set -euo pipefail
if [ ! -s "$PGDATA/PG_VERSION" ]; then
    until pg_isready -h postgres -p 5432 -q; do sleep 1; done
    mkdir -p "$PGDATA"
    chown postgres:postgres "$PGDATA"
    chmod 700 "$PGDATA"
    gosu postgres pg_basebackup -d "host=postgres port=5432 user=replicator password=$REPLICATION_PASSWORD" \
        -D "$PGDATA" -R -X stream --checkpoint=fast
fi
exec gosu postgres postgres "$@"
