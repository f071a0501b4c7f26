//! The recipe of docs/adding-a-gateway.md, reconciliation included: the
//! toy gateway — one folder of the gateways crate and its registry line,
//! nothing else — is configured with a `[source.api]`, asked about an order
//! over real HTTP by this crate's client (a stand-in for its API listens on
//! 127.0.0.1), and the facts it answers are the facts its webhook carries,
//! keyed as the ledger keys them.

use std::collections::HashMap;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use oncehook_common::Config;
use oncehook_gateway_api::Client;
use oncehook_gateway_api::store::DueOrder;
use oncehook_gateways::sample::{self, SampleSpec};
use oncehook_gateways::{Gateway, parse};
use oncehook_reconcile::ApiSource;
use oncehook_reconcile::limits::{self, Budget, Pace};
use oncehook_reconcile::store::FactKey;
use oncehook_reconcile::{ask, run};
use time::OffsetDateTime;
use tokio::io::{AsyncBufReadExt, AsyncWriteExt, BufReader};
use tokio::net::TcpListener;

const API_KEY: &str = "toy_live_reconcile_key";
const WEBHOOK_SECRET: &str = "toy-webhook-secret";

/// The toy API on 127.0.0.1: `GET /v1/orders/order_7/payments` answers
/// one paid and one pending payment, any other order 404, a request
/// without the key 401. Every request line and `toy-api-key` is kept.
struct ToyApi {
    base_url: String,
    seen: Arc<Mutex<Vec<Seen>>>,
}

/// A request the stand-in got: its request line and its `toy-api-key`.
type Seen = (String, Option<String>);

impl ToyApi {
    async fn start() -> ToyApi {
        let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind");
        let base_url = format!("http://{}", listener.local_addr().expect("address"));
        let seen = Arc::new(Mutex::new(Vec::new()));
        let log = seen.clone();
        tokio::spawn(async move {
            while let Ok((stream, _)) = listener.accept().await {
                let log = log.clone();
                tokio::spawn(async move {
                    let (read, mut write) = stream.into_split();
                    let mut lines = BufReader::new(read).lines();
                    let target = lines.next_line().await.ok().flatten().unwrap_or_default();
                    let mut key = None;
                    while let Ok(Some(line)) = lines.next_line().await {
                        if line.is_empty() {
                            break;
                        }
                        if let Some((name, value)) = line.split_once(':')
                            && name.eq_ignore_ascii_case("toy-api-key")
                        {
                            key = Some(value.trim().to_owned());
                        }
                    }
                    let (status, body) = answer(&target, key.as_deref());
                    log.lock().expect("log").push((target, key));
                    let head = format!(
                        "HTTP/1.1 {status} X\r\nContent-Type: application/json\r\nContent-Length: {}\r\nConnection: close\r\n\r\n",
                        body.len()
                    );
                    let _ = write.write_all(head.as_bytes()).await;
                    let _ = write.write_all(body.as_bytes()).await;
                    let _ = write.shutdown().await;
                });
            }
        });
        ToyApi { base_url, seen }
    }

    fn seen(&self) -> Vec<Seen> {
        self.seen.lock().expect("log").clone()
    }
}

/// The stand-in's answer to a request line.
fn answer(target: &str, key: Option<&str>) -> (u16, String) {
    if key != Some(API_KEY) {
        return (401, r#"{"error": "unauthorized"}"#.into());
    }
    if target.starts_with("GET /v1/orders/order_7/payments ") {
        let body = r#"{"payments": [
            {"id": "pay_7", "status": "paid", "amount": 49900, "currency": "INR", "order": "order_7"},
            {"id": "pay_8", "status": "pending", "amount": 49900, "currency": "INR", "order": "order_7"}]}"#;
        return (200, body.into());
    }
    (404, r#"{"error": "no such order"}"#.into())
}

/// The configuration file `toml` loaded with `vars`, as a binary loads it.
fn load(toml: &str, vars: &[(&str, &str)]) -> Result<Config, String> {
    static FILES: AtomicUsize = AtomicUsize::new(0);
    let path = std::env::temp_dir().join(format!(
        "oncehook-toy-gateway-{}-{}.toml",
        std::process::id(),
        FILES.fetch_add(1, Ordering::Relaxed)
    ));
    std::fs::write(&path, toml).expect("write the configuration");
    let mut env: HashMap<String, String> = vars
        .iter()
        .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
        .collect();
    env.insert("ONCEHOOK_CONFIG".into(), path.display().to_string());
    let config = Config::from_env_map(&env).map_err(|e| e.to_string());
    let _ = std::fs::remove_file(&path);
    config
}

fn source_toml(base_url: &str, api_key: &str) -> String {
    format!(
        "[[source]]\nname = \"toy-shop\"\ngateway = \"toy\"\nsecrets = [\"{WEBHOOK_SECRET}\"]\n\
         [source.api]\nbase_url = \"{base_url}\"\napi_key = \"{api_key}\"\n"
    )
}

fn due(order_ref: &str) -> DueOrder {
    DueOrder {
        id: 1,
        order_ref: order_ref.into(),
        status: "pending".into(),
        created_at: OffsetDateTime::UNIX_EPOCH,
        refs: Vec::new(),
        payments: Vec::new(),
    }
}

#[tokio::test]
async fn a_toy_payment_is_reconciled_over_http_as_the_fact_its_webhook_carries() {
    let api = ToyApi::start().await;
    let config = load(
        &source_toml(&api.base_url, "${TOY_API_KEY}"),
        &[("TOY_API_KEY", API_KEY)],
    )
    .expect("the toy source loads");
    let source = ApiSource::of(config.source("toy-shop").expect("the source"))
        .expect("the toy source has an API");
    assert_eq!(source.gateway.as_str(), "toy");
    assert!(
        !format!("{source:?}").contains(API_KEY),
        "the key is never shown"
    );

    // An order that names no gateway yet is asked by the shop's reference.
    let order = due("order_7");
    assert!(ask::asks_about(source.gateway, &order));
    let asks = ask::asks_for(source.gateway, &order);
    assert_eq!(asks.len(), 1);
    let client = Client::new(Duration::from_secs(5)).expect("a client");
    let budget = Budget::new(10);
    let mut pace = Pace::new(100);
    let answer = limits::call(&client, &source, &asks[0], &budget, &mut pace)
        .await
        .expect("the toy API answers");
    assert_eq!(answer.status, 200);
    assert_eq!(
        answer.facts.len(),
        1,
        "the pending payment records nothing yet"
    );

    // The fact found is the fact the toy's webhook for the payment carries.
    let spec = SampleSpec {
        order_ref: "order_7".into(),
        payment_id: "pay_7".into(),
        event_id: "evt_7".into(),
        amount_minor: 49_900,
        currency: "INR".into(),
        email: "asha@example.com".into(),
        timestamp: 1_764_633_600,
        merchant_key: None,
    };
    let toy: Gateway = "toy".parse().expect("the toy gateway");
    let delivery = sample::build(toy, "paid", &spec, WEBHOOK_SECRET).expect("a sample");
    let webhook = parse(toy, &delivery.headers, &delivery.body).expect("the webhook parses");
    let found = &answer.facts[0];
    assert_eq!(found.fact(), webhook.fact());
    assert_eq!(
        (
            found.order_ref.as_deref(),
            found.amount_minor,
            found.currency.as_deref()
        ),
        (Some("order_7"), Some(49_900), Some("INR"))
    );
    assert_eq!(
        run::fact_key(found),
        Some(FactKey::Attempt {
            provider: "toy".into(),
            payment_id: "pay_7".into(),
            status: "captured".into(),
        }),
        "keyed as the ledger keys the webhook's fact"
    );
    assert_eq!(run::fact_key(found), run::fact_key(&webhook));

    // An order the toy API does not know is an answer with nothing in it.
    let unknown = ask::asks_for(source.gateway, &due("order_404"));
    let answer = limits::call(&client, &source, &unknown[0], &budget, &mut pace)
        .await
        .expect("404 is an answer");
    assert_eq!((answer.status, answer.facts.len()), (404, 0));

    let seen = api.seen();
    assert_eq!(
        seen.iter().map(|(t, _)| t.as_str()).collect::<Vec<_>>(),
        [
            "GET /v1/orders/order_7/payments HTTP/1.1",
            "GET /v1/orders/order_404/payments HTTP/1.1"
        ]
    );
    assert!(seen.iter().all(|(_, key)| key.as_deref() == Some(API_KEY)));
}

#[test]
fn a_toy_source_with_a_malformed_key_refuses_to_start_naming_the_source_and_key() {
    let refused = load(&source_toml("http://127.0.0.1:9", "sk_live_1"), &[])
        .expect_err("a key that is not a toy key");
    assert!(refused.contains("toy-shop"), "{refused}");
    assert!(
        refused.contains("api.api_key does not start with toy_"),
        "{refused}"
    );
    assert!(!refused.contains("sk_live_1"), "never the value: {refused}");
}
