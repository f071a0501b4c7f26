//! A local stand-in for one gateway's API, for the reconciliation tests:
//! a real HTTP listener on 127.0.0.1 that serves the documented answers
//! (Razorpay's collections, Cashfree's bare arrays, PayU's
//! `verify_payment`, Stripe's objects and lists with `has_more`, and each
//! one's "no such id"), every object built from the gateway's documented
//! sample (`shapes`, from the files the readers are tested on), from an
//! in-memory state the test fills, checks each gateway's credentials, and
//! counts every call. Faults are queued: the next requests answer a status
//! (500, 401, …), a 429 with `Retry-After`, or only after a delay.
//!
//! Each stand-in also refunds, as its gateway does (`refund_api`): a refund
//! made is listed where reconciliation reads refunds, each gateway's own
//! idempotency is checked, and a refund can be made while its answer is
//! lost ([`Fault::Lost`], [`Fault::Dropped`], [`Fault::Slow`]).
//!
//! One instance per gateway (Razorpay and Stripe both live under `/v1`).

use std::collections::{HashMap, VecDeque};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use base64::Engine as _;
use oncehook_gateways::Gateway;
use serde_json::{Value, json};
use sha2::{Digest, Sha512};
use tokio::io::{AsyncBufReadExt, AsyncReadExt, AsyncWriteExt, BufReader};
use tokio::net::TcpListener;
use tokio::task::JoinHandle;

/// The credentials the stand-ins accept (and the test config gives).
pub struct ApiCredentials;

impl ApiCredentials {
    pub const RAZORPAY_KEY_ID: &'static str = "rzp_test_recon_key";
    pub const RAZORPAY_KEY_SECRET: &'static str = "rzp_test_recon_secret";
    pub const CASHFREE_CLIENT_ID: &'static str = "cf_test_client";
    pub const CASHFREE_CLIENT_SECRET: &'static str = "cf_test_client_secret";
    pub const STRIPE_API_KEY: &'static str = "sk_test_recon_key";
    /// The toy gateway's (`oncehook-gateways`' `toy` feature).
    pub const TOY_API_KEY: &'static str = "toy_test_recon_key";
}

/// Reconciliation every second, for orders older than a second, with a
/// short call timeout and no pacing to speak of (for every binary started
/// afterwards).
pub fn reconcile_every_second(env: &mut crate::TestEnv) {
    env.set_env("ONCEHOOK_RECONCILE_INTERVAL", "1s");
    env.set_env("ONCEHOOK_RECONCILE_AFTER", "1s");
    env.set_env("ONCEHOOK_RECONCILE_TIMEOUT", "1s");
    env.set_env("ONCEHOOK_RECONCILE_CALLS_PER_SECOND", "100");
}

/// Makes every order a minute old: inside the `after` window from the
/// first pass on.
pub async fn backdate_orders(env: &crate::TestEnv) {
    sqlx::query("UPDATE orders SET created_at = now() - interval '1 minute'")
        .execute(&env.pool)
        .await
        .expect("backdate");
}

/// Registers `reference` as the order's reference at `gateway`, as
/// `POST /v1/orders` `gateway_refs` does.
pub async fn register_gateway_ref(
    env: &crate::TestEnv,
    order_ref: &str,
    gateway: &str,
    reference: &str,
) {
    sqlx::query(
        "INSERT INTO order_gateway_refs (gateway, gateway_ref, order_id)
         SELECT $2, $3, id FROM orders WHERE order_ref = $1",
    )
    .bind(order_ref)
    .bind(gateway)
    .bind(reference)
    .execute(&env.pool)
    .await
    .expect("gateway ref");
}

/// Reconciliation passes of `outcome` (`completed`, `skipped`, `failed`)
/// on the `/metrics` of the worker at `base`; 0 while it does not answer.
pub async fn reconcile_passes(base: &str, outcome: &str) -> f64 {
    crate::metrics::text(base).await.map_or(0.0, |t| {
        crate::metrics::series(&t, "oncehook_reconcile_runs_total", &[("outcome", outcome)])
    })
}

/// The refunder's passes of `outcome` (`completed`, `failed`) on the
/// `/metrics` of the worker at `base`; 0 while it does not answer.
pub async fn refund_passes(base: &str, outcome: &str) -> f64 {
    crate::metrics::text(base).await.map_or(0.0, |t| {
        crate::metrics::series(&t, "oncehook_refund_passes_total", &[("outcome", outcome)])
    })
}

/// Waits until the worker at `base` has made at least `n` passes of
/// `outcome`.
pub async fn wait_reconcile_passes(base: &str, outcome: &str, n: f64) {
    crate::eventually(&format!("{n} {outcome} pass(es)"), crate::WAIT, || async {
        (reconcile_passes(base, outcome).await >= n).then_some(())
    })
    .await;
}

/// Waits until the worker at `base` has made `more` passes of `outcome`
/// beyond those made so far.
pub async fn wait_more_reconcile_passes(base: &str, outcome: &str, more: f64) {
    let before = reconcile_passes(base, outcome).await;
    wait_reconcile_passes(base, outcome, before + more).await;
}

#[path = "refund_api.rs"]
pub mod refund_api;

/// What the next request gets instead of its answer.
#[derive(Debug, Clone)]
pub enum Fault {
    /// This status and a small error body; the gateway did nothing (no
    /// refund made).
    Status(u16),
    /// 429 with `Retry-After: secs`; nothing done.
    RateLimited(u64),
    /// The real answer, after this long (longer than the client's timeout:
    /// a timeout). A refund asked is made at once: its answer is what waits.
    Slow(Duration),
    /// The real answer once the test opens the gate ([`Gate::open`]); as
    /// with [`Fault::Slow`], a refund asked is made at once.
    Gated(Gate),
    /// This status and a small error body once the test opens the gate
    /// (a gateway failing slowly); the gateway did nothing.
    HeldStatus(Gate, u16),
    /// The request takes effect (a refund is made) and its answer is lost:
    /// this status and a small error body instead.
    Lost(u16),
    /// The request takes effect (a refund is made) and the connection is
    /// closed without an answer.
    Dropped,
}

/// Holds an answer back until the test opens it.
#[derive(Debug, Clone)]
pub struct Gate(std::sync::Arc<tokio::sync::watch::Sender<bool>>);

impl Default for Gate {
    fn default() -> Self {
        Gate(std::sync::Arc::new(tokio::sync::watch::channel(false).0))
    }
}

impl Gate {
    /// Lets every answer held at this gate go, now and later.
    pub fn open(&self) {
        self.0.send_replace(true);
    }

    async fn passed(&self) {
        let mut open = self.0.subscribe();
        // An error means the sender is gone, which cannot be while `self` lives.
        let _ = open.wait_for(|open| *open).await;
    }
}

#[derive(Default)]
struct State {
    /// Razorpay and Cashfree lists and Stripe refund lists, by path
    /// (`/v1/orders/order_1/payments`, `/v1/refunds?payment_intent=pi_1`).
    lists: HashMap<String, Vec<Value>>,
    /// Stripe intents by path (`/v1/payment_intents/pi_1`).
    objects: HashMap<String, Value>,
    /// PayU transactions by txnid.
    payu: HashMap<String, Value>,
    /// Stripe's events that were not delivered.
    undelivered: Vec<Value>,
    faults: VecDeque<Fault>,
    /// Faults for the next refund requests only (taken before `faults`).
    refund_faults: VecDeque<Fault>,
    /// What the refund endpoints hold.
    refunds: refund_api::Refunds,
    refuse_credentials: bool,
    /// Stripe's page size (it caps `limit`).
    page_size: usize,
    calls: Vec<String>,
}

/// A running stand-in.
pub struct GatewayApi {
    pub gateway: Gateway,
    pub base: String,
    state: Arc<Mutex<State>>,
    task: JoinHandle<()>,
}

impl Drop for GatewayApi {
    fn drop(&mut self) {
        self.task.abort();
    }
}

impl GatewayApi {
    pub async fn start(gateway: Gateway) -> GatewayApi {
        let listener = TcpListener::bind(("127.0.0.1", 0))
            .await
            .expect("bind the gateway API stand-in");
        let base = format!(
            "http://127.0.0.1:{}",
            listener.local_addr().expect("local addr").port()
        );
        let state = Arc::new(Mutex::new(State {
            page_size: 100,
            ..State::default()
        }));
        let shared = state.clone();
        let task = tokio::spawn(async move {
            while let Ok((stream, _)) = listener.accept().await {
                let state = shared.clone();
                tokio::spawn(async move {
                    let _ = serve(stream, gateway, state).await;
                });
            }
        });
        GatewayApi {
            gateway,
            base,
            state,
            task,
        }
    }

    fn with<T>(&self, f: impl FnOnce(&mut State) -> T) -> T {
        f(&mut self.state.lock().expect("state"))
    }

    /// Adds an item to the list answered at `path`.
    pub fn add(&self, path: &str, item: Value) {
        self.with(|s| s.lists.entry(path.to_owned()).or_default().push(item));
    }

    /// Sets the object answered at `path`.
    pub fn set(&self, path: &str, object: Value) {
        self.with(|s| s.objects.insert(path.to_owned(), object));
    }

    /// Adds a Razorpay order whose `receipt` is `receipt`: listed by
    /// `GET /v1/orders?receipt=`, and known (its payments, none yet) by id.
    pub fn razorpay_order(&self, id: &str, receipt: &str, amount: i64) {
        self.add(
            &format!("/v1/orders?receipt={receipt}"),
            shapes::razorpay_order(id, receipt, amount),
        );
        self.with(|s| {
            s.lists
                .entry(format!("/v1/orders/{id}/payments"))
                .or_default();
        });
    }

    /// Sets a PayU transaction's details.
    pub fn payu_transaction(&self, txnid: &str, details: Value) {
        self.with(|s| s.payu.insert(txnid.to_owned(), details));
    }

    /// Adds a Stripe event that Stripe failed to deliver.
    pub fn undelivered(&self, event: Value) {
        self.with(|s| s.undelivered.push(event));
    }

    /// Stripe lists answer at most `n` objects a page.
    pub fn page_size(&self, n: usize) {
        self.with(|s| s.page_size = n.max(1));
    }

    /// The next requests get these faults, one each, in order.
    pub fn faults(&self, faults: &[Fault]) {
        self.with(|s| s.faults.extend(faults.iter().cloned()));
    }

    /// Whether every request is refused as unauthenticated (a revoked key).
    pub fn refuse_credentials(&self, refuse: bool) {
        self.with(|s| s.refuse_credentials = refuse);
    }

    /// Every request so far, `METHOD path?query`.
    pub fn calls(&self) -> Vec<String> {
        self.with(|s| s.calls.clone())
    }

    pub fn call_count(&self) -> usize {
        self.with(|s| s.calls.len())
    }

    /// Waits until the stand-in has been called more than `before` times
    /// (a pass is asking it).
    pub async fn wait_calls_over(&self, before: usize) {
        crate::eventually("a pass asking the gateway", crate::WAIT, || async {
            (self.call_count() > before).then_some(())
        })
        .await;
    }

    /// The `[source.api]` table pointing a source of this gateway here.
    pub fn source_api_toml(&self) -> String {
        let creds = match self.gateway {
            Gateway::Razorpay => format!(
                "key_id = \"{}\"\nkey_secret = \"{}\"\n",
                ApiCredentials::RAZORPAY_KEY_ID,
                ApiCredentials::RAZORPAY_KEY_SECRET
            ),
            Gateway::Cashfree => format!(
                "client_id = \"{}\"\nclient_secret = \"{}\"\n",
                ApiCredentials::CASHFREE_CLIENT_ID,
                ApiCredentials::CASHFREE_CLIENT_SECRET
            ),
            Gateway::Stripe => format!("api_key = \"{}\"\n", ApiCredentials::STRIPE_API_KEY),
            g if refund_api::toy::is_toy(g) => {
                format!("api_key = \"{}\"\n", ApiCredentials::TOY_API_KEY)
            }
            _ => String::new(),
        };
        format!("[source.api]\nbase_url = \"{}\"\n{creds}", self.base)
    }
}

/// A parsed request.
struct Request {
    method: String,
    target: String,
    headers: HashMap<String, String>,
    body: Vec<u8>,
}

async fn serve(
    stream: tokio::net::TcpStream,
    gateway: Gateway,
    state: Arc<Mutex<State>>,
) -> std::io::Result<()> {
    let (read, mut write) = stream.into_split();
    let mut reader = BufReader::new(read);
    let mut line = String::new();
    reader.read_line(&mut line).await?;
    let mut parts = line.split_whitespace();
    let (method, target) = (
        parts.next().unwrap_or("").to_owned(),
        parts.next().unwrap_or("").to_owned(),
    );
    let mut headers = HashMap::new();
    loop {
        let mut h = String::new();
        if reader.read_line(&mut h).await? == 0 || h.trim().is_empty() {
            break;
        }
        if let Some((k, v)) = h.split_once(':') {
            headers.insert(k.trim().to_ascii_lowercase(), v.trim().to_owned());
        }
    }
    let len: usize = headers
        .get("content-length")
        .and_then(|v| v.parse().ok())
        .unwrap_or(0);
    let mut body = vec![0; len.min(1 << 20)];
    reader.read_exact(&mut body).await?;
    let request = Request {
        method,
        target,
        headers,
        body,
    };
    let (fault, answer) = {
        let mut s = state.lock().expect("state");
        s.calls
            .push(format!("{} {}", request.method, request.target));
        let fault = if refund_api::is_create(gateway, &request) {
            s.refunds
                .bodies
                .push(String::from_utf8_lossy(&request.body).into_owned());
            let refund_fault = s.refund_faults.pop_front();
            refund_fault.or_else(|| s.faults.pop_front())
        } else {
            s.faults.pop_front()
        };
        let answer = if s.refuse_credentials || !authenticated(gateway, &request) {
            (
                401,
                json!({"error": {"code": "BAD_REQUEST_ERROR", "description": "Authentication failed"}}),
                None,
            )
        } else if matches!(
            fault,
            Some(Fault::Status(_) | Fault::HeldStatus(..) | Fault::RateLimited(_))
        ) {
            // The gateway failed before doing anything: the fault answers.
            (500, json!({}), None)
        } else {
            let (status, body) = answer(gateway, &request, &mut s);
            (status, body, None)
        };
        (fault, answer)
    };
    let (mut status, mut body, mut retry_after) = answer;
    match fault {
        Some(Fault::Status(code) | Fault::Lost(code)) => {
            status = code;
            body = json!({"error": {"code": "SERVER_ERROR", "description": "stand-in fault"}});
        }
        Some(Fault::HeldStatus(gate, code)) => {
            gate.passed().await;
            status = code;
            body = json!({"error": {"code": "SERVER_ERROR", "description": "stand-in fault"}});
        }
        // Done, and not a word back.
        Some(Fault::Dropped) => return Ok(()),
        Some(Fault::RateLimited(secs)) => {
            status = 429;
            body = json!({"error": {"code": "TOO_MANY_REQUESTS"}});
            retry_after = Some(secs);
        }
        Some(Fault::Slow(pause)) => tokio::time::sleep(pause).await,
        Some(Fault::Gated(gate)) => gate.passed().await,
        None => {}
    }
    let text = body.to_string();
    let extra = retry_after
        .map(|s| format!("Retry-After: {s}\r\n"))
        .unwrap_or_default();
    let head = format!(
        "HTTP/1.1 {status} X\r\nContent-Type: application/json\r\nContent-Length: {}\r\n{extra}Connection: close\r\n\r\n",
        text.len()
    );
    write.write_all(head.as_bytes()).await?;
    write.write_all(text.as_bytes()).await?;
    write.shutdown().await
}

/// Whether the request carries the gateway's credentials.
fn authenticated(gateway: Gateway, r: &Request) -> bool {
    let header = |k: &str| r.headers.get(k).map(String::as_str);
    match gateway {
        Gateway::Razorpay => {
            let expected = base64::engine::general_purpose::STANDARD.encode(format!(
                "{}:{}",
                ApiCredentials::RAZORPAY_KEY_ID,
                ApiCredentials::RAZORPAY_KEY_SECRET
            ));
            header("authorization") == Some(&format!("Basic {expected}"))
        }
        Gateway::Cashfree => {
            header("x-client-id") == Some(ApiCredentials::CASHFREE_CLIENT_ID)
                && header("x-client-secret") == Some(ApiCredentials::CASHFREE_CLIENT_SECRET)
                && header("x-api-version").is_some()
        }
        Gateway::Stripe => {
            header("authorization") == Some(&format!("Bearer {}", ApiCredentials::STRIPE_API_KEY))
        }
        g if refund_api::toy::is_toy(g) => {
            header("toy-api-key") == Some(ApiCredentials::TOY_API_KEY)
        }
        // PayU signs the form; checked with the answer.
        _ => true,
    }
}

/// The answer to an authenticated request: `(status, body)`.
fn answer(gateway: Gateway, r: &Request, s: &mut State) -> (u16, Value) {
    if let Some(answer) = refund_api::answer(gateway, r, s) {
        return answer;
    }
    let (path, query) = r.target.split_once('?').unwrap_or((&r.target, ""));
    let params: HashMap<String, String> = url::form_urlencoded::parse(query.as_bytes())
        .into_owned()
        .collect();
    match gateway {
        Gateway::Razorpay => razorpay(path, &params, s),
        Gateway::Cashfree => cashfree(path, s),
        Gateway::Payu => payu(r, s),
        Gateway::Stripe => stripe(path, &params, s),
        _ => (404, json!({})),
    }
}

/// Cashfree's answer: the order's payments or refunds (none yet: an empty
/// list), or its documented 404 for an order it does not know (one with
/// neither list).
fn cashfree(path: &str, s: &State) -> (u16, Value) {
    if let Some(items) = s.lists.get(path) {
        return (200, Value::Array(items.clone()));
    }
    let order = path
        .strip_suffix("/payments")
        .or_else(|| path.strip_suffix("/refunds"))
        .unwrap_or(path);
    let known = ["/payments", "/refunds"]
        .iter()
        .any(|tail| s.lists.contains_key(&format!("{order}{tail}")));
    if known {
        (200, json!([]))
    } else {
        (404, shapes::cashfree_not_found())
    }
}

/// Razorpay's answer: a collection, or for an id it does not know its
/// documented `400 BAD_REQUEST_ERROR` "The id provided does not exist".
fn razorpay(path: &str, params: &HashMap<String, String>, s: &State) -> (u16, Value) {
    let collection =
        |items: &[Value]| json!({"entity": "collection", "count": items.len(), "items": items});
    if path == "/v1/orders" {
        let Some(receipt) = params.get("receipt") else {
            return (
                400,
                json!({"error": {"code": "BAD_REQUEST_ERROR", "description": "this stand-in lists orders by receipt only"}}),
            );
        };
        let key = format!("/v1/orders?receipt={receipt}");
        return (
            200,
            collection(s.lists.get(&key).map_or(&[][..], Vec::as_slice)),
        );
    }
    // Razorpay's paging: `count` (at most 100) from `skip`; without a
    // `count` the stand-in lists everything (the reconciler asks so).
    let number = |k: &str| params.get(k).and_then(|v| v.parse::<usize>().ok());
    let page = |items: &[Value]| -> Vec<Value> {
        let skip = number("skip").unwrap_or(0).min(items.len());
        let count = number("count").map_or(items.len(), |c| c.min(100));
        items[skip..].iter().take(count).cloned().collect()
    };
    match s.lists.get(path) {
        Some(items) => (200, collection(&page(items))),
        None if path.starts_with("/v1/payments/") => (200, collection(&[])),
        None => (400, shapes::razorpay_unknown_id()),
    }
}

fn payu(r: &Request, s: &State) -> (u16, Value) {
    let form: HashMap<String, String> = url::form_urlencoded::parse(&r.body).into_owned().collect();
    let get = |k: &str| form.get(k).map(String::as_str).unwrap_or("");
    let expected = hex::encode(Sha512::digest(
        format!(
            "{}|{}|{}|{}",
            get("key"),
            get("command"),
            get("var1"),
            crate::Secrets::PAYU
        )
        .as_bytes(),
    ));
    if get("command") != "verify_payment" || get("hash") != expected {
        return (200, json!({"status": 0, "msg": "Invalid Hash."}));
    }
    let details: serde_json::Map<String, Value> = get("var1")
        .split('|')
        .map(|t| {
            let d = s
                .payu
                .get(t)
                .cloned()
                .unwrap_or_else(shapes::payu_not_found);
            (t.to_owned(), d)
        })
        .collect();
    (
        200,
        json!({"status": 1, "msg": format!("{} out of {} Transactions Fetched Successfully", details.len(), details.len()), "transaction_details": details}),
    )
}

fn stripe(path: &str, params: &HashMap<String, String>, s: &State) -> (u16, Value) {
    let page = |items: Vec<Value>| -> (u16, Value) {
        let start = params
            .get("starting_after")
            .and_then(|a| items.iter().position(|i| i["id"] == a.as_str()))
            .map_or(0, |p| p + 1);
        let limit = params
            .get("limit")
            .and_then(|l| l.parse().ok())
            .unwrap_or(10usize)
            .min(s.page_size);
        let rest = &items[start.min(items.len())..];
        let data: Vec<Value> = rest.iter().take(limit).cloned().collect();
        (
            200,
            json!({"object": "list", "url": path, "has_more": rest.len() > limit, "data": data}),
        )
    };
    match path {
        "/v1/events" => {
            if params.get("delivery_success").map(String::as_str) != Some("false") {
                return (
                    400,
                    json!({"error": {"message": "this stand-in lists undelivered events only"}}),
                );
            }
            let since: i64 = params
                .get("created[gte]")
                .and_then(|v| v.parse().ok())
                .unwrap_or(0);
            page(
                s.undelivered
                    .iter()
                    .filter(|e| e["created"].as_i64().unwrap_or(0) >= since)
                    .cloned()
                    .collect(),
            )
        }
        "/v1/refunds" => {
            let key = format!(
                "/v1/refunds?payment_intent={}",
                params
                    .get("payment_intent")
                    .map(String::as_str)
                    .unwrap_or("")
            );
            page(s.lists.get(&key).cloned().unwrap_or_default())
        }
        _ => match s.objects.get(path) {
            Some(o) => (200, o.clone()),
            None => (404, shapes::stripe_resource_missing("payment_intent")),
        },
    }
}

/// The gateways' documented objects (`oncehook_gateways::documented`, the
/// same files the readers are tested on), with a test's values put into
/// fields the documented object has: a field the documentation does not
/// show cannot be served.
pub mod shapes {
    use oncehook_gateways::documented::{body, cashfree, payu, razorpay, stripe};
    use serde_json::{Value, json};
    use sha2::Digest as _;

    /// The documented JSON of `file`.
    pub fn documented(file: &'static str) -> Value {
        serde_json::from_str(body(file)).expect("a documented answer is JSON")
    }

    /// `template` with each of `fields` set; every field must be one the
    /// documented object has.
    pub(in crate::gateway_api) fn filled(mut template: Value, fields: &[(&str, Value)]) -> Value {
        for (key, value) in fields {
            let slot = template
                .get_mut(*key)
                .unwrap_or_else(|| panic!("the documented object has no field {key:?}"));
            *slot = value.clone();
        }
        template
    }

    /// The `i`th item of the documented list `file` (at `items`, `data` or
    /// the top).
    fn item(file: &'static str, list: Option<&str>, i: usize) -> Value {
        let v = documented(file);
        let items = match list {
            Some(k) => &v[k],
            None => &v,
        };
        items[i].clone()
    }

    /// A Razorpay payment entity (the documented captured payment).
    pub fn razorpay_payment(
        id: &str,
        order_id: &str,
        status: &str,
        amount: i64,
        email: &str,
    ) -> Value {
        filled(
            item(razorpay::ORDER_PAYMENTS, Some("items"), 1),
            &[
                ("id", json!(id)),
                ("order_id", json!(order_id)),
                ("status", json!(status)),
                ("amount", json!(amount)),
                (
                    "captured",
                    json!(status == "captured" || status == "refunded"),
                ),
                ("email", json!(email)),
            ],
        )
    }

    /// A Razorpay order entity, paid, with the shop's reference as its receipt.
    pub fn razorpay_order(id: &str, receipt: &str, amount: i64) -> Value {
        filled(
            item(razorpay::ORDERS, Some("items"), 0),
            &[
                ("id", json!(id)),
                ("receipt", json!(receipt)),
                ("amount", json!(amount)),
                ("amount_paid", json!(amount)),
                ("amount_due", json!(0)),
                ("status", json!("paid")),
                ("attempts", json!(1)),
            ],
        )
    }

    /// A Razorpay refund entity, processed.
    pub fn razorpay_refund(id: &str, payment_id: &str, amount: i64) -> Value {
        filled(
            item(razorpay::PAYMENT_REFUNDS, Some("items"), 0),
            &[
                ("id", json!(id)),
                ("payment_id", json!(payment_id)),
                ("amount", json!(amount)),
            ],
        )
    }

    /// Razorpay's answer for an id it does not know (with status 400).
    pub fn razorpay_unknown_id() -> Value {
        documented(razorpay::ID_DOES_NOT_EXIST)
    }

    /// A Cashfree payment; `amount` in rupees.
    pub fn cashfree_payment(
        cf_payment_id: i64,
        order_id: &str,
        status: &str,
        amount: f64,
    ) -> Value {
        filled(
            item(cashfree::ORDER_PAYMENTS, None, 0),
            &[
                ("cf_payment_id", json!(cf_payment_id)),
                ("order_id", json!(order_id)),
                ("payment_status", json!(status)),
                ("is_captured", json!(status == "SUCCESS")),
                ("order_amount", json!(amount)),
                ("payment_amount", json!(amount)),
            ],
        )
    }

    /// A Cashfree refund, successful; `amount` in rupees.
    pub fn cashfree_refund(
        cf_payment_id: i64,
        refund_id: &str,
        order_id: &str,
        amount: f64,
    ) -> Value {
        filled(
            item(cashfree::ORDER_REFUNDS, None, 0),
            &[
                ("cf_payment_id", json!(cf_payment_id)),
                ("cf_refund_id", json!(format!("cf_{refund_id}"))),
                ("refund_id", json!(refund_id)),
                ("order_id", json!(order_id)),
                ("refund_amount", json!(amount)),
            ],
        )
    }

    /// Cashfree's 404 answer.
    pub fn cashfree_not_found() -> Value {
        documented(cashfree::NOT_FOUND)
    }

    /// A PayU transaction's details; `amount` in rupees as PayU writes it.
    /// (PayU's documented answer carries no email.)
    pub fn payu_transaction(txnid: &str, order_ref: &str, status: &str, amount: &str) -> Value {
        let answer = documented(payu::VERIFY_PAYMENT);
        let template = answer["transaction_details"]
            .as_object()
            .and_then(|d| d.values().next())
            .cloned()
            .expect("a documented transaction");
        filled(
            template,
            &[
                ("mihpayid", json!(payu_mihpayid(txnid))),
                ("txnid", json!(txnid)),
                ("amt", json!(amount)),
                ("transaction_amount", json!(amount)),
                ("udf1", json!(order_ref)),
                ("status", json!(status)),
            ],
        )
    }

    /// The PayU id (`mihpayid`) the stand-in gives the transaction
    /// `txnid`: PayU refunds by it.
    pub fn payu_mihpayid(txnid: &str) -> String {
        let digest = sha2::Sha256::digest(txnid.as_bytes());
        let mut first = [0u8; 8];
        first.copy_from_slice(&digest[..8]);
        format!(
            "40399{:013}",
            u64::from_be_bytes(first) % 10_000_000_000_000
        )
    }

    /// PayU's details of a txnid it does not know.
    pub fn payu_not_found() -> Value {
        let answer = documented(payu::VERIFY_PAYMENT_NOT_FOUND);
        answer["transaction_details"]
            .as_object()
            .and_then(|d| d.values().next())
            .cloned()
            .expect("a documented unknown transaction")
    }

    /// A Stripe PaymentIntent.
    pub fn stripe_intent(
        id: &str,
        order_ref: &str,
        status: &str,
        amount: i64,
        email: &str,
    ) -> Value {
        filled(
            documented(stripe::PAYMENT_INTENT),
            &[
                ("id", json!(id)),
                ("amount", json!(amount)),
                (
                    "amount_received",
                    json!(if status == "succeeded" { amount } else { 0 }),
                ),
                ("currency", json!("eur")),
                ("status", json!(status)),
                ("receipt_email", json!(email)),
                ("metadata", json!({"order_ref": order_ref})),
            ],
        )
    }

    /// A Stripe refund, succeeded.
    pub fn stripe_refund(id: &str, intent: &str, amount: i64) -> Value {
        filled(
            documented(stripe::REFUND),
            &[
                ("id", json!(id)),
                ("amount", json!(amount)),
                ("currency", json!("eur")),
                ("payment_intent", json!(intent)),
            ],
        )
    }

    /// A Stripe event (what `GET /v1/events` lists).
    pub fn stripe_event(id: &str, kind: &str, created: i64, object: Value) -> Value {
        filled(
            item(stripe::EVENTS, Some("data"), 0),
            &[
                ("id", json!(id)),
                ("type", json!(kind)),
                ("created", json!(created)),
                ("pending_webhooks", json!(1)),
                ("data", json!({"object": object})),
            ],
        )
    }

    /// Stripe's 404 for an id it does not know. Stripe documents the error
    /// object's fields (https://docs.stripe.com/api/errors) and the code
    /// `resource_missing`, but publishes no sample body: this one is built
    /// from those fields.
    pub fn stripe_resource_missing(what: &str) -> Value {
        json!({"error": {"code": "resource_missing", "doc_url": "https://stripe.com/docs/error-codes/resource-missing",
                         "message": format!("No such {what}"), "param": "id", "type": "invalid_request_error"}})
    }
}
