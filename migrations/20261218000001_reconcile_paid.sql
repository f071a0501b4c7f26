-- Reconciliation asks about paid orders too (docs/reconciliation.md, "Paid
-- orders"): a refund whose webhook the gateway gave up on is found without
-- a human. Those orders are found by when they were paid, within
-- reconcile.paid_horizon; the index holds only orders a refund can still
-- change.
CREATE INDEX orders_paid_at ON orders (paid_at) WHERE status IN ('paid', 'partially_refunded');
