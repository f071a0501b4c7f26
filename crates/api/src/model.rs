//! What the API reads and writes, as JSON: the request bodies (unknown
//! fields refused) and the answers, each with its OpenAPI schema (utoipa
//! derives them from these types; nothing in the document is written by
//! hand).

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};
use serde_json::Value;
use utoipa::{IntoParams, ToSchema};

// The order and its events as the shop sees them are the ledger's view.
pub use oncehook_ledger::view::{
    Amount, Email, Item, Order, OrderEvent, OrderSummary, Payment, Refund,
};

/// `PUT /v1/products/{sku}`.
#[derive(Debug, Clone, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct ProductPut {
    /// The product's name (1 to 200 characters).
    pub name: String,
    /// The stock when the product is new (0 if left out); ignored when it exists.
    pub stock: Option<i32>,
}

/// `POST /v1/products/{sku}/stock`: moves the stock, never sets it.
#[derive(Debug, Clone, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct StockDelta {
    /// Added to the stock (negative takes away); not zero.
    pub delta: i32,
    /// Why (`restock`, `damaged`, …), recorded with the adjustment.
    pub reason: Option<String>,
}

/// `POST /v1/orders/{order_ref}/cancel`.
#[derive(Debug, Clone, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct OrderCancel {
    /// Why (`customer_left`, …), recorded with the cancellation.
    pub reason: Option<String>,
}

/// A product.
#[derive(Debug, Clone, Serialize, ToSchema)]
pub struct Product {
    pub sku: String,
    pub name: String,
    pub stock: i32,
}

/// `POST /v1/orders`.
#[derive(Debug, Clone, Deserialize, Serialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct OrderCreate {
    /// The shop's order reference (`[A-Za-z0-9._:-]`, 1 to 128 characters).
    pub order_ref: String,
    pub customer_email: String,
    /// An ISO 4217 code in capitals (`INR`).
    pub currency: String,
    /// The order's amount in the currency's minor unit; the sum of its items.
    pub amount_minor: i64,
    pub items: Vec<ItemIn>,
    /// Each gateway's own reference for this order (`{"razorpay": "order_…"}`).
    #[serde(default)]
    pub gateway_refs: BTreeMap<String, String>,
    /// The shop's own data, returned as written (a JSON object, at most 4 KiB).
    #[serde(default)]
    #[schema(value_type = Object)]
    pub metadata: Option<Value>,
}

/// One item of an order to create.
#[derive(Debug, Clone, Deserialize, Serialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct ItemIn {
    pub sku: String,
    /// At least 1.
    pub qty: i32,
    /// The price of one unit, in minor units.
    pub unit_minor: i64,
}

/// One keyset page.
#[derive(Debug, Clone, Serialize, ToSchema)]
pub struct OrderPage {
    pub data: Vec<OrderSummary>,
    /// Pass as `cursor` for the next page; `null` on the last.
    pub next_cursor: Option<String>,
}

/// `GET /v1/orders`'s query.
#[derive(Debug, Clone, Deserialize, IntoParams)]
#[serde(deny_unknown_fields)]
#[into_params(parameter_in = Query)]
pub struct ListQuery {
    /// Only orders in this status.
    pub status: Option<String>,
    /// Only orders changed after this instant (RFC 3339).
    pub updated_after: Option<String>,
    /// Orders per page (1 to `api.limits.max_page_size`, default 50).
    pub limit: Option<u32>,
    /// The `next_cursor` of the page before.
    pub cursor: Option<String>,
}

/// One page of `GET /v1/events`.
#[derive(Debug, Clone, Serialize, ToSchema)]
pub struct EventPage {
    pub data: Vec<OrderEvent>,
    /// Pass as `after` for the next page (given on every page, the last
    /// one too: poll with it to hear of new events).
    pub next_cursor: String,
    /// More events follow now.
    pub has_more: bool,
}

/// `GET /v1/events`'s query.
#[derive(Debug, Clone, Deserialize, IntoParams)]
#[serde(deny_unknown_fields)]
#[into_params(parameter_in = Query)]
pub struct EventsQuery {
    /// The `next_cursor` of the page before (from the first event if left out).
    pub after: Option<String>,
    /// Events per page (1 to `api.limits.max_page_size`, default 50).
    pub limit: Option<u32>,
    /// Only events of these types (comma-separated: `order.paid,order.refunded`).
    #[serde(rename = "type")]
    #[param(rename = "type")]
    pub kind: Option<String>,
}
