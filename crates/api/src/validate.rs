//! The checks on what a shop sends, each naming the field at fault: an
//! order's amount is its items' sum, its currency a known ISO 4217 code,
//! its email an address, quantities positive, sizes bounded. Pure; the
//! checks that need the database (skus exist) are in `routes::orders`.

use std::collections::BTreeSet;

use oncehook_gateways::is_known_currency;
use oncehook_ledger::store::shop::{GatewayRef, ShopItem, ShopOrder};
use serde_json::Value;

use crate::error::ApiError;
use crate::model::{OrderCreate, ProductPut, StockDelta};

/// The largest amount, item price or quantity accepted.
const MAX_AMOUNT: i64 = 1_000_000_000_000_000;
const MAX_QTY: i32 = 1_000_000;
const MAX_STOCK: i32 = 1_000_000_000;
const MAX_METADATA_BYTES: usize = 4_096;

fn id_like(text: &str, max: usize, extra: &[char]) -> bool {
    !text.is_empty()
        && text.len() <= max
        && text
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || extra.contains(&c))
}

fn plain_text(text: &str, max: usize) -> bool {
    !text.trim().is_empty() && text.chars().count() <= max && !text.chars().any(char::is_control)
}

/// A sku: `[A-Za-z0-9._-]`, 1 to 64 characters.
pub fn sku(field: &str, sku: &str) -> Result<(), ApiError> {
    if id_like(sku, 64, &['.', '_', '-']) {
        Ok(())
    } else {
        Err(ApiError::invalid(
            field,
            "a sku is 1 to 64 characters of A-Z, a-z, 0-9, `.`, `_`, `-`",
        ))
    }
}

/// An order reference: `[A-Za-z0-9._:-]`, 1 to 128 characters.
pub fn order_ref(field: &str, r: &str) -> Result<(), ApiError> {
    if id_like(r, 128, &['.', '_', '-', ':']) {
        Ok(())
    } else {
        Err(ApiError::invalid(
            field,
            "an order_ref is 1 to 128 characters of A-Z, a-z, 0-9, `.`, `_`, `-`, `:`",
        ))
    }
}

pub fn product(p: &ProductPut) -> Result<i32, ApiError> {
    if !plain_text(&p.name, 200) {
        return Err(ApiError::invalid(
            "name",
            "1 to 200 characters, no control characters",
        ));
    }
    let stock = p.stock.unwrap_or(0);
    if !(0..=MAX_STOCK).contains(&stock) {
        return Err(ApiError::invalid(
            "stock",
            format!("between 0 and {MAX_STOCK}"),
        ));
    }
    Ok(stock)
}

pub fn delta(d: &StockDelta) -> Result<(), ApiError> {
    if d.delta == 0 || d.delta.unsigned_abs() > MAX_STOCK.unsigned_abs() {
        return Err(ApiError::invalid(
            "delta",
            format!("not 0, and at most {MAX_STOCK} either way"),
        ));
    }
    if let Some(reason) = &d.reason
        && (reason.chars().count() > 200 || reason.chars().any(char::is_control))
    {
        return Err(ApiError::invalid(
            "reason",
            "at most 200 characters, no control characters",
        ));
    }
    Ok(())
}

/// A plausible address: one `@`, a local part, a dotted domain, no spaces.
pub fn email(e: &str) -> bool {
    let Some((local, domain)) = e.split_once('@') else {
        return false;
    };
    e.len() <= 254
        && !local.is_empty()
        && local.len() <= 64
        && !domain.contains('@')
        && domain.contains('.')
        && !domain.starts_with('.')
        && !domain.ends_with('.')
        && !domain.contains("..")
        && !e
            .chars()
            .any(|c| c.is_whitespace() || c.is_control() || c == '"')
}

/// The order as it is stored, or the first field at fault.
pub fn order(o: &OrderCreate, max_items: usize) -> Result<ShopOrder, ApiError> {
    order_ref("order_ref", &o.order_ref)?;
    if !email(&o.customer_email) {
        return Err(ApiError::invalid("customer_email", "not an email address"));
    }
    if !is_known_currency(&o.currency) {
        return Err(ApiError::invalid(
            "currency",
            "not an ISO 4217 currency code in capitals (INR, USD, …)",
        ));
    }
    if !(0..=MAX_AMOUNT).contains(&o.amount_minor) {
        return Err(ApiError::invalid(
            "amount_minor",
            format!("between 0 and {MAX_AMOUNT}"),
        ));
    }
    let items = items(o, max_items)?;
    let metadata = metadata(o.metadata.as_ref())?;
    let mut gateway_refs = Vec::with_capacity(o.gateway_refs.len());
    for (gateway, r) in &o.gateway_refs {
        let field = format!("gateway_refs.{gateway}");
        if !oncehook_gateways::names().contains(&gateway.as_str()) {
            return Err(ApiError::invalid(&field, "not a gateway oncehook knows"));
        }
        if !plain_text(r, 128) || r.contains(char::is_whitespace) {
            return Err(ApiError::invalid(
                &field,
                "1 to 128 characters, no spaces or control characters",
            ));
        }
        gateway_refs.push(GatewayRef {
            gateway: gateway.clone(),
            gateway_ref: r.clone(),
        });
    }
    Ok(ShopOrder {
        order_ref: o.order_ref.clone(),
        customer_email: o.customer_email.clone(),
        currency: o.currency.clone(),
        amount_minor: o.amount_minor,
        items,
        gateway_refs,
        metadata,
    })
}

fn items(o: &OrderCreate, max_items: usize) -> Result<Vec<ShopItem>, ApiError> {
    if o.items.is_empty() || o.items.len() > max_items {
        return Err(ApiError::invalid(
            "items",
            format!("1 to {max_items} items"),
        ));
    }
    let mut seen = BTreeSet::new();
    let mut total: i64 = 0;
    let mut items = Vec::with_capacity(o.items.len());
    for (i, item) in o.items.iter().enumerate() {
        sku(&format!("items[{i}].sku"), &item.sku)?;
        if !seen.insert(item.sku.as_str()) {
            return Err(ApiError::invalid(
                &format!("items[{i}].sku"),
                "the same sku twice: give it once with the total qty",
            ));
        }
        if !(1..=MAX_QTY).contains(&item.qty) {
            return Err(ApiError::invalid(
                &format!("items[{i}].qty"),
                format!("between 1 and {MAX_QTY}"),
            ));
        }
        if !(0..=MAX_AMOUNT).contains(&item.unit_minor) {
            return Err(ApiError::invalid(
                &format!("items[{i}].unit_minor"),
                format!("between 0 and {MAX_AMOUNT}"),
            ));
        }
        total = item
            .unit_minor
            .checked_mul(i64::from(item.qty))
            .and_then(|line| total.checked_add(line))
            .filter(|t| *t <= MAX_AMOUNT)
            .ok_or_else(|| ApiError::invalid("amount_minor", "the items' sum is too large"))?;
        items.push(ShopItem {
            sku: item.sku.clone(),
            qty: item.qty,
            unit_minor: Some(item.unit_minor),
        });
    }
    if total != o.amount_minor {
        return Err(ApiError::invalid(
            "amount_minor",
            format!(
                "must equal the items' sum (qty × unit_minor): {total}, not {}",
                o.amount_minor
            ),
        ));
    }
    items.sort_by(|a, b| a.sku.cmp(&b.sku));
    Ok(items)
}

fn metadata(m: Option<&Value>) -> Result<Value, ApiError> {
    match m {
        None | Some(Value::Null) => Ok(Value::Object(Default::default())),
        Some(v @ Value::Object(_)) if v.to_string().len() <= MAX_METADATA_BYTES => Ok(v.clone()),
        Some(Value::Object(_)) => Err(ApiError::invalid(
            "metadata",
            format!("at most {MAX_METADATA_BYTES} bytes of JSON"),
        )),
        Some(_) => Err(ApiError::invalid("metadata", "must be a JSON object")),
    }
}

#[cfg(test)]
#[path = "validate_tests.rs"]
mod tests;
