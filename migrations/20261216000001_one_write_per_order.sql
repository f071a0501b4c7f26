-- One write of each order row per transaction (docs/scaling.md, "Where
-- PostgreSQL's time goes"). The ledger moves an order's `version` and
-- `updated_at` itself, in the one statement that writes its state (the
-- ledger's store::orders::write_orders); the touch triggers and the
-- foreign keys it no longer needs are dropped by the contract step
-- (migrations/contract/20261220000101_one_write_per_order.sql), once no
-- binary of an older release runs. (Release 0.5.0 dropped them here, in
-- the step that runs before the roll, and the older binaries' writes went
-- unseen by the shop until they stopped: CHANGELOG.md. A database that
-- applied that text is recognised by store::schema and keeps working.)
--
-- The worker claims a delivery (insert-first) and writes its outcome at the
-- end of the same transaction. The outcome's UPDATE leaves every indexed
-- column as it was for an applied event (`processed_at` is the
-- transaction's `now()` both times), so it can be a heap-only update, which
-- writes none of the table's eight indexes — if the row's page has room
-- for the new version. Inserts leave that room. (A storage parameter: the
-- lock it takes lets reads and writes go on.)
SET LOCAL lock_timeout = '5s';
ALTER TABLE processed_webhooks SET (fillfactor = 70);
