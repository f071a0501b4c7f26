-- The touch triggers of the releases before 0.5.0 (first made by
-- 20261207000001_shop_api.sql), there again while a release rolls: an
-- older binary's ledger and API never move an order's `version` and
-- `updated_at` themselves, they rely on these. Release 0.5.0 dropped them
-- before the roll, and from the migration until the last older binary
-- stopped, every order change those binaries made was invisible to a shop
-- that keeps the highest version or lists by `updated_after`.
--
-- They are safe beside this release's ledger, which writes each order row
-- once per transaction with `version = version + 1` itself:
-- - `orders_touch` leaves a statement that moves `version` as it is (only
--   `updated_at` follows);
-- - `orders_touch_from_facts` moves the version of an order only if no
--   statement of this transaction has touched the order yet (its
--   `updated_at` is not this transaction's `now()`): one fact of an older
--   binary's transaction bumps the order once, the rest of it (its emails,
--   its other facts) no more. An order this release's ledger writes moves
--   by one or two in a transaction of the window (a fact recorded before
--   its order row was written bumps it first); each committed state still
--   has a version of its own, and versions only grow.
--
-- The contract step drops them again
-- (migrations/contract/20261220000101_one_write_per_order.sql), once
-- every binary runs this release.
SET LOCAL lock_timeout = '5s';

CREATE OR REPLACE FUNCTION orders_touch() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    IF NEW.version <> OLD.version THEN
        NEW.updated_at := now();
    ELSIF NEW IS DISTINCT FROM OLD THEN
        NEW.version := OLD.version + 1;
        NEW.updated_at := now();
    END IF;
    RETURN NEW;
END $$;

CREATE OR REPLACE FUNCTION orders_touch_from_facts() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    UPDATE orders SET version = version + 1
    WHERE id IN (SELECT DISTINCT order_id FROM changed WHERE order_id IS NOT NULL)
      AND updated_at IS DISTINCT FROM now();
    RETURN NULL;
END $$;

CREATE OR REPLACE TRIGGER orders_touch BEFORE UPDATE ON orders
    FOR EACH ROW EXECUTE FUNCTION orders_touch();
CREATE OR REPLACE TRIGGER payments_touch_insert AFTER INSERT ON payments
    REFERENCING NEW TABLE AS changed FOR EACH STATEMENT EXECUTE FUNCTION orders_touch_from_facts();
CREATE OR REPLACE TRIGGER payments_touch_update AFTER UPDATE ON payments
    REFERENCING NEW TABLE AS changed FOR EACH STATEMENT EXECUTE FUNCTION orders_touch_from_facts();
CREATE OR REPLACE TRIGGER refunds_touch_insert AFTER INSERT ON refunds
    REFERENCING NEW TABLE AS changed FOR EACH STATEMENT EXECUTE FUNCTION orders_touch_from_facts();
CREATE OR REPLACE TRIGGER email_outbox_touch_insert AFTER INSERT ON email_outbox
    REFERENCING NEW TABLE AS changed FOR EACH STATEMENT EXECUTE FUNCTION orders_touch_from_facts();
