-- no-transaction
-- A shop's list of its orders (`GET /v1/orders`, by last change) reads its
-- own rows from the start of its range, however many other shops share the
-- table (docs/tenants.md, "At platform size"): the list names its tenant
-- and this index starts with it. Built CONCURRENTLY, so the running
-- release's writes to `orders` go on while it builds; the index by
-- `(updated_at, id)` stays for the running release (expand only).
CREATE INDEX CONCURRENTLY IF NOT EXISTS orders_tenant_updated_at_id ON orders (tenant_id, updated_at, id);
