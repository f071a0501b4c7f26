//! No configuration error can print a secret: every setting that holds a
//! URL (Postgres, RabbitMQ, SMTP, the OTLP endpoints, Prometheus, a notify
//! endpoint, a gateway API's base URL) given malformed values with a
//! marker secret in every part — the password, the user, a path, a query,
//! a fragment, and URLs that parse as something other than they look like
//! (`smtp:MARKER` is the scheme `smtp` and the path `MARKER`) — is refused
//! by a message that names the setting and never contains the marker, in
//! any case (a scheme is lowercased by the parser).

use super::testing::{refused, refused_env};
use super::*;

const MARKER: &str = "Mk7Sekr1t";

/// `text` (an error message) holds no trace of the marker.
fn assert_clean(setting: &str, value: &str, text: &str) {
    assert!(
        !text
            .to_ascii_lowercase()
            .contains(&MARKER.to_ascii_lowercase()),
        "{setting}={value:?}: the error shows the secret: {text}"
    );
}

/// Malformed URLs of `scheme`, the marker in each part that can hold it.
fn malformed(scheme: &str) -> Vec<String> {
    let m = MARKER;
    vec![
        // No `//`: the scheme and a path (or a user mistaken for a scheme).
        format!("{scheme}:{m}"),
        format!("{scheme}:{m}@db.example"),
        format!("{scheme}:user:{m}@db.example"),
        format!("{m}:{m}@db.example"),
        m.to_owned(),
        // No host, or a password the parser reads as a port or a host.
        format!("{scheme}://user:{m}@"),
        format!("{scheme}:///{m}"),
        format!("{scheme}://user:{m}"),
        format!("{scheme}://user:{m}@:5"),
        format!("{scheme}://[{m}]/"),
        // A password with an unencoded / ? # or @: read as a path, a query
        // or a fragment after a host that is the user.
        format!("{scheme}://user:12/{m}@db.example/x"),
        format!("{scheme}://user:12#{m}@db.example/x"),
        format!("{scheme}://user:pa/{m}@db.example/x"),
        format!("{scheme}://user:pa?{m}@db.example/x"),
        format!("{scheme}://user:pa#{m}@db.example/x"),
        // Whitespace, a bad escape, a bad port.
        format!("{scheme}://user:{m} x@db.example/x"),
        format!("{scheme}://user:{m}%ZZ@db.example:99999/x"),
        format!("{scheme}://user:{m}@db.example:port/x"),
    ]
}

#[test]
fn no_url_setting_quotes_a_malformed_url() {
    for (setting, scheme) in [
        (ENV_DATABASE_URL, "postgres"),
        (ENV_AMQP_URL, "amqp"),
        (ENV_SMTP_URL, "smtp"),
        (ENV_SMTP_URL, "smtps"),
        (telemetry::ENV_OTLP_ENDPOINT, "https"),
        (telemetry::ENV_OTLP_TRACES_ENDPOINT, "https"),
        (ENV_PROMETHEUS_URL, "http"),
    ] {
        let mut refusals = 0;
        for value in malformed(scheme) {
            // Some are URLs after all (a space in a password is %-encoded
            // by the parser): accepted, they print nothing.
            if Config::from_env_map(&testing::env(&[(setting, &value)])).is_ok() {
                continue;
            }
            refusals += 1;
            let text = refused_env(&[(setting, &value)]);
            assert_clean(setting, &value, &text);
            assert!(text.contains(setting), "{setting}={value:?}: {text}");
        }
        assert!(refusals >= 12, "{setting}: only {refusals} refused");
    }
}

#[test]
fn no_error_quotes_other_url_mistakes() {
    let m = MARKER;
    for (setting, value) in [
        // The SMTP URL's parameters, user and TLS mode as written.
        (ENV_SMTP_URL, format!("smtp://relay?{m}=1")),
        (ENV_SMTP_URL, format!("smtp://relay?tls={m}")),
        (ENV_SMTP_URL, format!("smtp://{m}@relay")),
        (ENV_SMTP_URL, format!("smtp://relay/{m}")),
        (ENV_SMTP_URL, format!("smtp://user:{m}@relay")),
        (ENV_SMTP_URL, format!("{m}://user:pw@relay")),
        (ENV_SMTP_TLS, m.to_owned()),
        // An AMQP parameter the client does not know the value of.
        (
            ENV_AMQP_URL,
            format!("amqp://u:pw@rabbit/%2f?auth_mechanism={m}"),
        ),
        (ENV_AMQP_URL, format!("amqp://u:pw@rabbit/%2f,amqp:{m}")),
        (ENV_DATABASE_URL, format!("postgresql:{m}@db/shop")),
        (ENV_DATABASE_URL, format!("mysql://u:{m}@db/shop")),
        // OTLP over something else than HTTP.
        (
            telemetry::ENV_OTLP_ENDPOINT,
            format!("grpc://u:{m}@collector:4317"),
        ),
        (telemetry::ENV_OTLP_ENDPOINT, format!("https:{m}@collector")),
        (telemetry::ENV_OTLP_ENDPOINT, "https://".to_owned()),
        (ENV_PROMETHEUS_URL, format!("https:{m}@prometheus")),
    ] {
        let mut vars = vec![(setting, value.as_str())];
        if setting == ENV_SMTP_TLS {
            vars.push((ENV_SMTP_URL, "smtp://relay"));
        }
        let text = refused_env(&vars);
        assert_clean(setting, &value, &text);
        // The SMTP URL's user without a password is ONCEHOOK_SMTP_PASSWORD's.
        let family = setting.get(..setting.len().min(13)).unwrap_or(setting);
        assert!(text.contains(family), "{setting}={value:?}: {text}");
    }
}

/// A query parameter the Postgres client refuses (checked where the client
/// is built in: the `db` feature).
#[cfg(feature = "db")]
#[test]
fn no_error_quotes_a_postgres_parameter() {
    let value = format!("postgres://u:pw@db/shop?sslmode={MARKER}");
    let text = refused_env(&[(ENV_DATABASE_URL, &value)]);
    assert_clean(ENV_DATABASE_URL, &value, &text);
    assert!(text.contains(ENV_DATABASE_URL), "{text}");
}

#[test]
fn no_error_quotes_a_notify_endpoint_or_an_api_base_url() {
    let m = MARKER;
    for url in [
        format!("https:{m}@shop.example/hooks"),
        format!("ftp://u:{m}@shop.example/hooks"),
        m.to_owned(),
        format!("https://u:{m}@/hooks"),
        format!("https://user:pa#{m}@shop.example"),
    ] {
        let toml = format!(
            "[[notify.endpoint]]\nname = \"shop\"\nurl = \"{url}\"\nsecret = \"whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw\"\n"
        );
        let text = refused(&toml, &[]);
        assert_clean("notify.endpoint.url", &url, &text);
        assert!(text.contains("notify.endpoint[0].url"), "{url}: {text}");
    }
    for url in [
        format!("https:{m}@api.stripe.com"),
        format!("ftp://u:{m}@api.stripe.com"),
        format!("https://api.stripe.com/?key={m}"),
        format!("https://u:{m}@api.stripe.com"),
        format!("https://:{m}@api.stripe.com"),
        format!("http://u:{m}@api.stripe.com"),
        m.to_owned(),
    ] {
        let toml = format!(
            "[[source]]\nname = \"s\"\ngateway = \"stripe\"\nsecrets = [\"whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw\"]\n\
             [source.api]\nbase_url = \"{url}\"\napi_key = \"k\"\n"
        );
        let text = refused(&toml, &[]);
        assert_clean("source.api.base_url", &url, &text);
        assert!(text.contains("api.base_url"), "{url}: {text}");
    }
}
