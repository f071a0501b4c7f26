//! PayU's `verify_payment` command (`POST /merchant/postservice?form=2`),
//! for reconciliation: the signed request for a set of `txnid`s, and its
//! answer read into the same [`NormalizedEvent`]s the payment's
//! notification becomes. No I/O: the caller posts, this signs and reads.
//!
//! The request is signed with the source's merchant key and salt,
//! `sha512(key|command|var1|salt)`, `var1` the `txnid`s joined by `|`. Each
//! transaction the answer knows is one fact named
//! `reconciliation:{txnid}:{fact}` — the `txnid` is the payment, as in a
//! notification, and `udf1` the order (else the `txnid`). `pending` and
//! `Not Found` record nothing: the attempt is still in flight, or never
//! reached PayU.
//!
//! [`GatewayApi`] for PayU: `https://info.payu.in`; `[source.api]` takes no
//! keys of its own (the request is signed with the source's `merchant_key`
//! and first salt); every `txnid` the order may have used — its PayU
//! references, known payments and the shop's own reference — asked
//! [`MAX_TXNIDS`] at a time.

use std::collections::BTreeSet;

use serde_json::Value;
use sha2::{Digest, Sha512};
use url::form_urlencoded::Serializer;

use super::Payu;
use super::scheme::CURRENCY;
use crate::amount::{currency_exponent, parse_decimal_minor};
use crate::event::{EventKind, NormalizedEvent};
use crate::json::{parse_body, str_at};
use crate::reconcile::{
    Answer, ApiCredentials, ApiRequest, Ask, CredentialError, CredentialKey, GatewayApi,
    OrderNames, RequestError,
};
use crate::scheme::ParseError;
use crate::{Credentials, Gateway};

/// The one call: `verify_payment` for a batch of txnids.
const VERIFY: &str = "verify_payment";

impl GatewayApi for Payu {
    fn default_base_url(&self) -> &'static str {
        "https://info.payu.in"
    }

    fn credential_keys(&self) -> &'static [CredentialKey] {
        &[]
    }

    fn takes(&self) -> String {
        "only base_url: it signs with the source's merchant_key and salt".to_owned()
    }

    /// The source's merchant key and current salt (its first secret).
    fn complete_credentials(
        &self,
        credentials: &mut ApiCredentials,
        source: Credentials<'_>,
    ) -> Result<(), CredentialError> {
        let missing = CredentialError::Source("a PayU source needs its merchant_key and salt");
        let (Some(key), Some(salt)) = (source.merchant_key, source.secrets.first()) else {
            return Err(missing);
        };
        credentials.set("merchant_key", key, false);
        credentials.set("salt", salt.as_str(), true);
        Ok(())
    }

    fn asks_by_shop_reference(&self) -> bool {
        true
    }

    /// `verify_payment` for every txnid the order may have used, 100 at a
    /// time; an id PayU's list separator would split is never sent.
    fn asks(&self, order: &OrderNames) -> Vec<Ask> {
        let txnids: BTreeSet<&String> = order
            .refs
            .iter()
            .chain(&order.payments)
            .chain([&order.order_ref])
            .filter(|t| !t.is_empty() && !t.contains('|'))
            .collect();
        let txnids: Vec<String> = txnids.into_iter().cloned().collect();
        txnids
            .chunks(MAX_TXNIDS)
            .map(|c| Ask::batch(VERIFY, c.to_vec()))
            .collect()
    }

    fn request(&self, ask: &Ask, credentials: &ApiCredentials) -> Result<ApiRequest, RequestError> {
        if ask.call != VERIFY {
            return Err(RequestError::UnknownCall(ask.call));
        }
        let ids: Vec<&str> = ask.ids.iter().map(String::as_str).collect();
        let form = verify_payment_request(
            credentials.require("merchant_key")?,
            credentials.require("salt")?,
            &ids,
        )
        .map_err(|e| RequestError::Invalid(e.to_string()))?;
        Ok(ApiRequest::post_form(
            "/merchant/postservice.php?form=2".to_owned(),
            form,
        ))
    }

    fn read(&self, _ask: &Ask, body: &[u8]) -> Result<Answer, ParseError> {
        Ok(Answer {
            facts: verify_payment(body)?,
            ..Answer::default()
        })
    }

    fn describe(&self, ask: &Ask) -> String {
        format!("POST verify_payment {}", ask.ids.join("|"))
    }
}

/// The command asked of PayU.
pub const VERIFY_COMMAND: &str = "verify_payment";

/// The most `txnid`s one request names (PayU accepts a pipe-separated
/// list; a small batch keeps the answer and its hash input short).
pub const MAX_TXNIDS: usize = 100;

/// Why a request could not be signed.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum VerifyRequestError {
    /// No transaction ids, or more than [`MAX_TXNIDS`].
    #[error("verify_payment needs 1 to {MAX_TXNIDS} txnids, got {0}")]
    Count(usize),
    /// A `txnid` that is empty or holds `|` (the list separator).
    #[error("txnid {0:?} is empty or contains '|'")]
    BadTxnid(String),
}

/// The form body of a `verify_payment` request for `txnids`.
pub fn verify_payment_request(
    merchant_key: &str,
    salt: &str,
    txnids: &[&str],
) -> Result<String, VerifyRequestError> {
    if txnids.is_empty() || txnids.len() > MAX_TXNIDS {
        return Err(VerifyRequestError::Count(txnids.len()));
    }
    if let Some(bad) = txnids.iter().find(|t| t.is_empty() || t.contains('|')) {
        return Err(VerifyRequestError::BadTxnid((*bad).to_owned()));
    }
    let var1 = txnids.join("|");
    let hash = hex::encode(Sha512::digest(
        format!("{merchant_key}|{VERIFY_COMMAND}|{var1}|{salt}").as_bytes(),
    ));
    Ok(Serializer::new(String::new())
        .append_pair("key", merchant_key)
        .append_pair("command", VERIFY_COMMAND)
        .append_pair("var1", &var1)
        .append_pair("hash", &hash)
        .finish())
}

/// The answer (`{"status": 1, "transaction_details": {txnid: {…}}}`): one
/// event per transaction whose status is `success` (a capture) or
/// `failure` / `failed` (a failed attempt).
pub fn verify_payment(body: &[u8]) -> Result<Vec<NormalizedEvent>, ParseError> {
    let v = parse_body(body)?;
    let details = match v.get("transaction_details") {
        Some(Value::Object(details)) => details,
        // `status: 0` with no details: PayU refused the request (a wrong
        // hash or key); the message says why.
        _ => {
            return Err(ParseError::InvalidField {
                field: "transaction_details",
                reason: format!(
                    "absent (status {}, msg {:?})",
                    v.get("status").map(Value::to_string).unwrap_or_default(),
                    str_at(&v, &["msg"]).unwrap_or("")
                ),
            });
        }
    };
    if details.len() > MAX_TXNIDS {
        return Err(ParseError::InvalidField {
            field: "transaction_details",
            reason: format!("{} transactions, more than {MAX_TXNIDS}", details.len()),
        });
    }
    let mut events = Vec::new();
    for (asked, t) in details {
        let status = str_at(t, &["status"])
            .ok_or(ParseError::MissingField("transaction_details.*.status"))?;
        let (kind, fact) = match status.to_ascii_lowercase().as_str() {
            "success" => (EventKind::Captured, "captured"),
            "failure" | "failed" => (EventKind::Failed, "failed"),
            _ => continue,
        };
        let txnid = str_at(t, &["txnid"]).unwrap_or(asked);
        let amount = str_at(t, &["amt"])
            .or_else(|| str_at(t, &["transaction_amount"]))
            .ok_or(ParseError::MissingField("transaction_details.*.amt"))?;
        let amount_minor = parse_decimal_minor(amount, currency_exponent(CURRENCY)).map_err(|e| {
            ParseError::InvalidField {
                field: "transaction_details.*.amt",
                reason: e.to_string(),
            }
        })?;
        events.push(NormalizedEvent {
            provider: Gateway::Payu,
            event_id: format!("reconciliation:{txnid}:{fact}"),
            event_type: status.to_owned(),
            kind,
            payment_id: Some(txnid.to_owned()),
            order_ref: Some(str_at(t, &["udf1"]).unwrap_or(txnid).to_owned()),
            amount_minor: Some(amount_minor),
            currency: Some(CURRENCY.to_owned()),
            email: str_at(t, &["email"]).map(str::to_owned),
            refund_id: None,
            cumulative_refund: false,
        });
    }
    Ok(events)
}

#[cfg(test)]
#[path = "api_tests.rs"]
mod tests;
