-- The console's Events page lists processed deliveries newest first,
-- filtered by gateway, source or outcome, one keyset page at a time. With a
-- million rows, a filter that matches few of them would otherwise walk the
-- processed_at index through most of the table.
CREATE INDEX processed_webhooks_provider_at ON processed_webhooks (provider, processed_at);
CREATE INDEX processed_webhooks_source_at ON processed_webhooks (source, processed_at);
-- Nearly every delivery is applied; the others are what an operator looks
-- for, and a partial index keeps them apart without costing the common insert.
CREATE INDEX processed_webhooks_unusual_at ON processed_webhooks (outcome, processed_at)
    WHERE outcome <> 'applied';
