-- The confluent order ledger (docs/ledger.md): the order's state is a
-- function of the recorded facts, so the delivery order no longer matters.
-- Upgrades a database created by the first migration in place.

-- Delivery identity: keyed by the source (two accounts of one gateway never
-- share a namespace) and bound to the signed bytes (an unsigned event-id
-- header cannot make a different body look like a duplicate).
UPDATE processed_webhooks SET source = provider WHERE source IS NULL;
ALTER TABLE processed_webhooks ALTER COLUMN source SET NOT NULL;
ALTER TABLE processed_webhooks ADD COLUMN body_sha256 text NOT NULL DEFAULT '';
ALTER TABLE processed_webhooks DROP CONSTRAINT processed_webhooks_pkey;
ALTER TABLE processed_webhooks ADD PRIMARY KEY (source, event_id, body_sha256);
CREATE INDEX processed_webhooks_provider_event ON processed_webhooks (provider, event_id);
ALTER TABLE processed_webhooks DROP CONSTRAINT processed_webhooks_outcome_check;
ALTER TABLE processed_webhooks ADD CONSTRAINT processed_webhooks_outcome_check
    CHECK (outcome IN ('applied', 'ignored', 'flagged', 'parked'));

-- Which order a payment belongs to, learnt from any event that names both.
CREATE TABLE payment_links (
    provider   text        NOT NULL,
    payment_id text        NOT NULL,
    order_id   bigint      NOT NULL REFERENCES orders (id),
    event_id   text        NOT NULL,
    created_at timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (provider, payment_id)
);
CREATE INDEX payment_links_order_id ON payment_links (order_id);
INSERT INTO payment_links (provider, payment_id, order_id, event_id)
SELECT DISTINCT ON (provider, payment_id) provider, payment_id, order_id, event_id
FROM payments ORDER BY provider, payment_id, created_at
ON CONFLICT DO NOTHING;

-- Events whose payment is not linked to an order yet, kept until a link
-- arrives or ONCEHOOK_UNLINKED_TTL passes (then dead-lettered).
CREATE TABLE parked_events (
    source       text        NOT NULL,
    event_id     text        NOT NULL,
    body_sha256  text        NOT NULL,
    provider     text        NOT NULL,
    payment_id   text        NOT NULL,
    routing_key  text        NOT NULL,
    envelope     bytea       NOT NULL,
    parked_at    timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (source, event_id, body_sha256)
);
CREATE INDEX parked_events_payment ON parked_events (provider, payment_id);
CREATE INDEX parked_events_parked_at ON parked_events (parked_at);

-- A Stripe `charge.refunded` carries the charge's cumulative refunded total.
ALTER TABLE refunds ADD COLUMN cumulative boolean NOT NULL DEFAULT false;

-- Stock moves once per order; overselling is recorded on the order.
ALTER TABLE orders ADD COLUMN stock_applied boolean NOT NULL DEFAULT false;
ALTER TABLE orders ADD COLUMN oversold boolean NOT NULL DEFAULT false;
UPDATE orders SET stock_applied = true WHERE status <> 'pending';
