use super::*;
use crate::config::testing::{File, load, refused};

fn source(gateway: &str, secrets: &str) -> String {
    format!("[[source]]\nname = \"s\"\ngateway = \"{gateway}\"\nsecrets = [{secrets}]\n")
}

#[test]
fn secrets_expand_and_an_unset_rotation_slot_is_skipped() {
    let toml =
        "[[source]]\nname = \"rzp\"\ngateway = \"razorpay\"\nsecrets = [\"${NEW}\", \"${OLD}\"]\n";
    let s = load(toml, &[("NEW", "s3cret")]).expect("config");
    let src = s.source("rzp").expect("source");
    assert_eq!(
        src.secrets,
        vec!["s3cret".to_owned()],
        "unset OLD is skipped"
    );
    assert_eq!(src.tolerance_secs, DEFAULT_TOLERANCE_SECS);
    assert!(!format!("{s:?}").contains("s3cret"));
}

#[test]
fn empty_secret_list_refuses_to_start() {
    let text = refused(&source("stripe", "\"${UNSET_VAR}\""), &[]);
    assert!(text.contains("no secrets"), "{text}");
}

#[test]
fn payu_sources_need_a_merchant_key_and_only_they_take_one() {
    let payu = "[[source]]\nname = \"pu\"\ngateway = \"payu\"\nsecrets = [\"salt\"]\n";
    let mut file = File::new(&format!("{payu}merchant_key = \"${{PAYU_KEY}}\"\n"));
    let text = file.load().expect_err("unset key").to_string();
    assert!(
        text.contains("\"pu\"") && text.contains("merchant_key"),
        "{text}"
    );
    let s = file.set("PAYU_KEY", "gtKFFx").load().expect("config");
    let src = s.source("pu").expect("source");
    assert_eq!(src.merchant_key.as_deref(), Some("gtKFFx"));
    assert_eq!(src.credentials().merchant_key, Some("gtKFFx"));

    assert!(refused(payu, &[]).contains("merchant_key"));
    let text = refused(
        &format!("{}merchant_key = \"k\"\n", source("stripe", "\"s\"")),
        &[],
    );
    assert!(text.contains("only used by"), "{text}");
}

#[test]
fn an_unknown_gateway_is_named() {
    let text = refused(&source("paypal", "\"a\""), &[]);
    assert!(text.contains("paypal"), "{text}");
}

#[test]
fn a_secret_with_an_unset_variable_inside_refuses_to_start() {
    for (gateway, secret) in [
        ("stripe", "\"whsec_${UNSET_PART}\""),
        ("razorpay", "\"rzp_${UNSET_PART}\""),
    ] {
        let text = refused(&source(gateway, secret), &[]);
        assert!(
            text.contains("\"s\"") && text.contains("secrets[0]") && text.contains("UNSET_PART"),
            "{text}"
        );
    }
    // A whole rotation slot left unset is fine next to a live secret.
    let s = load(
        &source("razorpay", "\"${LIVE}\", \"${OLD_UNSET}\""),
        &[("LIVE", "rzp_live")],
    )
    .expect("rotation slot");
    assert_eq!(s.ingest.sources[0].secrets, vec!["rzp_live".to_owned()]);
}

#[test]
fn blank_and_malformed_secrets_refuse_to_start() {
    let text = refused(&source("razorpay", "\"   \""), &[]);
    assert!(text.contains("secrets[0] is blank"), "{text}");
    let text = refused(&source("standard", "\"whsec_not*base64!\""), &[]);
    assert!(text.contains("Standard Webhooks secret"), "{text}");
    assert!(
        !text.contains("not*base64"),
        "the secret is not quoted: {text}"
    );
}

#[test]
fn a_tolerance_that_disables_the_window_refuses_to_start() {
    for tolerance in ["0", "86400", "9223372036854775807"] {
        let toml = format!(
            "{}tolerance_secs = {tolerance}\n",
            source("stripe", "\"whsec_x\"")
        );
        let text = refused(&toml, &[]);
        assert!(text.contains("tolerance_secs"), "{tolerance}: {text}");
    }
}

#[test]
fn names_are_checked_and_unique() {
    let twice = format!("{0}{0}", source("stripe", "\"whsec_x\""));
    assert!(refused(&twice, &[]).contains("defined twice"));
    let text = refused(
        "[[source]]\nname = \"a b\"\ngateway = \"stripe\"\nsecrets = [\"x\"]\n",
        &[],
    );
    assert!(text.contains("[A-Za-z0-9_-]"), "{text}");
}

#[test]
fn secrets_of_the_wrong_type_are_named_not_echoed() {
    let text = refused(
        "[[source]]\nname = \"s\"\ngateway = \"stripe\"\nsecrets = \"whsec_TYPEDSECRET123\"\n",
        &[],
    );
    assert!(
        text.contains("secrets")
            && text.contains("invalid type: expected")
            && text.contains("found a string"),
        "{text}"
    );
    assert!(!text.contains("TYPEDSECRET123"), "{text}");
    let text = refused(
        "[[source]]\nname = \"s\"\ngateway = \"stripe\"\nsecret = [\"x\"]\n",
        &[],
    );
    assert!(text.contains("secret"), "an unknown key: {text}");
}
