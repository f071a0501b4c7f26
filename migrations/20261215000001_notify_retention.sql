-- Retention of the notifier's settled deliveries (oncehookctl retention and
-- the worker's schedule): the rows delivered or failed before the horizon,
-- found without reading the whole table.
CREATE INDEX notify_deliveries_settled
    ON notify_deliveries ((coalesce(delivered_at, updated_at)))
    WHERE status <> 'pending';
