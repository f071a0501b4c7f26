//! Ingest's edge against bad requests: wrong signatures (401, nothing
//! published), oversized headers, stalled bodies and wrong methods, a burst
//! of them logged at WARN at most once per reason a second, and
//! `X-Content-Type-Options: nosniff` on every answer.

use std::time::Duration;

use oncehook_e2e::env::with_header;
use oncehook_e2e::{TestEnv, broker};
use oncehook_gateways::Gateway;

#[tokio::test]
async fn bad_signatures_get_401_and_nothing_is_published() {
    let mut env = TestEnv::new().await;
    let (ingest, url) = env.start_ingest().await;
    let spec = env.spec("order_5", "pay_E", "evt_E", 50_000);
    let good = env.sign(Gateway::Razorpay, "payment.captured", &spec);

    let mut tampered = good.clone();
    oncehook_gateways::sample::tamper(&mut tampered);
    let wrong_secret = oncehook_gateways::sample::build(
        Gateway::Razorpay,
        "payment.captured",
        &spec,
        "not-the-secret",
    )
    .expect("sample");
    let mut missing = good.clone();
    missing.headers = missing
        .headers
        .iter()
        .filter(|(n, _)| *n != "x-razorpay-signature")
        .collect();

    for (what, d) in [
        ("tampered body", &tampered),
        ("wrong secret", &wrong_secret),
        ("missing header", &missing),
    ] {
        let (status, body) = env.post(&url, "razorpay", d).await;
        assert_eq!(status, 401, "{what}: {body}");
        assert!(
            body.contains("\"error\""),
            "{what}: JSON error body: {body}"
        );
    }
    // Unknown source and an oversized body are refused too.
    assert_eq!(env.post(&url, "paypal", &good).await.0, 404);
    let mut huge = good.clone();
    huge.body = vec![b' '; 300 * 1024];
    assert_eq!(env.post_fresh(&url, "razorpay", &huge).await.0, 413);

    // A signature header that cannot be read, and a PayU body that is not a readable form: 400.
    let mut garbled = env.sign(Gateway::Stripe, "captured", &spec);
    garbled.headers = garbled
        .headers
        .iter()
        .map(|(n, v)| {
            (
                n,
                if n == "stripe-signature" {
                    "nonsense".to_owned()
                } else {
                    v.to_owned()
                },
            )
        })
        .collect();
    let (status, body) = env.post(&url, "stripe", &garbled).await;
    assert_eq!(status, 400, "{body}");
    assert!(body.contains("malformed_signature"), "{body}");
    let mut not_a_form = env.sign(Gateway::Payu, "success", &spec);
    not_a_form.body = b"txnid=\xff\xfe&hash=00".to_vec();
    assert_eq!(env.post(&url, "payu", &not_a_form).await.0, 400);

    // No worker runs, so anything published would still be in the queue.
    assert_eq!(broker::events_depth(&env.prefix).await, Some(0));
    // Refusals are logged for operators, without secrets.
    let log = ingest.log_text();
    assert!(log.contains("webhook refused"), "{log}");
    for secret in [
        oncehook_e2e::Secrets::RAZORPAY,
        oncehook_e2e::Secrets::STRIPE,
        oncehook_e2e::Secrets::PAYU,
    ] {
        assert!(!log.contains(secret), "a secret leaked into the log");
    }
    // The authentic one is accepted and is then the only message.
    assert_eq!(env.post(&url, "razorpay", &good).await.0, 200);
    assert_eq!(broker::events_depth(&env.prefix).await, Some(1));
}

#[tokio::test]
async fn the_edge_refuses_oversized_headers_stalled_bodies_and_wrong_methods_without_publishing() {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let mut env = TestEnv::new().await;
    let (mut ingest, url) = env.start_ingest().await;
    let addr = url.trim_start_matches("http://").to_owned();

    // 200 KB of headers: refused (by the HTTP layer, or by ingest's own limit).
    // A fresh connection per request: the server closes a connection after
    // refusing its headers, and a pooled one would then be reset under the next request.
    let fresh = || {
        reqwest::Client::builder()
            .pool_max_idle_per_host(0)
            .timeout(Duration::from_secs(15))
            .build()
            .expect("client")
    };
    let huge = fresh()
        .post(format!("{url}/webhooks/razorpay"))
        .header("x-padding", "a".repeat(200 * 1024))
        .body("{}")
        .send()
        .await
        .map(|r| r.status().as_u16());
    assert!(
        matches!(huge, Ok(431) | Err(_)),
        "oversized headers refused: {huge:?}"
    );

    // 20 KB of headers pass the HTTP layer but not ingest's limit.
    let big = fresh()
        .post(format!("{url}/webhooks/razorpay"))
        .header("x-padding", "a".repeat(20 * 1024))
        // No body: an early answer with unread body bytes can turn into a TCP reset.
        .send()
        .await
        .expect("answered");
    assert_eq!(big.status().as_u16(), 431);
    assert!(
        big.text()
            .await
            .unwrap_or_default()
            .contains("headers_too_large")
    );

    // A sender that stops after one byte of a 100-byte body gets 408, not a hung worker.
    let mut stream = tokio::net::TcpStream::connect(&addr)
        .await
        .expect("connect");
    stream
        .write_all(b"POST /webhooks/razorpay HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: 100\r\n\r\n{")
        .await
        .expect("write");
    let mut answer = vec![0u8; 512];
    let n = tokio::time::timeout(Duration::from_secs(20), stream.read(&mut answer))
        .await
        .expect("answered within 20 s")
        .expect("read");
    let answer = String::from_utf8_lossy(&answer[..n]);
    assert!(answer.starts_with("HTTP/1.1 408"), "{answer}");
    assert!(answer.contains("request_timeout"), "{answer}");

    // GET on the webhook endpoint: 405 with a JSON error.
    let get = fresh()
        .get(format!("{url}/webhooks/razorpay"))
        .send()
        .await
        .expect("get");
    assert_eq!(get.status().as_u16(), 405);
    assert!(
        get.text()
            .await
            .unwrap_or_default()
            .contains("method_not_allowed")
    );

    assert_eq!(
        broker::events_depth(&env.prefix).await,
        Some(0),
        "nothing published"
    );
    assert!(ingest.is_running(), "still serving");
}

/// Sends `request` on a connection of its own and returns whatever came
/// back before the server closed it (or 20 s passed).
async fn raw_exchange(addr: &str, request: &[u8]) -> String {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let Ok(mut stream) = tokio::net::TcpStream::connect(addr).await else {
        return String::new();
    };
    // The server may answer and close before it read everything.
    let _ = stream.write_all(request).await;
    let mut answer = Vec::new();
    let _ = tokio::time::timeout(Duration::from_secs(20), stream.read_to_end(&mut answer)).await;
    String::from_utf8_lossy(&answer).into_owned()
}

/// Refusals that are the sender's fault, one of each kind ingest tells
/// apart: (source, delivery, expected status).
fn bad_requests(
    env: &TestEnv,
) -> Vec<(&'static str, oncehook_gateways::sample::SignedDelivery, u16)> {
    let spec = env.spec("order_bad", "pay_bad", "evt_bad", 50_000);
    let good = env.sign(Gateway::Razorpay, "payment.captured", &spec);
    let mut tampered = good.clone();
    oncehook_gateways::sample::tamper(&mut tampered);
    let garbled = with_header(
        &env.sign(Gateway::Stripe, "captured", &spec),
        "stripe-signature",
        "nonsense",
    );
    let mut not_a_form = env.sign(Gateway::Payu, "success", &spec);
    not_a_form.body = b"txnid=\xff\xfe&hash=00".to_vec();
    let wrong_type = with_header(&good, "content-type", "text/plain");
    vec![
        ("razorpay", tampered, 401),
        ("stripe", garbled, 400),
        ("payu", not_a_form, 400),
        ("paypal", good, 404),
        ("razorpay", wrong_type, 415),
    ]
}

/// A burst of bad requests is the senders' fault, not the operator's: no
/// ERROR line, and at most one WARN line per kind of refusal per second,
/// the lines it held back counted on the next line of that kind.
#[tokio::test]
async fn a_burst_of_bad_requests_is_logged_at_warn_at_most_once_per_reason_per_second() {
    const BURST: usize = 30;
    let mut env = TestEnv::new().await;
    let (ingest, url) = env.start_ingest().await;
    let addr = url.trim_start_matches("http://").to_owned();
    let bad = bad_requests(&env);
    let mut huge = bad[0].1.clone();
    huge.body = vec![b' '; 300 * 1024];
    let mut huge_head = b"POST /webhooks/razorpay HTTP/1.1\r\nHost: x\r\nX-Padding: ".to_vec();
    huge_head.extend(std::iter::repeat_n(b'a', 200 * 1024));
    huge_head.extend_from_slice(b"\r\n\r\n");
    // Refused by ingest (5 kinds, plus too large), and by the HTTP layer
    // before ingest sees them (not HTTP; a head over the HTTP layer's limit).
    let reasons = bad.len() + 2;

    let started = std::time::Instant::now();
    for _ in 0..BURST {
        for (source, delivery, status) in &bad {
            assert_eq!(
                env.post(&url, source, delivery).await.0,
                *status,
                "{source}"
            );
        }
        assert_eq!(env.post_fresh(&url, "razorpay", &huge).await.0, 413);
        let answer = raw_exchange(&addr, b"NOT HTTP AT ALL\r\n\r\n").await;
        assert!(answer.starts_with("HTTP/1.1 400"), "{answer:?}");
        raw_exchange(&addr, &huge_head).await;
    }
    let elapsed = started.elapsed();
    // The count of what a reason's last second held back is written within
    // a second or so after it.
    tokio::time::sleep(Duration::from_millis(2500)).await;

    let log = ingest.log_text();
    let errors: Vec<&str> = log.lines().filter(|l| l.contains(" ERROR ")).collect();
    assert!(
        errors.is_empty(),
        "a sender's bad request is not an operator's error:\n{}",
        errors.join("\n")
    );
    let warns: Vec<&str> = log.lines().filter(|l| l.contains(" WARN ")).collect();
    // One line per reason per started second, and the final counts.
    let bound = reasons * (elapsed.as_secs() as usize + 4);
    assert!(
        warns.len() <= bound,
        "{} WARN lines for {} bad requests in {elapsed:?}, at most {bound}:\n{}",
        warns.len(),
        BURST * (bad.len() + 3),
        warns.join("\n")
    );
    assert!(
        bound < BURST * (bad.len() + 3),
        "the burst is long enough to need the limit"
    );
    // Every refusal is accounted for: logged, or counted as held back.
    let field = |line: &str, name: &str| -> Option<u64> {
        line.split_whitespace()
            .find_map(|w| w.strip_prefix(&format!("{name}=")))
            .and_then(|v| v.trim_matches('"').parse().ok())
    };
    let signature_lines: Vec<&str> = warns
        .iter()
        .copied()
        .filter(|l| l.contains("code=invalid_signature"))
        .collect();
    let logged = signature_lines
        .iter()
        .filter(|l| l.contains("webhook refused"))
        .count() as u64;
    let held_back: u64 = signature_lines
        .iter()
        .filter_map(|l| field(l, "suppressed"))
        .sum();
    assert_eq!(
        logged + held_back,
        BURST as u64,
        "every bad signature logged or counted:\n{}",
        signature_lines.join("\n")
    );
    assert!(held_back > 0, "{}", signature_lines.join("\n"));
    assert!(
        warns.iter().any(|l| l.contains("code=malformed_http")),
        "the HTTP layer's refusals are logged at WARN too:\n{}",
        warns.join("\n")
    );
    assert_eq!(
        broker::events_depth(&env.prefix).await,
        Some(0),
        "nothing published"
    );
}

/// `X-Content-Type-Options: nosniff` on everything ingest answers: the
/// webhook's 200, every refusal, the unknown paths, the balancer's
/// `/healthz`, a 503 without a broker, and the metrics listener.
#[tokio::test]
async fn every_answer_of_ingest_says_nosniff() {
    let mut env = TestEnv::new().await;
    let (ingest, url) = env.start_ingest().await;
    let addr = url.trim_start_matches("http://").to_owned();
    let nosniff = |what: &str, resp: &reqwest::Response| {
        assert_eq!(
            resp.headers()
                .get("x-content-type-options")
                .and_then(|v| v.to_str().ok()),
            Some("nosniff"),
            "{what}: {} {:?}",
            resp.status(),
            resp.headers()
        );
    };
    let fresh = || {
        reqwest::Client::builder()
            .pool_max_idle_per_host(0)
            .timeout(Duration::from_secs(15))
            .build()
            .expect("client")
    };
    let post = |source: &str, d: &oncehook_gateways::sample::SignedDelivery| {
        let mut req = fresh()
            .post(format!("{url}/webhooks/{source}"))
            .body(d.body.clone());
        for (name, value) in d.headers.iter() {
            req = req.header(name, value);
        }
        req.send()
    };

    let spec = env.spec("order_ns", "pay_ns", "evt_ns", 50_000);
    let good = env.sign(Gateway::Razorpay, "payment.captured", &spec);
    let accepted = post("razorpay", &good).await.expect("answered");
    assert_eq!(accepted.status().as_u16(), 200);
    nosniff("accepted", &accepted);
    for (source, delivery, status) in bad_requests(&env) {
        let resp = post(source, &delivery).await.expect("answered");
        assert_eq!(resp.status().as_u16(), status, "{source}");
        nosniff(&format!("{status} from {source}"), &resp);
    }
    let mut huge = good.clone();
    huge.body = vec![b' '; 300 * 1024];
    let resp = post("razorpay", &huge).await.expect("answered");
    assert_eq!(resp.status().as_u16(), 413);
    nosniff("413", &resp);
    let resp = fresh()
        .post(format!("{url}/webhooks/razorpay"))
        .header("x-padding", "a".repeat(20 * 1024))
        .send()
        .await
        .expect("answered");
    assert_eq!(resp.status().as_u16(), 431);
    nosniff("431", &resp);
    for (path, status) in [
        ("/webhooks/razorpay", 405),
        ("/nothing/here", 404),
        ("/healthz", 200),
    ] {
        let resp = fresh()
            .get(format!("{url}{path}"))
            .send()
            .await
            .expect("answered");
        assert_eq!(resp.status().as_u16(), status, "{path}");
        nosniff(path, &resp);
    }
    let stalled = raw_exchange(
        &addr,
        b"POST /webhooks/razorpay HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: 100\r\n\r\n{",
    )
    .await;
    assert!(stalled.starts_with("HTTP/1.1 408"), "{stalled}");
    assert!(
        stalled
            .to_ascii_lowercase()
            .contains("\r\nx-content-type-options: nosniff\r\n"),
        "408: {stalled}"
    );
    for path in ["/healthz", "/readyz", "/metrics"] {
        let resp = fresh()
            .get(format!("{}{path}", ingest.metrics_url()))
            .send()
            .await
            .expect("answered");
        assert_eq!(resp.status().as_u16(), 200, "metrics listener {path}");
        nosniff(&format!("metrics listener {path}"), &resp);
    }

    // Without a broker: the 503s.
    let dead_port = oncehook_e2e::free_port();
    let amqp = format!("amqp://guest:guest@127.0.0.1:{dead_port}/%2f");
    let (orphan, orphan_url) = env.spawn_ingest(&[("ONCEHOOK_AMQP_URL", amqp.as_str())]);
    env.wait_ready(orphan.metrics_url(), "/healthz").await;
    let mut req = fresh()
        .post(format!("{orphan_url}/webhooks/razorpay"))
        .body(good.body.clone());
    for (name, value) in good.headers.iter() {
        req = req.header(name, value);
    }
    let resp = req.send().await.expect("answered");
    assert_eq!(resp.status().as_u16(), 503);
    nosniff("503", &resp);
    let resp = fresh()
        .get(format!("{orphan_url}/healthz"))
        .send()
        .await
        .expect("answered");
    assert_eq!(resp.status().as_u16(), 503);
    nosniff("/healthz while not ready", &resp);
}
