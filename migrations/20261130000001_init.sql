-- oncehook schema: the delivery-dedup table and the built-in commerce effect.

-- One row per webhook delivery identity. Insert-first: the worker inserts
-- before doing anything else and treats a conflict as a duplicate.
-- Not partitioned on purpose: a partitioned table cannot enforce the key
-- across partitions.
CREATE TABLE processed_webhooks (
    provider     text        NOT NULL,
    event_id     text        NOT NULL,
    event_type   text        NOT NULL,
    order_ref    text,
    receipt_id   uuid,
    outcome      text        NOT NULL CHECK (outcome IN ('applied', 'ignored', 'flagged')),
    received_at  timestamptz NOT NULL,
    processed_at timestamptz NOT NULL DEFAULT now(),
    source       text,
    payment_id   text,
    detail       text,
    -- How many copies of this delivery arrived (1 + duplicates absorbed).
    deliveries   integer     NOT NULL DEFAULT 1,
    last_seen_at timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (provider, event_id)
);
CREATE INDEX processed_webhooks_processed_at ON processed_webhooks (processed_at);
CREATE INDEX processed_webhooks_order_ref ON processed_webhooks (order_ref);

CREATE TABLE products (
    sku   text PRIMARY KEY,
    name  text    NOT NULL,
    stock integer NOT NULL
);

CREATE TABLE orders (
    id             bigserial PRIMARY KEY,
    order_ref      text        UNIQUE NOT NULL,
    customer_email text        NOT NULL,
    amount_minor   bigint      NOT NULL CHECK (amount_minor >= 0),
    currency       text        NOT NULL,
    status         text        NOT NULL DEFAULT 'pending'
                   CHECK (status IN ('pending', 'paid', 'partially_refunded', 'refunded')),
    paid_at        timestamptz,
    paid_by        text,
    refunded_minor bigint      NOT NULL DEFAULT 0,
    created_at     timestamptz NOT NULL DEFAULT now()
);

CREATE TABLE order_items (
    order_id bigint  NOT NULL REFERENCES orders (id),
    sku      text    NOT NULL REFERENCES products (sku),
    qty      integer NOT NULL CHECK (qty > 0),
    PRIMARY KEY (order_id, sku)
);

-- Domain-level idempotency: one row per (provider, payment, status), so
-- payment.captured and order.paid for one payment record it once.
CREATE TABLE payments (
    id           bigserial PRIMARY KEY,
    provider     text        NOT NULL,
    payment_id   text        NOT NULL,
    order_id     bigint      NOT NULL REFERENCES orders (id),
    status       text        NOT NULL CHECK (status IN ('authorized', 'captured', 'failed')),
    amount_minor bigint,
    currency     text,
    event_id     text        NOT NULL,
    flag         text,
    created_at   timestamptz NOT NULL DEFAULT now(),
    UNIQUE (provider, payment_id, status)
);
CREATE INDEX payments_order_id ON payments (order_id);

CREATE TABLE refunds (
    provider     text        NOT NULL,
    refund_id    text        NOT NULL,
    payment_id   text,
    order_id     bigint      NOT NULL REFERENCES orders (id),
    amount_minor bigint      NOT NULL CHECK (amount_minor >= 0),
    currency     text,
    event_id     text        NOT NULL,
    created_at   timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (provider, refund_id)
);
CREATE INDEX refunds_order_id ON refunds (order_id);

-- The transactional outbox: written in the same transaction as the effect,
-- published by the relay, sent by the mailer. `dedup_key` makes "one
-- confirmation per order" a constraint rather than a hope.
CREATE TABLE email_outbox (
    id            uuid PRIMARY KEY,
    order_id      bigint      REFERENCES orders (id),
    kind          text        NOT NULL,
    dedup_key     text        UNIQUE NOT NULL,
    to_addr       text        NOT NULL,
    subject       text        NOT NULL,
    body          text        NOT NULL,
    created_at    timestamptz NOT NULL DEFAULT now(),
    published_at  timestamptz,
    claimed_until timestamptz,
    sent_at       timestamptz,
    failed_at     timestamptz,
    attempts      integer     NOT NULL DEFAULT 0,
    last_error    text
);
CREATE INDEX email_outbox_unpublished ON email_outbox (created_at) WHERE published_at IS NULL;
CREATE INDEX email_outbox_order_id ON email_outbox (order_id);
