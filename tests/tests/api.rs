//! The shop's API end to end: the real `oncehook-api` binary against a
//! database of its own — every endpoint, every error code, idempotent
//! creates (twenty at once make one order), keys and scopes, malformed and
//! oversized bodies, the audit in `oncehookctl trace`, an order created
//! through the API paid by a real webhook, and one product stormed from
//! every road into the ledger at once without a deadlock (and the one that
//! can still happen retried inside the API, not answered 503).

use oncehook_e2e::api::{Api, FULL_KEY, PRODUCTS_KEY, READ_KEY, order_body};
use oncehook_e2e::env::TestEnv;
use serde_json::Value;

#[tokio::test]
async fn products_are_created_renamed_and_moved_by_deltas() {
    let mut env = TestEnv::new().await;
    let api = Api::start(&mut env, &[]).await;
    let put = |body: &'static str| {
        api.call(
            "PUT",
            "/v1/products/tee-1",
            Some(PRODUCTS_KEY),
            Some(body),
            &[],
        )
    };
    let a = put(r#"{"name": "Tee", "stock": 10}"#).await;
    assert_eq!(
        (a.status, a.json["stock"].as_i64()),
        (201, Some(10)),
        "{a:?}"
    );
    let a = put(r#"{"name": "Tee, blue", "stock": 99}"#).await;
    assert_eq!(a.status, 200, "{a:?}");
    assert_eq!(a.json["name"], "Tee, blue");
    assert_eq!(
        a.json["stock"], 10,
        "the stock is set only when the product is new"
    );

    let stock = |body: &'static str| {
        api.call(
            "POST",
            "/v1/products/tee-1/stock",
            Some(PRODUCTS_KEY),
            Some(body),
            &[],
        )
    };
    let a = stock(r#"{"delta": 50, "reason": "restock"}"#).await;
    assert_eq!(
        (a.status, a.json["stock"].as_i64()),
        (200, Some(60)),
        "{a:?}"
    );
    let a = stock(r#"{"delta": -5}"#).await;
    assert_eq!(a.json["stock"], 55);
    let a = stock(r#"{"delta": 0}"#).await;
    assert_eq!(
        (a.status, a.code(), a.field()),
        (400, "validation_failed", "delta")
    );
    let a = api
        .call(
            "POST",
            "/v1/products/nope/stock",
            Some(PRODUCTS_KEY),
            Some(r#"{"delta": 1}"#),
            &[],
        )
        .await;
    assert_eq!((a.status, a.code()), (404, "not_found"));

    let a = api.get("/v1/products/tee-1", READ_KEY).await;
    assert_eq!((a.status, a.json["stock"].as_i64()), (200, Some(55)));
    assert_eq!(api.get("/v1/products/none", READ_KEY).await.status, 404);
    let a = api.get("/v1/products/bad%20sku", READ_KEY).await;
    assert_eq!((a.status, a.field()), (400, "sku"));
    let a = put(r#"{"name": "", "stock": 1}"#).await;
    assert_eq!((a.status, a.field()), (400, "name"));
    let a = api
        .call(
            "PUT",
            "/v1/products/x",
            Some(PRODUCTS_KEY),
            Some(r#"{"name": "x", "stock": -1}"#),
            &[],
        )
        .await;
    assert_eq!((a.status, a.field()), (400, "stock"));
    assert_eq!(
        env.count(
            "SELECT count(*) FROM stock_adjustments WHERE sku = 'tee-1' AND key_name = 'stock'"
        )
        .await,
        2
    );
    assert!(
        env.count("SELECT count(*) FROM api_audit WHERE sku = 'tee-1' AND NOT ok")
            .await
            >= 1
    );
}

#[tokio::test]
async fn an_order_is_created_once_per_key_and_shown_as_the_ledger_sees_it() {
    let mut env = TestEnv::new().await;
    let api = Api::start(&mut env, &[]).await;
    api.product("tee", 10).await;
    let body = order_body("o-1", "tee", 2);
    let first = api.create_order("k-1", &body).await;
    assert_eq!(first.status, 201, "{first:?}");
    let o = &first.json;
    assert_eq!(o["status"], "pending");
    assert_eq!(o["amount"]["minor"], 50_000);
    assert_eq!(o["amount"]["formatted"], "500.00");
    assert_eq!(o["gateway_refs"]["razorpay"], "order_rzp_o-1");
    assert_eq!(o["metadata"]["cart"], "c-1");
    assert_eq!(o["items"][0]["unit_minor"], 25_000);
    assert_eq!(o["version"], 1);
    assert_eq!(
        (o["needs_refund"].as_bool(), o["oversold"].as_bool()),
        (Some(false), Some(false))
    );

    let again = api.create_order("k-1", &body).await;
    assert_eq!(
        (again.status, &again.json),
        (201, &first.json),
        "same key, same body, same answer"
    );
    assert_eq!(
        again
            .headers
            .get("Idempotent-Replayed")
            .map(|v| v.as_bytes()),
        Some(&b"true"[..])
    );
    assert!(first.headers.get("Idempotent-Replayed").is_none());
    let other = api.create_order("k-1", &order_body("o-1", "tee", 3)).await;
    assert_eq!(
        (other.status, other.code()),
        (422, "idempotency_key_reused")
    );
    let conflict = api.create_order("k-2", &order_body("o-1", "tee", 3)).await;
    assert_eq!(
        (conflict.status, conflict.code(), conflict.field()),
        (409, "order_ref_conflict", "order_ref")
    );
    let same = api.create_order("k-3", &body).await;
    assert_eq!(
        same.status, 200,
        "the same order under another key: {same:?}"
    );
    let taken = order_body("o-2", "tee", 1).replace("order_rzp_o-2", "order_rzp_o-1");
    let a = api.create_order("k-4", &taken).await;
    assert_eq!(
        (a.status, a.code(), a.field()),
        (409, "gateway_ref_conflict", "gateway_refs.razorpay")
    );

    let shown = api.get("/v1/orders/o-1", READ_KEY).await;
    assert_eq!(
        (shown.status, &shown.json["order_ref"]),
        (200, &Value::from("o-1"))
    );
    assert_eq!(
        api.get("/v1/orders/o-none", READ_KEY).await.code(),
        "not_found"
    );
    assert_eq!(env.count("SELECT count(*) FROM orders").await, 1);

    let (code, out, _) = env.ctl(&["trace", "order", "o-1"]).await;
    assert_eq!(code, 0, "{out}");
    assert!(
        out.contains("shop API") && out.contains("order.create") && out.contains("full"),
        "{out}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn twenty_concurrent_posts_with_one_key_make_one_order() {
    let mut env = TestEnv::new().await;
    let api = Api::start(&mut env, &[]).await;
    api.product("cap", 100).await;
    let body = order_body("o-race", "cap", 1);
    let answers = {
        let mut tasks = Vec::new();
        for _ in 0..20 {
            let http = api.http.clone();
            let (base, body) = (api.base.clone(), body.clone());
            tasks.push(tokio::spawn(async move {
                let r = http
                    .post(format!("{base}/v1/orders"))
                    .header("Authorization", format!("Bearer {FULL_KEY}"))
                    .header("Content-Type", "application/json")
                    .header("Idempotency-Key", "race-1")
                    .body(body)
                    .send()
                    .await
                    .expect("post");
                (r.status().as_u16(), r.text().await.unwrap_or_default())
            }));
        }
        let mut out = Vec::new();
        for t in tasks {
            out.push(t.await.expect("task"));
        }
        out
    };
    let first = &answers[0];
    for a in &answers {
        assert_eq!(a, first, "every post answers the same");
    }
    assert_eq!(first.0, 201);
    assert_eq!(env.count("SELECT count(*) FROM orders").await, 1);
    assert_eq!(env.count("SELECT count(*) FROM order_items").await, 1);
    assert_eq!(
        env.count("SELECT count(*) FROM api_audit WHERE ok AND action = 'order.create'")
            .await,
        1
    );
}

#[tokio::test]
async fn every_validation_error_names_its_field() {
    let mut env = TestEnv::new().await;
    let api = Api::start(&mut env, &[("ONCEHOOK_API_MAX_ITEMS", "2")]).await;
    api.product("tee", 10).await;
    let good = order_body("o-v", "tee", 1);
    for (from, to, field) in [
        (
            r#""amount_minor": 25000"#,
            r#""amount_minor": 24000"#,
            "amount_minor",
        ),
        (r#""currency": "INR""#, r#""currency": "ABC""#, "currency"),
        ("buyer@shop.example", "not-an-email", "customer_email"),
        (r#""qty": 1"#, r#""qty": 0"#, "items[0].qty"),
        (r#""sku": "tee""#, r#""sku": "ghost""#, "items[0].sku"),
        (
            r#""order_ref": "o-v""#,
            r#""order_ref": "o v""#,
            "order_ref",
        ),
        (r#""razorpay""#, r#""paypal""#, "gateway_refs.paypal"),
        (r#"{"cart": "c-1"}"#, "[1]", "metadata"),
    ] {
        let body = good.replace(from, to);
        assert_ne!(body, good, "{from}");
        let a = api.create_order(&format!("v-{field}"), &body).await;
        assert_eq!((a.status, a.field()), (400, field), "{to}: {a:?}");
    }
    let items = r#""items": [{"sku": "a", "qty": 1, "unit_minor": 1}, {"sku": "b", "qty": 1, "unit_minor": 1}, {"sku": "c", "qty": 1, "unit_minor": 1}]"#;
    let body = good.replace(r#""amount_minor": 25000"#, r#""amount_minor": 3"#);
    let start = body.find("\"items\"").expect("items");
    let end = body.find("],").expect("end of items") + 1;
    let body = format!("{}{items}{}", &body[..start], &body[end..]);
    let a = api.create_order("v-items", &body).await;
    assert_eq!((a.status, a.field()), (400, "items"), "{a:?}");
    let a = api
        .call("POST", "/v1/orders", Some(FULL_KEY), Some(&good), &[])
        .await;
    assert_eq!((a.status, a.code()), (400, "idempotency_key_required"));
    let a = api.create_order("v-missing", r#"{"order_ref": "x"}"#).await;
    assert_eq!(
        (a.status, a.code(), a.field()),
        (400, "malformed_json", "customer_email")
    );
    assert_eq!(env.count("SELECT count(*) FROM orders").await, 0);
    assert!(
        env.count("SELECT count(*) FROM api_audit WHERE NOT ok")
            .await
            >= 9
    );
}

#[tokio::test]
async fn orders_are_listed_in_keyset_pages() {
    let mut env = TestEnv::new().await;
    let api = Api::start(&mut env, &[("ONCEHOOK_API_MAX_PAGE_SIZE", "10")]).await;
    api.product("tee", 100).await;
    for i in 0..5 {
        let a = api
            .create_order(&format!("l-{i}"), &order_body(&format!("o-{i}"), "tee", 1))
            .await;
        assert_eq!(a.status, 201);
    }
    let mut seen = Vec::new();
    let mut cursor: Option<String> = None;
    loop {
        let path = match &cursor {
            None => "/v1/orders?limit=2&status=pending".to_owned(),
            Some(c) => format!("/v1/orders?limit=2&status=pending&cursor={c}"),
        };
        let page = api.get(&path, READ_KEY).await;
        assert_eq!(page.status, 200, "{page:?}");
        for o in page.json["data"].as_array().expect("data") {
            seen.push(o["order_ref"].as_str().expect("ref").to_owned());
        }
        match page.json["next_cursor"].as_str() {
            Some(c) => cursor = Some(c.to_owned()),
            None => break,
        }
    }
    assert_eq!(seen, ["o-0", "o-1", "o-2", "o-3", "o-4"]);
    let paid = api.get("/v1/orders?status=paid", READ_KEY).await;
    assert_eq!(paid.json["data"], Value::Array(vec![]), "{paid:?}");
    let later = api
        .get("/v1/orders?updated_after=2999-01-01T00:00:00Z", READ_KEY)
        .await;
    assert_eq!(later.json["data"], Value::Array(vec![]), "{later:?}");
    for (query, code, field) in [
        ("limit=0", "validation_failed", "limit"),
        ("limit=11", "validation_failed", "limit"),
        (
            "updated_after=yesterday",
            "validation_failed",
            "updated_after",
        ),
        ("cursor=zzz", "invalid_cursor", "cursor"),
        ("limit=abc", "invalid_query", ""),
        ("colour=red", "invalid_query", "colour"),
    ] {
        let a = api.get(&format!("/v1/orders?{query}"), READ_KEY).await;
        assert_eq!((a.status, a.code()), (400, code), "{query}: {a:?}");
        if !field.is_empty() {
            assert_eq!(a.field(), field, "{query}");
        }
    }
}

#[tokio::test]
async fn keys_scopes_and_throttling() {
    let mut env = TestEnv::new().await;
    let api = Api::start(&mut env, &[("ONCEHOOK_API_AUTH_FAILURES_PER_MINUTE", "3")]).await;
    let a = api.call("GET", "/v1/orders", None, None, &[]).await;
    assert_eq!((a.status, a.code()), (401, "unauthorized"));
    let a = api.get("/v1/orders", "ohk_wrong").await;
    assert_eq!(a.status, 401);
    let a = api.get("/v1/orders", PRODUCTS_KEY).await;
    assert_eq!(
        (a.status, a.code()),
        (403, "forbidden"),
        "a key without the scope"
    );
    let a = api.create_order("k", &order_body("o", "tee", 1)).await;
    assert_ne!(a.status, 403);
    let a = api
        .call(
            "POST",
            "/v1/orders",
            Some(READ_KEY),
            Some("{}"),
            &[("Idempotency-Key", "k")],
        )
        .await;
    assert_eq!(a.status, 403);
    let text = oncehook_e2e::metrics::scrape(&api.metrics).await;
    assert!(
        text.contains("oncehook_api_auth_failures_total{key=\"unknown\"} 2"),
        "{text}"
    );
    assert!(
        text.contains("oncehook_api_auth_failures_total{key=\"stock\"} 1"),
        "{text}"
    );
    assert!(
        text.contains("oncehook_api_auth_failures_total{key=\"reader\"} 1"),
        "{text}"
    );
    assert_eq!(api.get("/v1/orders", "ohk_wrong").await.status, 401);
    let a = api.get("/v1/orders", FULL_KEY).await;
    assert_eq!((a.status, a.code()), (429, "too_many_failed_attempts"));
    assert!(a.headers.get("retry-after").is_some());
    let log = api.proc.log_text();
    assert!(
        !log.contains("ohk_wrong") && !log.contains(FULL_KEY),
        "keys are never logged"
    );
}

#[tokio::test]
async fn every_failure_is_json_even_from_the_http_layer() {
    let mut env = TestEnv::new().await;
    let api = Api::start(&mut env, &[("ONCEHOOK_API_BODY_LIMIT_BYTES", "2048")]).await;
    let a = api.create_order("k", "{not json").await;
    assert_eq!((a.status, a.code()), (400, "malformed_json"));
    let a = api
        .call(
            "POST",
            "/v1/orders",
            Some(FULL_KEY),
            None,
            &[("Idempotency-Key", "k"), ("Content-Type", "text/plain")],
        )
        .await;
    assert_eq!((a.status, a.code()), (415, "unsupported_media_type"));
    let huge = format!(r#"{{"order_ref": "{}"}}"#, "x".repeat(10_000));
    let a = api.create_order("k", &huge).await;
    assert_eq!((a.status, a.code()), (413, "body_too_large"));
    let a = api.get("/v2/nothing", FULL_KEY).await;
    assert_eq!((a.status, a.code()), (404, "not_found"));
    let a = api
        .call("DELETE", "/v1/orders", Some(FULL_KEY), None, &[])
        .await;
    assert_eq!((a.status, a.code()), (405, "method_not_allowed"));
    assert_eq!(
        a.headers
            .get("x-content-type-options")
            .map(|v| v.as_bytes()),
        Some(&b"nosniff"[..])
    );
    let doc = api.call("GET", "/v1/openapi.json", None, None, &[]).await;
    assert_eq!(doc.status, 200);
    for path in [
        "/v1/orders",
        "/v1/orders/{order_ref}",
        "/v1/products/{sku}",
        "/v1/products/{sku}/stock",
    ] {
        assert!(doc.json["paths"].get(path).is_some(), "{path}");
    }
}

#[tokio::test]
async fn an_order_created_through_the_api_is_paid_by_its_webhook() {
    let mut env = TestEnv::new().await;
    let api = Api::start(&mut env, &[]).await;
    let (_ingest, base) = env.start_ingest().await;
    let _worker = env.start_worker().await;
    api.product("tee", 10).await;
    assert_eq!(
        api.create_order("k", &order_body("o-pay", "tee", 2))
            .await
            .status,
        201
    );
    env.post_ok(
        &base,
        "razorpay",
        &env.captured("o-pay", "pay_api_1", "evt_api_1"),
    )
    .await;
    let order = oncehook_e2e::eventually("the order paid", oncehook_e2e::WAIT, || async {
        let a = api.get("/v1/orders/o-pay", READ_KEY).await;
        (a.json["status"] == "paid").then_some(a.json)
    })
    .await;
    assert!(order["version"].as_i64().expect("version") > 1, "{order}");
    assert_eq!(order["payments"][0]["payment_id"], "pay_api_1");
    assert_eq!(order["emails"][0]["kind"], "confirmation");
    assert!(
        order["paid_by"]
            .as_str()
            .is_some_and(|p| p.contains("pay_api_1")),
        "{order}"
    );
    let stock = api.get("/v1/products/tee", READ_KEY).await;
    assert_eq!(stock.json["stock"], 8);
    let page = api.get("/v1/orders?status=paid", READ_KEY).await;
    assert_eq!(page.json["data"][0]["order_ref"], "o-pay");
}

#[tokio::test]
async fn a_webhook_before_its_order_waits_and_is_applied_when_the_api_creates_it() {
    let mut env = TestEnv::new().await;
    let api = Api::start(&mut env, &[]).await;
    let (_ingest, base) = env.start_ingest().await;
    let _worker = env.start_worker().await;
    api.product("mug", 10).await;
    // The customer paid while the shop's create call was in flight: the
    // capture names Razorpay's own order id, which no order has yet.
    env.post_ok(
        &base,
        "razorpay",
        &env.captured("order_rzp_o-early", "pay_early", "evt_early"),
    )
    .await;
    oncehook_e2e::eventually("the capture waits", oncehook_e2e::WAIT, || async {
        (env.count("SELECT count(*) FROM parked_events").await == 1).then_some(())
    })
    .await;
    let created = api
        .create_order("k-early", &order_body("o-early", "mug", 2))
        .await;
    assert_eq!(created.status, 201, "{}", created.json);
    assert_eq!(created.json["status"], "paid", "{}", created.json);
    assert_eq!(created.json["payments"][0]["payment_id"], "pay_early");
    assert_eq!(env.count("SELECT count(*) FROM parked_events").await, 0);
    assert_eq!(api.get("/v1/products/mug", READ_KEY).await.json["stock"], 8);
    assert_eq!(
        env.count("SELECT count(*) FROM email_outbox WHERE kind = 'confirmation'")
            .await,
        1
    );
    // The gateway's retry of the same webhook is a duplicate.
    env.post_ok(
        &base,
        "razorpay",
        &env.captured("order_rzp_o-early", "pay_early", "evt_early"),
    )
    .await;
    oncehook_e2e::eventually("the copy absorbed", oncehook_e2e::WAIT, || async {
        (env.count("SELECT sum(deliveries)::bigint FROM processed_webhooks")
            .await
            == 2)
            .then_some(())
    })
    .await;
    assert_eq!(api.get("/v1/products/mug", READ_KEY).await.json["stock"], 8);

    // An order that is never created: dead-lettered after the TTL (2 s in
    // the tests), naming the reference.
    env.post_ok(
        &base,
        "razorpay",
        &env.captured("o-never", "pay_never", "evt_never"),
    )
    .await;
    let dead = format!("{}.dead", env.prefix);
    oncehook_e2e::eventually(
        "dead-lettered after the TTL",
        oncehook_e2e::WAIT,
        || async { (oncehook_e2e::broker::depth(&dead).await == Some(1)).then_some(()) },
    )
    .await;
    let letters = oncehook_e2e::broker::peek(&dead).await;
    assert_eq!(letters[0].kind().as_str(), "unknown_order");
    let error = &letters[0].record.error;
    assert!(error.contains("o-never"), "{error}");
}

#[tokio::test]
async fn an_order_is_cancelled_and_a_late_capture_is_owed_back() {
    let mut env = TestEnv::new().await;
    let api = Api::start(&mut env, &[]).await;
    let (_ingest, base) = env.start_ingest().await;
    let _worker = env.start_worker().await;
    api.product("cap", 10).await;
    assert_eq!(
        api.create_order("k-c", &order_body("o-cancel", "cap", 2))
            .await
            .status,
        201
    );
    let body = Some(r#"{"reason": "customer left"}"#);
    let cancel =
        |path: &'static str, key: &'static str| api.call("POST", path, Some(key), body, &[]);
    let cancelled = cancel("/v1/orders/o-cancel/cancel", FULL_KEY).await;
    assert_eq!(cancelled.status, 200, "{}", cancelled.json);
    assert_eq!(cancelled.json["status"], "cancelled");
    let again = cancel("/v1/orders/o-cancel/cancel", FULL_KEY).await;
    assert_eq!(again.status, 200, "twice answers the same: {}", again.json);
    let unknown = cancel("/v1/orders/o-none/cancel", FULL_KEY).await;
    assert_eq!((unknown.status, unknown.code()), (404, "not_found"));
    assert_eq!(
        cancel("/v1/orders/o-cancel/cancel", READ_KEY).await.status,
        403
    );
    // The customer's payment arrives after the cancellation.
    env.post_ok(
        &base,
        "razorpay",
        &env.captured("o-cancel", "pay_cancel", "evt_cancel"),
    )
    .await;
    let order = oncehook_e2e::eventually("the capture recorded", oncehook_e2e::WAIT, || async {
        let a = api.get("/v1/orders/o-cancel", READ_KEY).await;
        (a.json["payments"].as_array().is_some_and(|p| !p.is_empty())).then_some(a.json)
    })
    .await;
    assert_eq!(order["status"], "cancelled", "{order}");
    assert_eq!(order["payments"][0]["flag"], "needs_refund", "{order}");
    assert_eq!(
        api.get("/v1/products/cap", READ_KEY).await.json["stock"],
        10
    );
}

#[tokio::test]
async fn a_paid_order_cancelled_owes_its_payment_back_and_gives_its_stock_back() {
    let mut env = TestEnv::new().await;
    let api = Api::start(&mut env, &[]).await;
    let (_ingest, base) = env.start_ingest().await;
    let _worker = env.start_worker().await;
    api.product("mug", 10).await;
    let created = api
        .create_order("k-p", &order_body("o-paid-cancel", "mug", 2))
        .await;
    assert_eq!(created.status, 201, "{}", created.json);
    let capture = env.captured("o-paid-cancel", "pay_pc", "evt_pc");
    // The capture comes first: the order is paid and its stock taken.
    env.post_ok(&base, "razorpay", &capture).await;
    let paid = oncehook_e2e::eventually("the order paid", oncehook_e2e::WAIT, || async {
        let a = api.get("/v1/orders/o-paid-cancel", READ_KEY).await;
        (a.json["status"] == "paid").then_some(a.json)
    })
    .await;
    assert_eq!(api.get("/v1/products/mug", READ_KEY).await.json["stock"], 8);
    // Then the shop cancels it: the payment is owed back, the stock returns.
    let cancelled = api
        .call(
            "POST",
            "/v1/orders/o-paid-cancel/cancel",
            Some(FULL_KEY),
            Some(r#"{"reason": "out of delivery area"}"#),
            &[],
        )
        .await;
    assert_eq!(cancelled.status, 200, "{}", cancelled.json);
    let order = api.get("/v1/orders/o-paid-cancel", READ_KEY).await.json;
    assert_eq!(order["status"], "cancelled", "{order}");
    assert_eq!(order["payments"][0]["flag"], "needs_refund", "{order}");
    assert_eq!(order["needs_refund"], true, "{order}");
    assert!(
        order["version"].as_i64() > paid["version"].as_i64(),
        "the version grows: {paid} then {order}"
    );
    assert_eq!(
        api.get("/v1/products/mug", READ_KEY).await.json["stock"],
        10
    );
    // The capture's retry after the cancellation changes nothing.
    env.post_ok(&base, "razorpay", &capture).await;
    let emails = order["emails"].as_array().map_or(0, Vec::len);
    oncehook_e2e::eventually("the retry absorbed", oncehook_e2e::WAIT, || async {
        let copies = env
            .count("SELECT coalesce(max(deliveries), 0)::bigint FROM processed_webhooks WHERE event_id = 'evt_pc'")
            .await;
        (copies == 2).then_some(())
    })
    .await;
    let after = api.get("/v1/orders/o-paid-cancel", READ_KEY).await.json;
    assert_eq!(after["version"], order["version"], "{after}");
    assert_eq!(after["emails"].as_array().map_or(0, Vec::len), emails);
    assert_eq!(
        api.get("/v1/products/mug", READ_KEY).await.json["stock"],
        10
    );
}

#[tokio::test]
async fn demo_seed_goes_through_the_api_and_a_second_run_changes_nothing() {
    let mut env = TestEnv::new().await;
    let api = Api::start(&mut env, &[]).await;
    // Without a key it says where the key goes, and writes nothing.
    let (code, _, err) = env.ctl(&["demo", "seed", "--api", &api.base]).await;
    assert_ne!(code, 0);
    assert!(err.contains("ONCEHOOK_API_KEY"), "{err}");
    // A key without products:write is refused by the API, named in the error.
    env.set_env("ONCEHOOK_API_KEY", READ_KEY);
    let (code, _, err) = env.ctl(&["demo", "seed", "--api", &api.base]).await;
    assert_ne!(code, 0);
    assert!(
        err.contains("403") && err.contains("products:write"),
        "{err}"
    );
    assert_eq!(env.count("SELECT count(*) FROM products").await, 0);

    env.set_env("ONCEHOOK_API_KEY", FULL_KEY);
    let (code, out, err) = env.ctl(&["demo", "seed", "--api", &api.base]).await;
    assert_eq!(code, 0, "{out}{err}");
    assert!(out.contains("5 orders, 5 new"), "{out}");
    let order = api.get("/v1/orders/order_1001", READ_KEY).await;
    assert_eq!(order.json["status"], "pending", "{}", order.json);
    assert_eq!(
        order.json["amount"]["formatted"], "1097.00",
        "{}",
        order.json
    );
    assert_eq!(order.json["items"].as_array().map(Vec::len), Some(2));
    // The shop moves stock; a second seed keeps it and makes no new orders.
    let delta = api
        .call(
            "POST",
            "/v1/products/MUG/stock",
            Some(FULL_KEY),
            Some(r#"{"delta": -3, "reason": "breakage"}"#),
            &[],
        )
        .await;
    assert_eq!(delta.status, 200, "{}", delta.json);
    let (code, out, err) = env
        .ctl(&["--json", "demo", "seed", "--api", &api.base])
        .await;
    assert_eq!(code, 0, "{out}{err}");
    let report: Value = serde_json::from_str(&out).expect("JSON report");
    assert!(
        report["orders"]
            .as_array()
            .is_some_and(|o| o.iter().all(|o| o["result"] == "existed")),
        "{report}"
    );
    assert_eq!(
        api.get("/v1/products/MUG", READ_KEY).await.json["stock"],
        47
    );
    assert_eq!(env.count("SELECT count(*) FROM orders").await, 5);
    assert_eq!(
        env.count("SELECT count(*) FROM api_audit WHERE ok AND action = 'order.create'")
            .await,
        5,
        "the first seed's creates are audited; the second's were answered from their keys"
    );
}

#[tokio::test]
async fn idempotency_keys_are_forgotten_after_their_ttl() {
    let mut env = TestEnv::new().await;
    let api = Api::start(&mut env, &[("ONCEHOOK_API_IDEMPOTENCY_TTL", "2s")]).await;
    api.product("pen", 10).await;
    for (key, order_ref) in [("k-a", "o-a"), ("k-b", "o-b")] {
        let first = api
            .create_order(key, &order_body(order_ref, "pen", 1))
            .await;
        assert_eq!(first.status, 201, "{}", first.json);
    }
    let reused = api
        .create_order("k-a", &order_body("o-other", "pen", 1))
        .await;
    assert_eq!(
        (reused.status, reused.code()),
        (422, "idempotency_key_reused"),
        "while the key is remembered"
    );
    oncehook_e2e::eventually("the keys pruned", oncehook_e2e::WAIT, || async {
        (env.count("SELECT count(*) FROM api_idempotency").await == 0).then_some(())
    })
    .await;
    // Forgotten: another body under a key is a new request; the same body
    // finds its order by order_ref.
    let other = api
        .create_order("k-a", &order_body("o-other", "pen", 1))
        .await;
    assert_eq!(other.status, 201, "{}", other.json);
    let same = api.create_order("k-b", &order_body("o-b", "pen", 1)).await;
    assert_eq!(same.status, 200, "{}", same.json);
    assert!(same.headers.get("Idempotent-Replayed").is_none());
    assert_eq!(env.count("SELECT count(*) FROM orders").await, 3);
    let metrics = oncehook_e2e::metrics::scrape(&api.metrics).await;
    assert!(
        metrics.lines().any(
            |l| l.starts_with("oncehook_api_idempotency_keys_pruned_total ") && !l.ends_with(" 0")
        ),
        "{metrics}"
    );
}

/// Writes an order event for `order_ref` the way the ledger does, on `conn`.
async fn write_event(conn: &mut sqlx::PgConnection, id: &str, kind: &str, order_ref: &str) {
    sqlx::query(
        "INSERT INTO order_events (id, type, order_id) SELECT $1, $2, id FROM orders WHERE order_ref = $3",
    )
    .bind(id)
    .bind(kind)
    .bind(order_ref)
    .execute(conn)
    .await
    .expect("write an order event");
}

/// The page at `path` once it lists `n` events.
async fn listed(api: &Api, path: &str, n: usize) -> oncehook_e2e::api::Answer {
    oncehook_e2e::eventually(
        &format!("{path} to list {n} events"),
        oncehook_e2e::WAIT,
        || async {
            let a = api.get(path, FULL_KEY).await;
            (ids_of(&a.json).len() >= n).then_some(a)
        },
    )
    .await
}

fn ids_of(page: &Value) -> Vec<String> {
    page["data"]
        .as_array()
        .into_iter()
        .flatten()
        .map(|e| e["id"].as_str().unwrap_or("").to_owned())
        .collect()
}

#[tokio::test]
async fn events_are_paged_in_commit_order_and_a_cursor_never_skips_a_late_commit() {
    let mut env = TestEnv::new().await;
    let api = Api::start(&mut env, &[]).await;
    oncehook_e2e::shop::Shop::new()
        .product("MUG", 10)
        .order("ev_1", &[("MUG", 1)])
        .order("ev_2", &[("MUG", 1)])
        .seed(&env.pool)
        .await;
    let mut conn = env.pool.acquire().await.expect("conn");
    for (id, kind) in [
        ("evt_a", "order.paid"),
        ("evt_b", "order.refunded"),
        ("evt_c", "order.paid"),
    ] {
        write_event(&mut conn, id, kind, "ev_1").await;
    }
    // Transactions of other databases on the server hold the feed back
    // while they run (the horizon is the server's): poll until all three
    // are served, so that a page of two has more behind it.
    listed(&api, "/v1/events", 3).await;
    // Pages of two, then the rest; every page has a cursor.
    let first = listed(&api, "/v1/events?limit=2", 2).await;
    assert_eq!(first.status, 200, "{:?}", first.json);
    assert_eq!(ids_of(&first.json), ["evt_a", "evt_b"]);
    assert_eq!(first.json["has_more"], true);
    let cursor = first.json["next_cursor"]
        .as_str()
        .expect("cursor")
        .to_owned();
    let second = listed(&api, &format!("/v1/events?after={cursor}"), 1).await;
    assert_eq!(ids_of(&second.json), ["evt_c"]);
    assert_eq!(second.json["has_more"], false);
    // The event carries the order's snapshot as GET /v1/orders/{ref} shows it.
    let event = &second.json["data"][0];
    let order = api.get("/v1/orders/ev_1", READ_KEY).await;
    assert_eq!(event["order"], order.json);
    assert_eq!(event["type"], "order.paid");
    // A type filter.
    let refunds = api.get("/v1/events?type=order.refunded", FULL_KEY).await;
    assert_eq!(ids_of(&refunds.json), ["evt_b"]);

    // A transaction that wrote first but commits last: while it is open,
    // nothing after it is listed, so the cursor cannot pass it.
    let cursor = second.json["next_cursor"]
        .as_str()
        .expect("cursor")
        .to_owned();
    let mut slow = env.pool.begin().await.expect("begin");
    write_event(&mut slow, "evt_slow", "order.paid", "ev_2").await;
    write_event(&mut conn, "evt_fast", "order.cancelled", "ev_2").await;
    let during = api
        .get(&format!("/v1/events?after={cursor}"), FULL_KEY)
        .await;
    assert_eq!(ids_of(&during.json), Vec::<String>::new());
    assert_eq!(
        during.json["next_cursor"],
        cursor.as_str(),
        "an empty page keeps the cursor"
    );
    slow.commit().await.expect("commit");
    let after = listed(&api, &format!("/v1/events?after={cursor}"), 2).await;
    assert_eq!(ids_of(&after.json), ["evt_slow", "evt_fast"]);

    // Refusals: a key without events:read, a cursor not handed out, a bad limit or type.
    assert_eq!(api.get("/v1/events", READ_KEY).await.status, 403);
    for (query, field) in [
        ("after=nonsense", "after"),
        ("limit=0", "limit"),
        ("type=Order%20Paid", "type"),
    ] {
        let a = api.get(&format!("/v1/events?{query}"), FULL_KEY).await;
        assert_eq!((a.status, a.field()), (400, field), "{query}: {:?}", a.json);
    }
}

/// A response's status and JSON body.
/// `POST url` with the full key, a JSON `body` and, if given, an
/// `Idempotency-Key`, after `gate` lets every caller go at once.
async fn post_at_once(
    http: reqwest::Client,
    url: String,
    idempotency_key: Option<String>,
    body: String,
    gate: std::sync::Arc<tokio::sync::Barrier>,
) -> (u16, Value) {
    let mut request = http
        .post(&url)
        .header("Authorization", format!("Bearer {FULL_KEY}"))
        .header("Content-Type", "application/json")
        .body(body);
    if let Some(key) = idempotency_key {
        request = request.header("Idempotency-Key", key);
    }
    gate.wait().await;
    answer(request.send().await.expect("post")).await
}

async fn answer(r: reqwest::Response) -> (u16, Value) {
    let status = r.status().as_u16();
    let text = r.text().await.unwrap_or_default();
    (
        status,
        serde_json::from_str(&text).unwrap_or(Value::String(text)),
    )
}

/// The logs of `procs` with every line that says Postgres found a deadlock.
fn deadlocks_in(procs: &[&oncehook_e2e::process::Proc]) -> Vec<String> {
    procs
        .iter()
        .flat_map(|p| {
            p.log_text()
                .lines()
                .filter(|l| l.contains("deadlock"))
                .map(|l| format!("{}: {l}", p.name))
                .collect::<Vec<_>>()
        })
        .collect()
}

/// A Razorpay payment id whose advisory lock (`books::lock_keys`) sorts
/// before that of the order reference `gateway_ref`: a worker taking both
/// in one key order would take the payment's first, while the create of
/// that order holds the reference's and then wants the payment's.
async fn payment_locked_first(env: &TestEnv, gateway_ref: &str, i: usize) -> String {
    for n in 0.. {
        let payment = format!("pay_wait_{i}_{n}");
        let first: bool = sqlx::query_scalar(
            "SELECT hashtextextended('razorpay:' || $1, 7) < hashtextextended('order:' || $2, 7)",
        )
        .bind(&payment)
        .bind(gateway_ref)
        .fetch_one(&env.pool)
        .await
        .expect("hash the keys");
        if first {
            return payment;
        }
    }
    unreachable!("some payment id sorts first")
}

/// Issue 42: one hot product stormed from every road of the ledger at
/// once — sixteen `POST /v1/orders`, each with a capture that came first
/// and waits for its order (the `Created` road), Razorpay's `order.paid`
/// for those same orders at the same moment (the worker, naming the
/// reference and the payment the create is applying, a payment whose
/// advisory lock sorts before the reference's), captures of eight
/// other orders (the worker), and eight cancellations of paid orders of
/// the product (the `Cancel` road, giving stock back). Every road takes
/// the ledger's locks in one order (docs/ledger.md, "One lock order"), so
/// no transaction deadlocks: every order is created once (201, paid by
/// the capture that waited), every cancellation answers 200, the stock is
/// moved once per order, and neither the API nor the worker logged a
/// deadlock. Before, the create locked the product `FOR UPDATE` after its
/// `order_items` had taken the row's `FOR KEY SHARE`: two creates waited
/// for each other's share and most of them answered 503.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_product_stormed_from_every_road_at_once_creates_each_order_once_without_a_deadlock() {
    const WAITING: usize = 16;
    const PAID: usize = 8;
    const CANCELLED: usize = 8;
    const STOCK: i64 = 1_000;
    let mut env = TestEnv::new().await;
    // The waiting captures must still wait when the storm comes.
    env.set_env("ONCEHOOK_UNLINKED_TTL", "5m");
    let api = Api::start(&mut env, &[]).await;
    let (ingest, base) = env.start_ingest().await;
    let worker = env.start_worker().await;
    api.product("hot", i32::try_from(STOCK).expect("stock"))
        .await;

    // Before the storm: orders to pay during it, paid orders to cancel
    // during it, and the captures that wait for orders not created yet.
    for i in 0..PAID {
        let created = api
            .create_order(
                &format!("k-pay-{i}"),
                &order_body(&format!("o-pay-{i}"), "hot", 2),
            )
            .await;
        assert_eq!(created.status, 201, "{}", created.json);
    }
    for i in 0..CANCELLED {
        let order_ref = format!("o-cancel-{i}");
        let created = api
            .create_order(&format!("k-cancel-{i}"), &order_body(&order_ref, "hot", 2))
            .await;
        assert_eq!(created.status, 201, "{}", created.json);
        let capture = env.captured(
            &order_ref,
            &format!("pay_cancel_{i}"),
            &format!("evt_cancel_{i}"),
        );
        env.post_ok(&base, "razorpay", &capture).await;
    }
    let mut payments = Vec::new();
    for i in 0..WAITING {
        let payment = payment_locked_first(&env, &format!("order_rzp_o-wait-{i}"), i).await;
        let capture = env.captured(
            &format!("order_rzp_o-wait-{i}"),
            &payment,
            &format!("evt_wait_{i}"),
        );
        env.post_ok(&base, "razorpay", &capture).await;
        payments.push(payment);
    }
    oncehook_e2e::eventually("the stage set", oncehook_e2e::WAIT, || async {
        let paid = env
            .count("SELECT count(*) FROM orders WHERE status = 'paid'")
            .await;
        let waiting = env.count("SELECT count(*) FROM parked_events").await;
        (paid == i64::try_from(CANCELLED).ok()? && waiting == i64::try_from(WAITING).ok()?)
            .then_some(())
    })
    .await;
    let paid_before = STOCK - 2 * i64::try_from(CANCELLED).expect("count");
    let stock = api.get("/v1/products/hot", READ_KEY).await;
    assert_eq!(stock.json["stock"], paid_before, "{}", stock.json);

    // The storm: every road at once.
    let gate = std::sync::Arc::new(tokio::sync::Barrier::new(
        WAITING + PAID + CANCELLED + WAITING,
    ));
    let mut creates = tokio::task::JoinSet::new();
    for i in 0..WAITING {
        let (http, url) = (api.http.clone(), format!("{}/v1/orders", api.base));
        let body = order_body(&format!("o-wait-{i}"), "hot", 2);
        let post = post_at_once(http, url, Some(format!("k-wait-{i}")), body, gate.clone());
        creates.spawn(async move { (i, post.await) });
    }
    let mut cancels = tokio::task::JoinSet::new();
    for i in 0..CANCELLED {
        let url = format!("{}/v1/orders/o-cancel-{i}/cancel", api.base);
        let body = r#"{"reason": "storm"}"#.to_owned();
        let post = post_at_once(api.http.clone(), url, None, body, gate.clone());
        cancels.spawn(async move { (i, post.await) });
    }
    let mut webhooks = tokio::task::JoinSet::new();
    let deliveries = (0..PAID)
        .map(|i| {
            env.captured(
                &format!("o-pay-{i}"),
                &format!("pay_pay_{i}"),
                &format!("evt_pay_{i}"),
            )
        })
        .chain(payments.iter().enumerate().map(|(i, payment)| {
            env.sign(
                oncehook_gateways::Gateway::Razorpay,
                "order.paid",
                &env.spec(
                    &format!("order_rzp_o-wait-{i}"),
                    payment,
                    &format!("evt_wait_paid_{i}"),
                    50_000,
                ),
            )
        }));
    for delivery in deliveries {
        let (http, gate) = (env.http.clone(), gate.clone());
        let url = format!("{base}/webhooks/razorpay");
        webhooks.spawn(async move {
            gate.wait().await;
            oncehook_e2e::env::send(&http, &url, &delivery).await
        });
    }
    let mut surfaced = Vec::new();
    while let Some(done) = creates.join_next().await {
        let (i, (status, json)) = done.expect("create task");
        if status != 201 || json["status"] != "paid" {
            surfaced.push(format!("create o-wait-{i}: {status} {json}"));
        }
    }
    while let Some(done) = cancels.join_next().await {
        let (i, (status, json)) = done.expect("cancel task");
        if status != 200 || json["status"] != "cancelled" {
            surfaced.push(format!("cancel o-cancel-{i}: {status} {json}"));
        }
    }
    while let Some(done) = webhooks.join_next().await {
        let (status, body) = done.expect("webhook task");
        if status != 200 {
            surfaced.push(format!("webhook: {status} {body}"));
        }
    }
    assert_eq!(
        surfaced,
        Vec::<String>::new(),
        "every caller got its answer"
    );

    // Every webhook processed: the waiting captures, their order.paid, the
    // captures of the cancelled and of the paid orders.
    let deliveries = 2 * WAITING + PAID + CANCELLED;
    oncehook_e2e::eventually("every order paid", oncehook_e2e::WAIT, || async {
        let paid = env
            .count("SELECT count(*) FROM orders WHERE status = 'paid'")
            .await;
        let processed = env
            .count("SELECT count(*) FROM processed_webhooks WHERE outcome <> 'parked'")
            .await;
        (paid == i64::try_from(WAITING + PAID).ok()?
            && processed == i64::try_from(deliveries).ok()?)
        .then_some(())
    })
    .await;
    let all = i64::try_from(WAITING + PAID + CANCELLED).expect("count");
    assert_eq!(env.count("SELECT count(*) FROM orders").await, all);
    assert_eq!(env.count("SELECT count(*) FROM order_items").await, all);
    assert_eq!(
        env.count("SELECT count(*) FROM orders WHERE status = 'cancelled'")
            .await,
        i64::try_from(CANCELLED).expect("count")
    );
    assert_eq!(env.count("SELECT count(*) FROM parked_events").await, 0);
    assert_eq!(
        env.count("SELECT count(*) FROM payments WHERE status = 'captured'")
            .await,
        all,
        "one capture per order (order.paid names the same one)"
    );
    assert_eq!(
        env.count("SELECT count(*) FROM email_outbox WHERE kind = 'confirmation'")
            .await,
        all,
        "one confirmation per order paid"
    );
    // Each order paid and not cancelled took its two; the cancelled gave theirs back.
    let stock = api.get("/v1/products/hot", READ_KEY).await;
    assert_eq!(
        stock.json["stock"],
        STOCK - 2 * i64::try_from(WAITING + PAID).expect("count"),
        "{}",
        stock.json
    );
    assert_eq!(
        env.count("SELECT count(*) FROM orders WHERE stock_applied")
            .await,
        i64::try_from(WAITING + PAID).expect("count")
    );
    assert_eq!(
        deadlocks_in(&[&api.proc, &worker, &ingest]),
        Vec::<String>::new(),
        "no transaction of any road deadlocked"
    );
}

/// Waits until a session other than the test's waits for a lock in the
/// test's database.
async fn someone_waits_for_a_lock(env: &TestEnv) {
    oncehook_e2e::eventually(
        "a session waiting for a lock",
        oncehook_e2e::WAIT,
        || async {
            let waiting = env
                .count(
                    "SELECT count(*) FROM pg_stat_activity
                 WHERE datname = current_database() AND wait_event_type = 'Lock'
                   AND pid <> pg_backend_pid()",
                )
                .await;
            (waiting > 0).then_some(())
        },
    )
    .await;
}

/// Issue 42: a deadlock that can still happen (a transaction outside the
/// ledger's lock order, here the test's own) is retried inside the API's
/// transaction, not answered 503. The test's transaction takes a lock the
/// API's create (then its cancel) will want, waits until the API waits for
/// it, then asks for a lock the API holds: Postgres aborts the API's
/// transaction (its deadlock timeout comes first), which the API tries
/// again once the test's transaction is gone.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_deadlock_that_still_happens_is_retried_by_the_api_not_answered_503() {
    let mut env = TestEnv::new().await;
    env.set_env("ONCEHOOK_UNLINKED_TTL", "5m");
    let api = Api::start(&mut env, &[]).await;
    let (_ingest, base) = env.start_ingest().await;
    let _worker = env.start_worker().await;
    api.product("mug", 10).await;
    env.post_ok(
        &base,
        "razorpay",
        &env.captured("order_rzp_o-dl", "pay_dl", "evt_dl"),
    )
    .await;
    oncehook_e2e::eventually("the capture waits", oncehook_e2e::WAIT, || async {
        (env.count("SELECT count(*) FROM parked_events").await == 1).then_some(())
    })
    .await;
    // The keys of books::lock_keys.
    let lock = "SELECT pg_advisory_xact_lock(hashtextextended($1, 7))";

    // The create: it holds its references' locks when it wants the waiting
    // capture's payment, which the test holds.
    let mut theirs = env.pool.begin().await.expect("begin");
    sqlx::query("SET LOCAL deadlock_timeout = '20s'")
        .execute(&mut *theirs)
        .await
        .expect("set");
    sqlx::query(lock)
        .bind("razorpay:pay_dl")
        .execute(&mut *theirs)
        .await
        .expect("lock the payment");
    let create = {
        let (http, base) = (api.http.clone(), api.base.clone());
        tokio::spawn(async move {
            let r = http
                .post(format!("{base}/v1/orders"))
                .header("Authorization", format!("Bearer {FULL_KEY}"))
                .header("Content-Type", "application/json")
                .header("Idempotency-Key", "k-dl")
                .body(order_body("o-dl", "mug", 2))
                .send()
                .await
                .expect("post");
            answer(r).await
        })
    };
    someone_waits_for_a_lock(&env).await;
    sqlx::query(lock)
        .bind("order:o-dl")
        .execute(&mut *theirs)
        .await
        .expect("the API's transaction gave way");
    theirs.rollback().await.expect("rollback");
    let (status, json) = create.await.expect("create");
    assert_eq!(
        (status, &json["status"]),
        (201, &Value::from("paid")),
        "{json}"
    );

    // The cancel: it holds the order's reference when it wants the order's
    // row, which the test holds.
    let mut theirs = env.pool.begin().await.expect("begin");
    sqlx::query("SET LOCAL deadlock_timeout = '20s'")
        .execute(&mut *theirs)
        .await
        .expect("set");
    sqlx::query("SELECT 1 FROM orders WHERE order_ref = 'o-dl' FOR UPDATE")
        .execute(&mut *theirs)
        .await
        .expect("lock the order");
    let cancel = {
        let (http, base) = (api.http.clone(), api.base.clone());
        tokio::spawn(async move {
            let r = http
                .post(format!("{base}/v1/orders/o-dl/cancel"))
                .header("Authorization", format!("Bearer {FULL_KEY}"))
                .header("Content-Type", "application/json")
                .body(r#"{"reason": "deadlock"}"#)
                .send()
                .await
                .expect("cancel");
            answer(r).await
        })
    };
    someone_waits_for_a_lock(&env).await;
    sqlx::query(lock)
        .bind("order:o-dl")
        .execute(&mut *theirs)
        .await
        .expect("the API's transaction gave way");
    theirs.rollback().await.expect("rollback");
    let (status, json) = cancel.await.expect("cancel");
    assert_eq!(
        (status, &json["status"]),
        (200, &Value::from("cancelled")),
        "{json}"
    );

    // Both were deadlocks, each retried once, and the books are as if
    // nothing had happened.
    let log = api.proc.log_text();
    let retried = log
        .lines()
        .filter(|l| l.contains("deadlock detected") && l.contains("tried again"))
        .count();
    assert_eq!(retried, 2, "{log}");
    assert_eq!(env.count("SELECT count(*) FROM orders").await, 1);
    assert_eq!(
        env.count("SELECT count(*) FROM email_outbox WHERE kind = 'confirmation'")
            .await,
        1
    );
    assert_eq!(
        api.get("/v1/products/mug", READ_KEY).await.json["stock"],
        10
    );
}
