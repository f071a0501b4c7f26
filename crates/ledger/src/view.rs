//! An order as the shop sees it — in the API, in every order event (the
//! broker's, the notifier's, `GET /v1/events`): what the shop wrote (items,
//! gateway references, metadata) and the ledger's view — status, amounts in minor
//! units and formatted with the currency's exponent, payments with their
//! flags, refunds, the emails written, and the version. Read with the
//! ledger's own reads (`crate::store`) and the outbox's.

use std::collections::BTreeMap;

use crate::store::shop;
use oncehook_common::store::outbox;
use serde::Serialize;
use serde_json::Value;

use crate::store as ledger;
use oncehook_gateways::{currency_exponent, format_decimal_minor};
use sqlx::PgConnection;
use time::OffsetDateTime;
use time::format_description::well_known::Rfc3339;
use utoipa::ToSchema;

/// One item of an order.
#[derive(Debug, Clone, Serialize, ToSchema)]
pub struct Item {
    pub sku: String,
    pub qty: i32,
    /// `null` for orders written before the API.
    pub unit_minor: Option<i64>,
}

/// An amount in minor units and as text with the currency's exponent.
#[derive(Debug, Clone, Serialize, ToSchema)]
pub struct Amount {
    pub minor: i64,
    /// `500.00`, `5000` (JPY), `12.345` (KWD).
    pub formatted: String,
}

/// A payment attempt the ledger recorded.
#[derive(Debug, Clone, Serialize, ToSchema)]
pub struct Payment {
    pub provider: String,
    pub payment_id: String,
    /// `authorized`, `captured` or `failed`.
    pub status: String,
    pub amount_minor: Option<i64>,
    pub currency: Option<String>,
    /// `needs_refund`, `amount_mismatch`, `refunded` or `null`.
    pub flag: Option<String>,
    /// RFC 3339.
    pub created_at: String,
}

/// A refund the ledger recorded.
#[derive(Debug, Clone, Serialize, ToSchema)]
pub struct Refund {
    pub provider: String,
    pub refund_id: String,
    pub payment_id: Option<String>,
    pub amount_minor: i64,
    /// A payment's refunded total rather than one refund (Stripe).
    pub cumulative: bool,
    pub created_at: String,
}

/// An email the ledger wrote for the order.
#[derive(Debug, Clone, Serialize, ToSchema)]
pub struct Email {
    /// `confirmation` or `refund`.
    pub kind: String,
    pub to: String,
    /// `sent`, `failed`, `queued` or `pending`.
    pub status: String,
    pub created_at: String,
    pub sent_at: Option<String>,
}

/// An order: what the shop wrote and what the ledger made of it.
#[derive(Debug, Clone, Serialize, ToSchema)]
pub struct Order {
    pub order_ref: String,
    /// `pending`, `paid`, `partially_refunded`, `refunded`, …
    pub status: String,
    pub customer_email: String,
    pub currency: String,
    pub amount: Amount,
    pub refunded_minor: i64,
    pub refunded: Amount,
    pub items: Vec<Item>,
    pub payments: Vec<Payment>,
    pub refunds: Vec<Refund>,
    pub emails: Vec<Email>,
    /// A capture is owed back (paid twice, …).
    pub needs_refund: bool,
    /// A capture's amount or currency is not the order's.
    pub amount_mismatch: bool,
    /// Paying it took a product's stock below zero.
    pub oversold: bool,
    pub paid_by: Option<String>,
    pub paid_at: Option<String>,
    /// Grows with every change of the order's state.
    pub version: i64,
    #[schema(value_type = BTreeMap<String, String>)]
    pub gateway_refs: BTreeMap<String, String>,
    #[schema(value_type = Object)]
    pub metadata: Value,
    pub created_at: String,
    pub updated_at: String,
}

/// An order in a page of `GET /v1/orders`.
#[derive(Debug, Clone, Serialize, ToSchema)]
pub struct OrderSummary {
    pub order_ref: String,
    pub status: String,
    pub currency: String,
    pub amount: Amount,
    pub refunded_minor: i64,
    pub oversold: bool,
    pub version: i64,
    pub created_at: String,
    pub updated_at: String,
}

/// An order event (docs/shop-integration.md): what happened (`type`, and
/// `data` from the fact that caused it) and the order as it is now. Its
/// `id` is the Standard Webhooks `webhook-id`; keep the highest
/// `order.version` per order.
#[derive(Debug, Clone, Serialize, ToSchema)]
pub struct OrderEvent {
    pub id: String,
    /// `order.paid`, `order.refunded`, `order.needs_refund`,
    /// `order.amount_mismatch`, `order.oversold`, `order.cancelled` or
    /// `order.payment_failed`.
    #[serde(rename = "type")]
    pub kind: String,
    pub created_at: String,
    /// What the causing fact says (the refund, the payment); `{}` when the
    /// type says it all.
    #[schema(value_type = Object)]
    pub data: Value,
    pub order: Order,
}

pub fn rfc3339(t: OffsetDateTime) -> String {
    t.format(&Rfc3339).unwrap_or_default()
}

pub fn amount(minor: i64, currency: &str) -> Amount {
    Amount {
        minor,
        formatted: format_decimal_minor(minor, currency_exponent(currency)),
    }
}

/// The order with this reference, `None` if there is none.
pub async fn order(conn: &mut PgConnection, order_ref: &str) -> Result<Option<Order>, sqlx::Error> {
    let Some(o) = ledger::order_by_ref(conn, order_ref).await? else {
        return Ok(None);
    };
    let Some((_, shop_order)) = shop::shop_order(conn, order_ref).await? else {
        return Ok(None);
    };
    let Some(extras) = shop::order_extras(conn, o.id).await? else {
        return Ok(None);
    };
    let (payments, refunds) = facts_by_key(conn, o.id).await?;
    let emails = outbox::emails_of(conn, o.id).await?;
    let flagged = |flag: &str| payments.iter().any(|p| p.flag.as_deref() == Some(flag));
    Ok(Some(Order {
        needs_refund: flagged("needs_refund"),
        amount_mismatch: flagged("amount_mismatch"),
        amount: amount(o.amount_minor, &o.currency),
        refunded: amount(o.refunded_minor, &o.currency),
        items: shop_order
            .items
            .into_iter()
            .map(|i| Item {
                sku: i.sku,
                qty: i.qty,
                unit_minor: i.unit_minor,
            })
            .collect(),
        payments: payments
            .into_iter()
            .map(|p| Payment {
                provider: p.provider,
                payment_id: p.payment_id,
                status: p.status,
                amount_minor: p.amount_minor,
                currency: p.currency,
                flag: p.flag,
                created_at: rfc3339(p.created_at),
            })
            .collect(),
        refunds: refunds
            .into_iter()
            .map(|r| Refund {
                provider: r.provider,
                refund_id: r.refund_id,
                payment_id: r.payment_id,
                amount_minor: r.amount_minor,
                cumulative: r.cumulative,
                created_at: rfc3339(r.created_at),
            })
            .collect(),
        emails: emails
            .into_iter()
            .map(|e| Email {
                kind: e.kind,
                to: e.to_addr,
                status: e.status,
                created_at: rfc3339(e.created_at),
                sent_at: e.sent_at.map(rfc3339),
            })
            .collect(),
        gateway_refs: shop_order
            .gateway_refs
            .into_iter()
            .map(|g| (g.gateway, g.gateway_ref))
            .collect::<BTreeMap<_, _>>(),
        metadata: extras.metadata,
        version: extras.version,
        updated_at: rfc3339(extras.updated_at),
        created_at: rfc3339(o.created_at),
        paid_at: o.paid_at.map(rfc3339),
        paid_by: o.paid_by,
        oversold: o.oversold,
        refunded_minor: o.refunded_minor,
        order_ref: o.order_ref,
        status: o.status,
        customer_email: o.customer_email,
        currency: o.currency,
    }))
}

/// The order's payments and refunds by their keys, not by arrival: the
/// snapshot is the same whatever order the gateway's webhooks came in.
async fn facts_by_key(
    conn: &mut PgConnection,
    order_id: i64,
) -> Result<(Vec<ledger::PaymentRecord>, Vec<ledger::RefundRecord>), sqlx::Error> {
    let mut payments = ledger::payments_of(conn, order_id).await?;
    payments.sort_by(|a, b| {
        (&a.provider, &a.payment_id, &a.status).cmp(&(&b.provider, &b.payment_id, &b.status))
    });
    let mut refunds = ledger::refunds_of(conn, order_id).await?;
    refunds.sort_by(|a, b| (&a.provider, &a.refund_id).cmp(&(&b.provider, &b.refund_id)));
    Ok((payments, refunds))
}

pub fn summary(s: shop::OrderSummary) -> OrderSummary {
    OrderSummary {
        amount: amount(s.amount_minor, &s.currency),
        order_ref: s.order_ref,
        status: s.status,
        currency: s.currency,
        refunded_minor: s.refunded_minor,
        oversold: s.oversold,
        version: s.version,
        created_at: rfc3339(s.created_at),
        updated_at: rfc3339(s.updated_at),
    }
}
