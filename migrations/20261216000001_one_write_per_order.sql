-- One write of each order row per transaction (docs/scaling.md, "Where
-- PostgreSQL's time goes").
--
-- Until now an order's `version` and `updated_at` moved by triggers: a row
-- trigger on every UPDATE of `orders`, and statement triggers with
-- transition tables on `payments`, `refunds` and `email_outbox` that each
-- ran `UPDATE orders SET version = version + 1`. One captured payment then
-- rewrote its order row three or four times (each a new row version with
-- every index of `orders` written again). The ledger now moves them in the
-- one statement that writes the order's state (the ledger's store::orders::write_orders), for
-- every order it recorded something for, and that statement is the only
-- UPDATE of `orders` (tests/tests/architecture.rs).
DROP TRIGGER orders_touch ON orders;
DROP TRIGGER payments_touch_insert ON payments;
DROP TRIGGER payments_touch_update ON payments;
DROP TRIGGER refunds_touch_insert ON refunds;
DROP TRIGGER email_outbox_touch_insert ON email_outbox;
DROP FUNCTION orders_touch();
DROP FUNCTION orders_touch_from_facts();

-- The ledger's facts point at orders it has locked `FOR UPDATE` in the same
-- transaction, and orders are never deleted (tests/tests/architecture.rs
-- holds both): the foreign-key checks on the tables it writes for every
-- event (a `FOR KEY SHARE` lookup of the order per row) guarantee nothing
-- more. Tables written elsewhere (order_items, order_gateway_refs,
-- order_cancellations, notify_deliveries) keep theirs.
ALTER TABLE payments DROP CONSTRAINT payments_order_id_fkey;
ALTER TABLE refunds DROP CONSTRAINT refunds_order_id_fkey;
ALTER TABLE payment_links DROP CONSTRAINT payment_links_order_id_fkey;
ALTER TABLE email_outbox DROP CONSTRAINT email_outbox_order_id_fkey;
ALTER TABLE order_events DROP CONSTRAINT order_events_order_id_fkey;

-- The worker claims a delivery (insert-first) and writes its outcome at the
-- end of the same transaction. The outcome's UPDATE leaves every indexed
-- column as it was for an applied event (`processed_at` is the
-- transaction's `now()` both times), so it can be a heap-only update, which
-- writes none of the table's eight indexes — if the row's page has room
-- for the new version. Inserts leave that room.
ALTER TABLE processed_webhooks SET (fillfactor = 70);
