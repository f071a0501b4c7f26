-- Ceilings C and C′ of `make bench`: the worker's transaction for captured
-- payments, as pgbench runs it. Each statement is the worker's own (the same
-- SQL, set-based over the group's events the way the worker binds its
-- arrays), in the worker's order, with the worker's round trips: the
-- insert-first claim with the advisory locks on payments and order
-- references of the fresh claims, the orders locked with their links,
-- gateway references and products (and the events parked for the group's
-- payments taken out), the link, payment and refund facts in one statement
-- with every fact of the orders read back,
-- the one write of each order (state, version, updated_at) with the
-- captures' flags, the stock taken and the order events, the outcomes with
-- the confirmations into the outbox; then the commit. The
-- transaction runs on generic plans, as the worker's does on a direct
-- connection (its BEGIN sets plan_cache_mode = force_generic_plan for the
-- transaction, and the tenant's scope, docs/tenants.md; pgbench sends the
-- SETs as a statement of their own), and the
-- group's event numbers come in as an array (unnest), as the worker binds
-- its arrays, so each statement is planned once per connection. Only the Rust
-- around it is missing: what the worker computes between two statements is
-- computed here in SQL from the group's event numbers, and the results it
-- carries forward (the orders' ids, the stock to take) come back through
-- `\gset`.
--
-- tests/tests/ceiling.rs holds this script to the worker: it runs a captured
-- payment through the ledger behind a statement-recording proxy and fails
-- when the worker's transaction has a statement (by the tables it writes,
-- reads and locks) that this script lacks, or the other way round.
--
-- Variables (pass with -D):
--   batch     events per transaction: 1 is ceiling C (one transaction per
--             event, as the worker at batch 1); the worker's batch size is
--             C′, the set-based floor group commit approaches
--   norders   how many seeded pending orders this run may use
--   base      first order number of this run's range minus one
--   nclients  the -c value (spreads the clients over distinct orders)
--   tag       distinguishes runs, so event ids never repeat across runs
--   k         0; a per-client counter
--
-- Orders are `bench_<n>` as seeded by the pipeline bench, each with one
-- item. Transaction k of client c pays the orders of events
-- (c + nclients·k)·batch … + batch − 1, distinct across clients and
-- transactions until the range is used up (size `norders` for the run).
--
-- pgbench substitutes `:name` even inside string literals, so no literal
-- below has a colon directly followed by a letter.
--
-- Run by `make bench`; by hand:
--   pgbench -n -M prepared -c 16 -j 2 -T 10 -f deploy/bench/worker-tx.sql \
--     -D batch=1 -D norders=40000 -D base=0 -D nclients=16 -D tag=a -D k=0 <database-url>

\set k :k + 1
\set first (:client_id + :nclients * :k) * :batch
\set last :first + :batch - 1

BEGIN;
SET LOCAL plan_cache_mode = force_generic_plan; SET LOCAL oncehook.tenants = 'default';

WITH claimed AS (
    INSERT INTO processed_webhooks
        (source, event_id, body_sha256, provider, event_type, order_ref, receipt_id, outcome, received_at, payment_id, origin, trace_id)
    SELECT 'razorpay', 'evt_pgb_' || :tag::text || '_' || e, md5(:tag::text || '_' || e), 'razorpay', 'payment.captured',
           'bench_' || (:base + 1 + e % :norders), gen_random_uuid(), 'applied', now(),
           'pay_pgb_' || :tag::text || '_' || e, 'webhook', NULL
    FROM unnest(ARRAY(SELECT generate_series(:first::bigint, :last::bigint))) AS e
    ORDER BY e
    ON CONFLICT (source, body_sha256) WHERE body_sha256 <> '' DO UPDATE
        SET deliveries = processed_webhooks.deliveries
                + (processed_webhooks.event_id = EXCLUDED.event_id)::int,
            body_redeliveries = processed_webhooks.body_redeliveries
                + (processed_webhooks.event_id <> EXCLUDED.event_id)::int,
            last_seen_at = now()
    RETURNING source, event_id, body_sha256, (xmax = 0) AS inserted),
keys AS MATERIALIZED (
    SELECT DISTINCT l.kind, hashtextextended(l.name, 7) AS k
    FROM (SELECT 'razorpay'::text AS source, md5(:tag::text || '_' || e) AS body_sha256, 0::int2 AS kind,
                 'order:' || ('bench_' || (:base + 1 + e % :norders)) AS name
          FROM unnest(ARRAY(SELECT generate_series(:first::bigint, :last::bigint))) AS e
          UNION ALL
          SELECT 'razorpay', md5(:tag::text || '_' || e), 1::int2,
                 'razorpay' || ':' || ('pay_pgb_' || :tag::text || '_' || e)
          FROM unnest(ARRAY(SELECT generate_series(:first::bigint, :last::bigint))) AS e) AS l
    JOIN claimed c ON c.source = l.source AND c.body_sha256 = l.body_sha256 AND c.inserted),
locked AS MATERIALIZED (
    SELECT pg_advisory_xact_lock(s.k) FROM (SELECT kind, k FROM keys ORDER BY kind, k) s)
SELECT c.source, c.event_id, c.body_sha256, c.inserted, (SELECT count(*) FROM locked) AS locked
FROM claimed c;

WITH batch AS (
    SELECT 'razorpay'::text AS provider, 'pay_pgb_' || :tag::text || '_' || e AS payment_id
    FROM unnest(ARRAY(SELECT generate_series(:first::bigint, :last::bigint))) AS e),
named AS (SELECT * FROM unnest('{}'::text[], '{}'::text[]) AS t(gateway, gateway_ref)),
wanted AS (
    SELECT id FROM orders WHERE order_ref = ANY(ARRAY(
        SELECT 'bench_' || (:base + 1 + e % :norders) FROM unnest(ARRAY(SELECT generate_series(:first::bigint, :last::bigint))) AS e))
    UNION
    SELECT g.order_id FROM order_gateway_refs g
    JOIN named n ON n.gateway = g.gateway AND n.gateway_ref = g.gateway_ref
    UNION
    SELECT l.order_id FROM payment_links l
    JOIN batch b ON b.provider = l.provider AND b.payment_id = l.payment_id),
locked AS MATERIALIZED (
    SELECT o.id, o.order_ref, o.status, o.amount_minor, o.currency, o.customer_email,
           o.paid_by, o.refunded_minor, o.stock_applied,
           (o.status = 'cancelled'
            OR EXISTS (SELECT 1 FROM order_cancellations c WHERE c.order_id = o.id)) AS cancelled
    FROM orders o WHERE o.id IN (SELECT id FROM wanted)
    ORDER BY o.id FOR NO KEY UPDATE),
stock AS MATERIALIZED (
    SELECT p.sku, p.stock FROM products p
    WHERE p.sku IN (SELECT i.sku FROM order_items i WHERE i.order_id IN (SELECT id FROM locked))
    ORDER BY p.sku FOR NO KEY UPDATE),
taken AS (
    DELETE FROM parked_events p USING batch b
    WHERE p.provider = b.provider AND p.payment_id = b.payment_id AND p.order_ref IS NULL
      AND EXISTS (SELECT 1 FROM locked)
    RETURNING p.source, p.event_id, p.body_sha256, p.provider, p.payment_id, p.routing_key,
              encode(p.envelope, 'hex') AS envelope, p.replays, p.trace_parent,
              (extract(epoch FROM p.parked_at) * 1000000)::bigint AS parked_at_us),
told AS (
    SELECT k.id,
           COALESCE((SELECT jsonb_agg(jsonb_build_object('sku', i.sku, 'qty', i.qty, 'stock', s.stock)
                                      ORDER BY i.sku)
                     FROM order_items i JOIN stock s ON s.sku = i.sku
                     WHERE i.order_id = k.id), '[]'::jsonb) AS items,
           COALESCE((SELECT jsonb_agg(jsonb_build_object('provider', l.provider, 'payment_id', l.payment_id))
                     FROM payment_links l JOIN batch b
                       ON b.provider = l.provider AND b.payment_id = l.payment_id
                     WHERE l.order_id = k.id), '[]'::jsonb) AS linked,
           COALESCE((SELECT jsonb_agg(jsonb_build_object('gateway', g.gateway, 'gateway_ref', g.gateway_ref))
                     FROM order_gateway_refs g JOIN named n
                       ON n.gateway = g.gateway AND n.gateway_ref = g.gateway_ref
                     WHERE g.order_id = k.id), '[]'::jsonb) AS known_as,
           CASE WHEN k.id = (SELECT min(id) FROM locked)
                THEN (SELECT jsonb_agg(to_jsonb(t)) FROM taken t) END AS taken
    FROM locked k),
-- What the worker computes in Rust from the items: the stock each product
-- gives (every order here is first paid now).
moves AS (
    SELECT m.sku, sum(m.qty)::int AS qty
    FROM told k, jsonb_to_recordset(k.items) AS m(sku text, qty int, stock int)
    GROUP BY m.sku)
SELECT (SELECT array_agg(id ORDER BY id) FROM told)::text AS ids,
       (SELECT array_agg(sku ORDER BY sku) FROM moves)::text AS skus,
       (SELECT array_agg(qty ORDER BY sku) FROM moves)::text AS qtys \gset o_

WITH g AS (
    SELECT e, order_id
    FROM unnest(ARRAY(SELECT generate_series(:first::bigint, :last::bigint)), :o_ids::bigint[]) AS z(e, order_id)),
link AS (
    INSERT INTO payment_links (provider, payment_id, order_id, event_id)
    SELECT 'razorpay', 'pay_pgb_' || :tag::text || '_' || e, order_id, 'evt_pgb_' || :tag::text || '_' || e
    FROM g ORDER BY e
    ON CONFLICT DO NOTHING RETURNING provider, payment_id),
attempt AS (
    INSERT INTO payments (provider, payment_id, order_id, status, amount_minor, currency, event_id)
    SELECT 'razorpay', 'pay_pgb_' || :tag::text || '_' || e, order_id, 'captured', 10000, 'INR',
           'evt_pgb_' || :tag::text || '_' || e
    FROM g ORDER BY e
    ON CONFLICT (tenant_id, provider, payment_id, status) DO NOTHING
    RETURNING provider, payment_id, status, order_id, amount_minor, currency, flag),
refund AS (
    INSERT INTO refunds (provider, refund_id, payment_id, order_id, amount_minor, currency, event_id, cumulative)
    SELECT t.provider, t.refund_id, t.payment_id, t.order_id, t.amount_minor, t.currency, t.event_id, t.cumulative
    FROM unnest('{}'::text[], '{}'::text[], '{}'::text[], '{}'::bigint[], '{}'::bigint[], '{}'::text[],
                '{}'::text[], '{}'::boolean[])
         AS t(provider, refund_id, payment_id, order_id, amount_minor, currency, event_id, cumulative)
    ON CONFLICT (tenant_id, provider, refund_id) DO NOTHING
    RETURNING provider, refund_id, payment_id, order_id, amount_minor, currency, cumulative)
SELECT 'link' AS fact, provider, payment_id AS id, NULL::text AS status, NULL::bigint AS order_id,
       NULL::text AS payment_id, NULL::bigint AS amount_minor, NULL::text AS currency, NULL::text AS flag,
       NULL::boolean AS cumulative
FROM link
UNION ALL SELECT 'attempt', provider, payment_id, status, order_id, payment_id, amount_minor, currency, flag, false
FROM attempt
UNION ALL SELECT 'refund', provider, refund_id, NULL, order_id, payment_id, amount_minor, currency, NULL, cumulative
FROM refund
UNION ALL SELECT 'fact', provider, NULL, CASE WHEN capture THEN 'captured' END, order_id, payment_id,
                 amount_minor, currency, flag, cumulative
FROM order_facts WHERE order_id = ANY(:o_ids::bigint[]);

WITH flags AS (
    UPDATE payments p SET flag = t.flag
    FROM unnest('{}'::bigint[], '{}'::text[], '{}'::text[], '{}'::text[]) AS t(order_id, provider, payment_id, flag)
    WHERE p.order_id = t.order_id AND p.provider = t.provider AND p.payment_id = t.payment_id
      AND p.status = 'captured'
    RETURNING 1),
stock AS (
    UPDATE products p SET stock = p.stock - t.qty
    FROM unnest(:o_skus::text[], :o_qtys::int[]) AS t(sku, qty)
    WHERE p.sku = t.sku
    RETURNING 1),
written AS (
    UPDATE orders o SET
        status = CASE WHEN t.changed THEN t.status ELSE o.status END,
        refunded_minor = CASE WHEN t.changed THEN t.refunded_minor ELSE o.refunded_minor END,
        paid_by = CASE WHEN t.changed THEN t.paid_by ELSE o.paid_by END,
        paid_at = CASE WHEN NOT t.changed THEN o.paid_at
                       WHEN t.paid_by IS NULL THEN NULL ELSE COALESCE(o.paid_at, now()) END,
        stock_applied = CASE WHEN t.changed THEN t.stock_applied ELSE o.stock_applied END,
        oversold = CASE WHEN NOT t.changed THEN o.oversold
                        WHEN t.stock_applied THEN o.oversold OR t.oversold ELSE false END,
        version = o.version + 1,
        updated_at = now()
    FROM (SELECT order_id AS id, 'paid'::text AS status, 0::bigint AS refunded_minor,
                 'razorpay' || ':' || 'pay_pgb_' || :tag::text || '_' || e AS paid_by, true AS stock_applied,
                 false AS oversold, true AS changed
          FROM unnest(ARRAY(SELECT generate_series(:first::bigint, :last::bigint)), :o_ids::bigint[]) AS z(e, order_id)) AS t
    WHERE o.id = t.id
    RETURNING 1),
events AS (
    INSERT INTO order_events (id, type, order_id, data, trace_parent)
    SELECT 'evt_' || md5('order.paid' || order_id), 'order.paid', order_id, '{}'::jsonb, NULL::text
    FROM unnest(:o_ids::bigint[]) AS z(order_id)
    ON CONFLICT (id) DO NOTHING
    RETURNING id, type)
SELECT id, type FROM events;

WITH finished AS (
    UPDATE processed_webhooks p SET outcome = f.outcome, detail = f.detail, processed_at = now()
    FROM (SELECT 'razorpay'::text AS source, 'evt_pgb_' || :tag::text || '_' || e AS event_id,
                 md5(:tag::text || '_' || e) AS body_sha256, 'applied'::text AS outcome,
                 'captured payment pay_pgb_' || e || ' recorded; order bench_' || (:base + 1 + e % :norders)
                 || ' is paid (refunded 0.00 INR)' AS detail
          FROM unnest(ARRAY(SELECT generate_series(:first::bigint, :last::bigint))) AS e) AS f
    WHERE p.source = f.source AND p.event_id = f.event_id AND p.body_sha256 = f.body_sha256
    RETURNING 1),
mail AS (
    INSERT INTO email_outbox (id, order_id, kind, dedup_key, to_addr, subject, body, trace_parent)
    SELECT gen_random_uuid(), order_id, 'confirmation', 'order:' || order_id || ':' || 'confirmation',
           'bench_' || (:base + 1 + e % :norders) || '@example.com',
           'Order bench_' || (:base + 1 + e % :norders) || ' confirmed',
           'Thank you for your order bench_' || (:base + 1 + e % :norders) || '.' || chr(10) || chr(10)
           || 'We received your payment of 100.00 INR.' || chr(10) || chr(10)
           || 'Items:' || chr(10) || '  1 x SKU-000' || chr(10) || chr(10)
           || 'We will let you know when it ships.' || chr(10),
           NULL::text
    FROM unnest(ARRAY(SELECT generate_series(:first::bigint, :last::bigint)), :o_ids::bigint[]) AS z(e, order_id)
    ON CONFLICT (dedup_key) DO NOTHING
    RETURNING 1)
SELECT count(*) AS emails FROM mail;

COMMIT;
