use crate::config::SourceConfig;
use crate::config::testing::{load, refused};

/// A source of `gateway` (PayU with its merchant key) with `[source.api]` `api`.
fn source(gateway: &str, api: &str) -> String {
    let payu = if gateway == "payu" {
        "merchant_key = \"gtKFFx\"\n"
    } else {
        ""
    };
    format!(
        "[[source]]\nname = \"s\"\ngateway = \"{gateway}\"\nsecrets = [\"whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw\"]\n{payu}[source.api]\n{api}"
    )
}

fn loaded(gateway: &str, api: &str, env: &[(&str, &str)]) -> SourceConfig {
    let config = load(&source(gateway, api), env).expect("config");
    config.source("s").expect("source").clone()
}

#[test]
fn each_gateway_takes_its_own_credentials_from_variables() {
    let rzp = loaded(
        "razorpay",
        "key_id = \"${RZP_KEY_ID}\"\nkey_secret = \"${RZP_KEY_SECRET}\"\n",
        &[
            ("RZP_KEY_ID", "rzp_test_1DP5mmOlF5G5ag"),
            ("RZP_KEY_SECRET", "thisisasecret"),
        ],
    );
    let api = rzp.api.as_ref().expect("api");
    assert_eq!(api.base_url, "https://api.razorpay.com");
    assert_eq!(
        api.credentials.get("key_id"),
        Some("rzp_test_1DP5mmOlF5G5ag")
    );
    assert_eq!(api.credentials.get("key_secret"), Some("thisisasecret"));
    assert!(!format!("{rzp:?}").contains("thisisasecret"), "{rzp:?}");
    assert!(!format!("{rzp:?}").contains("1DP5mmOlF5G5ag"), "{rzp:?}");

    let cf = loaded(
        "cashfree",
        "base_url = \"https://sandbox.cashfree.com/\"\nclient_id = \"id\"\nclient_secret = \"cs\"\n",
        &[],
    );
    let api = cf.api.as_ref().expect("api");
    assert_eq!(api.base_url, "https://sandbox.cashfree.com");
    assert_eq!(api.credentials.get("api_version"), Some("2023-08-01"));

    let payu = loaded("payu", "base_url = \"https://test.payu.in\"\n", &[]);
    let api = payu.api.as_ref().expect("api");
    assert_eq!(api.base_url, "https://test.payu.in");
    assert_eq!(
        api.credentials.get("merchant_key"),
        Some("gtKFFx"),
        "PayU signs with the source's merchant key and salt"
    );

    let stripe = loaded(
        "stripe",
        "base_url = \"http://127.0.0.1:12111\"\napi_key = \"sk_test_x\"\n",
        &[],
    );
    assert_eq!(
        stripe.api.as_ref().expect("api").base_url,
        "http://127.0.0.1:12111"
    );
    assert!(
        load(
            &source("stripe", "api_key = \"k\"\n").replace("[source.api]\napi_key = \"k\"\n", ""),
            &[]
        )
        .expect("config")
        .source("s")
        .expect("source")
        .api
        .is_none(),
        "no table: never asked"
    );
}

#[test]
fn a_wrong_missing_or_clear_text_credential_refuses_to_start() {
    for (gateway, api, expect) in [
        ("razorpay", "key_id = \"k\"\n", "api.key_secret is required"),
        (
            "razorpay",
            "key_id = \"k\"\nkey_secret = \"${UNSET_SECRET}\"\n",
            "api.key_secret is empty",
        ),
        (
            "razorpay",
            "key_id = \"k\"\nkey_secret = \"s\"\napi_key = \"x\"\n",
            "api.api_key is not used",
        ),
        ("payu", "key_id = \"k\"\n", "merchant_key and salt"),
        (
            "stripe",
            "base_url = \"http://api.stripe.com\"\napi_key = \"k\"\n",
            "plain http",
        ),
        (
            "stripe",
            "base_url = \"ftp://127.0.0.1\"\napi_key = \"k\"\n",
            "must be an https",
        ),
        (
            "stripe",
            "base_url = \"https://api.stripe.com/?x=1\"\napi_key = \"k\"\n",
            "query",
        ),
        (
            "stripe",
            "base_url = \"not a url\"\napi_key = \"k\"\n",
            "not a URL",
        ),
        ("stripe", "api_key = \"k\"\nextra = 1\n", "extra"),
        (
            "stripe",
            "api_key = \"k\"\nextra = \"1\"\n",
            "api.extra is not used",
        ),
        (
            "stripe",
            "api_key = \"pk_live_1\"\n",
            "api.api_key is a publishable key",
        ),
        (
            "cashfree",
            "client_id = \"a b\"\nclient_secret = \"s\"\n",
            "api.client_id holds a space",
        ),
    ] {
        let text = refused(&source(gateway, api), &[]);
        assert!(text.contains(expect), "{gateway} {api:?}: {text}");
        assert!(
            text.contains("\"s\"") || text.contains("extra"),
            "names the source: {text}"
        );
    }
    let text = refused(
        "[[source]]\nname = \"s\"\ngateway = \"standard\"\nsecrets = [\"whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw\"]\n[source.api]\n",
        &[],
    );
    assert!(text.contains("no API to reconcile with"), "{text}");
}

#[test]
fn a_source_names_its_tenant_and_any_tenants_source_may_have_an_api() {
    let plain = "[[source]]\nname = \"s\"\ngateway = \"razorpay\"\nsecrets = [\"whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw\"]\n";
    let config = load(&format!("{plain}tenant = \"acme\"\n"), &[]).expect("config");
    assert_eq!(config.source("s").expect("source").tenant.as_str(), "acme");
    let config = load(plain, &[]).expect("config");
    assert!(config.source("s").expect("source").tenant.is_default());
    let bad = refused(&format!("{plain}tenant = \"Acme\"\n"), &[]);
    assert!(bad.contains("not a tenant id"), "{bad}");
    let with_api = source("razorpay", "key_id = \"k\"\nkey_secret = \"s\"\n")
        .replace("[source.api]", "tenant = \"acme\"\n[source.api]");
    let config = load(&with_api, &[]).expect("another tenant's source with an API");
    let source = config.source("s").expect("source");
    assert_eq!(source.tenant.as_str(), "acme");
    assert!(source.api.is_some());
}
