-- no-transaction
-- Reconciliation asks about paid orders too (docs/reconciliation.md, "Paid
-- orders"): a refund whose webhook the gateway gave up on is found without
-- a human. Those orders are found by when they were paid, within
-- reconcile.paid_horizon; the index holds only orders a refund can still
-- change. Built CONCURRENTLY, so the running release's writes to `orders`
-- go on while it builds (see 20261217000001 for a failed build).
CREATE INDEX CONCURRENTLY IF NOT EXISTS orders_paid_at ON orders (paid_at) WHERE status IN ('paid', 'partially_refunded');
