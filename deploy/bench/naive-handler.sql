-- The naive baseline of `make bench`: the SQL a webhook handler written the
-- usual way runs for one captured payment, inside the HTTP request, before
-- it sends the confirmation email over SMTP itself and answers. Same
-- dedup-first claim and the same effect as the worker (payment recorded,
-- order paid, stock decremented), without the broker, the outbox or the
-- ledger's facts. The bench reads the statements below by their `-- name:`
-- lines and runs them in one transaction with bound parameters.

-- name: claim
INSERT INTO processed_webhooks
    (source, event_id, body_sha256, provider, event_type, order_ref, outcome, received_at, payment_id)
VALUES ($1, $2, $3, $4, $5, $6, 'applied', now(), $7)
ON CONFLICT (source, event_id, body_sha256) DO NOTHING
RETURNING 1;

-- name: lock_order
SELECT id, customer_email, status FROM orders WHERE order_ref = $1 FOR UPDATE;

-- name: record_payment
INSERT INTO payments (provider, payment_id, order_id, status, amount_minor, currency, event_id)
VALUES ($1, $2, $3, 'captured', $4, $5, $6)
ON CONFLICT (tenant_id, provider, payment_id, status) DO NOTHING;

-- name: take_stock
UPDATE products p SET stock = p.stock - i.qty
FROM order_items i
WHERE i.order_id = $1 AND i.sku = p.sku;

-- name: mark_paid
UPDATE orders SET status = 'paid', paid_at = now(), paid_by = $2
WHERE id = $1 AND status = 'pending';
