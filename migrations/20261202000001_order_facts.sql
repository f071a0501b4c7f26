-- The facts an order's state is computed from (docs/ledger.md), in one
-- place: its captured payments and its refunds. Read by the worker's ledger
-- (crates/common/src/store/ledger.rs); a view, so it stores nothing.
CREATE VIEW order_facts AS
SELECT order_id, true AS capture, provider, payment_id, amount_minor, currency, flag,
       false AS cumulative
FROM payments WHERE status = 'captured'
UNION ALL
SELECT order_id, false, provider, payment_id, amount_minor, currency, NULL, cumulative
FROM refunds;
