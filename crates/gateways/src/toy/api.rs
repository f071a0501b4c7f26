//! The toy gateway's API, for reconciliation: the whole [`GatewayApi`]
//! recipe of `docs/adding-a-gateway.md` in one file — a default base URL,
//! one credential key (`[source.api] api_key`, sent as `toy-api-key`, which
//! must start with `toy_`), the calls asked about an order, which answer
//! means "no such order", and the answer read into the events the toy's
//! webhooks would carry.
//!
//! The API: `GET /v1/orders/{order}/payments` answers
//! `{"payments": [{"id", "status", "amount", "currency", "order"}]}`, 404
//! for an order it does not know. `paid` is a capture and `failed` a failed
//! attempt, each named `reconciliation:{payment}:{fact}`; other statuses
//! record nothing yet. An order is asked by its toy references, else by the
//! shop's own reference.

use serde_json::Value;

use super::Toy;
use crate::json::{currency_at, id_at, int_amount_at, parse_body, str_at};
use crate::reconcile::{
    Answer, ApiCredentials, ApiRequest, Ask, CredentialKey, GatewayApi, OrderNames, RequestError,
    segment,
};
use crate::scheme::ParseError;
use crate::{EventKind, Gateway, NormalizedEvent};

/// `GET /v1/orders/{order}/payments`.
const ORDER_PAYMENTS: &str = "order_payments";
/// The most payments one answer may list.
const MAX_ITEMS: usize = 1_000;

const KEYS: &[CredentialKey] = &[CredentialKey::secret("api_key").refusing(
    |key| !key.starts_with("toy_"),
    "does not start with toy_ (every toy API key does)",
)];

impl GatewayApi for Toy {
    fn default_base_url(&self) -> &'static str {
        "https://api.toy.invalid"
    }

    fn credential_keys(&self) -> &'static [CredentialKey] {
        KEYS
    }

    fn asks_by_shop_reference(&self) -> bool {
        true
    }

    fn asks(&self, order: &OrderNames) -> Vec<Ask> {
        if order.refs.is_empty() {
            return vec![Ask::of(ORDER_PAYMENTS, &order.order_ref)];
        }
        order
            .refs
            .iter()
            .map(|r| Ask::of(ORDER_PAYMENTS, r))
            .collect()
    }

    fn request(&self, ask: &Ask, credentials: &ApiCredentials) -> Result<ApiRequest, RequestError> {
        if ask.call != ORDER_PAYMENTS {
            return Err(RequestError::UnknownCall(ask.call));
        }
        let path = format!("/v1/orders/{}/payments", segment(ask.id()));
        Ok(ApiRequest::get(path).secret_header("toy-api-key", credentials.require("api_key")?))
    }

    /// The toy API answers 404 for an order it does not know.
    fn unknown_id(&self, _ask: &Ask, status: u16, _body: &[u8]) -> bool {
        status == 404
    }

    fn read(&self, _ask: &Ask, body: &[u8]) -> Result<Answer, ParseError> {
        let v = parse_body(body)?;
        let Some(Value::Array(items)) = v.get("payments") else {
            return Err(ParseError::MissingField("payments"));
        };
        if items.len() > MAX_ITEMS {
            return Err(ParseError::InvalidField {
                field: "payments",
                reason: format!("{} payments, more than {MAX_ITEMS}", items.len()),
            });
        }
        let mut facts = Vec::new();
        for item in items {
            facts.extend(payment(item)?);
        }
        Ok(Answer {
            facts,
            ..Answer::default()
        })
    }

    fn describe(&self, ask: &Ask) -> String {
        format!("GET /v1/orders/{}/payments", ask.id())
    }
}

/// One payment of the answer; `None` for a status that records nothing.
fn payment(item: &Value) -> Result<Option<NormalizedEvent>, ParseError> {
    let id = id_at(item, &["id"]).ok_or(ParseError::MissingField("payments[].id"))?;
    let status = str_at(item, &["status"]).ok_or(ParseError::MissingField("payments[].status"))?;
    let kind = match status {
        "paid" => EventKind::Captured,
        "failed" => EventKind::Failed,
        _ => return Ok(None),
    };
    Ok(Some(NormalizedEvent {
        provider: Gateway::Toy,
        event_id: format!("reconciliation:{id}:{}", kind.as_str()),
        event_type: status.to_owned(),
        kind,
        payment_id: Some(id),
        order_ref: id_at(item, &["order"]),
        amount_minor: int_amount_at(item, &["amount"], "payments[].amount")?,
        currency: currency_at(item, &["currency"]),
        email: None,
        refund_id: None,
        cumulative_refund: false,
    }))
}

#[cfg(test)]
mod tests {
    use crate::reconcile::{Ask, CredentialError, Method, OrderNames, credentials, table};
    use crate::sample::{self, SampleSpec};
    use crate::{Credentials, Gateway, parse};

    fn spec() -> SampleSpec {
        super::super::tests::spec_of("order 1")
    }

    #[test]
    fn the_registry_line_gives_it_an_api() {
        let api = Gateway::Toy.api().expect("the toy has an API");
        assert_eq!(api.default_base_url(), "https://api.toy.invalid");
        let secrets = vec!["s".to_owned()];
        let source = Credentials::new(&secrets);
        let creds = credentials(Gateway::Toy, &table(&[("api_key", "toy_k")]), source)
            .expect("credentials");
        assert_eq!(creds.get("api_key"), Some("toy_k"));
        assert!(!format!("{creds:?}").contains("toy_k"), "{creds:?}");
        for (t, expect) in [
            (table(&[]), CredentialError::Required("api_key")),
            (
                table(&[("api_key", " ")]),
                CredentialError::Empty("api_key"),
            ),
        ] {
            assert_eq!(credentials(Gateway::Toy, &t, source), Err(expect));
        }
        let wrong = credentials(Gateway::Toy, &table(&[("api_key", "sk_1")]), source);
        assert!(matches!(
            wrong,
            Err(CredentialError::Shape { key: "api_key", .. })
        ));
        let other = credentials(
            Gateway::Toy,
            &table(&[("api_key", "toy_k"), ("x", "1")]),
            source,
        );
        assert_eq!(
            other.map_err(|e| e.to_string()),
            Err(r#"x is not used by gateway "toy" (it takes api_key)"#.to_owned())
        );
    }

    #[test]
    fn an_order_is_asked_by_its_reference_and_the_answer_is_the_webhooks_fact() {
        let api = Gateway::Toy.api().expect("an API");
        assert!(api.asks_by_shop_reference());
        let order = OrderNames {
            order_ref: "order 1".into(),
            ..OrderNames::default()
        };
        let asks = api.asks(&order);
        assert_eq!(asks, [Ask::of("order_payments", "order 1")]);
        let secrets = vec!["s".to_owned()];
        let creds = credentials(
            Gateway::Toy,
            &table(&[("api_key", "toy_k")]),
            Credentials::new(&secrets),
        )
        .expect("credentials");
        let request = api.request(&asks[0], &creds).expect("a request");
        assert_eq!(request.method, Method::Get);
        assert_eq!(request.path, "/v1/orders/order%201/payments");
        assert!(!format!("{request:?}").contains("toy_k"));
        assert!(api.unknown_id(&asks[0], 404, b"{}"));

        let answer = br#"{"payments": [{"id": "pay_1", "status": "paid", "amount": 50000,
            "currency": "INR", "order": "order 1"}, {"id": "pay_0", "status": "created"}]}"#;
        let found = api.read(&asks[0], answer).expect("read");
        let d = sample::build(Gateway::Toy, "paid", &spec(), "s").expect("a sample");
        let hook = parse(Gateway::Toy, &d.headers, &d.body).expect("parsed");
        assert_eq!(found.facts.len(), 1);
        assert_eq!(found.facts[0].fact(), hook.fact());
        assert_eq!(found.facts[0].order_ref, hook.order_ref);
        assert!(api.read(&asks[0], b"{}").is_err());
    }
}
