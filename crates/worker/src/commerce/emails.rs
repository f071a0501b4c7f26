//! The emails the ledger writes to the outbox (sent later by the mailer):
//! one confirmation per order when it is first paid, one per refund fact.
//! Their text depends only on the facts (never on which capture came
//! first), and amounts use the currency's own exponent.

use oncehook_common::store::ledger::{OrderRow as Order, StockMove};
use oncehook_common::store::outbox::{self, NewEmail};
use oncehook_gateways::{NormalizedEvent, currency_exponent, format_decimal_minor};
use sqlx::PgConnection;

/// An amount with the currency's own number of decimals (`5000 JPY`, `500.00 INR`).
pub fn money(minor: i64, currency: &str) -> String {
    format!(
        "{} {currency}",
        format_decimal_minor(minor, currency_exponent(currency))
    )
}

/// The order's confirmation (one per order: its `dedup_key`), listing the
/// items whose stock moved.
pub(super) struct Confirmation {
    order_id: i64,
    dedup_key: String,
    to: String,
    subject: String,
    body: String,
}

impl Confirmation {
    pub(super) fn new(order: &Order, items: &[StockMove]) -> Self {
        let mut body = format!(
            "Thank you for your order {}.\n\nWe received your payment of {}.\n\nItems:\n",
            order.order_ref,
            money(order.amount_minor, &order.currency)
        );
        for item in items {
            body.push_str(&format!("  {} x {}\n", item.qty, item.sku));
        }
        body.push_str("\nWe will let you know when it ships.\n");
        Confirmation {
            order_id: order.id,
            dedup_key: format!("order:{}:confirmation", order.id),
            to: order.customer_email.clone(),
            subject: format!("Order {} confirmed", order.order_ref),
            body,
        }
    }

    /// The outbox row to write.
    pub(super) fn email(&self) -> NewEmail<'_> {
        NewEmail {
            order_id: self.order_id,
            kind: "confirmation",
            dedup_key: &self.dedup_key,
            to: &self.to,
            subject: &self.subject,
            body: &self.body,
        }
    }
}

/// One refund email per refund fact, whatever the order's state.
pub(super) async fn write_refund_email(
    conn: &mut PgConnection,
    event: &NormalizedEvent,
    order: &Order,
    refund_id: &str,
    amount: i64,
) -> Result<bool, sqlx::Error> {
    let currency = event.currency.as_deref().unwrap_or(&order.currency);
    let body = if event.cumulative_refund {
        format!(
            "Refunds for your order {} now total {}.\n\nIt may take a few days to reach your account.\n",
            order.order_ref,
            money(amount, currency)
        )
    } else {
        format!(
            "We have refunded {} for your order {} (refund {refund_id}).\n\nIt may take a few days to reach your account.\n",
            money(amount, currency),
            order.order_ref
        )
    };
    let email = NewEmail {
        order_id: order.id,
        kind: "refund",
        dedup_key: &format!("refund:{}:{refund_id}", event.provider),
        to: &order.customer_email,
        subject: &format!("Refund for order {}", order.order_ref),
        body: &body,
    };
    outbox::write(conn, email).await
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
