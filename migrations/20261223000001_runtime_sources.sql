-- Sources and API keys made at runtime (docs/tenants.md, "Onboarding a
-- merchant"): the platform's admin API and `oncehookctl sources` add a
-- tenant's gateway account, rotate and retire its signing secrets and
-- disable it; they issue and revoke a tenant's API keys. No binary
-- restarts: ingest reads the sources' changes from the admin API every
-- second, the API reads its keys every second.
--
-- * `sources`: one row per source made at runtime (the `[[source]]`
--   tables of the file stay where they are). `changed` is taken from
--   `admin_changes` by every write that changes what ingest must know (the
--   row, its secrets, its tenant's status), under one advisory lock, so
--   "every change after N" is exact: ingest asks for that, never for the
--   whole table.
-- * `source_secrets`: a source's signing secrets, sealed (docs/tenants.md,
--   "Secrets at rest"): never stored in the clear. Every live one verifies
--   (rotation); a retired one no longer does.
-- * `api_keys`: a tenant's API keys, by the SHA-256 of the key (the key is
--   shown once, when it is issued, and never stored). `changed` as for
--   sources: the API reads the keys changed since it last looked.
--
-- Each is a tenant table: `tenant_id`, row-level security, the one policy.
-- Expand only: new tables, a sequence, indexes on them, grants.
SET LOCAL lock_timeout = '5s';

CREATE SEQUENCE IF NOT EXISTS admin_changes;

CREATE TABLE IF NOT EXISTS sources (
    name           text PRIMARY KEY CHECK (name ~ '^[A-Za-z0-9_-]{1,64}$'),
    tenant_id      text NOT NULL DEFAULT oncehook_tenant() REFERENCES tenants (id),
    gateway        text NOT NULL,
    -- `disabled`: its webhooks are answered 503 (docs/tenants.md).
    status         text NOT NULL DEFAULT 'active' CHECK (status IN ('active', 'disabled')),
    tolerance_secs integer NOT NULL CHECK (tolerance_secs BETWEEN 1 AND 3600),
    -- PayU's merchant key: an account's name, not a secret.
    merchant_key   text,
    changed        bigint NOT NULL DEFAULT nextval('admin_changes'),
    created_at     timestamptz NOT NULL DEFAULT now(),
    disabled_at    timestamptz
);
CREATE INDEX IF NOT EXISTS sources_changed ON sources (changed);
CREATE INDEX IF NOT EXISTS sources_tenant ON sources (tenant_id, name);

CREATE TABLE IF NOT EXISTS source_secrets (
    source     text NOT NULL REFERENCES sources (name),
    no         integer NOT NULL CHECK (no >= 1),
    tenant_id  text NOT NULL DEFAULT oncehook_tenant(),
    -- `v1.<kid>.<…>`, sealed for `source:<name>:signing:<no>`.
    sealed     text NOT NULL,
    created_at timestamptz NOT NULL DEFAULT now(),
    retired_at timestamptz,
    PRIMARY KEY (source, no)
);

CREATE TABLE IF NOT EXISTS api_keys (
    id         text PRIMARY KEY,
    tenant_id  text NOT NULL DEFAULT oncehook_tenant() REFERENCES tenants (id),
    name       text NOT NULL,
    hash       bytea NOT NULL UNIQUE CHECK (length(hash) = 32),
    scopes     text[] NOT NULL,
    changed    bigint NOT NULL DEFAULT nextval('admin_changes'),
    created_at timestamptz NOT NULL DEFAULT now(),
    revoked_at timestamptz
);
CREATE INDEX IF NOT EXISTS api_keys_tenant ON api_keys (tenant_id, created_at);
CREATE INDEX IF NOT EXISTS api_keys_changed ON api_keys (changed);

ALTER TABLE sources        ENABLE ROW LEVEL SECURITY;
ALTER TABLE source_secrets ENABLE ROW LEVEL SECURITY;
ALTER TABLE api_keys       ENABLE ROW LEVEL SECURITY;
CREATE POLICY tenant_scope ON sources        USING (oncehook_sees(tenant_id)) WITH CHECK (oncehook_sees(tenant_id));
CREATE POLICY tenant_scope ON source_secrets USING (oncehook_sees(tenant_id)) WITH CHECK (oncehook_sees(tenant_id));
CREATE POLICY tenant_scope ON api_keys       USING (oncehook_sees(tenant_id)) WITH CHECK (oncehook_sees(tenant_id));

GRANT SELECT, INSERT, UPDATE ON sources, source_secrets, api_keys TO oncehook_service;
GRANT USAGE, SELECT, UPDATE ON SEQUENCE admin_changes TO oncehook_service;
