//! The operators' side from a test (`tests/tests/ops_*.rs`): `oncehookctl`
//! run and its JSON parsed, `dlq list` read back, deliveries that end up as
//! dead letters, and dead letters put straight into `P.dead` as the worker
//! would have written them.

use hmac::{Hmac, KeyInit, Mac};
use oncehook_common::dead_letter::{DeadLetter, DeadLetterKind};
use oncehook_gateways::sample::SignedDelivery;
use oncehook_gateways::{Gateway, Headers};
use serde_json::Value;
use sha2::Sha256;

use crate::{Secrets, TestEnv, WAIT, broker, eventually};

/// `P.dead` of this test.
pub fn dead_queue(env: &TestEnv) -> String {
    format!("{}.dead", env.prefix)
}

/// Waits ([`WAIT`]) until `P.dead` holds exactly `n` dead letters.
pub async fn wait_dead(env: &TestEnv, n: u32) {
    let queue = dead_queue(env);
    eventually(&format!("{n} dead letter(s) in {queue}"), WAIT, || async {
        (broker::depth(&queue).await == Some(n)).then_some(())
    })
    .await;
}

/// Runs `oncehookctl` and insists on exit code 0; its stdout.
pub async fn ctl_ok(env: &TestEnv, args: &[&str]) -> String {
    let (code, stdout, stderr) = env.ctl(args).await;
    assert_eq!(
        code, 0,
        "oncehookctl {args:?} failed\nstdout:\n{stdout}\nstderr:\n{stderr}"
    );
    stdout
}

/// Runs `oncehookctl` with `args`, `extra` variables and `input` on its
/// stdin (a secret is never an argument); returns (exit code, stdout,
/// stderr).
pub async fn ctl_input(
    env: &TestEnv,
    args: &[&str],
    extra: &[(&str, &str)],
    input: &str,
) -> (i32, String, String) {
    use tokio::io::AsyncWriteExt as _;
    let mut child = tokio::process::Command::new(crate::process::bin_dir().join("oncehookctl"))
        .args(args)
        .env_clear()
        .env("PATH", std::env::var("PATH").unwrap_or_default())
        .envs(env.database_envs("oncehookctl", args))
        .envs(extra.iter().copied())
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .expect("run oncehookctl");
    let mut stdin = child.stdin.take().expect("stdin");
    stdin
        .write_all(input.as_bytes())
        .await
        .expect("write stdin");
    drop(stdin);
    let out = child.wait_with_output().await.expect("oncehookctl ends");
    (
        out.status.code().unwrap_or(-1),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

/// `oncehookctl --json …` parsed.
pub async fn ctl_json(env: &TestEnv, args: &[&str]) -> Value {
    let mut all = vec!["--json"];
    all.extend_from_slice(args);
    let stdout = ctl_ok(env, &all).await;
    serde_json::from_str(&stdout).unwrap_or_else(|e| panic!("{args:?}: not JSON ({e}):\n{stdout}"))
}

/// `dlq list --json` with extra arguments.
pub async fn dlq_list(env: &TestEnv, extra: &[&str]) -> Vec<Value> {
    let mut args = vec!["dlq", "list"];
    args.extend_from_slice(extra);
    match ctl_json(env, &args).await {
        Value::Array(items) => items,
        other => panic!("dlq list --json must print an array, got {other}"),
    }
}

/// The `id` of every listed dead letter, in order.
pub fn ids(items: &[Value]) -> Vec<String> {
    items
        .iter()
        .map(|i| i["id"].as_str().expect("id is a string").to_owned())
        .collect()
}

/// The one item with `field == value`.
pub fn find<'a>(items: &'a [Value], field: &str, value: &str) -> &'a Value {
    let found: Vec<&Value> = items.iter().filter(|i| i[field] == value).collect();
    assert_eq!(
        found.len(),
        1,
        "exactly one dead letter with {field}={value}: {items:#?}"
    );
    found[0]
}

/// A Razorpay delivery with a hand-made body, signed with the test secret.
pub fn razorpay_raw(body: &str, event_id: Option<&str>) -> SignedDelivery {
    let mut mac = Hmac::<Sha256>::new_from_slice(Secrets::RAZORPAY.as_bytes()).expect("hmac key");
    mac.update(body.as_bytes());
    let signature = hex::encode(mac.finalize().into_bytes());
    let mut headers = Headers::new()
        .with("Content-Type", "application/json")
        .with("X-Razorpay-Signature", &signature);
    if let Some(id) = event_id {
        headers.insert("X-Razorpay-Event-Id", id);
    }
    SignedDelivery {
        headers,
        body: body.as_bytes().to_vec(),
    }
}

/// A failed PayU attempt `txnid` for `order_ref` (`udf1`, which may not exist).
pub fn payu_failure(env: &TestEnv, order_ref: &str, txnid: &str) -> SignedDelivery {
    env.sign(
        Gateway::Payu,
        "failure",
        &env.spec(order_ref, txnid, "unused", 50_000),
    )
}

/// What the worker writes for an event whose order does not exist.
pub fn unknown_order(env: &TestEnv, error: &str) -> DeadLetter {
    DeadLetter {
        kind: DeadLetterKind::UnknownOrder,
        error: error.to_owned(),
        origin: format!("{}.events", env.prefix),
        attempts: 1,
        trace_parent: None,
    }
}

/// Puts a dead letter into `P.dead` as the worker would have written it,
/// `age` ago (only the headers `dlq` reads; the body is not an envelope).
pub async fn publish_old_dead_letter(env: &TestEnv, event_id: &str, age: time::Duration) {
    let conn = broker::connect().await;
    let ch = conn.create_channel().await.expect("channel");
    broker::put_dead_letter(
        &ch,
        &dead_queue(env),
        &unknown_order(env, "no order order_long_gone"),
        "razorpay.payment.captured",
        time::OffsetDateTime::now_utc() - age,
        lapin::BasicProperties::default().with_message_id(format!("razorpay:{event_id}").into()),
        b"{}",
    )
    .await;
    let _ = conn.close(200, "bye".into()).await;
}

/// Publishes `n` dead letters straight into `P.dead` on one channel.
pub async fn publish_dead_letters(env: &TestEnv, n: usize) {
    use lapin::options::ConfirmSelectOptions;
    let conn = broker::connect().await;
    let ch = conn.create_channel().await.expect("channel");
    ch.confirm_select(ConfirmSelectOptions::default())
        .await
        .expect("confirms");
    let why = unknown_order(env, "no order order_gone");
    for i in 0..n {
        broker::put_dead_letter(
            &ch,
            &dead_queue(env),
            &why,
            "razorpay.payment.captured",
            time::OffsetDateTime::now_utc(),
            lapin::BasicProperties::default()
                .with_message_id(format!("razorpay:evt_many_{i}").into()),
            format!("{{\"n\":{i}}}").as_bytes(),
        )
        .await;
    }
    let _ = conn.close(200, "bye".into()).await;
}
