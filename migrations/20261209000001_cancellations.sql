-- The shop gives up on an order (POST /v1/orders/{order_ref}/cancel): one
-- more fact in the ledger. A cancelled order is `cancelled` whatever came
-- before or after: its captures are owed back (flag needs_refund), its
-- stock is not taken (or is given back), and the books are the same
-- whatever the order of the cancellation and the payments (docs/ledger.md).
ALTER TABLE orders DROP CONSTRAINT orders_status_check;
ALTER TABLE orders ADD CONSTRAINT orders_status_check
    CHECK (status IN ('pending', 'paid', 'partially_refunded', 'refunded', 'cancelled'));

CREATE TABLE order_cancellations (
    order_id     bigint      PRIMARY KEY REFERENCES orders (id),
    reason       text        NOT NULL DEFAULT '',
    cancelled_by text        NOT NULL,
    cancelled_at timestamptz NOT NULL DEFAULT now()
);
