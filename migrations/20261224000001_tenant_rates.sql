-- A tenant's rate at ingest's door (docs/tenants.md, "Fairness"): the
-- webhooks per second each of its sources may send, and the burst, set at
-- runtime with `oncehookctl tenants limits` and read by ingest from the
-- sources feed. NULL: the configuration file's; `rate_per_second` 0: no
-- limit. Expand only: nullable columns with no default (no rewrite), then
-- their checks NOT VALID (no scan under the lock; every row is NULL); the
-- running release neither reads nor writes them.
SET LOCAL lock_timeout = '5s';
ALTER TABLE tenants ADD COLUMN IF NOT EXISTS rate_per_second integer;
ALTER TABLE tenants ADD COLUMN IF NOT EXISTS rate_burst integer;
ALTER TABLE tenants ADD CONSTRAINT tenants_rate_per_second_check CHECK (rate_per_second >= 0) NOT VALID;
ALTER TABLE tenants ADD CONSTRAINT tenants_rate_burst_check CHECK (rate_burst >= 0) NOT VALID;
