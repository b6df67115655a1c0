#!/usr/bin/env bash
# Runs once, when the primary's data folder is first created (/docker-entrypoint-initdb.d): pgvector in the
# citerag database (citerag's migrations also create it; here so the first start needs no superuser later),
# and the role the replica streams the WAL with, allowed to connect for replication.
set -eo pipefail
psql -v ON_ERROR_STOP=1 --username "$POSTGRES_USER" --dbname "$POSTGRES_DB" \
    --set=password="$REPLICATION_PASSWORD" <<'SQL'
CREATE EXTENSION IF NOT EXISTS vector;
CREATE ROLE replicator WITH REPLICATION LOGIN PASSWORD :'password';
SQL
echo "host replication replicator all scram-sha-256" >> "$PGDATA/pg_hba.conf"
