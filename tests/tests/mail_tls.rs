//! The mailer against an SMTP listener that behaves like a hosted email
//! provider: submission with `STARTTLS` and a login, implicit TLS (`smtps://`)
//! with the login in the URL, a wrong password that is a clear error and
//! delays the email instead of losing it, a server that offers no
//! `STARTTLS` or whose certificate is not trusted (refused, nothing sent in
//! the clear), and start-up refusals that never print the password.

use std::time::Duration;

use oncehook_e2e::smtp_tls::{SecureSmtpSink, SinkTls};
use oncehook_e2e::{Proc, TestEnv, eventually, shop};
use oncehook_gateways::Gateway;

const WAIT: Duration = Duration::from_secs(30);
const USER: &str = "mailer@shop.example";
const PASSWORD: &str = "pw-Q7f!x@y:z";

/// Seeds `order_ref`, starts ingest and a worker, and posts its capture.
async fn pay(env: &mut TestEnv, order_ref: &str) -> (Proc, Proc) {
    shop::product(&env.pool, "MUG", 10).await;
    shop::order(&env.pool, order_ref, 50_000, "INR", &[("MUG", 1)]).await;
    let (ingest, url) = env.start_ingest().await;
    let worker = env.start_worker().await;
    let spec = env.spec(
        order_ref,
        &format!("pay_{order_ref}"),
        &format!("evt_{order_ref}"),
        50_000,
    );
    let delivery = env.sign(Gateway::Razorpay, "payment.captured", &spec);
    assert_eq!(env.post(&url, "razorpay", &delivery).await.0, 200);
    (ingest, worker)
}

async fn wait_sent(env: &TestEnv, order_ref: &str) {
    eventually(&format!("the email of {order_ref} sent"), WAIT, || async {
        let emails = shop::emails(&env.pool, order_ref).await;
        (emails.len() == 1 && emails[0].1).then_some(())
    })
    .await;
}

fn ca(sink: &SecureSmtpSink) -> String {
    sink.ca_file.display().to_string()
}

#[tokio::test]
async fn submission_with_starttls_and_a_login_delivers_the_email() {
    let mut env = TestEnv::new().await;
    let sink = SecureSmtpSink::start(SinkTls::StartTls, &env.dir, USER, PASSWORD).await;
    let _pipeline = pay(&mut env, "order_tls1").await;
    let (url, ca) = (sink.url(), ca(&sink));
    let mailer = env
        .start_consumer(
            "oncehook-mailer",
            &[
                ("ONCEHOOK_SMTP_URL", url.as_str()),
                ("ONCEHOOK_SMTP_USERNAME", USER),
                ("ONCEHOOK_SMTP_PASSWORD", PASSWORD),
                ("ONCEHOOK_SMTP_CA_FILE", ca.as_str()),
            ],
        )
        .await;
    wait_sent(&env, "order_tls1").await;
    let messages = sink.messages();
    assert_eq!(messages.len(), 1, "one email over the encrypted session");
    assert!(
        messages[0].contains("Subject: Order order_tls1 confirmed"),
        "{}",
        messages[0]
    );
    assert!(sink.logins() >= 1, "the mailer logged in");
    assert_eq!(sink.plaintext_logins(), 0, "never AUTH before STARTTLS");
    let log = mailer.log_text();
    assert!(
        log.contains("tls starttls"),
        "the start-up line says how: {log}"
    );
    assert!(
        !log.contains(PASSWORD),
        "the password is never printed: {log}"
    );
}

#[tokio::test]
async fn implicit_tls_with_the_login_in_the_url_delivers_the_email() {
    let mut env = TestEnv::new().await;
    let sink = SecureSmtpSink::start(SinkTls::Implicit, &env.dir, USER, PASSWORD).await;
    let _pipeline = pay(&mut env, "order_tls2").await;
    // The user and password percent-encoded, as a URL carries them.
    let url = format!(
        "smtps://mailer%40shop.example:pw-Q7f%21x%40y%3Az@127.0.0.1:{}",
        sink.port
    );
    let ca = ca(&sink);
    let mailer = env
        .start_consumer(
            "oncehook-mailer",
            &[
                ("ONCEHOOK_SMTP_URL", url.as_str()),
                ("ONCEHOOK_SMTP_CA_FILE", ca.as_str()),
            ],
        )
        .await;
    wait_sent(&env, "order_tls2").await;
    assert_eq!(sink.messages().len(), 1);
    assert!(sink.logins() >= 1);
    let log = mailer.log_text();
    assert!(
        !log.contains("pw-Q7f"),
        "the password is never printed: {log}"
    );
}

#[tokio::test]
async fn a_wrong_password_is_a_clear_error_and_the_email_waits_until_it_can_be_sent() {
    let mut env = TestEnv::new().await;
    let sink = SecureSmtpSink::start(SinkTls::StartTls, &env.dir, USER, "the-new-key").await;
    let _pipeline = pay(&mut env, "order_tls3").await;
    let (url, ca) = (sink.url(), ca(&sink));
    let mailer = env
        .start_consumer(
            "oncehook-mailer",
            &[
                ("ONCEHOOK_SMTP_URL", url.as_str()),
                ("ONCEHOOK_SMTP_USERNAME", USER),
                ("ONCEHOOK_SMTP_PASSWORD", "the-old-key"),
                ("ONCEHOOK_SMTP_CA_FILE", ca.as_str()),
                ("ONCEHOOK_MAX_ATTEMPTS", "20"),
            ],
        )
        .await;
    eventually("a refused login", WAIT, || async {
        (sink.refused_logins() >= 1).then_some(())
    })
    .await;
    let expected = format!("logging in to 127.0.0.1:{} as \"{USER}\" failed", sink.port);
    eventually("the error in the log", WAIT, || async {
        mailer.log_text().contains(&expected).then_some(())
    })
    .await;
    let (last_error,): (Option<String>,) = sqlx::query_as("SELECT last_error FROM email_outbox")
        .fetch_one(&env.pool)
        .await
        .expect("outbox row");
    let last_error = last_error.unwrap_or_default();
    assert!(
        last_error.contains(&expected) && last_error.contains("535"),
        "{last_error}"
    );
    assert!(sink.messages().is_empty());
    assert!(
        !shop::emails(&env.pool, "order_tls3").await[0].1,
        "not sent yet"
    );

    // The provider activates the key: the waiting email goes out, once.
    sink.set_password("the-old-key");
    wait_sent(&env, "order_tls3").await;
    assert_eq!(sink.messages().len(), 1);
    let log = mailer.log_text();
    assert!(
        !log.contains("the-old-key"),
        "the password is never printed: {log}"
    );
}

/// Starts a mailer for `sink` with the login (and `ca_file` if `trusted`),
/// and waits for `expected` in its log; nothing may reach the listener.
async fn refused(sink: SinkTls, trusted: bool, order_ref: &str, expected: &str) {
    let mut env = TestEnv::new().await;
    let sink = SecureSmtpSink::start(sink, &env.dir, USER, PASSWORD).await;
    let _pipeline = pay(&mut env, order_ref).await;
    let (url, ca) = (sink.url(), ca(&sink));
    let mut extra = vec![
        ("ONCEHOOK_SMTP_URL", url.as_str()),
        ("ONCEHOOK_SMTP_USERNAME", USER),
        ("ONCEHOOK_SMTP_PASSWORD", PASSWORD),
    ];
    if trusted {
        extra.push(("ONCEHOOK_SMTP_CA_FILE", ca.as_str()));
    }
    let mailer = env.start_consumer("oncehook-mailer", &extra).await;
    let expected = expected.replace("{port}", &sink.port.to_string());
    eventually(&format!("{expected:?} in the log"), WAIT, || async {
        mailer.log_text().contains(&expected).then_some(())
    })
    .await;
    assert!(sink.messages().is_empty(), "nothing sent");
    assert_eq!(
        sink.logins() + sink.plaintext_logins(),
        0,
        "no password sent"
    );
    assert!(
        !shop::emails(&env.pool, order_ref).await[0].1,
        "the email still waits"
    );
}

#[tokio::test]
async fn a_server_that_offers_no_starttls_gets_nothing_in_the_clear() {
    refused(
        SinkTls::NoStartTls,
        true,
        "order_tls4",
        "127.0.0.1:{port} does not offer STARTTLS",
    )
    .await;
}

#[tokio::test]
async fn a_server_whose_certificate_is_not_trusted_gets_nothing() {
    // No ca_file: the listener's certificate is signed by an unknown CA.
    refused(
        SinkTls::StartTls,
        false,
        "order_tls5",
        "TLS with 127.0.0.1:{port} failed",
    )
    .await;
}

#[tokio::test]
async fn the_mailer_refuses_a_bad_smtp_setting_without_printing_the_password() {
    let mut env = TestEnv::new().await;
    for url in [
        // A password over a plain connection.
        "smtp://mailer:TOPSECRET-PW@relay.example.com:25",
        // A bad port.
        "smtps://mailer:TOPSECRET-PW@smtp.example.com:99999",
        "smtps://mailer:TOPSECRET-PW@smtp.example.com:port",
        // Not SMTP at all.
        "https://mailer:TOPSECRET-PW@smtp.example.com",
    ] {
        let mut proc = env.spawn("oncehook-mailer", &[("ONCEHOOK_SMTP_URL", url)], &[]);
        let code = proc.wait_exit(Duration::from_secs(15));
        let log = proc.log_text();
        assert!(
            code.is_some_and(|c| c != 0),
            "{url} must refuse to start: {log}"
        );
        assert!(log.contains("ONCEHOOK_SMTP_URL"), "names the key: {log}");
        assert!(
            !log.contains("TOPSECRET"),
            "{url}: the password is printed: {log}"
        );
    }
    let mut proc = env.spawn(
        "oncehook-mailer",
        &[
            ("ONCEHOOK_SMTP_URL", "smtps://smtp.example.com"),
            ("ONCEHOOK_SMTP_USERNAME", "mailer"),
            ("ONCEHOOK_SMTP_PASSWORD", "TOPSECRET-PW"),
            ("ONCEHOOK_SMTP_CA_FILE", "/nonexistent/relay-ca.pem"),
        ],
        &[],
    );
    let code = proc.wait_exit(Duration::from_secs(15));
    let log = proc.log_text();
    assert!(
        code.is_some_and(|c| c != 0),
        "a missing CA file must refuse: {log}"
    );
    assert!(
        log.contains("relay-ca.pem") && log.contains("mail.ca_file"),
        "{log}"
    );
    assert!(!log.contains("TOPSECRET"), "{log}");
}
