-- Refund intents (docs/refunds.md): money the books say is owed back — a
-- capture that is not the order's payment (paid twice), a capture of a
-- cancelled order, a capture of the wrong amount — written by the ledger in
-- the transaction that recorded the fact, one per owed payment, under an id
-- derived from the payment alone (`ri_…`), so replays, duplicates,
-- reconciliation and any delivery order mint the same intent. The
-- refunder sends approved intents through the gateway with that id as its
-- idempotency key; the refund fact (its webhook, a reconciliation answer or
-- the refunder's own answer) settles the intent through the books.
-- The foreign key to `orders` locks it (SHARE ROW EXCLUSIVE) for a moment:
-- never longer than this, behind a running release's transactions (a
-- migration that times out is run again). Added after release 0.5.0
-- applied this file: store::schema recognises that text.
SET LOCAL lock_timeout = '5s';
CREATE TABLE refund_intents (
    id                text        PRIMARY KEY,
    order_id          bigint      NOT NULL REFERENCES orders (id),
    provider          text        NOT NULL,
    payment_id        text        NOT NULL,
    -- The capture's amount, all of which is owed back.
    amount_minor      bigint      NOT NULL CHECK (amount_minor >= 0),
    currency          text        NOT NULL,
    reason            text        NOT NULL
        CHECK (reason IN ('duplicate_capture', 'cancelled_order', 'amount_mismatch')),
    -- What the books show refunded of the payment so far.
    refunded_minor    bigint      NOT NULL DEFAULT 0,
    state             text        NOT NULL
        CHECK (state IN ('owed', 'approved', 'sending', 'sent', 'settled', 'failed', 'cancelled')),
    -- The account (source) that took the payment, once the refunder knows.
    source            text,
    -- The amount sent (fixed at the first attempt: every retry sends the
    -- same request under the same key).
    sent_minor        bigint,
    approved_by       text,
    approved_at       timestamptz,
    attempts          integer     NOT NULL DEFAULT 0,
    -- A refunder holds the intent until then (a killed one's lease runs
    -- out and another takes it over, with the same key).
    lease_until       timestamptz,
    next_attempt_at   timestamptz,
    gateway_refund_id text,
    -- The gateway's words when it refused, or the last retryable error.
    gateway_code      text,
    gateway_message   text,
    -- Why the intent waits (over a ceiling, a reason that is not automatic).
    held_because      text,
    -- The W3C traceparent of the delivery whose fact minted it.
    trace_parent      text,
    created_at        timestamptz NOT NULL DEFAULT now(),
    updated_at        timestamptz NOT NULL DEFAULT now(),
    UNIQUE (provider, payment_id)
);
CREATE INDEX refund_intents_order ON refund_intents (order_id);
CREATE INDEX refund_intents_open ON refund_intents (state, created_at)
    WHERE state IN ('owed', 'approved', 'sending', 'sent', 'failed');

-- The kill switch: one row; while `paused`, no refunder sends anything
-- (intents keep being minted and approved, nothing is lost).
CREATE TABLE refund_control (
    singleton  boolean     PRIMARY KEY DEFAULT true CHECK (singleton),
    paused     boolean     NOT NULL DEFAULT false,
    changed_by text,
    changed_at timestamptz NOT NULL DEFAULT now()
);
INSERT INTO refund_control (singleton, paused) VALUES (true, false);
