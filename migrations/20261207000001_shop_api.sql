-- The shop's API (oncehook-api, docs/shop-integration.md): orders and
-- products created over HTTP instead of psql, with the shop's own metadata,
-- gateway references, idempotent creates and an audit of every write.

-- What the shop attaches to an order (returned as written), when its state
-- last changed and a version that grows with every change of that state.
ALTER TABLE orders ADD COLUMN metadata   jsonb       NOT NULL DEFAULT '{}';
ALTER TABLE orders ADD COLUMN updated_at timestamptz NOT NULL DEFAULT now();
ALTER TABLE orders ADD COLUMN version    bigint      NOT NULL DEFAULT 1;
-- Keyset pages of GET /v1/orders (?updated_after=, ?status=).
CREATE INDEX orders_updated_at_id ON orders (updated_at, id);
CREATE INDEX orders_status_updated_at_id ON orders (status, updated_at, id);

-- The price of one unit when the order was made; NULL for rows written
-- before the API existed.
ALTER TABLE order_items ADD COLUMN unit_minor bigint CHECK (unit_minor >= 0);

-- The version: an UPDATE of an order that changes anything bumps it (unless
-- the statement sets it itself), and so does every fact written for the
-- order — a payment recorded or flagged, a refund, an email. Triggers, so
-- the worker's set-based statements stay as they are; the statement-level
-- ones run one UPDATE per statement, not per row.
CREATE FUNCTION orders_touch() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    IF NEW.version <> OLD.version THEN
        NEW.updated_at := now();
    ELSIF NEW IS DISTINCT FROM OLD THEN
        NEW.version := OLD.version + 1;
        NEW.updated_at := now();
    END IF;
    RETURN NEW;
END $$;
CREATE TRIGGER orders_touch BEFORE UPDATE ON orders
    FOR EACH ROW EXECUTE FUNCTION orders_touch();

CREATE FUNCTION orders_touch_from_facts() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    UPDATE orders SET version = version + 1
    WHERE id IN (SELECT DISTINCT order_id FROM changed WHERE order_id IS NOT NULL);
    RETURN NULL;
END $$;
CREATE TRIGGER payments_touch_insert AFTER INSERT ON payments
    REFERENCING NEW TABLE AS changed FOR EACH STATEMENT EXECUTE FUNCTION orders_touch_from_facts();
CREATE TRIGGER payments_touch_update AFTER UPDATE ON payments
    REFERENCING NEW TABLE AS changed FOR EACH STATEMENT EXECUTE FUNCTION orders_touch_from_facts();
CREATE TRIGGER refunds_touch_insert AFTER INSERT ON refunds
    REFERENCING NEW TABLE AS changed FOR EACH STATEMENT EXECUTE FUNCTION orders_touch_from_facts();
CREATE TRIGGER email_outbox_touch_insert AFTER INSERT ON email_outbox
    REFERENCING NEW TABLE AS changed FOR EACH STATEMENT EXECUTE FUNCTION orders_touch_from_facts();

-- The gateways' own references for an order (Razorpay's `order_…` id, a
-- Stripe Checkout session): a webhook can find its order by any of them.
CREATE TABLE order_gateway_refs (
    gateway     text   NOT NULL,
    gateway_ref text   NOT NULL,
    order_id    bigint NOT NULL REFERENCES orders (id),
    PRIMARY KEY (gateway, gateway_ref)
);
CREATE INDEX order_gateway_refs_order_id ON order_gateway_refs (order_id);

-- POST /v1/orders's Idempotency-Key, per API key: the digest of the request
-- it came with and the answer it got. The row is written in the transaction
-- that creates the order, so a concurrent post with the same key waits for
-- it and then answers the same.
CREATE TABLE api_idempotency (
    key_name        text        NOT NULL,
    idempotency_key text        NOT NULL,
    request_sha256  text        NOT NULL,
    status_code     int,
    response        jsonb,
    created_at      timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (key_name, idempotency_key)
);
CREATE INDEX api_idempotency_created_at ON api_idempotency (created_at);

-- Stock moves by deltas only (a restock never overwrites a concurrent
-- decrement by a paid order); each one is recorded with who made it.
CREATE TABLE stock_adjustments (
    id       bigserial   PRIMARY KEY,
    sku      text        NOT NULL REFERENCES products (sku),
    delta    int         NOT NULL,
    reason   text        NOT NULL DEFAULT '',
    key_name text        NOT NULL,
    at       timestamptz NOT NULL DEFAULT now()
);
CREATE INDEX stock_adjustments_sku ON stock_adjustments (sku, at);

-- Every write through the API, accepted or refused: which key, what, on
-- which order or product, and how it ended (beside console_audit, the
-- operators' record). Shown by `oncehookctl trace order` and the console.
CREATE TABLE api_audit (
    id        bigserial   PRIMARY KEY,
    at        timestamptz NOT NULL DEFAULT now(),
    key_name  text        NOT NULL,
    action    text        NOT NULL,
    order_ref text,
    sku       text,
    ok        boolean     NOT NULL,
    result    text        NOT NULL
);
CREATE INDEX api_audit_order_ref ON api_audit (order_ref);
CREATE INDEX api_audit_at ON api_audit (at);
