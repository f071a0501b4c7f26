-- no-transaction
-- The captures owed back (flagged `needs_refund` or `amount_mismatch`),
-- for the refund-intent sweep (the ledger's refund_intents::sweep): every
-- owed payment has an intent, whoever wrote its flag — an older release's
-- binary during a roll never mints one. Few rows, so the sweep's pass
-- costs next to nothing however large `payments` grows. Built
-- CONCURRENTLY: the running release's writes go on.
CREATE INDEX CONCURRENTLY IF NOT EXISTS payments_owed ON payments (order_id)
    WHERE status = 'captured' AND flag IN ('needs_refund', 'amount_mismatch');
