//! A local stand-in for one gateway's API, for the reconciliation tests:
//! a real HTTP listener on 127.0.0.1 that serves the documented answer
//! shapes (Razorpay's collections, Cashfree's bare arrays, PayU's
//! `verify_payment`, Stripe's objects and lists with `has_more`) from an
//! in-memory state the test fills, checks each gateway's credentials, and
//! counts every call. Faults are queued: the next requests answer a status
//! (500, 401, …), a 429 with `Retry-After`, or only after a delay.
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
}

/// What the next request gets instead of its answer.
#[derive(Debug, Clone)]
pub enum Fault {
    /// This status and a small error body.
    Status(u16),
    /// 429 with `Retry-After: secs`.
    RateLimited(u64),
    /// The real answer, after this long (longer than the client's timeout:
    /// a timeout).
    Slow(Duration),
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
        let fault = s.faults.pop_front();
        let answer = if s.refuse_credentials || !authenticated(gateway, &request) {
            (
                401,
                json!({"error": {"code": "BAD_REQUEST_ERROR", "description": "Authentication failed"}}),
                None,
            )
        } else {
            let (status, body) = answer(gateway, &request, &s);
            (status, body, None)
        };
        (fault, answer)
    };
    let (mut status, mut body, mut retry_after) = answer;
    match fault {
        Some(Fault::Status(code)) => {
            status = code;
            body = json!({"error": {"code": "SERVER_ERROR", "description": "stand-in fault"}});
        }
        Some(Fault::RateLimited(secs)) => {
            status = 429;
            body = json!({"error": {"code": "TOO_MANY_REQUESTS"}});
            retry_after = Some(secs);
        }
        Some(Fault::Slow(pause)) => tokio::time::sleep(pause).await,
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
        // PayU signs the form; checked with the answer.
        _ => true,
    }
}

/// The answer to an authenticated request: `(status, body)`.
fn answer(gateway: Gateway, r: &Request, s: &State) -> (u16, Value) {
    let (path, query) = r.target.split_once('?').unwrap_or((&r.target, ""));
    let params: HashMap<String, String> = url::form_urlencoded::parse(query.as_bytes())
        .into_owned()
        .collect();
    match gateway {
        Gateway::Razorpay => match s.lists.get(path) {
            Some(items) => (
                200,
                json!({"entity": "collection", "count": items.len(), "items": items}),
            ),
            None if path.starts_with("/v1/payments/") => (
                200,
                json!({"entity": "collection", "count": 0, "items": []}),
            ),
            None => (
                404,
                json!({"error": {"code": "BAD_REQUEST_ERROR", "description": "The id provided does not exist"}}),
            ),
        },
        Gateway::Cashfree => (
            200,
            Value::Array(s.lists.get(path).cloned().unwrap_or_default()),
        ),
        Gateway::Payu => payu(r, s),
        Gateway::Stripe => stripe(path, &params, s),
        _ => (404, json!({})),
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
                .unwrap_or(json!({"mihpayid": "Not Found", "status": "Not Found"}));
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
            None => (
                404,
                json!({"error": {"code": "resource_missing", "message": "No such payment_intent"}}),
            ),
        },
    }
}

/// The documented objects, filled with a test's values.
pub mod shapes {
    use serde_json::{Value, json};

    /// A Razorpay payment entity.
    pub fn razorpay_payment(
        id: &str,
        order_id: &str,
        status: &str,
        amount: i64,
        email: &str,
    ) -> Value {
        json!({"id": id, "entity": "payment", "amount": amount, "currency": "INR", "status": status,
               "order_id": order_id, "captured": status == "captured", "email": email,
               "created_at": 1_764_633_600})
    }

    /// A Razorpay refund entity.
    pub fn razorpay_refund(id: &str, payment_id: &str, amount: i64) -> Value {
        json!({"id": id, "entity": "refund", "amount": amount, "currency": "INR",
               "payment_id": payment_id, "status": "processed", "created_at": 1_764_634_000})
    }

    /// A Cashfree payment (2023-08-01); `amount` in rupees.
    pub fn cashfree_payment(
        cf_payment_id: i64,
        order_id: &str,
        status: &str,
        amount: f64,
    ) -> Value {
        json!({"cf_payment_id": cf_payment_id, "order_id": order_id, "entity": "payment",
               "is_captured": status == "SUCCESS", "order_amount": amount, "payment_amount": amount,
               "payment_currency": "INR", "payment_status": status,
               "payment_time": "2026-12-01T10:00:00+05:30", "payment_group": "upi"})
    }

    /// A Cashfree refund.
    pub fn cashfree_refund(
        cf_payment_id: i64,
        refund_id: &str,
        order_id: &str,
        amount: f64,
    ) -> Value {
        json!({"cf_payment_id": cf_payment_id, "cf_refund_id": format!("cf_{refund_id}"),
               "refund_id": refund_id, "order_id": order_id, "entity": "refund",
               "refund_amount": amount, "refund_currency": "INR", "refund_status": "SUCCESS"})
    }

    /// A PayU transaction's details; `amount` in rupees as PayU writes it.
    pub fn payu_transaction(
        txnid: &str,
        order_ref: &str,
        status: &str,
        amount: &str,
        email: &str,
    ) -> Value {
        json!({"mihpayid": format!("40399{}", txnid.len()), "txnid": txnid, "amt": amount,
               "transaction_amount": amount, "udf1": order_ref, "status": status,
               "email": email, "field9": "stand-in"})
    }

    /// A Stripe PaymentIntent.
    pub fn stripe_intent(
        id: &str,
        order_ref: &str,
        status: &str,
        amount: i64,
        email: &str,
    ) -> Value {
        json!({"id": id, "object": "payment_intent", "amount": amount,
               "amount_received": if status == "succeeded" { amount } else { 0 },
               "currency": "eur", "status": status, "receipt_email": email,
               "metadata": {"order_ref": order_ref}})
    }

    /// A Stripe refund.
    pub fn stripe_refund(id: &str, intent: &str, amount: i64) -> Value {
        json!({"id": id, "object": "refund", "amount": amount, "currency": "eur",
               "payment_intent": intent, "status": "succeeded"})
    }

    /// A Stripe event (what `GET /v1/events` lists).
    pub fn stripe_event(id: &str, kind: &str, created: i64, object: Value) -> Value {
        json!({"id": id, "object": "event", "type": kind, "created": created,
               "livemode": false, "pending_webhooks": 1, "data": {"object": object}})
    }
}
