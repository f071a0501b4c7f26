//! The gateways' API answers as their public documentation publishes them,
//! one file each in the gateway's folder (`src/<gateway>/documented/`),
//! with a header of `//` lines saying where it was published. Each
//! gateway's reader is tested on these files, and the tests' stand-in of
//! the gateway's API builds every answer it serves from the same files
//! (the documented object, with a test's ids and amounts in its own
//! fields), so the reader and the stand-in cannot drift apart from the
//! documentation or from each other.

/// The JSON of a documented answer: the file without its `//` header.
pub fn body(file: &'static str) -> &'static str {
    let mut rest = file;
    while rest.starts_with("//") {
        rest = rest.split_once('\n').map_or("", |(_, r)| r);
    }
    rest
}

/// Razorpay's documented answers.
pub mod razorpay {
    /// `GET /v1/orders/{order_id}/payments`.
    pub const ORDER_PAYMENTS: &str = include_str!("razorpay/documented/order_payments.json");
    /// `GET /v1/orders` (the list `?receipt=` filters).
    pub const ORDERS: &str = include_str!("razorpay/documented/orders.json");
    /// `GET /v1/payments/{payment_id}/refunds`.
    pub const PAYMENT_REFUNDS: &str = include_str!("razorpay/documented/payment_refunds.json");
    /// `400`: "The id provided does not exist".
    pub const ID_DOES_NOT_EXIST: &str = include_str!("razorpay/documented/id_does_not_exist.json");
    /// `POST /v1/payments/{payment_id}/refund`: the refund made.
    pub const REFUND_CREATE: &str = include_str!("razorpay/documented/refund_create.json");
    /// `400` to a refund: "The amount must be at least INR 1.00".
    pub const REFUND_CREATE_FAILURE: &str =
        include_str!("razorpay/documented/refund_create_failure.json");
    /// `400` to a refund the bank no longer takes (the payment is too old).
    pub const REFUND_NOT_SUPPORTED: &str =
        include_str!("razorpay/documented/refund_not_supported.json");
}

/// Cashfree's documented answers.
pub mod cashfree {
    /// `GET /pg/orders/{order_id}/payments`.
    pub const ORDER_PAYMENTS: &str = include_str!("cashfree/documented/order_payments.json");
    /// `GET /pg/orders/{order_id}/refunds` (each entry the refund entity
    /// `POST /pg/orders/{order_id}/refunds` and
    /// `GET /pg/orders/{order_id}/refunds/{refund_id}` answer).
    pub const ORDER_REFUNDS: &str = include_str!("cashfree/documented/order_refunds.json");
    /// `404`.
    pub const NOT_FOUND: &str = include_str!("cashfree/documented/not_found.json");
}

/// PayU's documented answers.
pub mod payu {
    /// `verify_payment` for a transaction PayU knows.
    pub const VERIFY_PAYMENT: &str = include_str!("payu/documented/verify_payment.json");
    /// `verify_payment` for a txnid PayU does not know.
    pub const VERIFY_PAYMENT_NOT_FOUND: &str =
        include_str!("payu/documented/verify_payment_not_found.json");
    /// A refund request accepted and queued.
    pub const REFUND_QUEUED: &str = include_str!("payu/documented/refund_queued.json");
    /// A refund request refused ("Invalid amount").
    pub const REFUND_INVALID_AMOUNT: &str =
        include_str!("payu/documented/refund_invalid_amount.json");
    /// `check_action_status` by PayU id: the transaction's actions.
    pub const CHECK_ACTION_STATUS: &str = include_str!("payu/documented/check_action_status.json");
    /// `check_action_status` for a PayU id with no action.
    pub const CHECK_ACTION_STATUS_NOT_FOUND: &str =
        include_str!("payu/documented/check_action_status_not_found.json");
}

/// Stripe's documented answers.
pub mod stripe {
    /// `GET /v1/payment_intents/{id}`.
    pub const PAYMENT_INTENT: &str = include_str!("stripe/documented/payment_intent.json");
    /// A Refund object (what `GET /v1/refunds` lists, and `POST /v1/refunds`
    /// answers).
    pub const REFUND: &str = include_str!("stripe/documented/refund.json");
    /// `GET /v1/events`.
    pub const EVENTS: &str = include_str!("stripe/documented/events.json");
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_documented_answer_says_where_it_was_published_and_is_json() {
        for file in [
            razorpay::ORDER_PAYMENTS,
            razorpay::ORDERS,
            razorpay::PAYMENT_REFUNDS,
            razorpay::ID_DOES_NOT_EXIST,
            razorpay::REFUND_CREATE,
            razorpay::REFUND_CREATE_FAILURE,
            razorpay::REFUND_NOT_SUPPORTED,
            cashfree::ORDER_PAYMENTS,
            cashfree::ORDER_REFUNDS,
            cashfree::NOT_FOUND,
            payu::VERIFY_PAYMENT,
            payu::VERIFY_PAYMENT_NOT_FOUND,
            payu::REFUND_QUEUED,
            payu::REFUND_INVALID_AMOUNT,
            payu::CHECK_ACTION_STATUS,
            payu::CHECK_ACTION_STATUS_NOT_FOUND,
            stripe::PAYMENT_INTENT,
            stripe::REFUND,
            stripe::EVENTS,
        ] {
            assert!(file.starts_with("// "), "a header first: {file}");
            assert!(file.contains("https://"), "where it was published: {file}");
            let json: Result<serde_json::Value, _> = serde_json::from_str(body(file));
            assert!(json.is_ok(), "{file}");
        }
    }
}
