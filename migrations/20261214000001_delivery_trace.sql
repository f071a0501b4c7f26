-- The traceparent of the notifier's fan-out that made the delivery row, so
-- each HTTP attempt to the shop is a child of the hop before it (the
-- fan-out's consumer span) rather than of the worker's delivery that wrote
-- the order event. Rows made before this migration fall back to the order
-- event's own trace_parent.
ALTER TABLE notify_deliveries ADD COLUMN trace_parent text;
