//! [`Api`]: the real `oncehook-api` binary on a free port, with three keys
//! (every scope, orders:read only, products:write only), and a small client
//! that returns each answer's status, JSON and headers.

use std::time::Duration;

use reqwest::header::HeaderMap;
use serde_json::Value;
use sha2::{Digest, Sha256};

use crate::env::TestEnv;
use crate::process::Proc;

/// A key with every scope.
pub const FULL_KEY: &str = "ohk_test_full_0123456789abcdefghijklmnopqrstuv";
/// A key that may only read orders.
pub const READ_KEY: &str = "ohk_test_read_0123456789abcdefghijklmnopqrstuv";
/// A key that may only write products.
pub const PRODUCTS_KEY: &str = "ohk_test_products_0123456789abcdefghijklmnopq";

/// One answer.
#[derive(Debug)]
pub struct Answer {
    pub status: u16,
    pub json: Value,
    pub headers: HeaderMap,
}

impl Answer {
    /// The `error` code of an error answer.
    pub fn code(&self) -> &str {
        self.json["error"].as_str().unwrap_or("")
    }

    pub fn field(&self) -> &str {
        self.json["field"].as_str().unwrap_or("")
    }
}

pub struct Api {
    pub base: String,
    pub metrics: String,
    pub proc: Proc,
    pub http: reqwest::Client,
}

fn entry(name: &str, key: &str, scopes: &str) -> String {
    let hash = hex::encode(Sha256::digest(key.as_bytes()));
    format!("\n[[api.key]]\nname = \"{name}\"\nhash = \"{hash}\"\nscopes = [{scopes}]\n")
}

/// The test configuration plus the three keys.
pub fn config_with_keys(env: &TestEnv) -> String {
    let mut config = std::fs::read_to_string(&env.config_path).expect("test config");
    config.push_str(&entry(
        "full",
        FULL_KEY,
        "\"orders:write\", \"orders:read\", \"products:write\", \"events:read\"",
    ));
    config.push_str(&entry("reader", READ_KEY, "\"orders:read\""));
    config.push_str(&entry("stock", PRODUCTS_KEY, "\"products:write\""));
    config
}

impl Api {
    /// Starts the API with the three keys and `extra` settings; waits for `/readyz`.
    pub async fn start(env: &mut TestEnv, extra: &[(&str, &str)]) -> Api {
        let path = env.dir.join(format!("api-{}.toml", crate::free_port()));
        std::fs::write(&path, config_with_keys(env)).expect("write api config");
        let addr = format!("127.0.0.1:{}", crate::free_port());
        let metrics = format!("127.0.0.1:{}", crate::free_port());
        let path_text = path.display().to_string();
        let mut all = vec![
            ("ONCEHOOK_CONFIG", path_text.as_str()),
            ("ONCEHOOK_API_ADDR", addr.as_str()),
            ("ONCEHOOK_METRICS_ADDR", metrics.as_str()),
        ];
        all.extend_from_slice(extra);
        let proc = env.spawn("oncehook-api", &all, &[]);
        let metrics = format!("http://{metrics}");
        env.wait_ready(&metrics, "/readyz").await;
        Api {
            base: format!("http://{addr}"),
            metrics,
            proc,
            http: reqwest::Client::builder()
                .timeout(Duration::from_secs(30))
                .build()
                .expect("http client"),
        }
    }

    /// `method path` with the key (if any), a JSON body (if any) and headers.
    pub async fn call(
        &self,
        method: &str,
        path: &str,
        key: Option<&str>,
        body: Option<&str>,
        headers: &[(&str, &str)],
    ) -> Answer {
        let method = reqwest::Method::from_bytes(method.as_bytes()).expect("method");
        let mut req = self.http.request(method, format!("{}{path}", self.base));
        if let Some(k) = key {
            req = req.header("Authorization", format!("Bearer {k}"));
        }
        if let Some(b) = body {
            req = req
                .header("Content-Type", "application/json")
                .body(b.to_owned());
        }
        for (k, v) in headers {
            req = req.header(*k, *v);
        }
        let resp = req.send().await.expect("the API answers");
        let status = resp.status().as_u16();
        let headers = resp.headers().clone();
        let text = resp.text().await.unwrap_or_default();
        let json = serde_json::from_str(&text).unwrap_or(Value::String(text));
        Answer {
            status,
            json,
            headers,
        }
    }

    pub async fn get(&self, path: &str, key: &str) -> Answer {
        self.call("GET", path, Some(key), None, &[]).await
    }

    /// `PUT /v1/products/{sku}` with every scope; insists on success.
    pub async fn product(&self, sku: &str, stock: i32) {
        let body = format!(r#"{{"name": "Product {sku}", "stock": {stock}}}"#);
        let a = self
            .call(
                "PUT",
                &format!("/v1/products/{sku}"),
                Some(FULL_KEY),
                Some(&body),
                &[],
            )
            .await;
        assert!(a.status == 201 || a.status == 200, "{a:?}");
    }

    /// `POST /v1/orders` with every scope and `key`.
    pub async fn create_order(&self, idempotency_key: &str, body: &str) -> Answer {
        self.call(
            "POST",
            "/v1/orders",
            Some(FULL_KEY),
            Some(body),
            &[("Idempotency-Key", idempotency_key)],
        )
        .await
    }
}

/// An order body: `qty` of `sku` at 250.00 INR each.
pub fn order_body(order_ref: &str, sku: &str, qty: i32) -> String {
    let amount = 25_000 * i64::from(qty);
    format!(
        r#"{{"order_ref": "{order_ref}", "customer_email": "buyer@shop.example", "currency": "INR",
            "amount_minor": {amount}, "items": [{{"sku": "{sku}", "qty": {qty}, "unit_minor": 25000}}],
            "gateway_refs": {{"razorpay": "order_rzp_{order_ref}"}}, "metadata": {{"cart": "c-1"}}}}"#
    )
}
