-- no-transaction
-- Contract step of 20261217000001_order_facts_seek.sql: the index on the
-- order alone, replaced by payments_order_id_status (whose first column
-- serves every read by order). Dropped CONCURRENTLY, so nothing waits.
DROP INDEX CONCURRENTLY IF EXISTS payments_order_id;
