//! PayU India: the notification is an `application/x-www-form-urlencoded`
//! post whose `hash` field is the lowercase hex SHA-512 (salted, not an HMAC)
//! of `SALT|status|udf10|…|udf1|email|firstname|productinfo|amount|txnid|key`
//! over the URL-decoded values, prefixed with `{additional_charges}|` when
//! that field is present. There is no timestamp and no event id: the
//! identity is `{txnid}:{status}`, both covered by the hash.
//!
//! Two checks come before the hash:
//! - no hash-covered value may contain `|`: the hash input joins the values
//!   with `|`, so a value containing one could be re-split into different
//!   field values with the same hash (a `firstname` of `A|B|500.00|order_x`
//!   moving the boundaries of `productinfo`, `amount`, `txnid`);
//! - the form's `key` must be the merchant key configured on the source
//!   (salts belong to a key; another merchant's notification is refused).
//!
//! Fields outside the hash (`mihpayid`, `refund_id`, …) are informational:
//! nothing that decides identity or money is read from them. The payment id
//! is the `txnid` (PayU requires a new one per attempt), the order reference
//! `udf1` (else the `txnid`). PayU's refund notifications are not signed, so
//! a form whose status says refund never moves money: it is
//! [`EventKind::Other`]; refunds reach oncehook from the shop's back office
//! (see docs/gateways.md).

use sha2::{Digest, Sha512};

use crate::crypto::{ct_eq, decode_hex, first_match};
use crate::form::Form;
use crate::scheme::{ParseError, Request, Verification, VerifyError};
use crate::amount::{currency_exponent, parse_decimal_minor};
use crate::{EventKind, Gateway, Headers, NormalizedEvent};

/// PayU India settles in rupees only.
pub(crate) const CURRENCY: &str = "INR";

/// The form field carrying the hash.
pub(crate) const HASH_FIELD: &str = "hash";

/// Fields covered by the reverse hash, in order, after the salt.
pub(crate) const HASHED_FIELDS: [&str; 17] = [
    "status",
    "udf10",
    "udf9",
    "udf8",
    "udf7",
    "udf6",
    "udf5",
    "udf4",
    "udf3",
    "udf2",
    "udf1",
    "email",
    "firstname",
    "productinfo",
    "amount",
    "txnid",
    "key",
];

/// Hash-covered fields outside [`HASHED_FIELDS`]: either spelling of the
/// additional charges prefix.
const CHARGES_FIELDS: [&str; 2] = ["additional_charges", "additionalCharges"];

/// The form field carrying the merchant key.
pub(crate) const KEY_FIELD: &str = "key";

/// The first hash-covered field whose value contains the `|` separator.
pub(crate) fn field_with_separator(form: &Form) -> Option<&'static str> {
    CHARGES_FIELDS
        .into_iter()
        .chain(HASHED_FIELDS)
        .find(|name| form.get(name).is_some_and(|v| v.contains('|')))
}

/// The exact string PayU hashes for `form` under `salt`.
pub(crate) fn hash_input(salt: &str, form: &Form) -> String {
    let mut input = String::new();
    let charges = form
        .non_empty(CHARGES_FIELDS[0])
        .or_else(|| form.non_empty(CHARGES_FIELDS[1]));
    if let Some(charges) = charges {
        input.push_str(charges);
        input.push('|');
    }
    input.push_str(salt);
    for name in HASHED_FIELDS {
        input.push('|');
        input.push_str(form.get_or_empty(name));
    }
    input
}

/// The `hash` value PayU would post for `form` under `salt`.
pub(crate) fn hash_hex(salt: &str, form: &Form) -> String {
    hex::encode(Sha512::digest(hash_input(salt, form).as_bytes()))
}

pub(crate) fn verify(request: &Request<'_>) -> Result<Verification, VerifyError> {
    let (salts, body) = (request.credentials.secrets, request.body);
    let merchant_key = request
        .credentials
        .merchant_key
        .filter(|k| !k.is_empty())
        .ok_or(VerifyError::NoMerchantKey)?;
    let form = Form::decode(body).map_err(|e| VerifyError::Malformed {
        what: "form body",
        reason: e.0,
    })?;
    let value = form
        .get(HASH_FIELD)
        .map(str::trim)
        .ok_or(VerifyError::Missing(HASH_FIELD))?;
    let expected = decode_hex(value, 64, HASH_FIELD)?;
    if let Some(what) = field_with_separator(&form) {
        return Err(VerifyError::Malformed {
            what,
            reason: "contains the hash separator `|`".into(),
        });
    }
    let key = form.get(KEY_FIELD).ok_or(VerifyError::Missing(KEY_FIELD))?;
    if key != merchant_key {
        return Err(VerifyError::Mismatch);
    }
    let secret_index = first_match(salts, |salt| {
        let digest = Sha512::digest(hash_input(salt, &form).as_bytes());
        ct_eq(digest.as_slice(), &expected)
    })?;
    Ok(Verification {
        secret_index,
        signed_at: None,
    })
}

fn kind_of(status: &str) -> EventKind {
    match status.to_ascii_lowercase().as_str() {
        "success" => EventKind::Captured,
        "failure" | "failed" | "pending" => EventKind::Failed,
        // A refund status never moves money: PayU does not sign its refund
        // notifications, so refunds arrive from the back office instead.
        _ => EventKind::Other,
    }
}

pub(crate) fn parse(_headers: &Headers, body: &[u8]) -> Result<NormalizedEvent, ParseError> {
    let form = Form::decode(body).map_err(|e| ParseError::Syntax("form", e.0))?;
    let status = form
        .non_empty("status")
        .ok_or(ParseError::MissingField("status"))?;
    let txnid = form
        .non_empty("txnid")
        .ok_or(ParseError::MissingField("txnid"))?;
    let kind = kind_of(status);
    let event_id = format!("{txnid}:{status}");

    // Only hash-covered fields may decide money or identity: the amount is
    // `amount`, the currency is always INR (an uncovered `currency` field
    // could otherwise rescale the amount), the payment is the `txnid` (not
    // the uncovered `mihpayid`) and the order is `udf1`, else the `txnid`.
    let amount_minor = form
        .non_empty("amount")
        .map(|a| parse_decimal_minor(a, currency_exponent(CURRENCY)))
        .transpose()
        .map_err(|e| ParseError::InvalidField {
            field: "amount",
            reason: e.to_string(),
        })?;
    let order_ref = form.non_empty("udf1").unwrap_or(txnid);

    Ok(NormalizedEvent {
        provider: Gateway::Payu,
        event_type: status.to_owned(),
        kind,
        payment_id: Some(txnid.to_owned()),
        order_ref: Some(order_ref.to_owned()),
        amount_minor,
        currency: Some(CURRENCY.to_owned()),
        email: form.non_empty("email").map(str::to_owned),
        refund_id: None,
        cumulative_refund: false,
        event_id,
    })
}
