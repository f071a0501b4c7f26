-- An event may also wait for its order: it names an order reference (the
-- shop's, or a gateway's own) that no order has yet — the customer paid
-- while the shop's create call was still in flight. It is parked with that
-- reference until the order is created (and applied in the transaction
-- that creates it, POST /v1/orders) or ONCEHOOK_UNLINKED_TTL passes (then
-- dead-lettered as unknown_order). NULL: the event waits for its payment's
-- link instead.
ALTER TABLE parked_events ADD COLUMN order_ref text;
CREATE INDEX parked_events_order_ref ON parked_events (order_ref) WHERE order_ref IS NOT NULL;
