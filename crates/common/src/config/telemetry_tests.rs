use super::*;
use crate::config::testing::{load, load_env, refused_env};

#[test]
fn defaults() {
    let c = load_env(&[]).expect("defaults").telemetry;
    assert_eq!((c.log.as_str(), c.log_json), ("info", false));
    assert_eq!(
        (c.metrics, c.prometheus_url),
        (MetricsListener::Default, None)
    );
}

#[test]
fn the_log_format_is_text_or_json() {
    let c = load_env(&[(ENV_LOG_FORMAT, "json"), (ENV_LOG, "debug")]).expect("json");
    assert!(c.telemetry.log_json);
    assert_eq!(c.telemetry.log, "debug");
    let c = load("log_format = \"json\"\n", &[]).expect("older flat key");
    assert!(c.telemetry.log_json);
    let text = refused_env(&[(ENV_LOG_FORMAT, "xml")]);
    assert!(
        text.contains(ENV_LOG_FORMAT) && text.contains("json"),
        "{text}"
    );
}

#[test]
fn the_prometheus_url_is_an_http_base_url_or_unset() {
    let url = |v: &str| load_env(&[(ENV_PROMETHEUS_URL, v)]).map(|c| c.telemetry.prometheus_url);
    assert_eq!(url("").expect("empty is unset"), None);
    assert_eq!(
        url("http://prometheus:9090/").expect("valid"),
        Some("http://prometheus:9090".to_owned())
    );
    assert!(url("https://prom.example.internal").is_ok());
    for bad in ["prometheus:9090", "ftp://x", "http://", "http://a b"] {
        let err = url(bad).expect_err(bad).to_string();
        assert!(err.contains(ENV_PROMETHEUS_URL), "{bad}: {err}");
    }
    let c = load("[telemetry]\nprometheus_url = \"\"\n", &[]).expect("empty in the file");
    assert_eq!(c.telemetry.prometheus_url, None);
}

#[test]
fn metrics_listener_defaults_per_binary_and_can_be_moved_or_off() {
    let none = load_env(&[]).expect("defaults");
    let addrs = [
        none.clone().into_worker().metrics_addr,
        none.clone().into_mailer().metrics_addr,
        none.telemetry.metrics.resolve(INGEST_METRICS_ADDR),
    ];
    assert_eq!(
        addrs,
        [
            Some(WORKER_METRICS_ADDR),
            Some(MAILER_METRICS_ADDR),
            Some(INGEST_METRICS_ADDR)
        ]
    );
    assert!(addrs.iter().flatten().all(|a| a.ip().is_loopback()));
    assert_ne!(WORKER_METRICS_ADDR.port(), MAILER_METRICS_ADDR.port());
    assert_ne!(INGEST_METRICS_ADDR.port(), WORKER_METRICS_ADDR.port());

    let at = |v: &str| load_env(&[(ENV_METRICS_ADDR, v)]).map(|c| c.into_worker().metrics_addr);
    assert_eq!(at("off").expect("off"), None);
    assert_eq!(
        at("0.0.0.0:9300").expect("explicit"),
        Some("0.0.0.0:9300".parse().expect("addr"))
    );
    let err = at("localhost").expect_err("not an address").to_string();
    assert!(
        err.contains(ENV_METRICS_ADDR) && err.contains("off"),
        "{err}"
    );
    let c = load("[telemetry]\nmetrics_addr = \"off\"\n", &[]).expect("off in the file");
    assert_eq!(c.telemetry.metrics, MetricsListener::Off);
}

fn traces(vars: &[(&str, &str)]) -> Option<TracesConfig> {
    load_env(vars).expect("valid").telemetry.traces
}

#[test]
fn traces_are_off_until_an_endpoint_is_set() {
    assert_eq!(traces(&[]), None);
    assert_eq!(traces(&[(ENV_OTLP_PROTOCOL, "grpc")]), None);
}

#[test]
fn the_traces_url_follows_the_spec() {
    let t = traces(&[(ENV_OTLP_ENDPOINT, "http://collector:4318/")]).expect("on");
    assert_eq!(
        t.endpoint, "http://collector:4318/v1/traces",
        "the signal's path added"
    );
    assert_eq!(t.protocol, OtlpProtocol::HttpProtobuf);
    assert_eq!(t.sampler, Sampler::ParentBasedAlwaysOn);
    assert_eq!((t.service_name, t.headers.len()), (None, 0));
    let t = traces(&[
        (ENV_OTLP_ENDPOINT, "http://collector:4318"),
        (
            ENV_OTLP_TRACES_ENDPOINT,
            "https://traces.example/otlp/v1/traces",
        ),
    ])
    .expect("on");
    assert_eq!(
        t.endpoint, "https://traces.example/otlp/v1/traces",
        "used as given"
    );
    let t = traces(&[
        (ENV_OTLP_ENDPOINT, "http://collector:4317"),
        (ENV_OTLP_PROTOCOL, "grpc"),
    ])
    .expect("on");
    assert_eq!(
        (t.endpoint.as_str(), t.protocol),
        ("http://collector:4317", OtlpProtocol::Grpc)
    );
    let c = load(
        "[telemetry]\notlp_endpoint = \"http://c:4318\"\nservice_name = \"shop-a-ingest\"\n",
        &[],
    )
    .expect("the same keys in the file");
    let t = c.telemetry.traces.expect("on");
    assert_eq!(t.service_name.as_deref(), Some("shop-a-ingest"));
}

#[test]
fn bad_trace_settings_refuse_to_start_naming_the_variable() {
    let on = (ENV_OTLP_ENDPOINT, "http://c:4318");
    for (vars, names) in [
        (
            vec![(ENV_OTLP_ENDPOINT, "collector:4318")],
            ENV_OTLP_ENDPOINT,
        ),
        (
            vec![on, (ENV_OTLP_PROTOCOL, "http/json")],
            ENV_OTLP_PROTOCOL,
        ),
        (
            vec![on, (ENV_OTEL_TRACES_SAMPLER, "sometimes")],
            ENV_OTEL_TRACES_SAMPLER,
        ),
        (
            vec![
                on,
                (ENV_OTEL_TRACES_SAMPLER, "traceidratio"),
                (ENV_OTEL_TRACES_SAMPLER_ARG, "1.5"),
            ],
            ENV_OTEL_TRACES_SAMPLER_ARG,
        ),
        (
            vec![on, (ENV_OTEL_RESOURCE_ATTRIBUTES, "team")],
            ENV_OTEL_RESOURCE_ATTRIBUTES,
        ),
    ] {
        let text = refused_env(&vars);
        assert!(text.contains(names), "{vars:?}: {text}");
    }
}

#[test]
fn samplers_and_resource_attributes_are_read() {
    let on = (ENV_OTLP_ENDPOINT, "http://c:4318");
    let t = traces(&[
        on,
        (ENV_OTEL_TRACES_SAMPLER, "parentbased_traceidratio"),
        (ENV_OTEL_TRACES_SAMPLER_ARG, "0.25"),
        (
            ENV_OTEL_RESOURCE_ATTRIBUTES,
            "deployment.environment=prod, team = payments",
        ),
    ])
    .expect("on");
    assert_eq!(t.sampler, Sampler::ParentBasedTraceIdRatio(0.25));
    assert_eq!(
        t.resource_attributes,
        vec![
            ("deployment.environment".to_owned(), "prod".to_owned()),
            ("team".to_owned(), "payments".to_owned())
        ]
    );
    let t = traces(&[on, (ENV_OTEL_TRACES_SAMPLER, "always_off")]).expect("on");
    assert_eq!(t.sampler, Sampler::AlwaysOff);
}

#[test]
fn export_headers_are_pairs_with_percent_encoded_values() {
    let on = (ENV_OTLP_ENDPOINT, "https://api.honeycomb.io");
    let t = traces(&[
        on,
        (
            ENV_OTLP_HEADERS,
            "X-Honeycomb-Team=k3y%2C1, x-dataset = shop",
        ),
    ])
    .expect("on");
    assert_eq!(
        t.headers,
        vec![
            ("x-honeycomb-team".to_owned(), Secret::new("k3y,1")),
            ("x-dataset".to_owned(), Secret::new("shop")),
        ]
    );
    assert!(!format!("{t:?}").contains("k3y"), "never printed");
    // The traces' own variable wins over the general one (the spec).
    let t = traces(&[
        on,
        (ENV_OTLP_HEADERS, "a=1"),
        (ENV_OTLP_TRACES_HEADERS, "b=2"),
    ])
    .expect("on");
    assert_eq!(t.headers, vec![("b".to_owned(), Secret::new("2"))]);
    let c = load(
        "[telemetry]\notlp_endpoint = \"http://c:4318\"\notlp_headers = \"authorization=Bearer%20t0ken\"\n",
        &[],
    )
    .expect("in the file");
    let t = c.telemetry.traces.expect("on");
    assert_eq!(
        t.headers,
        vec![("authorization".to_owned(), Secret::new("Bearer t0ken"))]
    );
}

#[test]
fn a_bad_export_header_is_refused_naming_the_header_never_its_value() {
    let on = (ENV_OTLP_ENDPOINT, "http://c:4318");
    for (bad, says) in [
        ("s3cr3t-without-a-name", "name=value"),
        ("bad name=s3cr3t", "\"bad name\" is not an HTTP header name"),
        ("x-key=s3cr3t%0A", "x-key"),
        ("x-key=s3cr3t%FF", "x-key"),
    ] {
        let text = refused_env(&[on, (ENV_OTLP_HEADERS, bad)]);
        assert!(
            text.contains(ENV_OTLP_HEADERS) && text.contains(says),
            "{bad}: {text}"
        );
        assert!(!text.contains("s3cr3t"), "{bad}: the value printed: {text}");
    }
}
