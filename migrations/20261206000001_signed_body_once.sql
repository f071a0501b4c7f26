-- One row per signed body and source, whatever event id it came with.
-- Razorpay signs no timestamp, and neither Razorpay nor Cashfree signs the
-- header that carries its event id (x-razorpay-event-id, x-idempotency-key):
-- a captured genuine delivery re-posted under fresh ids passes the signature
-- check, and keyed on (source, event_id, body_sha256) alone each copy added
-- a row. From now on such a copy is counted on the row of the first
-- delivery of that body (body_redeliveries) and has no effect, like any
-- duplicate. Why no genuine event is lost by this: docs/architecture.md.
ALTER TABLE processed_webhooks
    ADD COLUMN body_redeliveries integer NOT NULL DEFAULT 0;

-- Rows earlier copies left behind: each body keeps its first delivery (the
-- one received first), which counts the others' copies; the others go,
-- with any event they had parked (the kept row parked the same body).
WITH ranked AS (
    SELECT source, event_id, body_sha256, deliveries,
           row_number() OVER (PARTITION BY source, body_sha256
                              ORDER BY received_at, processed_at, event_id) AS n,
           sum(deliveries) OVER (PARTITION BY source, body_sha256) AS copies
    FROM processed_webhooks
    WHERE body_sha256 <> ''
),
kept AS (
    UPDATE processed_webhooks p
    SET body_redeliveries = r.copies - r.deliveries
    FROM ranked r
    WHERE r.n = 1 AND r.copies > r.deliveries
      AND (p.source, p.event_id, p.body_sha256) = (r.source, r.event_id, r.body_sha256)
),
folded AS (
    DELETE FROM processed_webhooks p
    USING ranked r
    WHERE r.n > 1
      AND (p.source, p.event_id, p.body_sha256) = (r.source, r.event_id, r.body_sha256)
    RETURNING p.source, p.event_id, p.body_sha256
)
DELETE FROM parked_events e
USING folded f
WHERE (e.source, e.event_id, e.body_sha256) = (f.source, f.event_id, f.body_sha256);

-- The claim's conflict target (crates/common/src/store/dedup.rs). Rows from
-- before bodies were digested have an empty digest and stay keyed by event
-- id alone; every new claim carries one. The primary key stays: the
-- version still running during a deploy claims on it. That version cannot
-- count a copy under another event id: it fails on this index and
-- dead-letters the copy (and now and then a copy racing another under its
-- own id); copies never had an effect, and replayed after the deploy they
-- are absorbed.
CREATE UNIQUE INDEX processed_webhooks_signed_body
    ON processed_webhooks (source, body_sha256)
    WHERE body_sha256 <> '';
