-- The operators' console (oncehook-console): every operator action — who,
-- what, which dead letters, when, and how it ended — for its Audit page.
CREATE TABLE console_audit (
    id       bigserial   PRIMARY KEY,
    at       timestamptz NOT NULL DEFAULT now(),
    actor    text        NOT NULL,
    role     text        NOT NULL,
    action   text        NOT NULL,
    -- The dead-letter IDs the action touched (or would have).
    letters  text[]      NOT NULL DEFAULT '{}',
    -- The filter a bulk action was scoped by, in the CLI's words.
    scope    text,
    ok       boolean     NOT NULL,
    result   text        NOT NULL,
    address  text
);
CREATE INDEX console_audit_at ON console_audit (at);
