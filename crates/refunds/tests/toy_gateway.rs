//! The refund half of docs/adding-a-gateway.md, proved: the toy gateway —
//! one folder of the gateways crate (`toy/refund.rs`) and its registry
//! line, nothing in this crate — is refunded by the real refunder
//! ([`Refunder::pass`]) over real HTTP, against the end-to-end suite's
//! gateway stand-in (`tests/support/refund_api_toy.rs`), on a database of
//! the test's own (`TestEnv`: created, migrated and dropped as the
//! end-to-end tests' are; PostgreSQL on 127.0.0.1:5432).
//!
//! The intent is written `approved`, as the ledger mints it and an operator
//! approves it, so the pass only sends. The stand-in answers a refund
//! `done`, so the refunder publishes its fact as it does in production:
//! to RabbitMQ on 127.0.0.1:5672 (guest/guest, the test's own prefix,
//! deleted with it), where the test counts it on the events queue.

use std::collections::HashMap;

use oncehook_common::Config;
use oncehook_common::shutdown::Shutdown;
use oncehook_common::store::Pooled;
use oncehook_e2e::broker;
use oncehook_e2e::gateway_api::{Fault, GatewayApi};
use oncehook_e2e::{TestEnv, WAIT, eventually};
use oncehook_gateways::Gateway;
use oncehook_refunds::Refunder;

const SOURCE: &str = "toy-shop";
const ORDER: &str = "order_toy_7";
const PAYMENT: &str = "pay_toy_8";
const INTENT: &str = "ri_toy_0f1e2d3c4b5a6978";

/// A test's world: its database and broker prefix, the toy's stand-in, and
/// a refunder configured with one toy source pointed at it.
struct World {
    env: TestEnv,
    api: GatewayApi,
    refunder: Refunder,
}

impl World {
    async fn new() -> World {
        let env = TestEnv::new().await;
        let toy: Gateway = "toy".parse().expect("the toy gateway (feature `toy`)");
        let api = GatewayApi::start(toy).await;
        env.append_config(&format!(
            "[[source]]\nname = \"{SOURCE}\"\ngateway = \"toy\"\nsecrets = [\"toy-webhook-secret\"]\n{}",
            api.source_api_toml()
        ));
        let mut vars: HashMap<String, String> = env.envs().into_iter().collect();
        vars.insert("ONCEHOOK_REFUNDS_MODE".into(), "propose".into());
        let config = Config::from_env_map(&vars).expect("the configuration loads");
        let pool = Pooled::open(&config.database, 2).expect("the database URL");
        let refunder = Refunder::new(&config, pool).expect("a refunder");
        World { env, api, refunder }
    }

    /// The order, and its intent for the second payment, approved.
    async fn approved_intent(&self) {
        let order_id: i64 = sqlx::query_scalar(
            "INSERT INTO orders (order_ref, customer_email, amount_minor, currency)
             VALUES ($1, 'asha@example.com', 49900, 'INR') RETURNING id",
        )
        .bind(ORDER)
        .fetch_one(&self.env.pool)
        .await
        .expect("an order");
        sqlx::query(
            "INSERT INTO refund_intents (id, order_id, provider, payment_id, amount_minor,
                 currency, reason, state, source, approved_by, approved_at)
             VALUES ($1, $2, 'toy', $3, 49900, 'INR', 'duplicate_capture', 'approved', $4,
                 'operator', now())",
        )
        .bind(INTENT)
        .bind(order_id)
        .bind(PAYMENT)
        .bind(SOURCE)
        .execute(&self.env.pool)
        .await
        .expect("an approved intent");
    }

    async fn pass(&self) {
        self.refunder
            .pass(&Shutdown::new())
            .await
            .expect("a refunder pass");
    }

    /// The intent's state and the gateway's refund id it recorded.
    async fn intent(&self) -> (String, Option<String>) {
        sqlx::query_as("SELECT state, gateway_refund_id FROM refund_intents WHERE id = $1")
            .bind(INTENT)
            .fetch_one(&self.env.pool)
            .await
            .expect("the intent")
    }

    /// The refund requests the stand-in got: each one's key.
    fn keys_sent(&self) -> Vec<String> {
        self.api
            .refund_posts()
            .into_iter()
            .map(|(_, k)| k)
            .collect()
    }

    /// Waits until the events queue holds `n` messages: the refund facts
    /// the refunder published.
    async fn facts_published(&self, n: u32) {
        // A fact goes to its tenant's bulk lane (docs/tenants.md, "Fairness").
        let prefix = &self.env.prefix;
        eventually(
            &format!("{n} fact(s) in {prefix}'s events queues"),
            WAIT,
            || async { (broker::events_depth(prefix).await == Some(n)).then_some(()) },
        )
        .await;
    }
}

#[tokio::test]
async fn a_toy_refund_is_sent_once_under_the_intents_key() {
    let world = World::new().await;
    world.approved_intent().await;

    world.pass().await;
    assert_eq!(
        world.keys_sent(),
        [INTENT],
        "one request, under the intent's key"
    );
    assert_eq!(world.api.refunds_made(PAYMENT), 1);
    let made = world.api.refund_ids(PAYMENT);
    assert_eq!(
        world.intent().await,
        ("sent".to_owned(), made.first().cloned())
    );
    world.facts_published(1).await;

    // Nothing is left to send: a second pass asks the toy nothing.
    let calls = world.api.call_count();
    world.pass().await;
    assert_eq!(world.api.call_count(), calls, "{:?}", world.api.calls());
    assert_eq!(world.api.refunds_made(PAYMENT), 1);
    assert_eq!(world.intent().await.0, "sent");
    world.facts_published(1).await;
}

#[tokio::test]
async fn a_toy_refund_whose_answer_was_lost_is_found_by_the_lookup_not_made_twice() {
    let world = World::new().await;
    world.approved_intent().await;
    world.api.refund_faults(&[Fault::Lost(500)]);

    world.pass().await;
    assert_eq!(world.api.refunds_made(PAYMENT), 1, "made, its answer lost");
    assert_eq!(world.intent().await, ("sending".to_owned(), None));

    // The toy forgets the key (its retention ran out) and the retry's wait
    // runs out: only the lookup stands between the retry and a second refund.
    world.api.forget_refund_keys();
    sqlx::query("UPDATE refund_intents SET lease_until = now() WHERE id = $1")
        .bind(INTENT)
        .execute(&world.env.pool)
        .await
        .expect("the retry is due");
    world.pass().await;
    let lookup = format!("GET /v1/payments/{PAYMENT}/refunds");
    assert!(
        world.api.calls().contains(&lookup),
        "{:?}",
        world.api.calls()
    );
    assert_eq!(world.keys_sent(), [INTENT], "never sent again");
    assert_eq!(world.api.refunds_made(PAYMENT), 1);
    let made = world.api.refund_ids(PAYMENT);
    assert_eq!(
        world.intent().await,
        ("sent".to_owned(), made.first().cloned())
    );
    world.facts_published(1).await;
}
