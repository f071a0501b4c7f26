-- The ledger reads an order's facts (order_facts: its captured payments and
-- its refunds) in every transaction, by order id. On `payments` that read
-- filters on the order and on `status = 'captured'`; with only an index on
-- the order, a plan made before the table had statistics (a new database,
-- or one whose statistics say it is empty) scanned every captured payment —
-- through the unique (provider, payment_id, status) index or the heap —
-- and kept doing so as the table grew, until autovacuum's next ANALYZE
-- made the server plan again (docs/scaling.md, "Cost flat as the tables
-- grow"). An index on both columns is the obvious seek whatever the
-- statistics say; it replaces the one on the order alone, which every
-- other read by order uses as well through its first column.
CREATE INDEX payments_order_id_status ON payments (order_id, status);
DROP INDEX payments_order_id;
