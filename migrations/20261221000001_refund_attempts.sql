-- Refund attempts (docs/refunds.md, "Attempts and keys"). An intent is sent
-- in attempts: the first under the intent's id as idempotency key, and each
-- re-approval after the gateway refused it under a new key derived from
-- the id and the attempt number (`ri_…-2`, `ri_…-3`), recorded here when
-- it is approved, before anything is sent. What one attempt sends is fixed
-- at its first send: the amount (`sent_minor`) and the reason
-- (`sent_reason`; the ledger may rewrite `reason` when the shop cancels the
-- order, and a keyed request must not change). `in_doubt` is true from the
-- first send of an attempt until an answer says what became of it; an
-- intent the books find refunded while in doubt ends `settled`, not
-- `cancelled` (oncehook may have sent it), and a re-approval of a failed
-- intent still in doubt keeps its attempt and key (it is looked up first).
-- Expand only: columns with constant defaults (no rewrite); the running
-- release neither reads nor writes them. Safe to run again.
SET LOCAL lock_timeout = '5s';
ALTER TABLE refund_intents
    ADD COLUMN IF NOT EXISTS attempt_no  integer NOT NULL DEFAULT 1,
    ADD COLUMN IF NOT EXISTS sent_reason text,
    ADD COLUMN IF NOT EXISTS in_doubt    boolean NOT NULL DEFAULT false;
