//! The binaries refuse a bad configuration at start-up, with a message that
//! names the key and never the secret (the unit tests in
//! `crates/common/src/config` cover every rule; these run the real binary).

use std::time::Duration;

use oncehook_e2e::TestEnv;

/// Starts `bin` with `toml` as its configuration file; returns (exit code, log).
fn start_with(env: &mut TestEnv, bin: &str, toml: &str) -> (Option<i32>, String) {
    let path = env.dir.join(format!("{bin}-bad.toml"));
    std::fs::write(&path, toml).expect("write config");
    let path = path.display().to_string();
    let mut proc = env.spawn(bin, &[("ONCEHOOK_CONFIG", path.as_str())], &[]);
    let code = proc.wait_exit(Duration::from_secs(15));
    (code, proc.log_text())
}

#[tokio::test]
async fn ingest_refuses_a_partial_secret_naming_the_source_not_the_secret() {
    let mut env = TestEnv::new().await;
    let (code, log) = start_with(
        &mut env,
        "oncehook-ingest",
        "[[source]]\nname = \"stripe\"\ngateway = \"stripe\"\nsecrets = [\"whsec_live_PARTIAL${STRIPE_SECRET_UNSET}\"]\n",
    );
    assert_ne!(code, Some(0), "must not start: {log}");
    assert!(code.is_some(), "must exit, not hang: {log}");
    assert!(
        log.contains("\"stripe\"")
            && log.contains("secrets[0]")
            && log.contains("STRIPE_SECRET_UNSET"),
        "{log}"
    );
    assert!(
        !log.contains("whsec_live_PARTIAL"),
        "the secret is never printed: {log}"
    );
}

#[tokio::test]
async fn a_toml_syntax_error_is_refused_by_line_without_quoting_it() {
    let mut env = TestEnv::new().await;
    for bin in ["oncehook-ingest", "oncehook-worker", "oncehook-mailer"] {
        let (code, log) = start_with(
            &mut env,
            bin,
            "[database]\nurl = \"postgres://app:TOPSECRET@db/shop\" oops\n",
        );
        assert_ne!(code, Some(0), "{bin} must not start: {log}");
        assert!(code.is_some(), "{bin} must exit, not hang: {log}");
        assert!(log.contains("line 2"), "{bin}: {log}");
        assert!(!log.contains("TOPSECRET"), "{bin} printed the line: {log}");
    }
}

#[tokio::test]
async fn a_secret_of_the_wrong_type_is_named_with_its_type_never_echoed() {
    let mut env = TestEnv::new().await;
    let cases = [
        // A string where the list of secrets belongs.
        (
            "[[source]]\nname = \"stripe\"\ngateway = \"stripe\"\nsecrets = \"whsec_TYPEDSECRET123\"\n",
            "secrets",
            "whsec_TYPEDSECRET123",
        ),
        // A list where the console's session key belongs.
        (
            "[console]\nsession_key = [\"TYPEDSECRET456-long-enough-for-a-session-key\"]\n",
            "console.session_key",
            "TYPEDSECRET456",
        ),
        // The SMTP password as a list.
        (
            "[mail]\npassword = [\"TYPEDSECRET789\"]\n",
            "mail.password",
            "TYPEDSECRET789",
        ),
    ];
    for bin in [
        "oncehook-ingest",
        "oncehook-worker",
        "oncehook-mailer",
        "oncehook-console",
        "oncehookctl",
    ] {
        for (toml, key, secret) in cases {
            let path = env.dir.join(format!("{bin}-typed.toml"));
            std::fs::write(&path, toml).expect("write config");
            let path = path.display().to_string();
            let args: &[&str] = if bin == "oncehookctl" {
                &["migrate"]
            } else {
                &[]
            };
            let mut proc = env.spawn(bin, &[("ONCEHOOK_CONFIG", path.as_str())], args);
            let code = proc.wait_exit(Duration::from_secs(15));
            let log = proc.log_text();
            assert!(
                code.is_some_and(|c| c != 0),
                "{bin} must refuse {key}: {log}"
            );
            assert!(log.contains(key), "{bin} names {key}: {log}");
            assert!(
                log.contains("invalid type: expected") && log.contains("found a"),
                "{bin} says what type was expected and found: {log}"
            );
            assert!(!log.contains(secret), "{bin} echoed the secret: {log}");
        }
    }
}

#[tokio::test]
async fn secure_cookies_takes_a_toml_boolean() {
    let mut env = TestEnv::new().await;
    let user = oncehook_e2e::console::hash_line(&env, "ops", "operator", "correct horse").await;
    for (value, secure) in [("false", false), ("true", true)] {
        let addr = format!("127.0.0.1:{}", oncehook_e2e::free_port());
        let toml = format!("[console]\naddr = \"{addr}\"\nsecure_cookies = {value}\n{user}\n");
        let path = env.dir.join(format!("console-cookies-{value}.toml"));
        std::fs::write(&path, toml).expect("write config");
        let path = path.display().to_string();
        let mut console = env.spawn(
            "oncehook-console",
            &[
                ("ONCEHOOK_CONFIG", path.as_str()),
                ("ONCEHOOK_CONSOLE_SECURE_COOKIES", ""),
            ],
            &[],
        );
        let http = reqwest::Client::builder()
            .redirect(reqwest::redirect::Policy::none())
            .build()
            .expect("client");
        let login = format!("http://{addr}/login");
        let answer = oncehook_e2e::eventually(
            &format!("the console with secure_cookies = {value}"),
            Duration::from_secs(20),
            || {
                assert!(
                    console.is_running(),
                    "the console stopped: {}",
                    console.log_text()
                );
                let (http, login) = (&http, &login);
                async move {
                    http.post(login)
                        .form(&[("user", "ops"), ("password", "correct horse")])
                        .send()
                        .await
                        .ok()
                }
            },
        )
        .await;
        assert_eq!(answer.status().as_u16(), 303, "{}", console.log_text());
        let cookie = answer
            .headers()
            .get("set-cookie")
            .and_then(|v| v.to_str().ok())
            .unwrap_or_default()
            .to_owned();
        assert_eq!(cookie.contains("Secure"), secure, "{value}: {cookie}");
    }
}

/// A URL that parses as something other than it looks like (`smtp:PASSWORD`
/// is the scheme `smtp` and the path `PASSWORD`; `postgres:…`, `amqp:…`
/// likewise) is refused naming the variable, and the mailer's output never
/// holds the secret.
#[tokio::test]
async fn the_mailer_refuses_a_url_without_a_host_never_echoing_it() {
    let mut env = TestEnv::new().await;
    for (var, value) in [
        ("ONCEHOOK_SMTP_URL", "smtp:MAILERSECRET1"),
        ("ONCEHOOK_SMTP_URL", "smtps://user:12/MAILERSECRET1@relay"),
        ("ONCEHOOK_DATABASE_URL", "postgres:MAILERSECRET1@db/shop"),
        ("ONCEHOOK_AMQP_URL", "amqp:MAILERSECRET1"),
    ] {
        let mut proc = env.spawn("oncehook-mailer", &[(var, value)], &[]);
        let code = proc.wait_exit(Duration::from_secs(15));
        let log = proc.log_text();
        assert_ne!(code, Some(0), "{var}={value}: must not start: {log}");
        assert!(code.is_some(), "{var}={value}: must exit, not hang: {log}");
        assert!(
            log.contains(var),
            "{var}={value}: names the variable: {log}"
        );
        assert!(
            !log.to_ascii_lowercase().contains("mailersecret1"),
            "{var}={value}: the secret is printed: {log}"
        );
    }
}

/// A retired setting is refused by name with the release it went away in,
/// from the environment and from the file, never read and ignored.
#[tokio::test]
async fn the_worker_refuses_the_retired_batch_linger() {
    let mut env = TestEnv::new().await;
    let said = "worker.batch.linger_ms (ONCEHOOK_WORKER_BATCH_LINGER_MS) was removed in oncehook";
    let mut proc = env.spawn(
        "oncehook-worker",
        &[("ONCEHOOK_WORKER_BATCH_LINGER_MS", "2")],
        &[],
    );
    let code = proc.wait_exit(Duration::from_secs(15));
    let log = proc.log_text();
    assert!(code.is_some_and(|c| c != 0), "must exit, refused: {log}");
    assert!(log.contains(said), "{log}");
    let (code, log) = start_with(
        &mut env,
        "oncehook-worker",
        "[worker.batch]\nsize = 8\nlinger_ms = 2\n",
    );
    assert!(code.is_some_and(|c| c != 0), "must exit, refused: {log}");
    assert!(log.contains(said), "{log}");
}
