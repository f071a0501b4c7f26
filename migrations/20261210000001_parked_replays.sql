-- How many times an operator had replayed a parked event's message (its
-- x-oncehook-replays header) when it was parked: the sweeper's dead letter
-- carries it on, so `dlq show` counts every replay, parked or not.
ALTER TABLE parked_events ADD COLUMN replays bigint NOT NULL DEFAULT 0;
