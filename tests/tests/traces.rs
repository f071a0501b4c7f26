//! One trace per payment (OpenTelemetry), against the real binaries and a
//! stand-in collector (`support::otlp`): a webhook posted with the
//! gateway's `traceparent` gives spans from ingest, the worker, the
//! mailer and the notifier (its order event to the shop) in that one trace; duplicates and replays are told apart; a
//! collector that is down costs spans (counted), never an event.

use std::time::Duration;

use oncehook_e2e::env::with_header;
use oncehook_e2e::metrics::{scrape, sum};
use oncehook_e2e::ops::{self, ctl_json, ctl_ok, wait_dead};
use oncehook_e2e::otlp::{OtlpReceiver, ReceivedSpan};
use oncehook_e2e::shop::{self, Shop, wait_paid_and_mailed};
use oncehook_e2e::{TestEnv, WAIT, eventually};

/// The gateway's own trace and span (as a gateway that traces would send).
const GATEWAY_TRACE: &str = "4bf92f3577b34da6a3ce929d0e0e4736";
const GATEWAY_SPAN: &str = "00f067aa0ba902b7";

fn traced(env: &mut TestEnv, receiver: &OtlpReceiver) {
    env.set_env("OTEL_EXPORTER_OTLP_ENDPOINT", &receiver.endpoint);
    // Export every 200 ms instead of every 5 s.
    env.set_env("OTEL_BSP_SCHEDULE_DELAY", "200");
}

/// Whether a span is the `operation` (`publish`, `process`) of a messaging
/// span, named `{operation} {destination}` by the conventions.
fn is(s: &ReceivedSpan, operation: &str) -> bool {
    s.name == operation || s.name.starts_with(&format!("{operation} "))
}

fn one<'a>(spans: &'a [ReceivedSpan], service: &str, name: &str) -> &'a ReceivedSpan {
    let found: Vec<&ReceivedSpan> = spans
        .iter()
        .filter(|s| s.service == service && is(s, name))
        .collect();
    assert_eq!(found.len(), 1, "one {service} {name:?} span in {spans:#?}");
    found[0]
}

#[tokio::test]
async fn one_webhook_is_one_trace_from_the_gateways_request_to_the_customers_inbox() {
    let receiver = OtlpReceiver::start().await;
    let mut env = TestEnv::new().await;
    traced(&mut env, &receiver);
    Shop::basket("tr_1").seed(&env.pool).await;
    let p = env.pipeline().await;
    let delivery = with_header(
        &env.captured("tr_1", "pay_tr1", "evt_tr1"),
        "traceparent",
        &format!("00-{GATEWAY_TRACE}-{GATEWAY_SPAN}-01"),
    );
    env.post_ok(&p.url, "razorpay", &delivery).await;
    wait_paid_and_mailed(&env.pool, "tr_1").await;

    let spans = eventually("every hop's spans exported", WAIT, || async {
        let t = receiver.trace(GATEWAY_TRACE);
        let has = |service: &str, op: &str| t.iter().any(|s| s.service == service && is(s, op));
        (has("oncehook-ingest", "POST /webhooks/{source}")
            && has("oncehook-ingest", "publish")
            && has("oncehook-worker", "process")
            && has("oncehook-worker", "publish")
            && has("oncehook-mailer", "process")
            && has("oncehook-mailer", "send email"))
        .then_some(t)
    })
    .await;
    let request = one(&spans, "oncehook-ingest", "POST /webhooks/{source}");
    assert_eq!(
        request.parent_span_id, GATEWAY_SPAN,
        "a child of the gateway's span"
    );
    assert_eq!(request.kind, 2, "server");
    assert_eq!(request.attributes["oncehook.event_id"], "evt_tr1");
    assert_eq!(request.attributes["oncehook.outcome"], "accepted");
    assert_eq!(request.attributes["http.response.status_code"], "200");
    let publish = one(&spans, "oncehook-ingest", "publish");
    assert_eq!(publish.parent_span_id, request.span_id);
    assert_eq!(publish.attributes["messaging.system"], "rabbitmq");
    assert_eq!(publish.kind, 4, "producer");
    let process = spans
        .iter()
        .find(|s| s.service == "oncehook-worker" && is(s, "process"))
        .expect("the worker's span");
    assert_eq!(
        process.parent_span_id, publish.span_id,
        "continued across the broker"
    );
    assert_eq!(process.kind, 5, "consumer");
    assert_eq!(process.attributes["oncehook.outcome"], "applied");
    assert_eq!(process.attributes["oncehook.order_ref"], "tr_1");
    assert_eq!(
        process.attributes["messaging.rabbitmq.destination.routing_key"],
        "razorpay.payment.captured"
    );
    let mailed = one(&spans, "oncehook-mailer", "process");
    let relayed = spans
        .iter()
        .find(|s| {
            s.service == "oncehook-worker" && is(s, "publish") && s.span_id == mailed.parent_span_id
        })
        .expect("the relay's publish is the mailer's parent");
    assert_eq!(
        relayed.parent_span_id, process.span_id,
        "the outbox row kept the delivery's context"
    );
    let send = one(&spans, "oncehook-mailer", "send email");
    assert_eq!(send.parent_span_id, mailed.span_id);

    // The group's transaction is a span of its own, linked to the delivery.
    let commit = eventually("the commit span exported", WAIT, || async {
        receiver
            .spans()
            .into_iter()
            .find(|s| s.name == "commit group" && s.links.iter().any(|(t, _)| t == GATEWAY_TRACE))
    })
    .await;
    assert_eq!(commit.service, "oncehook-worker");

    // The operator finds the trace id where they look.
    let stored: Option<String> =
        sqlx::query_scalar("SELECT trace_id FROM processed_webhooks WHERE event_id = 'evt_tr1'")
            .fetch_one(&env.pool)
            .await
            .expect("trace id");
    assert_eq!(stored.as_deref(), Some(GATEWAY_TRACE));
    let story = ctl_json(&env, &["trace", "order", "tr_1"]).await;
    assert_eq!(story["webhooks"][0]["trace_id"], GATEWAY_TRACE, "{story}");
    assert!(
        ctl_ok(&env, &["trace", "order", "tr_1"])
            .await
            .contains(GATEWAY_TRACE)
    );
    // The worker's text log line inside its span names the trace and the
    // span at its end.
    let ids = format!("trace_id={GATEWAY_TRACE} span_id={}", process.span_id);
    let log = p.worker().log_text();
    assert!(
        log.lines()
            .any(|l| l.contains("event processed") && l.ends_with(&ids)),
        "no line ends with {ids}:\n{log}"
    );
    assert_eq!(shop::emails(&env.pool, "tr_1").await.len(), 1);
}

#[tokio::test]
async fn a_duplicate_is_marked_and_a_replay_is_a_new_trace_linked_to_the_first() {
    let receiver = OtlpReceiver::start().await;
    let mut env = TestEnv::new().await;
    traced(&mut env, &receiver);
    Shop::basket("tr_dup").seed(&env.pool).await;
    let p = env.pipeline().await;
    let delivery = env.captured("tr_dup", "pay_trdup", "evt_trdup");
    env.post_ok(&p.url, "razorpay", &delivery).await;
    wait_paid_and_mailed(&env.pool, "tr_dup").await;
    env.post_ok(&p.url, "razorpay", &delivery).await;
    eventually("the duplicate's span", WAIT, || async {
        receiver.spans().into_iter().find(|s| {
            is(s, "process")
                && s.attributes.get("oncehook.outcome").map(String::as_str) == Some("duplicate")
        })
    })
    .await;

    // An authentic event the worker cannot read is dead-lettered at once;
    // an operator replays it: a new trace, linked to the handling that
    // gave up in the first delivery's.
    let unreadable = ops::razorpay_raw(
        r#"{"event":"payment.captured","payload":{}}"#,
        Some("evt_trbad"),
    );
    env.post_ok(&p.url, "razorpay", &unreadable).await;
    wait_dead(&env, 1).await;
    // Ingest names it by the event-id header it could read.
    let message_id = "razorpay:evt_trbad".to_owned();

    let first = eventually("the first delivery's publish span", WAIT, || async {
        receiver.spans().into_iter().find(|s| {
            s.service == "oncehook-ingest"
                && is(s, "publish")
                && s.attributes.get("messaging.message.id") == Some(&message_id)
        })
    })
    .await;
    // The operator finds the letter's trace where they look at it.
    let letters = ctl_json(&env, &["dlq", "list"]).await;
    let id = letters[0]["id"].as_str().expect("a letter id").to_owned();
    let shown = ctl_json(&env, &["dlq", "show", &id]).await;
    assert_eq!(shown["trace_id"], first.trace_id.as_str(), "{shown:#}");
    assert!(shown["first_trace_id"].is_null(), "{shown:#}");
    assert!(
        ctl_ok(&env, &["dlq", "show", &id])
            .await
            .contains(&first.trace_id)
    );

    // The worker's handling that gave up, in the first delivery's trace.
    let failed = eventually("the failed handling's span", WAIT, || async {
        receiver.trace(&first.trace_id).into_iter().find(|s| {
            s.service == "oncehook-worker"
                && is(s, "process")
                && s.attributes.get("messaging.message.id") == Some(&message_id)
        })
    })
    .await;
    assert_eq!(failed.parent_span_id, first.span_id);
    ctl_ok(&env, &["dlq", "replay", "--all", "--yes"]).await;
    let replayed = eventually("the replay's span, linked to the failure", WAIT, || async {
        receiver.spans().into_iter().find(|s| {
            is(s, "process")
                && s.links
                    .contains(&(failed.trace_id.clone(), failed.span_id.clone()))
        })
    })
    .await;
    assert_ne!(replayed.trace_id, first.trace_id, "a new trace");
    assert_eq!(replayed.parent_span_id, "", "a root of its own");

    // Still unreadable, it is dead-lettered again: in the replay's trace,
    // naming the first.
    wait_dead(&env, 1).await;
    let letters = ctl_json(&env, &["dlq", "list"]).await;
    let id = letters[0]["id"].as_str().expect("a letter id").to_owned();
    let shown = ctl_json(&env, &["dlq", "show", &id]).await;
    assert_eq!(shown["trace_id"], replayed.trace_id.as_str(), "{shown:#}");
    assert_eq!(
        shown["first_trace_id"],
        first.trace_id.as_str(),
        "{shown:#}"
    );
}

#[tokio::test]
async fn with_the_collector_down_every_event_is_applied_and_lost_spans_are_counted() {
    let receiver = OtlpReceiver::start().await;
    let endpoint = receiver.endpoint.clone();
    drop(receiver);
    let mut env = TestEnv::new().await;
    env.set_env("OTEL_EXPORTER_OTLP_ENDPOINT", &endpoint);
    env.set_env("OTEL_BSP_SCHEDULE_DELAY", "200");
    let orders: Vec<String> = (0..5).map(|i| format!("tr_down_{i}")).collect();
    Shop::mugs(10, &orders).seed(&env.pool).await;
    let p = env.pipeline().await;
    for (i, o) in orders.iter().enumerate() {
        env.post_ok(
            &p.url,
            "razorpay",
            &env.captured(o, &format!("pay_down{i}"), &format!("evt_down{i}")),
        )
        .await;
    }
    for o in &orders {
        wait_paid_and_mailed(&env.pool, o).await;
    }
    let worker = p.worker().metrics_url().to_owned();
    eventually("dropped spans counted", Duration::from_secs(60), || async {
        (sum(
            &scrape(&worker).await,
            "oncehook_telemetry_spans_dropped_total",
        ) > 0.0)
            .then_some(())
    })
    .await;
    assert_eq!(shop::stock(&env.pool, "MUG").await, 5);
}

#[tokio::test]
async fn an_event_parked_then_dead_lettered_keeps_its_trace() {
    let receiver = OtlpReceiver::start().await;
    let mut env = TestEnv::new().await;
    traced(&mut env, &receiver);
    let p = env.pipeline().await;
    let delivery = with_header(
        &env.captured("tr_never", "pay_trnever", "evt_trnever"),
        "traceparent",
        &format!("00-{GATEWAY_TRACE}-{GATEWAY_SPAN}-01"),
    );
    env.post_ok(&p.url, "razorpay", &delivery).await;
    // It waits for an order that never comes (2 s here), then the sweeper
    // dead-letters it: the letter carries the delivery's trace.
    wait_dead(&env, 1).await;
    let letters = ops::dlq_list(&env, &[]).await;
    let id = letters[0]["id"].as_str().expect("an id").to_owned();
    let shown = ctl_json(&env, &["dlq", "show", &id]).await;
    let traceparent = shown["headers"]["traceparent"]
        .as_str()
        .unwrap_or_else(|| panic!("a traceparent header: {shown}"));
    assert_eq!(
        traceparent.split('-').nth(1),
        Some(GATEWAY_TRACE),
        "{shown}"
    );
}

#[tokio::test]
async fn the_order_event_to_the_shop_joins_the_payments_trace() {
    use oncehook_e2e::receiver::{Receiver, SECRET};
    let receiver = OtlpReceiver::start().await;
    let shop_rx = Receiver::start(SECRET).await;
    let mut env = TestEnv::new().await;
    traced(&mut env, &receiver);
    env.append_config(&format!(
        "[[notify.endpoint]]\nname = \"shop\"\nurl = \"{}\"\nsecret = \"{SECRET}\"\nevents = [\"order.paid\"]\n",
        shop_rx.url
    ));
    Shop::basket("tr_n1").seed(&env.pool).await;
    let p = env.pipeline().await;
    let _notifier = env.start_consumer("oncehook-notifier", &[]).await;
    let delivery = with_header(
        &env.captured("tr_n1", "pay_trn1", "evt_trn1"),
        "traceparent",
        &format!("00-{GATEWAY_TRACE}-{GATEWAY_SPAN}-01"),
    );
    env.post_ok(&p.url, "razorpay", &delivery).await;
    let spans = eventually("the notifier's spans exported", WAIT, || async {
        let t = receiver.trace(GATEWAY_TRACE);
        let has = |op: &str| {
            t.iter()
                .any(|s| s.service == "oncehook-notifier" && is(s, op))
        };
        // The worker's span comes in its own export, maybe after these.
        let worker = t
            .iter()
            .any(|s| s.service == "oncehook-worker" && is(s, "process"));
        (has("publish") && has("process") && has("POST shop") && worker).then_some(t)
    })
    .await;
    let process = spans
        .iter()
        .find(|s| s.service == "oncehook-worker" && is(s, "process"))
        .expect("the worker's span");
    let published = one(&spans, "oncehook-notifier", "publish");
    assert_eq!(
        published.parent_span_id, process.span_id,
        "the order event kept the delivery's context"
    );
    assert_eq!(
        published.attributes["messaging.destination.name"],
        format!("{}.order-events", env.prefix)
    );
    let fanned = one(&spans, "oncehook-notifier", "process");
    assert_eq!(
        fanned.parent_span_id, published.span_id,
        "continued across the broker"
    );
    let post = one(&spans, "oncehook-notifier", "POST shop");
    assert_eq!(
        post.parent_span_id, fanned.span_id,
        "the attempt is a child of the fan-out that made its row"
    );
    assert_eq!(post.kind, 3, "client");
    assert_eq!(post.attributes["oncehook.outcome"], "delivered");
    assert_eq!(post.attributes["http.response.status_code"], "200");
    // The shop's request carries the trace on.
    let got = shop_rx.received();
    let tp = got[0]
        .traceparent
        .as_deref()
        .expect("a traceparent to the shop");
    assert!(
        tp.contains(GATEWAY_TRACE) && tp.contains(&post.span_id),
        "{tp}"
    );
}

#[tokio::test]
async fn a_collector_that_wants_an_api_key_gets_it_from_the_headers_setting() {
    // http/protobuf, the key in the file, %-encoded (it holds a comma).
    let http = OtlpReceiver::start()
        .await
        .requiring("x-honeycomb-team", "k3y,1");
    let mut env = TestEnv::new().await;
    traced(&mut env, &http);
    env.append_config("[telemetry]\notlp_headers = \"x-honeycomb-team=k3y%2C1\"\n");
    let (_ingest, url) = env.start_ingest().await;
    env.post_ok(
        &url,
        "razorpay",
        &env.captured("tr_h1", "pay_trh1", "evt_trh1"),
    )
    .await;
    eventually("ingest's spans accepted with the key", WAIT, || async {
        (!http.spans().is_empty()).then_some(())
    })
    .await;
    assert_eq!(http.refused(), 0, "every export carried the key once");

    // gRPC, the key from the standard variable (it wins over the file):
    // sent once, though the exporter reads the variable too.
    let grpc = OtlpReceiver::start_grpc()
        .await
        .requiring("authorization", "Bearer t0ken");
    env.set_env("OTEL_EXPORTER_OTLP_ENDPOINT", &grpc.endpoint);
    env.set_env("OTEL_EXPORTER_OTLP_PROTOCOL", "grpc");
    env.set_env("OTEL_EXPORTER_OTLP_HEADERS", "authorization=Bearer%20t0ken");
    let (_ingest, url) = env.start_ingest().await;
    env.post_ok(
        &url,
        "razorpay",
        &env.captured("tr_h2", "pay_trh2", "evt_trh2"),
    )
    .await;
    eventually(
        "ingest's spans accepted over gRPC with the key",
        WAIT,
        || async { (!grpc.spans().is_empty()).then_some(()) },
    )
    .await;
    assert_eq!(grpc.refused(), 0, "every call carried the key once");

    // A wrong key: the backend refuses every export; the webhooks are
    // still accepted and the lost spans are counted.
    env.set_env("OTEL_EXPORTER_OTLP_HEADERS", "authorization=Bearer%20wrong");
    let (ingest, url) = env.start_ingest().await;
    env.post_ok(
        &url,
        "razorpay",
        &env.captured("tr_h3", "pay_trh3", "evt_trh3"),
    )
    .await;
    let metrics = ingest.metrics_url().to_owned();
    eventually("refused exports counted as dropped spans", WAIT, || async {
        (grpc.refused() > 0
            && sum(
                &scrape(&metrics).await,
                "oncehook_telemetry_spans_dropped_total",
            ) > 0.0)
            .then_some(())
    })
    .await;
    assert!(
        grpc.spans()
            .iter()
            .all(|s| s.attributes.get("oncehook.event_id").map(String::as_str) != Some("evt_trh3")),
        "no span went through with the wrong key"
    );
}

#[tokio::test]
async fn the_standard_variables_name_the_service_and_choose_what_is_sampled() {
    let receiver = OtlpReceiver::start().await;
    let mut env = TestEnv::new().await;
    traced(&mut env, &receiver);
    env.set_env("OTEL_SERVICE_NAME", "shop-a-ingest");
    env.set_env(
        "OTEL_RESOURCE_ATTRIBUTES",
        "deployment.environment=staging,team=payments",
    );
    // Only traces the gateway sampled: a request without a traceparent
    // starts an unsampled trace of its own.
    env.set_env("OTEL_TRACES_SAMPLER", "parentbased_always_off");
    let (_ingest, url) = env.start_ingest().await;
    env.post_ok(
        &url,
        "razorpay",
        &env.captured("tr_s1", "pay_trs1", "evt_trs_plain"),
    )
    .await;
    let sampled = with_header(
        &env.captured("tr_s2", "pay_trs2", "evt_trs_sampled"),
        "traceparent",
        &format!("00-{GATEWAY_TRACE}-{GATEWAY_SPAN}-01"),
    );
    env.post_ok(&url, "razorpay", &sampled).await;
    let spans = eventually("the sampled request's spans", WAIT, || async {
        let t = receiver.trace(GATEWAY_TRACE);
        (t.len() >= 2).then_some(t)
    })
    .await;
    let request = one(&spans, "shop-a-ingest", "POST /webhooks/{source}");
    assert_eq!(request.attributes["oncehook.event_id"], "evt_trs_sampled");
    assert_eq!(request.resource["deployment.environment"], "staging");
    assert_eq!(request.resource["team"], "payments");
    // A later export would have carried the unsampled request by now.
    tokio::time::sleep(Duration::from_millis(600)).await;
    let all = receiver.spans();
    assert!(
        all.iter().all(|s| s.trace_id == GATEWAY_TRACE),
        "only the gateway's sampled trace is exported: {all:#?}"
    );
}

/// The JSON log lines of `proc` that parse (every line should).
fn json_lines(proc: &oncehook_e2e::process::Proc) -> Vec<serde_json::Value> {
    proc.log_text()
        .lines()
        .map(|l| serde_json::from_str(l).unwrap_or_else(|e| panic!("not JSON ({e}): {l}")))
        .collect()
}

#[tokio::test]
async fn every_json_log_line_inside_a_span_names_its_trace_and_span_at_the_top() {
    use oncehook_e2e::receiver::{Receiver, SECRET};
    let receiver = OtlpReceiver::start().await;
    let shop_rx = Receiver::start(SECRET).await;
    let mut env = TestEnv::new().await;
    traced(&mut env, &receiver);
    env.set_env("ONCEHOOK_LOG_FORMAT", "json");
    env.set_env("ONCEHOOK_LOG", "debug,h2=info,hyper=info,tower=info,reqwest=info,lapin=info,sqlx=info,rustls=info,tonic=info");
    env.append_config(&format!(
        "[[notify.endpoint]]\nname = \"shop\"\nurl = \"{}\"\nsecret = \"{SECRET}\"\nevents = [\"order.paid\"]\n",
        shop_rx.url
    ));
    Shop::basket("tr_j1").seed(&env.pool).await;
    let p = env.pipeline().await;
    let notifier = env.start_consumer("oncehook-notifier", &[]).await;
    let delivery = with_header(
        &env.captured("tr_j1", "pay_trj1", "evt_trj1"),
        "traceparent",
        &format!("00-{GATEWAY_TRACE}-{GATEWAY_SPAN}-01"),
    );
    env.post_ok(&p.url, "razorpay", &delivery).await;
    wait_paid_and_mailed(&env.pool, "tr_j1").await;
    let services = [
        ("oncehook-ingest", &p.ingest),
        ("oncehook-worker", p.worker()),
        ("oncehook-mailer", p.mailer.as_ref().expect("a mailer")),
        ("oncehook-notifier", &notifier),
    ];
    // Each line inside a span says at the top which trace and span it is
    // in (the innermost traced span): one the collector received from that
    // binary. Spans are exported in batches, so wait (bounded) until every
    // such line's span has arrived.
    let started = std::time::Instant::now();
    let spans = loop {
        let all = receiver.spans();
        let ready = services.iter().all(|(service, proc)| {
            let lines = json_lines(proc);
            let inside = in_spans(&lines);
            inside.iter().any(|l| l["trace_id"] == GATEWAY_TRACE)
                && inside.iter().all(|l| {
                    all.iter()
                        .any(|s| s.service == *service && l["span_id"] == s.span_id.as_str())
                })
        });
        if ready || started.elapsed() > WAIT {
            break all;
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    };
    for (service, proc) in services {
        let exported: Vec<(&str, &str)> = spans
            .iter()
            .filter(|s| s.service == service)
            .map(|s| (s.trace_id.as_str(), s.span_id.as_str()))
            .collect();
        let lines = json_lines(proc);
        let inside = in_spans(&lines);
        assert!(
            inside.iter().any(|l| l["trace_id"] == GATEWAY_TRACE),
            "{service} logged nothing inside the payment's spans"
        );
        for line in inside {
            let ids = (
                line["trace_id"].as_str().unwrap_or_default(),
                line["span_id"].as_str().unwrap_or_default(),
            );
            assert!(
                exported.contains(&ids),
                "{service}: the trace and span {ids:?} of {line} are not one of its exported spans {exported:?}"
            );
        }
        // A line outside every span names no trace.
        let outside = lines
            .iter()
            .find(|l| l.get("spans").is_none())
            .unwrap_or_else(|| panic!("{service} logged no line outside a span"));
        assert!(outside.get("trace_id").is_none(), "{service}: {outside}");
    }
}

/// The lines logged inside a span (of oncehook's: every span is).
fn in_spans(lines: &[serde_json::Value]) -> Vec<&serde_json::Value> {
    lines.iter().filter(|l| l.get("spans").is_some()).collect()
}

#[tokio::test]
async fn spans_are_exported_over_grpc_too() {
    let receiver = OtlpReceiver::start_grpc().await;
    let mut env = TestEnv::new().await;
    traced(&mut env, &receiver);
    env.set_env("OTEL_EXPORTER_OTLP_PROTOCOL", "grpc");
    Shop::basket("tr_g1").seed(&env.pool).await;
    let p = env.pipeline().await;
    let delivery = with_header(
        &env.captured("tr_g1", "pay_trg1", "evt_trg1"),
        "traceparent",
        &format!("00-{GATEWAY_TRACE}-{GATEWAY_SPAN}-01"),
    );
    env.post_ok(&p.url, "razorpay", &delivery).await;
    wait_paid_and_mailed(&env.pool, "tr_g1").await;
    let spans = eventually("spans exported over gRPC", WAIT, || async {
        let t = receiver.trace(GATEWAY_TRACE);
        let has = |service: &str, op: &str| t.iter().any(|s| s.service == service && is(s, op));
        (has("oncehook-ingest", "POST /webhooks/{source}")
            && has("oncehook-worker", "process")
            && has("oncehook-mailer", "send email"))
        .then_some(t)
    })
    .await;
    let request = one(&spans, "oncehook-ingest", "POST /webhooks/{source}");
    assert_eq!(request.parent_span_id, GATEWAY_SPAN);
    let (calls, _) = receiver.received();
    assert!(
        calls >= 3,
        "one export call per binary at least, got {calls}"
    );
}
