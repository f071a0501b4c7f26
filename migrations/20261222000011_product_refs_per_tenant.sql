-- Tenants: a sku is unique per tenant (products_tenant_sku, built by
-- 20261222000003), so the items of an order and the stock adjustments point
-- at their own tenant's product: (tenant_id, sku), not sku alone. The keys
-- on sku alone stay until the contract step
-- (migrations/contract/20261222000101_keys_per_tenant.sql), which also
-- validates these. NOT VALID: nothing scans the tables now, and rows
-- written from here on are checked.
SET LOCAL lock_timeout = '5s';
ALTER TABLE order_items ADD CONSTRAINT order_items_tenant_sku_fkey
    FOREIGN KEY (tenant_id, sku) REFERENCES products (tenant_id, sku) NOT VALID;
ALTER TABLE stock_adjustments ADD CONSTRAINT stock_adjustments_tenant_sku_fkey
    FOREIGN KEY (tenant_id, sku) REFERENCES products (tenant_id, sku) NOT VALID;
