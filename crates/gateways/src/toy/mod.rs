//! A toy gateway for tests only: its registry line in `lib.rs` makes it
//! exist in this crate's unit tests and, for other crates' tests, with the
//! `toy` feature, which no production crate enables — so no production
//! build, configuration or envelope can name it. It follows
//! `docs/adding-a-gateway.md` to the letter — this folder plus one registry
//! line — and its tests run verification, parsing and samples through the
//! crate's generic entry points ([`crate::verify`], [`crate::parse`],
//! [`crate::sample::build`], [`crate::sample::tamper`], `Gateway` names and
//! serde), its API (`api.rs`) through [`Gateway::api`] and its refunds
//! (`refund.rs`, tests in `refund_tests.rs`) through [`Gateway::refunds`];
//! the reconciler's own test asks it over HTTP, and the refunder's sends it
//! a refund through the test suite's stand-in (`tests/support/`). A change
//! to the contract that the recipe no longer covers fails here.
//!
//! The scheme: `toy-timestamp` (unix seconds) and `toy-signature`, the
//! lowercase hex HMAC-SHA256 of `{timestamp}.{raw body}`; the body is
//! `{"id", "type", "payment", "order", "amount", "currency", "email"}`. A real
//! gateway splits this file into `scheme.rs` and `sample.rs`.

mod api;
mod refund;

use crate::crypto::{
    check_window, decode_hex, first_match, hmac_sha256, hmac_sha256_matches, parse_unix_digits,
};
use crate::json::{currency_at, id_at, int_amount_at, parse_body, str_at};
use crate::reconcile::GatewayApi;
use crate::refund::GatewayRefunds;
use crate::sample::text::js;
use crate::sample::{SampleError, SampleSpec, SignedDelivery};
use crate::scheme::{
    ContentType, GatewayScheme, ParseError, ParseFn, Request, SampleFn, Verification, VerifyError,
    VerifyFn, header,
};
use crate::{EventKind, Gateway, Headers, NormalizedEvent};

const SIGNATURE_HEADER: &str = "toy-signature";
const TIMESTAMP_HEADER: &str = "toy-timestamp";

/// The toy gateway.
pub(crate) struct Toy;

impl GatewayScheme for Toy {
    const NAME: &'static str = "toy";
    const CONTENT_TYPE: ContentType = ContentType::Json;
    const SIGNS_TIMESTAMP: bool = true;
    const RELEVANT_HEADERS: &'static [&'static str] =
        &[SIGNATURE_HEADER, TIMESTAMP_HEADER, "content-type"];
    const SIGNATURE_HEADER: Option<&'static str> = Some(SIGNATURE_HEADER);
    const SAMPLE_EVENTS: &'static [(&'static str, &'static str)] = &[
        ("paid", "paid"),
        ("refunded", "refunded"),
        ("captured", "paid"),
    ];
    const SAMPLE_EVENT_NAMES: &'static [&'static str] = &["paid", "refunded", "captured"];

    const VERIFY: VerifyFn = verify;
    const PARSE: ParseFn = parse;
    const SAMPLE: SampleFn = sample;
    const SAMPLE_REFUND_ID: fn(&SampleSpec) -> String = |spec| format!("toyrf_{}", spec.event_id);
    const API: Option<&'static dyn GatewayApi> = Some(&Toy);
    const REFUNDS: Option<&'static dyn GatewayRefunds> = Some(&Toy);
}

fn verify(request: &Request<'_>) -> Result<Verification, VerifyError> {
    let (headers, body) = (request.headers, request.body);
    let ts = header(headers, TIMESTAMP_HEADER).ok_or(VerifyError::Missing(TIMESTAMP_HEADER))?;
    let sig = header(headers, SIGNATURE_HEADER).ok_or(VerifyError::Missing(SIGNATURE_HEADER))?;
    let signed_at = parse_unix_digits(ts, TIMESTAMP_HEADER)?;
    let signature = decode_hex(sig, 32, SIGNATURE_HEADER)?;
    check_window(signed_at, request.now_unix, request.tolerance_secs)?;
    let signed = [ts.as_bytes(), b".", body];
    let secret_index = first_match(request.credentials.secrets, |s| {
        hmac_sha256_matches(s.as_bytes(), &signed, &signature)
    })?;
    Ok(Verification {
        secret_index,
        signed_at: Some(signed_at),
    })
}

fn parse(_headers: &Headers, body: &[u8]) -> Result<NormalizedEvent, ParseError> {
    let v = parse_body(body)?;
    let event_id = id_at(&v, &["id"]).ok_or(ParseError::MissingField("id"))?;
    let ty = str_at(&v, &["type"]).ok_or(ParseError::MissingField("type"))?;
    let kind = match ty {
        "paid" => EventKind::Captured,
        "refunded" => EventKind::Refunded,
        _ => EventKind::Other,
    };
    Ok(NormalizedEvent {
        provider: Gateway::Toy,
        refund_id: (kind == EventKind::Refunded).then(|| format!("toyrf_{event_id}")),
        event_id,
        event_type: ty.to_owned(),
        kind,
        payment_id: id_at(&v, &["payment"]),
        order_ref: id_at(&v, &["order"]),
        amount_minor: int_amount_at(&v, &["amount"], "amount")?,
        currency: currency_at(&v, &["currency"]),
        email: str_at(&v, &["email"]).map(str::to_owned),
        cumulative_refund: false,
    })
}

fn sample(event: &str, spec: &SampleSpec, secret: &str) -> Result<SignedDelivery, SampleError> {
    let body = format!(
        r#"{{"id":{id},"type":{ty},"payment":{payment},"order":{order},"amount":{amount},"currency":{currency},"email":{email}}}"#,
        id = js(&spec.event_id),
        ty = js(event),
        payment = js(&spec.payment_id),
        order = js(&spec.order_ref),
        amount = spec.amount_minor,
        currency = js(&spec.currency),
        email = js(&spec.email),
    )
    .into_bytes();
    let ts = spec.timestamp.to_string();
    let signature = hex::encode(hmac_sha256(
        secret.as_bytes(),
        &[ts.as_bytes(), b".", &body],
    ));
    let headers = Headers::new()
        .with("Content-Type", Toy::CONTENT_TYPE.as_str())
        .with(TIMESTAMP_HEADER, ts)
        .with(SIGNATURE_HEADER, signature);
    Ok(SignedDelivery { headers, body })
}

#[cfg(test)]
mod tests {
    use crate::sample::{self, SampleError, SampleSpec};
    use crate::{ContentType, Credentials, EventKind, Gateway, VerifyError, parse, verify};

    const SECRET: &str = "toy-secret";

    fn spec() -> SampleSpec {
        spec_of("order_1")
    }

    /// The toy's sample of order `order_ref` (the API's tests read it too).
    pub(super) fn spec_of(order_ref: &str) -> SampleSpec {
        SampleSpec {
            order_ref: order_ref.into(),
            payment_id: "pay_1".into(),
            event_id: "evt_1".into(),
            amount_minor: 50_000,
            currency: "INR".into(),
            email: "a@example.com".into(),
            timestamp: 1_717_740_003,
            merchant_key: None,
        }
    }

    fn secrets() -> Vec<String> {
        vec!["old".to_owned(), SECRET.to_owned()]
    }

    #[test]
    fn the_registry_line_makes_it_a_gateway() {
        assert!(Gateway::ALL.contains(&Gateway::Toy));
        assert_eq!("toy".parse::<Gateway>(), Ok(Gateway::Toy));
        assert_eq!(Gateway::Toy.to_string(), "toy");
        assert_eq!(serde_json::to_string(&Gateway::Toy).unwrap(), r#""toy""#);
        assert_eq!(
            serde_json::from_str::<Gateway>(r#""toy""#).unwrap(),
            Gateway::Toy
        );
        assert!(Gateway::Toy.signs_timestamp());
        assert_eq!(Gateway::Toy.content_type(), ContentType::Json);
        assert!(Gateway::Toy.relevant_headers().contains(&"toy-signature"));
        assert_eq!(
            sample::event_names(Gateway::Toy),
            ["paid", "refunded", "captured"]
        );
    }

    #[test]
    fn a_sample_verifies_parses_and_round_trips_the_spec() {
        let d = sample::build(Gateway::Toy, "Captured", &spec(), SECRET).unwrap();
        let secrets = secrets();
        let creds = Credentials::new(&secrets);
        let v = verify(
            Gateway::Toy,
            creds,
            &d.headers,
            &d.body,
            spec().timestamp,
            300,
        )
        .unwrap();
        assert_eq!((v.secret_index, v.signed_at), (1, Some(spec().timestamp)));
        let e = parse(Gateway::Toy, &d.headers, &d.body).unwrap();
        assert_eq!(e.provider, Gateway::Toy);
        assert_eq!(
            (e.event_id.as_str(), e.event_type.as_str()),
            ("evt_1", "paid")
        );
        assert_eq!(e.kind, EventKind::Captured);
        assert_eq!(e.payment_id.as_deref(), Some("pay_1"));
        assert_eq!(e.order_ref.as_deref(), Some("order_1"));
        assert_eq!(
            (e.amount_minor, e.currency.as_deref()),
            (Some(50_000), Some("INR"))
        );

        let r = sample::build(Gateway::Toy, "refunded", &spec(), SECRET).unwrap();
        let e = parse(Gateway::Toy, &r.headers, &r.body).unwrap();
        assert_eq!(e.refund_id, Some(spec().refund_id(Gateway::Toy)));
    }

    #[test]
    fn the_generic_checks_apply_to_it() {
        let d = sample::build(Gateway::Toy, "paid", &spec(), SECRET).unwrap();
        let now = spec().timestamp;
        let none: Vec<String> = Vec::new();
        let verify_with = |secrets: &[String], body: &[u8], now: i64| {
            verify(
                Gateway::Toy,
                Credentials::new(secrets),
                &d.headers,
                body,
                now,
                300,
            )
        };
        assert_eq!(
            verify_with(&none, &d.body, now),
            Err(VerifyError::NoSecrets)
        );
        assert_eq!(
            verify_with(&["x".to_owned()], &d.body, now),
            Err(VerifyError::Mismatch)
        );
        assert!(matches!(
            verify_with(&secrets(), &d.body, now + 301),
            Err(VerifyError::OutsideTolerance { .. })
        ));
        // `tamper` recognises the delivery by its signature header and
        // changes the amount, which no longer verifies.
        let mut tampered = d.clone();
        sample::tamper(&mut tampered);
        assert_ne!(tampered.body, d.body);
        assert_eq!(
            verify_with(&secrets(), &tampered.body, now),
            Err(VerifyError::Mismatch)
        );
        let amount = |body: &[u8]| parse(Gateway::Toy, &d.headers, body).unwrap().amount_minor;
        assert_ne!(amount(&tampered.body), amount(&d.body));
        assert!(matches!(
            sample::build(Gateway::Toy, "shipped", &spec(), SECRET),
            Err(SampleError::UnknownSampleEvent {
                gateway: Gateway::Toy,
                ..
            })
        ));
    }
}
