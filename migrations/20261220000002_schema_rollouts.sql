-- Releases rolling out (docs/operations.md, "Deploying a new version"):
-- `oncehookctl migrate` opens one when it applies new migrations to a
-- database a release already runs on (the window begins: older and newer
-- binaries write side by side); `oncehookctl migrate --finish` applies the
-- contract step, catches up what the older binaries wrote in the window
-- (the orders changed since `expanded_at`, recomputed by this release's
-- ledger: their state, order events and refund intents) and closes it.
CREATE TABLE schema_rollouts (
    id             bigserial   PRIMARY KEY,
    -- The release whose `migrate` opened the window.
    release        text        NOT NULL,
    -- Just before its first migration ran.
    expanded_at    timestamptz NOT NULL,
    finished_at    timestamptz,
    -- What the contract step caught up.
    orders_caught_up bigint,
    intents_minted   bigint
);
-- At most one window open at a time.
CREATE UNIQUE INDEX schema_rollouts_open ON schema_rollouts ((true)) WHERE finished_at IS NULL;
