//! The refund tests' common ground: a payment captured twice through one
//! gateway, posted as the gateway signs it, refunds turned on against the
//! gateways' stand-ins, and what a user checks once a refund loop closed
//! (the intent as `oncehookctl` shows it, the payments' flags, the emails).

use serde_json::Value;

use crate::gateway_api::{GatewayApi, refund_passes, register_gateway_ref, shapes};
use crate::shop::emails;
use crate::{Pipeline, TestEnv, WAIT, eventually};
use oncehook_gateways::Gateway;

/// One gateway's side of a double payment: its source, the event that
/// captures, and the two payments' ids as the ledger records them.
pub struct Paid {
    pub gateway: Gateway,
    pub source: &'static str,
    pub captured: &'static str,
    /// Sorts first: the order's payment.
    pub first: String,
    /// The one owed back.
    pub second: String,
}

impl Paid {
    pub fn twice(gateway: Gateway, tag: &str) -> Paid {
        let (source, captured, prefix) = match gateway {
            Gateway::Razorpay => ("razorpay", "payment.captured", "pay_"),
            Gateway::Stripe => ("stripe", "payment_intent.succeeded", "pi_"),
            Gateway::Cashfree => ("cashfree", "PAYMENT_SUCCESS_WEBHOOK", "88"),
            Gateway::Payu => ("payu", "success", "txn"),
            other => panic!("{other:?} has no refund API"),
        };
        Paid {
            gateway,
            source,
            captured,
            first: format!("{prefix}{tag}1"),
            second: format!("{prefix}{tag}2"),
        }
    }

    /// Posts the capture of `payment` for `order_ref` to ingest. The
    /// gateway's API knows it too where the refunder asks about it: PayU
    /// (its `mihpayid`, which it refunds by) and Cashfree, which refunds
    /// by order — so at Cashfree the second payment is of a second order
    /// the shop registered (one Cashfree order takes one payment).
    pub async fn post(
        &self,
        env: &TestEnv,
        p: &Pipeline,
        api: &GatewayApi,
        order_ref: &str,
        payment: &str,
    ) {
        let mut named = order_ref.to_owned();
        match self.gateway {
            Gateway::Payu => api.payu_transaction(
                payment,
                shapes::payu_transaction(payment, order_ref, "success", "500.00"),
            ),
            Gateway::Cashfree => {
                if *payment == self.second {
                    named = format!("{order_ref}_2");
                    register_gateway_ref(env, order_ref, "cashfree", &named).await;
                }
                let id: i64 = payment.parse().expect("Cashfree payment ids are numbers");
                api.add(
                    &format!("/pg/orders/{named}/payments"),
                    shapes::cashfree_payment(id, &named, "SUCCESS", 500.0),
                );
            }
            _ => {}
        }
        let delivery = env.sign(
            self.gateway,
            self.captured,
            &env.spec(&named, payment, &format!("evt_{payment}"), 50_000),
        );
        env.post_ok(&p.url, self.source, &delivery).await;
    }
}

/// Refunds on for every source in `mode`, a pass a second, a short lease
/// and call timeout (the lease outlasting one send, three calls of 2 s),
/// pointed at `apis`.
pub fn refunds_on(env: &mut TestEnv, mode: &str, apis: &[&GatewayApi]) {
    env.use_gateway_apis(apis);
    env.set_env("ONCEHOOK_REFUNDS_MODE", mode);
    env.set_env("ONCEHOOK_REFUNDS_INTERVAL", "1s");
    env.set_env("ONCEHOOK_REFUNDS_LEASE", "7s");
    env.set_env("ONCEHOOK_RECONCILE_TIMEOUT", "2s");
    // Reconciliation stays out of the way (these orders are never old enough).
    env.set_env("ONCEHOOK_RECONCILE_INTERVAL", "1h");
}

/// An intent as the operators' tool shows it.
pub async fn intents(env: &TestEnv, order_ref: &str) -> Vec<Value> {
    let (code, stdout, _) = env.ctl(&["--json", "refunds", "show", order_ref]).await;
    if code != 0 {
        return Vec::new();
    }
    let v: Value = serde_json::from_str(&stdout).expect("refunds show --json");
    v["intents"].as_array().cloned().unwrap_or_default()
}

/// Waits until the order's one intent is in `state`; returns it.
pub async fn wait_intent(env: &TestEnv, order_ref: &str, state: &str) -> Value {
    eventually(&format!("{order_ref}'s intent {state}"), WAIT, || async {
        let all = intents(env, order_ref).await;
        assert!(all.len() <= 1, "one intent per owed payment: {all:?}");
        all.into_iter().find(|i| i["state"] == state)
    })
    .await
}

/// Waits until the refunder completed `more` passes after now.
pub async fn wait_passes(worker: &str, more: f64) {
    let from = refund_passes(worker, "completed").await;
    eventually("refunder passes", WAIT, || async {
        (refund_passes(worker, "completed").await >= from + more).then_some(())
    })
    .await;
}

/// The flag of every captured payment of the order.
pub async fn flags(env: &TestEnv, order_ref: &str) -> Vec<(String, Option<String>)> {
    sqlx::query_as(
        "SELECT p.payment_id, p.flag FROM payments p JOIN orders o ON o.id = p.order_id
         WHERE o.order_ref = $1 AND p.status = 'captured' ORDER BY p.payment_id",
    )
    .bind(order_ref)
    .fetch_all(&env.pool)
    .await
    .expect("flags")
}

/// The refund emails of the order, once the mailer sent them all.
pub async fn refund_emails(env: &TestEnv, order_ref: &str) -> usize {
    emails(&env.pool, order_ref)
        .await
        .iter()
        .filter(|(kind, _)| kind == "refund")
        .count()
}

/// What a user checks after the loop closed: the gateway made one refund,
/// of the second payment only; the books show it refunded (flag), the
/// intent settled, one refund email.
pub async fn refunded_once(env: &TestEnv, api: &GatewayApi, paid: &Paid, order_ref: &str) {
    let intent = wait_intent(env, order_ref, "settled").await;
    assert_eq!(intent["payment_id"], paid.second.as_str(), "{intent}");
    assert_eq!(intent["reason"], "duplicate_capture");
    assert_eq!(
        api.refunds_made(&paid.second),
        1,
        "{:?}",
        api.refund_posts()
    );
    assert_eq!(api.refunds_made(&paid.first), 0);
    assert_eq!(
        flags(env, order_ref).await,
        [
            (paid.first.clone(), None),
            (paid.second.clone(), Some("refunded".to_owned()))
        ]
    );
    eventually("one refund email", WAIT, || async {
        (refund_emails(env, order_ref).await == 1).then_some(())
    })
    .await;
}
