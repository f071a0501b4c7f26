-- Order events (docs/shop-integration.md): what the ledger tells the shop.
-- Written in the ledger's own transaction whenever an order's derived state
-- changes, with an id derived from the fact that caused it, so recomputing
-- an order (a duplicate, a replay, a redelivery) never mints a second one.
-- The order's snapshot is not stored: it is rendered when the event is sent
-- (the broker, the notifier, GET /v1/events), so every copy carries the
-- order's latest version.
CREATE TABLE order_events (
    id           text        PRIMARY KEY,
    seq          bigserial   NOT NULL UNIQUE,
    type         text        NOT NULL,
    order_id     bigint      NOT NULL REFERENCES orders (id),
    -- What the causing fact says (the refund, the payment); never the
    -- order's state, which the snapshot carries.
    data         jsonb       NOT NULL DEFAULT '{}',
    created_at   timestamptz NOT NULL DEFAULT now(),
    -- The writing transaction: GET /v1/events pages in (txid, seq) order and
    -- lists only transactions older than every running one, so a cursor
    -- never skips an event committed later.
    txid         xid8        NOT NULL DEFAULT pg_current_xact_id(),
    -- Published to P.order-events (by the notifier's relay).
    published_at timestamptz,
    -- The traceparent of the delivery that caused it.
    trace_parent text
);
CREATE INDEX order_events_unpublished ON order_events (seq) WHERE published_at IS NULL;
CREATE INDEX order_events_txid_seq ON order_events (txid, seq);
CREATE INDEX order_events_order_id ON order_events (order_id);

-- The shop's endpoints as the notifier last left them: a 410 Gone disables
-- one until `oncehookctl notify enable NAME`, across restarts.
CREATE TABLE notify_endpoints (
    name            text        PRIMARY KEY,
    disabled_at     timestamptz,
    disabled_reason text
);

-- One row per event and endpoint it is for: the attempts, the next one due,
-- and how the last one ended. A failed row (schedule exhausted, endpoint
-- disabled) is kept and can be sent again (`oncehookctl notify replay`).
CREATE TABLE notify_deliveries (
    event_id        text        NOT NULL REFERENCES order_events (id),
    endpoint        text        NOT NULL,
    status          text        NOT NULL DEFAULT 'pending'
                    CHECK (status IN ('pending', 'delivered', 'failed')),
    attempts        int         NOT NULL DEFAULT 0,
    next_attempt_at timestamptz NOT NULL DEFAULT now(),
    -- A notifier holds the row while it sends it; a killed one's rows come
    -- due again when the lease ends.
    locked_until    timestamptz,
    last_status     int,
    last_error      text,
    last_answer     text,
    created_at      timestamptz NOT NULL DEFAULT now(),
    updated_at      timestamptz NOT NULL DEFAULT now(),
    delivered_at    timestamptz,
    PRIMARY KEY (event_id, endpoint)
);
CREATE INDEX notify_deliveries_due ON notify_deliveries (endpoint, next_attempt_at)
    WHERE status = 'pending';
CREATE INDEX notify_deliveries_updated ON notify_deliveries (updated_at);
