-- Reconciliation (docs/reconciliation.md): the worker asks the gateways'
-- APIs about orders still pending, and what it finds is applied as an event
-- like a webhook's.

-- How each delivery came: a signed webhook, or a payment state read from
-- the gateway's API. Rows written before this column are webhooks.
ALTER TABLE processed_webhooks ADD COLUMN origin text NOT NULL DEFAULT 'webhook'
    CHECK (origin IN ('webhook', 'reconciliation'));

-- When the reconciler last asked the gateways about an order, so a backlog
-- larger than one run's budget is worked through least recently asked
-- first. Its own table: writing it never touches the order's version.
CREATE TABLE reconcile_checks (
    order_id   bigint      PRIMARY KEY REFERENCES orders (id),
    checked_at timestamptz NOT NULL DEFAULT now(),
    checks     bigint      NOT NULL DEFAULT 1
);

-- The pending orders inside the window, oldest check first.
CREATE INDEX orders_pending_created_at ON orders (created_at) WHERE status = 'pending';

-- When the last scheduled run finished (one row): a worker that takes the
-- lock soon after another finished skips, so two workers make one run per
-- interval between them.
CREATE TABLE reconcile_runs (
    id          int         PRIMARY KEY CHECK (id = 1),
    finished_at timestamptz NOT NULL,
    runs        bigint      NOT NULL DEFAULT 1
);
