-- Tenants (docs/tenants.md): every row of the books, the outbox, the
-- notify tables, the reconciler's and the operators' records belongs to one
-- tenant, and PostgreSQL itself keeps each tenant's rows from the others.
--
-- * `tenants`: one row per shop; `default` is the shop a deployment that
--   configures no tenant has, and every row written before this migration
--   (or by the previous release, which knows no tenant) belongs to it.
-- * The scope of a transaction is the setting `oncehook.tenants`: a
--   tenant's id, several ids separated by commas (a console operator's
--   tenants), or `*` (the platform: the worker, relays, mailer, notifier,
--   reconciler and refunder, which work for every tenant). Unset or empty,
--   a transaction sees no row of a tenant table. The binaries set it per
--   transaction (`SET LOCAL`, sent with the `BEGIN`), so it holds behind a
--   pooler in transaction mode.
-- * Every tenant table gets `tenant_id`, whose default is the transaction's
--   tenant when its scope is exactly one tenant and `default` otherwise: an
--   insert made for a tenant is that tenant's without naming it, and the
--   previous release's inserts (no scope) are the default tenant's.
-- * Row-level security on every tenant table, one policy each: a row is
--   seen, and may be written, only inside a scope that includes its tenant.
--   The role the binaries connect as, `oncehook_service`, owns no table and
--   is no superuser, so the policies hold for it; `oncehookctl migrate`
--   creates it (a cluster's role is not a database's object) before this
--   file runs. The owner (the previous release's binaries connect as it
--   until the roll is over) is not subject to them: security is enabled,
--   not forced, so nothing the previous release does changes.
--
-- Expand only: a new table, new functions, columns with a default that is
-- not volatile (existing rows take its value at this migration, no
-- rewrite), policies and grants.
SET LOCAL lock_timeout = '5s';

-- Whether the transaction's scope includes tenant `t`.
CREATE OR REPLACE FUNCTION oncehook_sees(t text) RETURNS boolean
    LANGUAGE sql STABLE PARALLEL SAFE AS $$
    SELECT coalesce(current_setting('oncehook.tenants', true), '') = '*'
        OR t = ANY (string_to_array(nullif(current_setting('oncehook.tenants', true), ''), ','))
$$;

-- The tenant a row inserted now belongs to: the scope's when it names
-- exactly one tenant, `default` otherwise.
CREATE OR REPLACE FUNCTION oncehook_tenant() RETURNS text
    LANGUAGE sql STABLE PARALLEL SAFE AS $$
    SELECT CASE
        WHEN coalesce(current_setting('oncehook.tenants', true), '') IN ('', '*') THEN 'default'
        WHEN strpos(current_setting('oncehook.tenants', true), ',') > 0 THEN 'default'
        ELSE current_setting('oncehook.tenants', true)
    END
$$;

CREATE TABLE IF NOT EXISTS tenants (
    id          text PRIMARY KEY CHECK (id ~ '^[a-z0-9][a-z0-9_-]{0,62}$'),
    name        text NOT NULL,
    -- `active` or `disabled` (docs/tenants.md, "Disabling a tenant").
    status      text NOT NULL DEFAULT 'active' CHECK (status IN ('active', 'disabled')),
    created_at  timestamptz NOT NULL DEFAULT now(),
    disabled_at timestamptz
);
INSERT INTO tenants (id, name) VALUES ('default', 'Default tenant') ON CONFLICT (id) DO NOTHING;
ALTER TABLE tenants ENABLE ROW LEVEL SECURITY;
CREATE POLICY tenant_scope ON tenants USING (oncehook_sees(id)) WITH CHECK (oncehook_sees(id));

ALTER TABLE orders              ADD COLUMN IF NOT EXISTS tenant_id text NOT NULL DEFAULT oncehook_tenant();
ALTER TABLE order_items         ADD COLUMN IF NOT EXISTS tenant_id text NOT NULL DEFAULT oncehook_tenant();
ALTER TABLE order_gateway_refs  ADD COLUMN IF NOT EXISTS tenant_id text NOT NULL DEFAULT oncehook_tenant();
ALTER TABLE order_cancellations ADD COLUMN IF NOT EXISTS tenant_id text NOT NULL DEFAULT oncehook_tenant();
ALTER TABLE order_events        ADD COLUMN IF NOT EXISTS tenant_id text NOT NULL DEFAULT oncehook_tenant();
ALTER TABLE payments            ADD COLUMN IF NOT EXISTS tenant_id text NOT NULL DEFAULT oncehook_tenant();
ALTER TABLE payment_links       ADD COLUMN IF NOT EXISTS tenant_id text NOT NULL DEFAULT oncehook_tenant();
ALTER TABLE refunds             ADD COLUMN IF NOT EXISTS tenant_id text NOT NULL DEFAULT oncehook_tenant();
ALTER TABLE refund_intents      ADD COLUMN IF NOT EXISTS tenant_id text NOT NULL DEFAULT oncehook_tenant();
ALTER TABLE refund_control      ADD COLUMN IF NOT EXISTS tenant_id text NOT NULL DEFAULT oncehook_tenant();
ALTER TABLE products            ADD COLUMN IF NOT EXISTS tenant_id text NOT NULL DEFAULT oncehook_tenant();
ALTER TABLE stock_adjustments   ADD COLUMN IF NOT EXISTS tenant_id text NOT NULL DEFAULT oncehook_tenant();
ALTER TABLE parked_events       ADD COLUMN IF NOT EXISTS tenant_id text NOT NULL DEFAULT oncehook_tenant();
ALTER TABLE processed_webhooks  ADD COLUMN IF NOT EXISTS tenant_id text NOT NULL DEFAULT oncehook_tenant();
ALTER TABLE email_outbox        ADD COLUMN IF NOT EXISTS tenant_id text NOT NULL DEFAULT oncehook_tenant();
ALTER TABLE notify_endpoints    ADD COLUMN IF NOT EXISTS tenant_id text NOT NULL DEFAULT oncehook_tenant();
ALTER TABLE notify_deliveries   ADD COLUMN IF NOT EXISTS tenant_id text NOT NULL DEFAULT oncehook_tenant();
ALTER TABLE reconcile_runs      ADD COLUMN IF NOT EXISTS tenant_id text NOT NULL DEFAULT oncehook_tenant();
ALTER TABLE reconcile_checks    ADD COLUMN IF NOT EXISTS tenant_id text NOT NULL DEFAULT oncehook_tenant();
ALTER TABLE api_idempotency     ADD COLUMN IF NOT EXISTS tenant_id text NOT NULL DEFAULT oncehook_tenant();
ALTER TABLE api_audit           ADD COLUMN IF NOT EXISTS tenant_id text NOT NULL DEFAULT oncehook_tenant();
ALTER TABLE console_audit       ADD COLUMN IF NOT EXISTS tenant_id text NOT NULL DEFAULT oncehook_tenant();

ALTER TABLE orders              ENABLE ROW LEVEL SECURITY;
ALTER TABLE order_items         ENABLE ROW LEVEL SECURITY;
ALTER TABLE order_gateway_refs  ENABLE ROW LEVEL SECURITY;
ALTER TABLE order_cancellations ENABLE ROW LEVEL SECURITY;
ALTER TABLE order_events        ENABLE ROW LEVEL SECURITY;
ALTER TABLE payments            ENABLE ROW LEVEL SECURITY;
ALTER TABLE payment_links       ENABLE ROW LEVEL SECURITY;
ALTER TABLE refunds             ENABLE ROW LEVEL SECURITY;
ALTER TABLE refund_intents      ENABLE ROW LEVEL SECURITY;
ALTER TABLE refund_control      ENABLE ROW LEVEL SECURITY;
ALTER TABLE products            ENABLE ROW LEVEL SECURITY;
ALTER TABLE stock_adjustments   ENABLE ROW LEVEL SECURITY;
ALTER TABLE parked_events       ENABLE ROW LEVEL SECURITY;
ALTER TABLE processed_webhooks  ENABLE ROW LEVEL SECURITY;
ALTER TABLE email_outbox        ENABLE ROW LEVEL SECURITY;
ALTER TABLE notify_endpoints    ENABLE ROW LEVEL SECURITY;
ALTER TABLE notify_deliveries   ENABLE ROW LEVEL SECURITY;
ALTER TABLE reconcile_runs      ENABLE ROW LEVEL SECURITY;
ALTER TABLE reconcile_checks    ENABLE ROW LEVEL SECURITY;
ALTER TABLE api_idempotency     ENABLE ROW LEVEL SECURITY;
ALTER TABLE api_audit           ENABLE ROW LEVEL SECURITY;
ALTER TABLE console_audit       ENABLE ROW LEVEL SECURITY;

-- One policy per table, the same on each: a tenant's rows inside its scope.
CREATE POLICY tenant_scope ON orders              USING (oncehook_sees(tenant_id)) WITH CHECK (oncehook_sees(tenant_id));
CREATE POLICY tenant_scope ON order_items         USING (oncehook_sees(tenant_id)) WITH CHECK (oncehook_sees(tenant_id));
CREATE POLICY tenant_scope ON order_gateway_refs  USING (oncehook_sees(tenant_id)) WITH CHECK (oncehook_sees(tenant_id));
CREATE POLICY tenant_scope ON order_cancellations USING (oncehook_sees(tenant_id)) WITH CHECK (oncehook_sees(tenant_id));
CREATE POLICY tenant_scope ON order_events        USING (oncehook_sees(tenant_id)) WITH CHECK (oncehook_sees(tenant_id));
CREATE POLICY tenant_scope ON payments            USING (oncehook_sees(tenant_id)) WITH CHECK (oncehook_sees(tenant_id));
CREATE POLICY tenant_scope ON payment_links       USING (oncehook_sees(tenant_id)) WITH CHECK (oncehook_sees(tenant_id));
CREATE POLICY tenant_scope ON refunds             USING (oncehook_sees(tenant_id)) WITH CHECK (oncehook_sees(tenant_id));
CREATE POLICY tenant_scope ON refund_intents      USING (oncehook_sees(tenant_id)) WITH CHECK (oncehook_sees(tenant_id));
CREATE POLICY tenant_scope ON refund_control      USING (oncehook_sees(tenant_id)) WITH CHECK (oncehook_sees(tenant_id));
CREATE POLICY tenant_scope ON products            USING (oncehook_sees(tenant_id)) WITH CHECK (oncehook_sees(tenant_id));
CREATE POLICY tenant_scope ON stock_adjustments   USING (oncehook_sees(tenant_id)) WITH CHECK (oncehook_sees(tenant_id));
CREATE POLICY tenant_scope ON parked_events       USING (oncehook_sees(tenant_id)) WITH CHECK (oncehook_sees(tenant_id));
CREATE POLICY tenant_scope ON processed_webhooks  USING (oncehook_sees(tenant_id)) WITH CHECK (oncehook_sees(tenant_id));
CREATE POLICY tenant_scope ON email_outbox        USING (oncehook_sees(tenant_id)) WITH CHECK (oncehook_sees(tenant_id));
CREATE POLICY tenant_scope ON notify_endpoints    USING (oncehook_sees(tenant_id)) WITH CHECK (oncehook_sees(tenant_id));
CREATE POLICY tenant_scope ON notify_deliveries   USING (oncehook_sees(tenant_id)) WITH CHECK (oncehook_sees(tenant_id));
CREATE POLICY tenant_scope ON reconcile_runs      USING (oncehook_sees(tenant_id)) WITH CHECK (oncehook_sees(tenant_id));
CREATE POLICY tenant_scope ON reconcile_checks    USING (oncehook_sees(tenant_id)) WITH CHECK (oncehook_sees(tenant_id));
CREATE POLICY tenant_scope ON api_idempotency     USING (oncehook_sees(tenant_id)) WITH CHECK (oncehook_sees(tenant_id));
CREATE POLICY tenant_scope ON api_audit           USING (oncehook_sees(tenant_id)) WITH CHECK (oncehook_sees(tenant_id));
CREATE POLICY tenant_scope ON console_audit       USING (oncehook_sees(tenant_id)) WITH CHECK (oncehook_sees(tenant_id));

-- The binaries' role: reads and writes, owns nothing.
GRANT USAGE ON SCHEMA public TO oncehook_service;
GRANT SELECT, INSERT, UPDATE, DELETE ON ALL TABLES IN SCHEMA public TO oncehook_service;
GRANT USAGE, SELECT, UPDATE ON ALL SEQUENCES IN SCHEMA public TO oncehook_service;
-- Tables a later migration creates, by whoever runs the migrations.
ALTER DEFAULT PRIVILEGES IN SCHEMA public
    GRANT SELECT, INSERT, UPDATE, DELETE ON TABLES TO oncehook_service;
ALTER DEFAULT PRIVILEGES IN SCHEMA public
    GRANT USAGE, SELECT, UPDATE ON SEQUENCES TO oncehook_service;
