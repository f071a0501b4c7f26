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
