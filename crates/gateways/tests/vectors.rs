//! The published vectors (tests/fixtures/vectors.json): each verifies with
//! its secret and parses to the fixture's facts; one-byte changes, wrong
//! secrets and stale timestamps are refused; rotation works.

mod common;

use common::*;
use oncehook_gateways::{EventKind, Gateway, Headers, VerifyError, parse, verify};
use sha2::{Digest, Sha512};

const TOLERANCE: u64 = 300;

fn check(
    gateway: Gateway,
    secrets: &[String],
    headers: &Headers,
    body: &[u8],
) -> Result<usize, VerifyError> {
    verify(
        gateway,
        vector_creds(secrets),
        headers,
        body,
        vector_now(gateway),
        TOLERANCE,
    )
    .map(|v| v.secret_index)
}

#[test]
fn every_vector_verifies_with_its_secret() {
    for gateway in Gateway::ALL {
        let v = verify(
            gateway,
            vector_creds(&[vector_secret(gateway)]),
            &vector_headers(gateway),
            vector_body(gateway),
            vector_now(gateway),
            TOLERANCE,
        );
        let v = v.unwrap_or_else(|e| panic!("{gateway}: {e}"));
        assert_eq!(v.secret_index, 0, "{gateway}");
        let expected_signed_at = gateway.signs_timestamp().then(|| vector_now(gateway));
        assert_eq!(v.signed_at, expected_signed_at, "{gateway}");
    }
}

#[test]
fn vector_bodies_are_the_published_bytes() {
    for gateway in Gateway::ALL {
        let meta = &vectors()[vector_key(gateway)]["body"];
        assert_eq!(
            Some(vector_body(gateway).len() as u64),
            meta["len"].as_u64(),
            "{gateway}"
        );
    }
}

#[test]
fn payu_vector_verifies_only_for_its_merchant_key() {
    assert_eq!(vector_str(Gateway::Payu, "key"), VECTOR_PAYU_KEY);
    let salts = [vector_secret(Gateway::Payu)];
    let with = |key| {
        verify(
            Gateway::Payu,
            oncehook_gateways::Credentials::new(&salts).with_merchant_key(key),
            &Headers::new(),
            vector_body(Gateway::Payu),
            0,
            0,
        )
    };
    assert!(with(Some(VECTOR_PAYU_KEY)).is_ok());
    assert_eq!(with(Some("TESTKEY2")), Err(VerifyError::Mismatch));
    assert_eq!(with(None), Err(VerifyError::NoMerchantKey));
}

#[test]
fn payu_hash_input_matches_the_vector() {
    let input = vector_str(Gateway::Payu, "hash_input");
    assert_eq!(
        hex::encode(Sha512::digest(input.as_bytes())),
        vector_str(Gateway::Payu, "hash")
    );
}

#[test]
fn vectors_parse_to_the_fixture_facts() {
    let rzp = parse(
        Gateway::Razorpay,
        &vector_headers(Gateway::Razorpay),
        vector_body(Gateway::Razorpay),
    )
    .unwrap();
    assert_eq!(rzp.event_id, "NnJ8TqLr2sKx1A");
    assert_eq!(rzp.event_type, "payment.captured");
    assert_eq!(rzp.kind, EventKind::Captured);
    assert_eq!(rzp.payment_id.as_deref(), Some("pay_NnJ8TqLr2sKx1B"));
    assert_eq!(rzp.order_ref.as_deref(), Some("order_NnJ7zQ3c4PpD9e"));
    assert_eq!(rzp.amount_minor, Some(50_000));
    assert_eq!(rzp.currency.as_deref(), Some("INR"));
    assert_eq!(rzp.email.as_deref(), Some("gaurav.kumar@example.com"));
    assert_eq!(rzp.refund_id, None);

    let cf = parse(
        Gateway::Cashfree,
        &vector_headers(Gateway::Cashfree),
        vector_body(Gateway::Cashfree),
    )
    .unwrap();
    assert_eq!(cf.event_id, "PAYMENT_SUCCESS_WEBHOOK:5114910371254:SUCCESS");
    assert_eq!(cf.kind, EventKind::Captured);
    assert_eq!(cf.payment_id.as_deref(), Some("5114910371254"));
    assert_eq!(cf.order_ref.as_deref(), Some("order_1042"));
    assert_eq!(cf.amount_minor, Some(50_000));
    assert_eq!(cf.currency.as_deref(), Some("INR"));
    assert_eq!(cf.email.as_deref(), Some("gaurav.kumar@example.com"));

    let payu = parse(
        Gateway::Payu,
        &vector_headers(Gateway::Payu),
        vector_body(Gateway::Payu),
    )
    .unwrap();
    assert_eq!(payu.event_id, "TXN1042A:success");
    assert_eq!(payu.event_type, "success");
    assert_eq!(payu.kind, EventKind::Captured);
    // The attempt is the hashed txnid (not the unsigned mihpayid), the order udf1.
    assert_eq!(payu.payment_id.as_deref(), Some("TXN1042A"));
    assert_eq!(payu.order_ref.as_deref(), Some("order_1042"));
    assert_eq!(payu.amount_minor, Some(50_000));
    assert_eq!(payu.currency.as_deref(), Some("INR"));
    assert_eq!(payu.email.as_deref(), Some("gaurav.kumar@example.com"));

    let stripe = parse(
        Gateway::Stripe,
        &vector_headers(Gateway::Stripe),
        vector_body(Gateway::Stripe),
    )
    .unwrap();
    assert_eq!(stripe.event_id, "evt_3PPaY2LkdIwHu7ix0bPzH1nX");
    assert_eq!(stripe.event_type, "payment_intent.succeeded");
    assert_eq!(stripe.kind, EventKind::Captured);
    assert_eq!(
        stripe.payment_id.as_deref(),
        Some("pi_3PPaY2LkdIwHu7ix0k9m2Ab1")
    );
    assert_eq!(
        stripe.order_ref, None,
        "the vector's metadata has no order_ref"
    );
    assert_eq!(stripe.amount_minor, Some(50_000));
    assert_eq!(stripe.currency.as_deref(), Some("INR"));
    assert_eq!(stripe.email, None);

    let std = parse(
        Gateway::Standard,
        &vector_headers(Gateway::Standard),
        vector_body(Gateway::Standard),
    )
    .unwrap();
    assert_eq!(std.event_id, "msg_2KWPBgLlAfxdpx2AI54pPJ85f4W");
    assert_eq!(std.kind, EventKind::Captured);
    assert_eq!(std.payment_id.as_deref(), Some("pay_01HZX9Q4Z5"));
    assert_eq!(std.order_ref.as_deref(), Some("order_1042"));
    assert_eq!(std.amount_minor, Some(50_000));
    assert_eq!(std.currency.as_deref(), Some("INR"));
    assert_eq!(std.email, None);

    for e in [&rzp, &cf, &payu, &stripe, &std] {
        assert_eq!(e.provider.as_str(), e.provider.to_string());
    }
}

#[test]
fn standard_secret_decodes_to_the_published_key() {
    let secret = vector_secret(Gateway::Standard);
    let key_hex = vector_str(Gateway::Standard, "key_hex");
    use base64::Engine;
    let key = base64::engine::general_purpose::STANDARD
        .decode(secret.trim_start_matches("whsec_"))
        .unwrap();
    assert_eq!(hex::encode(key), key_hex);
    // Without the prefix the same secret still verifies.
    let bare = secret.trim_start_matches("whsec_").to_owned();
    assert_eq!(
        check(
            Gateway::Standard,
            &[bare],
            &vector_headers(Gateway::Standard),
            vector_body(Gateway::Standard)
        ),
        Ok(0)
    );
}

/// Positions in a gateway's vector body whose change must break verification.
/// Every byte of a JSON body is signed; PayU's hash covers only some fields,
/// so there the positions are inside covered values.
fn signed_positions(gateway: Gateway) -> Vec<usize> {
    let body = vector_body(gateway);
    if gateway != Gateway::Payu {
        return (0..body.len()).collect();
    }
    let text = std::str::from_utf8(body).unwrap();
    let mut positions = Vec::new();
    for field in [
        "status",
        "key",
        "txnid",
        "amount",
        "productinfo",
        "firstname",
        "email",
        "udf1",
        "hash",
    ] {
        let start = text.find(&format!("&{field}=")).unwrap() + field.len() + 2;
        let end = text[start..].find('&').map_or(text.len(), |e| start + e);
        positions.extend(start..end);
    }
    positions
}

#[test]
fn one_byte_body_changes_fail() {
    for gateway in Gateway::ALL {
        let secrets = [vector_secret(gateway)];
        let headers = vector_headers(gateway);
        let body = vector_body(gateway);
        for pos in signed_positions(gateway) {
            for replacement in [b'1', b'x'] {
                if body[pos] == replacement {
                    continue;
                }
                let mut changed = body.to_vec();
                changed[pos] = replacement;
                let r = check(gateway, &secrets, &headers, &changed);
                assert!(r.is_err(), "{gateway}: change at {pos} still verified");
            }
        }
    }
}

#[test]
fn payu_fields_outside_the_hash_do_not_change_the_identity() {
    // mihpayid is not covered by PayU's hash: a changed one still verifies,
    // which is why the event identity is txnid:status and never mihpayid.
    let body = std::str::from_utf8(vector_body(Gateway::Payu)).unwrap();
    let changed = body.replacen(
        "mihpayid=403993715531077182",
        "mihpayid=403993715531077183",
        1,
    );
    let salt = [vector_secret(Gateway::Payu)];
    assert_eq!(
        check(Gateway::Payu, &salt, &Headers::new(), changed.as_bytes()),
        Ok(0)
    );
    let a = parse(Gateway::Payu, &Headers::new(), body.as_bytes()).unwrap();
    let b = parse(Gateway::Payu, &Headers::new(), changed.as_bytes()).unwrap();
    assert_eq!(a.event_id, b.event_id);
    assert_eq!(a.order_ref, b.order_ref);
    assert_eq!(a.amount_minor, b.amount_minor);
}

#[test]
fn one_byte_header_changes_fail() {
    let cases: &[(Gateway, &str)] = &[
        (Gateway::Razorpay, "X-Razorpay-Signature"),
        (Gateway::Cashfree, "x-webhook-signature"),
        (Gateway::Cashfree, "x-webhook-timestamp"),
        (Gateway::Stripe, "Stripe-Signature"),
        (Gateway::Standard, "webhook-signature"),
        (Gateway::Standard, "webhook-timestamp"),
        (Gateway::Standard, "webhook-id"),
    ];
    for &(gateway, name) in cases {
        let headers = vector_headers(gateway);
        let value = headers.get(name).unwrap().to_owned();
        let secrets = [vector_secret(gateway)];
        // Change every character in turn (timestamps: only the last digits, so
        // the window check does not hide a signature that still matches).
        let start = if name.contains("timestamp") {
            value.len() - 3
        } else {
            0
        };
        for i in start..value.len() {
            if value.as_bytes()[i] == b'=' || value.as_bytes()[i] == b',' {
                continue;
            }
            let changed = change_char(&value, i);
            assert_ne!(changed, value);
            let h = replace_header(&headers, name, &changed);
            let r = check(gateway, &secrets, &h, vector_body(gateway));
            assert!(r.is_err(), "{gateway}: {name} {changed:?} still verified");
        }
    }
}

#[test]
fn payu_hash_field_changes_fail() {
    let body = std::str::from_utf8(vector_body(Gateway::Payu)).unwrap();
    let hash = vector_str(Gateway::Payu, "hash");
    let start = body.find(&hash).unwrap();
    for i in 0..hash.len() {
        let changed = format!("{}{}", &body[..start], change_char(&body[start..], i));
        let r = check(
            Gateway::Payu,
            &[vector_secret(Gateway::Payu)],
            &Headers::new(),
            changed.as_bytes(),
        );
        assert_eq!(r, Err(VerifyError::Mismatch), "hash char {i}");
    }
}

#[test]
fn missing_signature_headers_are_reported_by_name() {
    let cases: &[(Gateway, &str)] = &[
        (Gateway::Razorpay, "X-Razorpay-Signature"),
        (Gateway::Cashfree, "x-webhook-signature"),
        (Gateway::Cashfree, "x-webhook-timestamp"),
        (Gateway::Stripe, "Stripe-Signature"),
        (Gateway::Standard, "webhook-id"),
        (Gateway::Standard, "webhook-timestamp"),
        (Gateway::Standard, "webhook-signature"),
    ];
    for &(gateway, name) in cases {
        let h = remove_header(&vector_headers(gateway), name);
        let r = check(gateway, &[vector_secret(gateway)], &h, vector_body(gateway));
        assert_eq!(r, Err(VerifyError::Missing(name)), "{gateway}");
    }
    let body = std::str::from_utf8(vector_body(Gateway::Payu)).unwrap();
    let without_hash = &body[..body.find("&hash=").unwrap()];
    assert_eq!(
        check(
            Gateway::Payu,
            &[vector_secret(Gateway::Payu)],
            &Headers::new(),
            without_hash.as_bytes()
        ),
        Err(VerifyError::Missing("hash"))
    );
}

#[test]
fn malformed_signatures_are_malformed() {
    let malformed = |r: Result<usize, VerifyError>| matches!(r, Err(VerifyError::Malformed { .. }));
    let rzp = vector_headers(Gateway::Razorpay);
    for bad in ["zz", "abcd", "not hex at all", &"a".repeat(66)] {
        let h = replace_header(&rzp, "X-Razorpay-Signature", bad);
        assert!(
            malformed(check(
                Gateway::Razorpay,
                &[vector_secret(Gateway::Razorpay)],
                &h,
                vector_body(Gateway::Razorpay)
            )),
            "{bad}"
        );
    }
    let cf = vector_headers(Gateway::Cashfree);
    for (name, bad) in [
        ("x-webhook-signature", "%%%"),
        ("x-webhook-signature", "AAAA"),
        ("x-webhook-timestamp", "12.5"),
        ("x-webhook-timestamp", "-1746426425612"),
    ] {
        let h = replace_header(&cf, name, bad);
        assert!(
            malformed(check(
                Gateway::Cashfree,
                &[vector_secret(Gateway::Cashfree)],
                &h,
                vector_body(Gateway::Cashfree)
            )),
            "{name} {bad}"
        );
    }
    let stripe = vector_headers(Gateway::Stripe);
    for bad in [
        "v1=88b95a08a44dfd7568488111eb24a29aa6ada8e877c375cd6ae8d92550ad65c7",
        "t=abc,v1=88b95a08a44dfd7568488111eb24a29aa6ada8e877c375cd6ae8d92550ad65c7",
        "t=1717740003",
        "t=1717740003,v0=88b95a08a44dfd7568488111eb24a29aa6ada8e877c375cd6ae8d92550ad65c7",
        "t=1717740003,v1=xyz",
        "t=1717740003,t=1717740003,v1=88b95a08a44dfd7568488111eb24a29aa6ada8e877c375cd6ae8d92550ad65c7",
        "",
    ] {
        let h = replace_header(&stripe, "Stripe-Signature", bad);
        let r = check(
            Gateway::Stripe,
            &[vector_secret(Gateway::Stripe)],
            &h,
            vector_body(Gateway::Stripe),
        );
        assert!(
            malformed(r.clone())
                || (bad.is_empty() && r == Err(VerifyError::Missing("Stripe-Signature"))),
            "{bad:?}: {r:?}"
        );
    }
    let std = vector_headers(Gateway::Standard);
    for (name, bad) in [
        (
            "webhook-signature",
            "v2,6mI1HB2t8nBnxxzphJfCNE3+JSAV/Q9+KC2Y0sIcPpw=",
        ),
        ("webhook-signature", "v1,@@@"),
        ("webhook-timestamp", "soon"),
    ] {
        let h = replace_header(&std, name, bad);
        assert!(
            malformed(check(
                Gateway::Standard,
                &[vector_secret(Gateway::Standard)],
                &h,
                vector_body(Gateway::Standard)
            )),
            "{name} {bad}"
        );
    }
    assert!(malformed(check(
        Gateway::Payu,
        &[vector_secret(Gateway::Payu)],
        &Headers::new(),
        b"status=success&hash=xyz"
    )));
    assert!(malformed(check(
        Gateway::Payu,
        &[vector_secret(Gateway::Payu)],
        &Headers::new(),
        b"a=\xff&hash=00"
    )));
    assert!(malformed(check(
        Gateway::Payu,
        &[vector_secret(Gateway::Payu)],
        &Headers::new(),
        b"a=1&a=2&hash=00"
    )));
}

#[test]
fn stripe_ignores_v0_and_extra_signatures() {
    let sig = vector_headers(Gateway::Stripe)
        .get("Stripe-Signature")
        .unwrap()
        .to_owned();
    let v1 = sig.split_once(",v1=").unwrap().1;
    let header = format!(
        "t=1717740003, v0=deadbeef, v1={}, v1={v1}, x=1",
        "0".repeat(64)
    );
    let h = replace_header(
        &vector_headers(Gateway::Stripe),
        "Stripe-Signature",
        &header,
    );
    assert_eq!(
        check(
            Gateway::Stripe,
            &[vector_secret(Gateway::Stripe)],
            &h,
            vector_body(Gateway::Stripe)
        ),
        Ok(0)
    );
}

#[test]
fn standard_accepts_any_listed_v1_signature() {
    let headers = vector_headers(Gateway::Standard);
    let sig = headers.get("webhook-signature").unwrap().to_owned();
    let listed = format!("v1a,zzz v1,{} {sig}", "A".repeat(43) + "=");
    let h = replace_header(&headers, "webhook-signature", &listed);
    assert_eq!(
        check(
            Gateway::Standard,
            &[vector_secret(Gateway::Standard)],
            &h,
            vector_body(Gateway::Standard)
        ),
        Ok(0)
    );
}

#[test]
fn no_secrets_is_its_own_error() {
    for gateway in Gateway::ALL {
        assert_eq!(
            check(gateway, &[], &vector_headers(gateway), vector_body(gateway)),
            Err(VerifyError::NoSecrets),
            "{gateway}"
        );
    }
}

#[test]
fn wrong_secret_is_a_mismatch_and_rotation_finds_the_right_one() {
    for gateway in Gateway::ALL {
        let right = vector_secret(gateway);
        let wrong = "whsec_d3Jvbmcgc2VjcmV0IGZvciB0ZXN0cw==".to_owned();
        let headers = vector_headers(gateway);
        let body = vector_body(gateway);
        assert_eq!(
            check(gateway, std::slice::from_ref(&wrong), &headers, body),
            Err(VerifyError::Mismatch),
            "{gateway}"
        );
        assert_eq!(
            check(gateway, &[wrong.clone(), right.clone()], &headers, body),
            Ok(1),
            "{gateway}"
        );
        assert_eq!(
            check(gateway, &[right, wrong], &headers, body),
            Ok(0),
            "{gateway}"
        );
    }
}

#[test]
fn standard_skips_secrets_that_are_not_base64() {
    let headers = vector_headers(Gateway::Standard);
    let body = vector_body(Gateway::Standard);
    assert_eq!(
        check(
            Gateway::Standard,
            &["whsec_!!not base64!!".into()],
            &headers,
            body
        ),
        Err(VerifyError::Mismatch)
    );
    assert_eq!(
        check(
            Gateway::Standard,
            &[
                "whsec_!!not base64!!".into(),
                vector_secret(Gateway::Standard)
            ],
            &headers,
            body
        ),
        Ok(1)
    );
}

#[test]
fn stripe_rotation_header_passes_with_either_secret() {
    let rotation = vectors()["stripe"]["headers"]["Stripe-Signature (rotation, both secrets)"]
        .as_str()
        .unwrap()
        .to_owned();
    let headers = replace_header(
        &vector_headers(Gateway::Stripe),
        "Stripe-Signature",
        &rotation,
    );
    let body = vector_body(Gateway::Stripe);
    let new = vector_secret(Gateway::Stripe);
    let old = vector_str(Gateway::Stripe, "old_secret");
    let unrelated = "whsec_test_VW5yZWxhdGVkU2VjcmV0".to_owned();
    assert_eq!(
        check(Gateway::Stripe, std::slice::from_ref(&new), &headers, body),
        Ok(0)
    );
    assert_eq!(
        check(Gateway::Stripe, std::slice::from_ref(&old), &headers, body),
        Ok(0)
    );
    assert_eq!(
        check(Gateway::Stripe, &[old.clone(), new.clone()], &headers, body),
        Ok(0)
    );
    assert_eq!(
        check(
            Gateway::Stripe,
            &[unrelated.clone(), old.clone()],
            &headers,
            body
        ),
        Ok(1)
    );
    assert_eq!(
        check(Gateway::Stripe, &[unrelated.clone(), new], &headers, body),
        Ok(1)
    );
    assert_eq!(
        check(Gateway::Stripe, &[unrelated], &headers, body),
        Err(VerifyError::Mismatch)
    );
    // The single-signature header is the new secret's only.
    let single = vector_headers(Gateway::Stripe);
    assert_eq!(
        check(Gateway::Stripe, &[old], &single, body),
        Err(VerifyError::Mismatch)
    );
}

#[test]
fn timestamps_outside_the_window_are_refused_both_ways() {
    for gateway in [Gateway::Cashfree, Gateway::Stripe, Gateway::Standard] {
        let secrets = [vector_secret(gateway)];
        let headers = vector_headers(gateway);
        let body = vector_body(gateway);
        let signed = vector_now(gateway);
        for now in [signed - 300, signed, signed + 300] {
            assert!(
                verify(
                    gateway,
                    vector_creds(&secrets),
                    &headers,
                    body,
                    now,
                    TOLERANCE
                )
                .is_ok(),
                "{gateway} at {now}"
            );
        }
        for now in [signed - 301, signed + 301, signed + 86_400, 0, i64::MAX] {
            let r = verify(
                gateway,
                vector_creds(&secrets),
                &headers,
                body,
                now,
                TOLERANCE,
            );
            assert_eq!(
                r,
                Err(VerifyError::OutsideTolerance {
                    signed_at: signed,
                    now,
                    tolerance_secs: TOLERANCE
                }),
                "{gateway} at {now}"
            );
        }
        // A generous tolerance accepts a replay hours later.
        assert!(
            verify(
                gateway,
                vector_creds(&secrets),
                &headers,
                body,
                signed + 7_200,
                86_400
            )
            .is_ok()
        );
    }
}

#[test]
fn gateways_without_timestamps_ignore_the_clock() {
    for gateway in [Gateway::Razorpay, Gateway::Payu] {
        let r = verify(
            gateway,
            vector_creds(&[vector_secret(gateway)]),
            &vector_headers(gateway),
            vector_body(gateway),
            i64::MIN,
            0,
        );
        assert_eq!(r.map(|v| v.signed_at), Ok(None), "{gateway}");
    }
}

#[test]
fn error_messages_never_contain_expected_signatures() {
    for gateway in Gateway::ALL {
        let secret = vector_secret(gateway);
        let headers = vector_headers(gateway);
        let mut body = vector_body(gateway).to_vec();
        let pos = signed_positions(gateway)[1];
        body[pos] ^= 1;
        let err = check(gateway, std::slice::from_ref(&secret), &headers, &body).unwrap_err();
        let text = err.to_string();
        assert!(!text.contains(&secret), "{gateway}: {text}");
        for (_, value) in headers.iter() {
            if value.len() > 20 {
                assert!(!text.contains(value), "{gateway}: {text}");
            }
        }
    }
}
