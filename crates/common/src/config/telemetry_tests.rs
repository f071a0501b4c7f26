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
