//! The emails the ledger writes to the outbox (sent later by the mailer):
//! one confirmation per order when it is first paid, one per refund fact.
//! Their text depends only on the facts (never on which capture came
//! first), amounts use the currency's own exponent, and each has a
//! `dedup_key` derived from its fact, so recomputing never writes one twice.

use crate::store::books::{NewRefund, OrderRow};
use oncehook_common::store::outbox::NewEmail;
use oncehook_gateways::{currency_exponent, format_decimal_minor};

use super::stock::StockMove;

/// An amount with the currency's own number of decimals (`5000 JPY`, `500.00 INR`).
pub fn money(minor: i64, currency: &str) -> String {
    format!(
        "{} {currency}",
        format_decimal_minor(minor, currency_exponent(currency))
    )
}

/// An email to write.
#[derive(Debug, Clone)]
pub struct Email {
    order_id: i64,
    kind: &'static str,
    dedup_key: String,
    to: String,
    subject: String,
    body: String,
    /// The `traceparent` of the delivery that caused it.
    trace_parent: Option<String>,
}

impl Email {
    /// The order's confirmation (one per order: its `dedup_key`), listing
    /// the items whose stock moved.
    pub fn confirmation(order: &OrderRow, items: &[StockMove]) -> Self {
        let mut body = format!(
            "Thank you for your order {}.\n\nWe received your payment of {}.\n\nItems:\n",
            order.order_ref,
            money(order.amount_minor, &order.currency)
        );
        for item in items {
            body.push_str(&format!("  {} x {}\n", item.qty, item.sku));
        }
        body.push_str("\nWe will let you know when it ships.\n");
        Email {
            order_id: order.id,
            kind: "confirmation",
            dedup_key: format!("order:{}:confirmation", order.id),
            to: order.customer_email.clone(),
            subject: format!("Order {} confirmed", order.order_ref),
            body,
            trace_parent: None,
        }
    }

    /// One email per refund fact, whatever the order's state.
    pub fn refund(order: &OrderRow, refund: &NewRefund) -> Self {
        let currency = refund.currency.as_deref().unwrap_or(&order.currency);
        let amount = money(refund.amount_minor, currency);
        let body = if refund.cumulative {
            format!(
                "Refunds for your order {} now total {amount}.\n\nIt may take a few days to reach your account.\n",
                order.order_ref
            )
        } else {
            format!(
                "We have refunded {amount} for your order {} (refund {}).\n\nIt may take a few days to reach your account.\n",
                order.order_ref, refund.refund_id
            )
        };
        Email {
            order_id: order.id,
            kind: "refund",
            dedup_key: format!("refund:{}:{}", refund.provider, refund.refund_id),
            to: order.customer_email.clone(),
            subject: format!("Refund for order {}", order.order_ref),
            body,
            trace_parent: None,
        }
    }

    /// The email, joining the trace of the delivery that caused it.
    pub fn traced(mut self, trace_parent: Option<&str>) -> Self {
        self.trace_parent = trace_parent.map(str::to_owned);
        self
    }

    pub fn order_id(&self) -> i64 {
        self.order_id
    }

    /// The outbox row to write.
    pub fn row(self) -> NewEmail {
        NewEmail {
            order_id: self.order_id,
            kind: self.kind.to_owned(),
            dedup_key: self.dedup_key,
            to: self.to,
            subject: self.subject,
            body: self.body,
            trace_parent: self.trace_parent,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::money;

    #[test]
    fn amounts_use_the_currency_exponent() {
        assert_eq!(money(5000, "JPY"), "5000 JPY");
        assert_eq!(money(12345, "KWD"), "12.345 KWD");
        assert_eq!(money(50000, "INR"), "500.00 INR");
        assert_eq!(money(7, "USD"), "0.07 USD");
    }
}
