-- Ceiling C of `make bench`: the worker's transaction for one captured
-- payment, statement by statement, as pgbench runs it. Same statements, same
-- order of locks and the same number of round trips as the worker's order
-- ledger (dedup claim, lock the order, record the payment and its link in
-- one statement, read the order's facts, lock and decrement stock, write the
-- order's state, write the confirmation into the outbox, record the
-- outcome, commit); only the Rust around it is missing.
--
-- Variables (pass with -D):
--   norders   how many seeded pending orders this run may use
--   base      first order number of this run's range minus one
--   nclients  the -c value (spreads the clients over distinct orders)
--   tag       distinguishes runs, so event ids never repeat across runs
--   k         0; a per-client counter
--
-- Orders are `bench_<n>` as seeded by the pipeline bench. Each client walks
-- its own pseudo-random permutation of the range, so every transaction pays a
-- distinct pending order (like K distinct captured events for K orders) until
-- the range is used up.
--
-- pgbench substitutes `:name` even inside string literals, so no literal
-- below has a colon directly followed by a letter.
--
-- Run by `make bench`; by hand:
--   pgbench -n -M prepared -c 16 -j 2 -T 10 -f deploy/bench/worker-tx.sql \
--     -D norders=40000 -D base=0 -D nclients=16 -D tag=a -D k=0 <database-url>

\set k :k + 1
\set n :base + 1 + permute(:client_id + :nclients * :k, :norders)

BEGIN;

INSERT INTO processed_webhooks
    (source, event_id, body_sha256, provider, event_type, order_ref, receipt_id, outcome, received_at, payment_id)
VALUES ('razorpay', 'evt_pgb_' || :tag::text || '_' || :client_id::text || '_' || :k::text,
        md5(:tag::text || '_' || :client_id::text || '_' || :k::text), 'razorpay', 'payment.captured',
        'bench_' || :n::text, gen_random_uuid(), 'applied', now(),
        'pay_pgb_' || :tag::text || '_' || :client_id::text || '_' || :k::text)
ON CONFLICT (source, body_sha256) WHERE body_sha256 <> '' DO UPDATE
    SET deliveries = processed_webhooks.deliveries
            + (processed_webhooks.event_id = EXCLUDED.event_id)::int,
        body_redeliveries = processed_webhooks.body_redeliveries
            + (processed_webhooks.event_id <> EXCLUDED.event_id)::int,
        last_seen_at = now()
RETURNING (xmax = 0) AS inserted;

SELECT id, order_ref, status, amount_minor, currency, customer_email, paid_by, refunded_minor, stock_applied
FROM orders WHERE order_ref = 'bench_' || :n::text FOR UPDATE \gset o_

WITH link AS (
    INSERT INTO payment_links (provider, payment_id, order_id, event_id)
    SELECT 'razorpay', 'pay_pgb_' || :tag::text || '_' || :client_id::text || '_' || :k::text, :o_id,
           'evt_pgb_' || :tag::text || '_' || :client_id::text || '_' || :k::text WHERE true
    ON CONFLICT DO NOTHING RETURNING 1),
fact AS (
    INSERT INTO payments (provider, payment_id, order_id, status, amount_minor, currency, event_id)
    VALUES ('razorpay', 'pay_pgb_' || :tag::text || '_' || :client_id::text || '_' || :k::text, :o_id, 'captured',
            10000, 'INR', 'evt_pgb_' || :tag::text || '_' || :client_id::text || '_' || :k::text)
    ON CONFLICT (provider, payment_id, status) DO NOTHING RETURNING 1)
SELECT EXISTS (SELECT 1 FROM link) AS linked, EXISTS (SELECT 1 FROM fact) AS recorded;

SELECT true AS capture, provider, payment_id, amount_minor, currency, flag, false AS cumulative
FROM payments WHERE order_id = :o_id AND status = 'captured'
UNION ALL
SELECT false, provider, payment_id, amount_minor, currency, NULL, cumulative
FROM refunds WHERE order_id = :o_id;

SELECT p.sku FROM products p JOIN order_items i ON i.sku = p.sku
WHERE i.order_id = :o_id ORDER BY p.sku FOR UPDATE OF p;

UPDATE products p SET stock = p.stock - i.qty
FROM order_items i
WHERE i.order_id = :o_id AND i.sku = p.sku
RETURNING p.sku, i.qty, p.stock;

UPDATE orders SET status = 'paid', refunded_minor = 0,
    paid_by = 'razorpay:' || 'pay_pgb_' || :tag::text || '_' || :client_id::text || '_' || :k::text,
    paid_at = COALESCE(paid_at, now()), stock_applied = true, oversold = oversold OR false
WHERE id = :o_id;

INSERT INTO email_outbox (id, order_id, kind, dedup_key, to_addr, subject, body)
VALUES (gen_random_uuid(), :o_id, 'confirmation', 'order:' || :o_id::text || ':' || 'confirmation',
        'bench_' || :n::text || '@example.com', 'Order bench_' || :n::text || ' confirmed',
        'Thank you for your order bench_' || :n::text || '.' || chr(10) || chr(10)
        || 'We received your payment of 100.00 INR.' || chr(10) || chr(10)
        || 'Items:' || chr(10) || '  1 x SKU-000' || chr(10) || chr(10)
        || 'We will let you know when it ships.' || chr(10))
ON CONFLICT (dedup_key) DO NOTHING
RETURNING id;

UPDATE processed_webhooks SET outcome = 'applied',
    detail = 'captured payment pay_pgb_' || :k::text || ' recorded; order bench_' || :n::text || ' is paid (refunded 0.00 INR)',
    processed_at = now()
WHERE source = 'razorpay' AND event_id = 'evt_pgb_' || :tag::text || '_' || :client_id::text || '_' || :k::text
  AND body_sha256 = md5(:tag::text || '_' || :client_id::text || '_' || :k::text);

COMMIT;
