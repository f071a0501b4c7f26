//! An order as the API shows it: what the shop wrote (items, gateway
//! references, metadata) and the ledger's view — status, amounts in minor
//! units and formatted with the currency's exponent, payments with their
//! flags, refunds, the emails written, and the version. Read with the
//! ledger's own reads (`store::ledger`, `store::outbox`).

use std::collections::BTreeMap;

use oncehook_common::store::{ledger, outbox, shop};
use oncehook_gateways::{currency_exponent, format_decimal_minor};
use sqlx::PgConnection;
use time::OffsetDateTime;
use time::format_description::well_known::Rfc3339;

use crate::model::{Amount, Email, Item, Order, OrderSummary, Payment, Refund};

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
