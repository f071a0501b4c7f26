-- A tenant's own sender for its customers' emails (docs/tenants.md,
-- "A shop's sender"): `Name <address>` as the mailer puts it in `From:`;
-- NULL: the deployment's `mail.from`. Expand only: a nullable column with
-- no default (no rewrite); the running release neither reads nor writes it.
SET LOCAL lock_timeout = '5s';
ALTER TABLE tenants ADD COLUMN IF NOT EXISTS mail_from text;
