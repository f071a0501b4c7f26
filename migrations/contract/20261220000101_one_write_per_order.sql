-- Contract step of 20261216000001_one_write_per_order.sql: run by
-- `oncehookctl migrate --finish`, once every binary runs release 0.6.0 or
-- later (no binary relies on these any more).
--
-- The touch triggers (made again for the roll by
-- 20261220000001_touch_during_roll.sql): the ledger moves `version` and
-- `updated_at` in the one statement that writes an order
-- (store::orders::write_orders), which tests/tests/architecture.rs holds
-- to be the only UPDATE of `orders`. IF EXISTS: a database that ran
-- release 0.5.0's text of 20261216000001 dropped them then.
SET LOCAL lock_timeout = '5s';
DROP TRIGGER IF EXISTS orders_touch ON orders;
DROP TRIGGER IF EXISTS payments_touch_insert ON payments;
DROP TRIGGER IF EXISTS payments_touch_update ON payments;
DROP TRIGGER IF EXISTS refunds_touch_insert ON refunds;
DROP TRIGGER IF EXISTS email_outbox_touch_insert ON email_outbox;
DROP FUNCTION IF EXISTS orders_touch();
DROP FUNCTION IF EXISTS orders_touch_from_facts();

-- The ledger's facts point at orders it has locked (`FOR NO KEY UPDATE`) in the same
-- transaction, and orders are never deleted (tests/tests/architecture.rs
-- holds both): the foreign-key checks on the tables it writes for every
-- event (a `FOR KEY SHARE` lookup of the order per row) guarantee nothing
-- more. Tables written elsewhere (order_items, order_gateway_refs,
-- order_cancellations, notify_deliveries) keep theirs.
ALTER TABLE payments DROP CONSTRAINT IF EXISTS payments_order_id_fkey;
ALTER TABLE refunds DROP CONSTRAINT IF EXISTS refunds_order_id_fkey;
ALTER TABLE payment_links DROP CONSTRAINT IF EXISTS payment_links_order_id_fkey;
ALTER TABLE email_outbox DROP CONSTRAINT IF EXISTS email_outbox_order_id_fkey;
ALTER TABLE order_events DROP CONSTRAINT IF EXISTS order_events_order_id_fkey;
