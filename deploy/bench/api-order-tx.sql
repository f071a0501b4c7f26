-- Ceiling D of `make bench`: the shop API's `POST /v1/orders` transaction
-- (`crates/api/src/routes/orders.rs`) as pgbench runs it. The same
-- statements in the same order, one round trip each as the API sends them:
-- claim the Idempotency-Key (`api_idempotency`), check the skus exist, take
-- the references' advisory locks, insert the order, its items and its
-- gateway reference, look for webhooks waiting for it (`parked_events`;
-- none here), read the order back as the API answers it (the ledger's view:
-- order, shop order, items, gateway references, version, payments,
-- refunds, emails), store the answer under the key, audit the write
-- (`api_audit`), commit. Only the Rust around it is missing: HTTP, JSON,
-- the key's digest (computed here from md5 to the same length), and the
-- pool's liveness check before the transaction.
--
-- Variables (pass with -D):
--   nclients  the -c value (spreads the clients over distinct orders)
--   k         0; a per-client counter
--
-- Every transaction creates a new order `pgb_<n>` under a new key, with one
-- or two items (every other order two) of the 50 products `SKU-000` …
-- `SKU-049` seeded by the pipeline bench, as the bench's HTTP clients do.
--
-- pgbench substitutes `:name` even inside string literals, so no literal
-- below has a colon directly followed by a letter, a digit or `_`.
--
-- Run by `make bench`; by hand:
--   pgbench -n -M prepared -c 16 -j 2 -T 10 -f deploy/bench/api-order-tx.sql \
--     -D nclients=16 -D k=0 <database-url>

\set k :k + 1
\set n :client_id + :nclients * :k
\set two :k % 2
\set qty1 1 + :k % 3
\set s1 random(0, 49)
\set s2 (:s1 * 7 + 3) % 50
\set amount 25000 * (:qty1 + :two)
\set whole 250 * (:qty1 + :two)

BEGIN;
-- The key's tenant's scope, as the API opens each transaction (docs/tenants.md).
SET LOCAL oncehook.tenants = 'default';

INSERT INTO api_idempotency (key_name, idempotency_key, request_sha256)
VALUES ('full', 'pgb-' || :n::text, md5(:n::text) || md5('body' || :n::text))
ON CONFLICT DO NOTHING RETURNING 1 AS one;

SELECT s FROM unnest((ARRAY['SKU-' || lpad(:s1::text, 3, '0'),
                            'SKU-' || lpad(:s2::text, 3, '0')])[1 : 1 + :two::int]) AS s
WHERE NOT EXISTS (SELECT 1 FROM products p WHERE p.sku = s) ORDER BY s;

WITH keys AS MATERIALIZED (
       SELECT 0 AS kind, hashtextextended('order:' || r, 7) AS k
       FROM unnest(ARRAY['order_rzp_pgb_' || :n::text, 'pgb_' || :n::text]) AS t(r)
       UNION
       SELECT 1, hashtextextended(p || ':' || i, 7)
       FROM unnest(ARRAY[]::text[], ARRAY[]::text[]) AS t(p, i)),
   locked AS MATERIALIZED (
       SELECT pg_advisory_xact_lock(s.k) FROM (SELECT kind, k FROM keys ORDER BY kind, k) s)
SELECT count(*) AS locked FROM locked;

INSERT INTO orders (order_ref, customer_email, amount_minor, currency, metadata)
VALUES ('pgb_' || :n::text, 'buyer@shop.example', :amount::bigint, 'INR',
        jsonb_build_object('cart', 'c-' || :n::text))
ON CONFLICT (tenant_id, order_ref) DO NOTHING RETURNING id \gset o_

INSERT INTO order_items (order_id, sku, qty, unit_minor)
SELECT :o_id::bigint, * FROM unnest(
    (ARRAY['SKU-' || lpad(:s1::text, 3, '0'), 'SKU-' || lpad(:s2::text, 3, '0')])[1 : 1 + :two::int],
    (ARRAY[:qty1::int, 1])[1 : 1 + :two::int],
    (ARRAY[25000, 25000]::bigint[])[1 : 1 + :two::int]);

INSERT INTO order_gateway_refs (gateway, gateway_ref, order_id)
SELECT g, r, :o_id::bigint FROM unnest(ARRAY['razorpay'], ARRAY['order_rzp_pgb_' || :n::text]) AS t(g, r)
ON CONFLICT DO NOTHING RETURNING gateway;

DELETE FROM parked_events p
WHERE p.order_ref = 'pgb_' || :n::text
   OR (p.provider, p.order_ref) IN
      (SELECT * FROM unnest(ARRAY['razorpay'], ARRAY['order_rzp_pgb_' || :n::text]))
RETURNING p.source, p.event_id, p.body_sha256, p.provider, p.payment_id, p.order_ref, p.routing_key, p.envelope;

SELECT id, order_ref, customer_email, amount_minor, currency, status, paid_at, paid_by,
       refunded_minor, oversold, created_at
FROM orders WHERE order_ref = 'pgb_' || :n::text;

SELECT id, order_ref, customer_email, currency, amount_minor, metadata
FROM orders WHERE order_ref = 'pgb_' || :n::text;

SELECT sku, qty, unit_minor FROM order_items WHERE order_id = :o_id::bigint ORDER BY sku;

SELECT gateway, gateway_ref FROM order_gateway_refs WHERE order_id = :o_id::bigint ORDER BY gateway;

SELECT version, updated_at, metadata FROM orders WHERE id = :o_id::bigint;

SELECT provider, payment_id, status, amount_minor, currency, flag, event_id, created_at
FROM payments WHERE order_id = :o_id::bigint ORDER BY created_at, id;

SELECT provider, refund_id, payment_id, amount_minor, cumulative, event_id, created_at
FROM refunds WHERE order_id = :o_id::bigint ORDER BY created_at;

SELECT id, kind, to_addr, subject, attempts, last_error, created_at, published_at, sent_at, failed_at,
       CASE WHEN sent_at IS NOT NULL THEN 'sent' WHEN failed_at IS NOT NULL THEN 'failed'
            WHEN published_at IS NOT NULL THEN 'queued' ELSE 'pending' END AS status
FROM email_outbox WHERE order_id = :o_id::bigint ORDER BY created_at;

-- The answer as the API stores it: the order's view, built here from what
-- this transaction wrote (the API serializes what it just read).
UPDATE api_idempotency SET status_code = 201, response = jsonb_build_object(
        'order_ref', 'pgb_' || :n::text, 'status', 'pending',
        'customer_email', 'buyer@shop.example', 'currency', 'INR',
        'amount', jsonb_build_object('minor', :amount::bigint,
                                     'formatted', :whole::text || '.00'),
        'refunded', jsonb_build_object('minor', 0, 'formatted', '0.00'),
        'refunded_minor', 0, 'oversold', false, 'needs_refund', false, 'amount_mismatch', false,
        'items', CASE WHEN :two::int = 1
            THEN jsonb_build_array(
                jsonb_build_object('sku', 'SKU-' || lpad(:s1::text, 3, '0'), 'qty', :qty1::int, 'unit_minor', 25000),
                jsonb_build_object('sku', 'SKU-' || lpad(:s2::text, 3, '0'), 'qty', 1, 'unit_minor', 25000))
            ELSE jsonb_build_array(
                jsonb_build_object('sku', 'SKU-' || lpad(:s1::text, 3, '0'), 'qty', :qty1::int, 'unit_minor', 25000))
            END,
        'payments', '[]'::jsonb, 'refunds', '[]'::jsonb, 'emails', '[]'::jsonb,
        'gateway_refs', jsonb_build_object('razorpay', 'order_rzp_pgb_' || :n::text),
        'metadata', jsonb_build_object('cart', 'c-' || :n::text),
        'version', 1, 'created_at', now()::text, 'updated_at', now()::text,
        'paid_at', NULL, 'paid_by', NULL)
WHERE key_name = 'full' AND idempotency_key = 'pgb-' || :n::text;

INSERT INTO api_audit (key_name, action, order_ref, sku, ok, result)
VALUES ('full', 'order.create', 'pgb_' || :n::text, NULL, true, 'created');

COMMIT;
