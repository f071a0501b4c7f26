-- One trace per payment (docs/operations.md, Traces): the W3C
-- `traceparent` of the delivery that caused an email travels with the
-- outbox row, so the relay and the mailer's send join that delivery's
-- trace; each processed delivery keeps its trace id for `trace` and the
-- console. NULL where nothing was traced.
ALTER TABLE email_outbox ADD COLUMN trace_parent text;
ALTER TABLE processed_webhooks ADD COLUMN trace_id text;
-- An event parked to wait for its order keeps its trace: adopted, it is
-- applied in that trace; dead-lettered by the sweeper, the letter carries it.
ALTER TABLE parked_events ADD COLUMN trace_parent text;
