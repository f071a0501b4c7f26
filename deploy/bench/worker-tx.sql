-- Ceiling C of `make bench`: the worker's transaction for one captured
-- payment, statement by statement, as pgbench runs it. Same statements, same
-- order of locks and the same number of round trips as the worker (dedup
-- claim, lock the order, record the payment, mark the order paid, lock and
-- decrement stock, write the confirmation into the outbox, record the
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
    (provider, event_id, event_type, order_ref, receipt_id, outcome, received_at, source, payment_id)
VALUES ('razorpay', 'evt_pgb_' || :tag::text || '_' || :client_id::text || '_' || :k::text, 'payment.captured',
        'bench_' || :n::text, gen_random_uuid(), 'applied', now(), 'razorpay',
        'pay_pgb_' || :tag::text || '_' || :client_id::text || '_' || :k::text)
ON CONFLICT (provider, event_id) DO UPDATE
    SET deliveries = processed_webhooks.deliveries + 1, last_seen_at = now()
RETURNING (xmax = 0) AS inserted;

SELECT o.id, o.order_ref, o.status, o.amount_minor, o.currency, o.customer_email, o.paid_by, o.refunded_minor
FROM orders o WHERE o.order_ref = 'bench_' || :n::text FOR UPDATE \gset o_

INSERT INTO payments (provider, payment_id, order_id, status, amount_minor, currency, event_id, flag)
VALUES ('razorpay', 'pay_pgb_' || :tag::text || '_' || :client_id::text || '_' || :k::text, :o_id, 'captured', 10000, 'INR',
        'evt_pgb_' || :tag::text || '_' || :client_id::text || '_' || :k::text, NULL)
ON CONFLICT (provider, payment_id, status) DO NOTHING
RETURNING id;

UPDATE orders SET status = 'paid', paid_at = now(), paid_by = 'razorpay:' || 'pay_pgb_' || :tag::text || '_' || :client_id::text || '_' || :k::text
WHERE id = :o_id;

SELECT p.sku FROM products p JOIN order_items i ON i.sku = p.sku
WHERE i.order_id = :o_id ORDER BY p.sku FOR UPDATE OF p;

UPDATE products p SET stock = p.stock - i.qty
FROM order_items i
WHERE i.order_id = :o_id AND i.sku = p.sku
RETURNING p.sku, i.qty, p.stock;

INSERT INTO email_outbox (id, order_id, kind, dedup_key, to_addr, subject, body)
VALUES (gen_random_uuid(), :o_id, 'confirmation', 'order:' || :o_id::text || ':' || 'confirmation',
        'bench_' || :n::text || '@example.com', 'Order bench_' || :n::text || ' confirmed',
        'Thank you for your order bench_' || :n::text || '.' || chr(10) || chr(10)
        || 'We received your payment of 100.00 INR (payment pay_pgb_' || :k::text || ').' || chr(10) || chr(10)
        || 'Items:' || chr(10) || '  1 x SKU-000' || chr(10) || chr(10)
        || 'We will let you know when it ships.' || chr(10))
ON CONFLICT (dedup_key) DO NOTHING
RETURNING id;

UPDATE processed_webhooks SET outcome = 'applied',
    detail = 'order bench_' || :n::text || ' paid by razorpay:' || 'pay_pgb_' || :k::text || '; stock decremented; confirmation queued',
    processed_at = now()
WHERE provider = 'razorpay' AND event_id = 'evt_pgb_' || :tag::text || '_' || :client_id::text || '_' || :k::text;

COMMIT;
