-- citerag's PostgreSQL schema, version 12: who may see what (issue 30).
-- documents.read_groups: the groups allowed to read a document; [] is everyone who may read its collection.
ALTER TABLE documents ADD COLUMN read_groups JSONB NOT NULL DEFAULT '[]';
-- Users and their groups (made by `citerag users`, or at an OpenID Connect sign-in from the provider's claim).
CREATE TABLE api_users (
    name TEXT PRIMARY KEY,
    member_of JSONB NOT NULL DEFAULT '[]',
    origin TEXT NOT NULL DEFAULT 'local',
    created_at TEXT NOT NULL,
    updated_at TEXT NOT NULL
);
-- A key belongs to a user (and reads with the user's groups as they are at each request), or is a service key
-- with its own groups; a key with neither reads only the documents open to everyone in its collection.
ALTER TABLE api_keys ADD COLUMN user_name TEXT REFERENCES api_users(name) ON DELETE CASCADE;
ALTER TABLE api_keys ADD COLUMN member_of JSONB NOT NULL DEFAULT '[]';
