use super::*;

#[test]
fn every_path_is_listed_once_and_every_variable_is_ours() {
    let mut paths: Vec<&str> = all().map(|k| k.path).collect();
    let n = paths.len();
    paths.sort_unstable();
    paths.dedup();
    assert_eq!(paths.len(), n, "a path listed twice");
    // Ours, or one of OpenTelemetry's standard variables (`[telemetry]`).
    let standard = [
        super::telemetry::ENV_OTLP_ENDPOINT,
        super::telemetry::ENV_OTLP_TRACES_ENDPOINT,
        super::telemetry::ENV_OTLP_PROTOCOL,
        super::telemetry::ENV_OTLP_HEADERS,
        super::telemetry::ENV_OTLP_TRACES_HEADERS,
        super::telemetry::ENV_OTEL_SERVICE_NAME,
        super::telemetry::ENV_OTEL_TRACES_SAMPLER,
        super::telemetry::ENV_OTEL_TRACES_SAMPLER_ARG,
        super::telemetry::ENV_OTEL_RESOURCE_ATTRIBUTES,
    ];
    assert!(
        all().all(|k| k.env.starts_with("ONCEHOOK_") || standard.contains(&k.env)),
        "a variable that is neither ONCEHOOK_… nor a standard OTEL_… one"
    );
    assert!(all().all(|k| k.env != ENV_CONFIG));
}

#[test]
fn a_variable_listed_in_several_sections_means_the_same_there() {
    for key in all() {
        for other in all().filter(|o| o.env == key.env) {
            assert_eq!(
                (other.legacy, other.secret),
                (key.legacy, key.secret),
                "{} is listed for {} and {} with different flags",
                key.env,
                key.path,
                other.path
            );
        }
    }
    let shared: Vec<&str> = all()
        .filter(|k| k.env == ENV_PREFETCH || k.env == ENV_MAX_ATTEMPTS)
        .map(|k| k.path)
        .collect();
    assert_eq!(
        shared,
        [
            "worker.prefetch",
            "worker.retry.max_attempts",
            "mail.prefetch",
            "mail.retry.max_attempts"
        ]
    );
}

#[test]
fn a_path_finds_its_key() {
    let key = by_path("broker.url").expect("listed");
    assert_eq!(key.env, "ONCEHOOK_AMQP_URL");
    assert!(key.secret);
    assert!(by_path("broker.nope").is_none());
}
