//! `oncehookctl dlq show` masks what the console masks: the dead letter of
//! a Razorpay webhook (its `X-Razorpay-Signature` header) and of a PayU
//! form webhook (its `hash` field) never show the signature or the hash,
//! in text or in `--json` (not even base64-encoded in the message body);
//! `--reveal` shows them in full and warns on stderr, naming the operator.

use base64::Engine as _;
use oncehook_e2e::ops::{ctl_ok, dlq_list, find, payu_failure, wait_dead};
use oncehook_e2e::{PipelineSpec, TestEnv};
use oncehook_gateways::sample::SignedDelivery;

/// The value of form field `name` in a form body, as posted.
fn form_field(delivery: &SignedDelivery, name: &str) -> String {
    let body = String::from_utf8_lossy(&delivery.body).into_owned();
    body.split('&')
        .find_map(|pair| {
            let (k, v) = pair.split_once('=')?;
            (k == name).then(|| v.to_owned())
        })
        .unwrap_or_else(|| panic!("no {name} field in {body}"))
}

/// Neither `secret` nor its base64 appears in `text` (nor the base64 of the
/// message that carries it).
fn assert_hidden(what: &str, text: &str, secret: &str) {
    assert!(!secret.is_empty());
    assert!(
        !text.contains(secret),
        "{what} shows the secret {secret}:\n{text}"
    );
    let b64 = base64::engine::general_purpose::STANDARD.encode(secret);
    assert!(
        !text.contains(&b64),
        "{what} shows the secret base64:\n{text}"
    );
}

#[tokio::test]
async fn dlq_show_masks_signatures_and_hashes_unless_revealed() {
    let mut env = TestEnv::new().await;
    let app = env
        .pipeline_with(PipelineSpec::default().without_mailer())
        .await;

    let razorpay = env.captured("order_masked_gone", "pay_M1", "evt_M1");
    let signature = razorpay
        .headers
        .get("X-Razorpay-Signature")
        .expect("a signed Razorpay delivery")
        .to_owned();
    env.post_ok(&app.url, "razorpay", &razorpay).await;
    let payu = payu_failure(&env, "order_payu_masked_gone", "503993715531");
    let hash = form_field(&payu, "hash");
    env.post_ok(&app.url, "payu", &payu).await;
    wait_dead(&env, 2).await;

    let items = dlq_list(&env, &[]).await;
    let razorpay_id = find(&items, "event_id", "evt_M1")["id"]
        .as_str()
        .expect("id")
        .to_owned();
    let payu_id = find(&items, "gateway", "payu")["id"]
        .as_str()
        .expect("id")
        .to_owned();

    for (id, secret, what) in [
        (&razorpay_id, &signature, "the Razorpay signature"),
        (&payu_id, &hash, "the PayU hash"),
    ] {
        // Masked: text and JSON, with the marker where the secret was.
        let text = ctl_ok(&env, &["dlq", "show", id]).await;
        assert_hidden(&format!("dlq show ({what})"), &text, secret);
        assert!(text.contains("masked ("), "the marker:\n{text}");
        let (code, json, stderr) = env.ctl(&["--json", "dlq", "show", id]).await;
        assert_eq!(code, 0, "{stderr}");
        assert_hidden(&format!("dlq show --json ({what})"), &json, secret);
        let parsed: serde_json::Value = serde_json::from_str(&json).expect("JSON");
        assert!(parsed["message_body_b64"].is_null(), "{parsed:#}");
        assert!(!stderr.contains("--reveal"), "no reveal warning: {stderr}");

        // Revealed: the secret in full, and a warning naming the operator.
        for json_flag in [false, true] {
            let mut args = vec!["dlq", "show", id.as_str(), "--reveal"];
            if json_flag {
                args.insert(0, "--json");
            }
            let (code, out, stderr) = env.ctl(&args).await;
            assert_eq!(code, 0, "{args:?}: {stderr}");
            if json_flag {
                let parsed: serde_json::Value = serde_json::from_str(&out).expect("JSON");
                assert!(parsed["message_body_b64"].is_string(), "{parsed:#}");
            }
            assert!(
                out.contains(secret.as_str()),
                "{args:?} must show {what} {secret}:\n{out}"
            );
            assert!(
                stderr.contains("--reveal") && stderr.contains(id.as_str()),
                "{args:?}: the reveal is noted on stderr: {stderr}"
            );
        }
    }

    // The rest of the letter is still there when masked.
    let payu_text = ctl_ok(&env, &["dlq", "show", &payu_id]).await;
    for needle in ["txnid=503993715531", "udf1=order_payu_masked_gone", "Raw:"] {
        assert!(payu_text.contains(needle), "{needle:?}:\n{payu_text}");
    }
    let razorpay_text = ctl_ok(&env, &["dlq", "show", &razorpay_id]).await;
    for needle in ["X-Razorpay-Signature", "pay_M1", "order_masked_gone"] {
        assert!(
            razorpay_text
                .to_ascii_lowercase()
                .contains(&needle.to_ascii_lowercase()),
            "{needle:?}:\n{razorpay_text}"
        );
    }
}
