-- Contract step of the tenants' keys (20261222000002 to 20261222000011): the
-- unique keys without the tenant, which only the previous release's
-- `ON CONFLICT` named, give way to the per-tenant ones built concurrently
-- in the expand step; each per-tenant index becomes its table's primary
-- key where the old key was one (renamed to the old name, so the schema
-- reads as before). The foreign keys to a product by sku alone go; the
-- per-tenant ones are validated (a scan that does not block writes).
SET LOCAL lock_timeout = '5s';
ALTER TABLE order_items DROP CONSTRAINT IF EXISTS order_items_sku_fkey;
ALTER TABLE stock_adjustments DROP CONSTRAINT IF EXISTS stock_adjustments_sku_fkey;
ALTER TABLE order_items VALIDATE CONSTRAINT order_items_tenant_sku_fkey;
ALTER TABLE stock_adjustments VALIDATE CONSTRAINT stock_adjustments_tenant_sku_fkey;

ALTER TABLE orders DROP CONSTRAINT IF EXISTS orders_order_ref_key;
ALTER TABLE payments DROP CONSTRAINT IF EXISTS payments_provider_payment_id_status_key;
ALTER TABLE refund_intents DROP CONSTRAINT IF EXISTS refund_intents_provider_payment_id_key;

ALTER TABLE products DROP CONSTRAINT IF EXISTS products_pkey;
ALTER TABLE products ADD CONSTRAINT products_pkey PRIMARY KEY USING INDEX products_tenant_sku;
ALTER TABLE order_gateway_refs DROP CONSTRAINT IF EXISTS order_gateway_refs_pkey;
ALTER TABLE order_gateway_refs ADD CONSTRAINT order_gateway_refs_pkey
    PRIMARY KEY USING INDEX order_gateway_refs_tenant_ref;
ALTER TABLE payment_links DROP CONSTRAINT IF EXISTS payment_links_pkey;
ALTER TABLE payment_links ADD CONSTRAINT payment_links_pkey
    PRIMARY KEY USING INDEX payment_links_tenant_payment;
ALTER TABLE refunds DROP CONSTRAINT IF EXISTS refunds_pkey;
ALTER TABLE refunds ADD CONSTRAINT refunds_pkey PRIMARY KEY USING INDEX refunds_tenant_refund;
ALTER TABLE notify_endpoints DROP CONSTRAINT IF EXISTS notify_endpoints_pkey;
ALTER TABLE notify_endpoints ADD CONSTRAINT notify_endpoints_pkey
    PRIMARY KEY USING INDEX notify_endpoints_tenant_name;
ALTER TABLE api_idempotency DROP CONSTRAINT IF EXISTS api_idempotency_pkey;
ALTER TABLE api_idempotency ADD CONSTRAINT api_idempotency_pkey
    PRIMARY KEY USING INDEX api_idempotency_tenant_key;
