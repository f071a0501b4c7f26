//! The ledger's three roads — a delivery, an order the shop creates with
//! the webhooks that waited for it, a cancellation — take the same facts to
//! the same order events, counted once each, every one joined to the trace
//! of the input that caused it (docs/ledger.md, One entry). One test per
//! pair of roads: the same facts arrive by each road in turn, in two
//! databases, and the two books of order events are compared. In process:
//! real Postgres, the pipeline's one transaction path, no broker, no sleeps.
//!
//! The order holds one unit of a product with none in stock, so paying it
//! oversells: `order.oversold` is part of every comparison, the cancelled
//! order's too (its rule: docs/ledger.md, Order events).

use std::collections::BTreeMap;
use std::sync::OnceLock;

use metrics_exporter_prometheus::{PrometheusBuilder, PrometheusHandle};
use oncehook_common::config::Pooler;
use oncehook_common::store::Pooled;
use oncehook_e2e::in_process::envelope;
use oncehook_e2e::{TestEnv, shop};
use oncehook_gateways::Gateway;
use oncehook_ledger::store::shop::{ShopItem, ShopOrder};
use oncehook_ledger::{Cancel, Create, Creation, Ledger};
use oncehook_pipeline as pipeline;
use sqlx::{PgPool, Row};
use tokio::sync::Mutex;

const ORDER: &str = "road_1";
/// The delivery's trace, as ingest would have started it.
const DELIVERY_TRACE: &str = "00-11111111111111111111111111111111-1111111111111111-01";
/// The shop's cancel request's trace.
const CANCEL_TRACE: &str = "00-22222222222222222222222222222222-2222222222222222-01";

/// The process-wide counters, read before and after each road.
fn recorder() -> &'static PrometheusHandle {
    static HANDLE: OnceLock<PrometheusHandle> = OnceLock::new();
    HANDLE.get_or_init(|| {
        PrometheusBuilder::new()
            .install_recorder()
            .expect("the test binary's metrics recorder")
    })
}

/// The counters are process-wide: one road at a time.
static ONE_AT_A_TIME: Mutex<()> = Mutex::const_new(());

/// `oncehook_order_events_written_total` by type.
fn written() -> BTreeMap<String, u64> {
    recorder()
        .render()
        .lines()
        .filter_map(|l| l.strip_prefix("oncehook_order_events_written_total{type=\""))
        .filter_map(|l| {
            let (kind, rest) = l.split_once("\"}")?;
            Some((kind.to_owned(), rest.trim().parse().ok()?))
        })
        .collect()
}

/// One step of a road: what arrives.
#[derive(Debug, Clone, Copy)]
enum Step {
    /// The shop creates the order (with whatever waited for it).
    Create,
    /// The gateway's capture is delivered.
    Capture,
    /// The shop cancels the order.
    Cancel,
}

/// What a road left: every order event as `(id, type) → trace`, and how
/// many of each type the counter counted.
#[derive(Debug, PartialEq, Eq)]
struct Told {
    events: BTreeMap<(String, String), Option<String>>,
    counted: BTreeMap<String, u64>,
}

/// Takes `steps` in a database of their own; checks that what each step
/// wrote joins that step's trace, and returns what was told.
async fn road(steps: &[Step]) -> Told {
    let _one = ONE_AT_A_TIME.lock().await;
    let env = TestEnv::new().await;
    shop::product(&env.pool, "road_sku", 0).await;
    let before = written();
    let mut events = BTreeMap::new();
    for step in steps {
        let trace = match step {
            Step::Create => create(&env.pool).await,
            Step::Capture => capture(&env).await,
            Step::Cancel => cancel(&env.pool).await,
        };
        for (key, tp) in order_events(&env.pool).await {
            if let Some(earlier) = events.get(&key) {
                assert_eq!(earlier, &tp, "{key:?} was written once");
                continue;
            }
            assert_eq!(
                tp.as_deref(),
                trace,
                "{key:?}, written by {step:?}, joins the trace of the input that caused it"
            );
            events.insert(key, tp);
        }
    }
    let after = written();
    let counted: BTreeMap<String, u64> = after
        .into_iter()
        .map(|(kind, n)| {
            let was = before.get(&kind).copied().unwrap_or(0);
            (kind, n - was)
        })
        .filter(|(_, n)| *n > 0)
        .collect();
    let mut by_type: BTreeMap<String, u64> = BTreeMap::new();
    for (_, kind) in events.keys() {
        *by_type.entry(kind.clone()).or_default() += 1;
    }
    assert_eq!(
        counted, by_type,
        "each order event is counted once, when written"
    );
    Told { events, counted }
}

/// The shop creates the order as `POST /v1/orders` does: its references
/// locked, inserted, and the events that waited for it applied, in one
/// transaction. The trace of what it applies: the waiting delivery's.
async fn create(pool: &PgPool) -> Option<&'static str> {
    let order = ShopOrder {
        order_ref: ORDER.into(),
        customer_email: "road@example.com".into(),
        currency: "INR".into(),
        amount_minor: 50_000,
        items: vec![ShopItem {
            sku: "road_sku".into(),
            qty: 1,
            unit_minor: Some(50_000),
        }],
        gateway_refs: Vec::new(),
        metadata: serde_json::json!({}),
    };
    let mut tx = pool.begin().await.expect("begin");
    let created = Ledger::default()
        .apply(&mut tx, Create { order: &order })
        .await
        .expect("created");
    assert!(matches!(created, Creation::Created { .. }), "{created:?}");
    tx.commit().await.expect("commit");
    Some(DELIVERY_TRACE)
}

/// The capture, delivered with its trace through the pipeline's one
/// transaction path.
async fn capture(env: &TestEnv) -> Option<&'static str> {
    let signed = env.captured(ORDER, "pay_road", "evt_road");
    let env_bytes = envelope("razorpay", Gateway::Razorpay, &signed);
    let mut delivery = pipeline::decode(&env_bytes.to_bytes(), &env_bytes.message_id())
        .expect("a readable envelope");
    delivery.trace_parent = Some(DELIVERY_TRACE.to_owned());
    let pool = Pooled::new(env.pool.clone(), Pooler::None);
    pipeline::commit(&pool, &Ledger::default(), &[&delivery])
        .await
        .expect("committed");
    Some(DELIVERY_TRACE)
}

/// The shop cancels the order, from a request with its own trace.
async fn cancel(pool: &PgPool) -> Option<&'static str> {
    let mut tx = pool.begin().await.expect("begin");
    let cancel = Cancel {
        order_ref: ORDER,
        by: "test",
        reason: "customer left",
        trace_parent: Some(CANCEL_TRACE),
    };
    Ledger::default()
        .apply(&mut tx, cancel)
        .await
        .expect("cancelled");
    tx.commit().await.expect("commit");
    Some(CANCEL_TRACE)
}

/// The order's events: `(id, type) → trace`.
async fn order_events(pool: &PgPool) -> BTreeMap<(String, String), Option<String>> {
    sqlx::query(
        "SELECT e.id, e.type, e.trace_parent FROM order_events e JOIN orders o ON o.id = e.order_id WHERE o.order_ref = $1",
    )
    .bind(ORDER)
    .fetch_all(pool)
    .await
    .expect("order events")
    .into_iter()
    .map(|r| ((r.get("id"), r.get("type")), r.get("trace_parent")))
    .collect()
}

/// The types told, sorted.
fn types(told: &Told) -> Vec<&str> {
    let mut types: Vec<&str> = told.events.keys().map(|(_, kind)| kind.as_str()).collect();
    types.sort_unstable();
    types
}

#[tokio::test]
async fn a_delivery_and_an_order_created_after_it_tell_the_same() {
    let delivered = road(&[Step::Create, Step::Capture]).await;
    let waited = road(&[Step::Capture, Step::Create]).await;
    assert_eq!(types(&delivered), ["order.oversold", "order.paid"]);
    assert_eq!(delivered, waited);
}

#[tokio::test]
async fn a_delivery_before_or_after_a_cancellation_tells_the_same() {
    let paid_first = road(&[Step::Create, Step::Capture, Step::Cancel]).await;
    let cancelled_first = road(&[Step::Create, Step::Cancel, Step::Capture]).await;
    assert_eq!(
        types(&paid_first),
        [
            "order.cancelled",
            "order.needs_refund",
            "order.oversold",
            "order.paid"
        ]
    );
    // The same events, counted the same; each joined to the trace of the
    // input that wrote it (checked along each road).
    assert_eq!(
        paid_first.events.keys().collect::<Vec<_>>(),
        cancelled_first.events.keys().collect::<Vec<_>>()
    );
    assert_eq!(paid_first.counted, cancelled_first.counted);
}

#[tokio::test]
async fn an_order_created_with_what_waited_and_a_cancellation_tell_the_same() {
    let waited_then_cancelled = road(&[Step::Capture, Step::Create, Step::Cancel]).await;
    let cancelled_then_paid = road(&[Step::Create, Step::Cancel, Step::Capture]).await;
    assert_eq!(
        waited_then_cancelled.events.keys().collect::<Vec<_>>(),
        cancelled_then_paid.events.keys().collect::<Vec<_>>()
    );
    assert_eq!(waited_then_cancelled.counted, cancelled_then_paid.counted);
    assert_eq!(types(&waited_then_cancelled).len(), 4);
}
