//! PayU India sample deliveries: the form PayU posts to the merchant's
//! webhook URL, with the reverse hash computed under the salt. PayU carries no
//! event id: the identity is `{txnid}:{status}`, where `txnid` is the spec's
//! payment id (a new one per attempt, as PayU requires) and `udf1` the
//! order reference (`spec.event_id` is not used). There are no refund
//! samples: PayU's refund notifications are not signed, so oncehook does not
//! take them (refunds come from the shop's back office).

use url::form_urlencoded::Serializer;

use crate::sample::text::payu_ist;
use crate::sample::{SampleError, SampleSpec, SignedDelivery};
use crate::Headers;
use crate::amount::{currency_exponent, format_decimal_minor};
use crate::form::Form;
use super::scheme::{CURRENCY, HASH_FIELD, HASHED_FIELDS, hash_hex};

/// The merchant key written into every PayU sample's `key` field.
pub const SAMPLE_PAYU_KEY: &str = "oncehook_test";

/// The form fields PayU's reverse hash covers, in order, after the salt
/// (and before them, `additional_charges` when the form has it).
pub const PAYU_HASHED_FIELDS: [&str; 17] = HASHED_FIELDS;

/// The `hash` PayU would post for a form of `fields` under `salt` (the
/// first value of a repeated name counts), for tests that write forms of
/// their own. Verification uses the same hash, checked against PayU's
/// vendored vector.
pub fn payu_hash(fields: &[(&str, &str)], salt: &str) -> String {
    let form = Form::from_pairs(fields.iter().map(|&(k, v)| (k.to_owned(), v.to_owned())));
    hash_hex(salt, &form)
}

pub(super) const TABLE: &[(&str, &str)] = &[
    ("success", "success"),
    ("failure", "failure"),
    ("pending", "pending"),
    ("captured", "success"),
    ("failed", "failure"),
];

pub(super) const EVENT_NAMES: &[&str] = &["success", "failure", "pending", "captured", "failed"];

/// A PayU-style numeric `mihpayid` for a transaction (informational: the
/// hash does not cover it and nothing reads it).
fn mihpayid(txnid: &str) -> String {
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    for b in txnid.bytes() {
        h ^= u64::from(b);
        h = h.wrapping_mul(0x0100_0000_01b3);
    }
    (400_000_000_000 + h % 100_000_000_000).to_string()
}

/// Refuses what PayU would not post (see [`build`]).
fn check_spec(spec: &SampleSpec) -> Result<(), SampleError> {
    if !spec.currency.eq_ignore_ascii_case(CURRENCY) {
        return Err(SampleError::InvalidSpec(format!(
            "PayU samples are in {CURRENCY} only, not {:?}",
            spec.currency
        )));
    }
    if spec.payment_id.is_empty() {
        return Err(SampleError::InvalidSpec(
            "a PayU sample needs a payment id (its txnid)".into(),
        ));
    }
    for (what, value) in [
        ("order_ref", spec.order_ref.as_str()),
        ("payment_id", spec.payment_id.as_str()),
        ("email", spec.email.as_str()),
        ("merchant_key", spec.payu_merchant_key()),
    ] {
        if value.contains('|') {
            return Err(SampleError::InvalidSpec(format!(
                "PayU hashes `|`-separated values: {what} must not contain `|`"
            )));
        }
    }
    Ok(())
}

/// Fails for a currency other than INR (PayU India posts rupees only), an
/// empty payment id (the `txnid`), or a value containing the hash
/// separator `|` (PayU refuses those, and so does verification).
pub(super) fn build(
    status: &str,
    spec: &SampleSpec,
    salt: &str,
) -> Result<SignedDelivery, SampleError> {
    check_spec(spec)?;
    let key = spec.payu_merchant_key();
    let amount = format_decimal_minor(spec.amount_minor, currency_exponent(CURRENCY));
    let (unmapped, field9, error, error_message, debited) = match status {
        "failure" => (
            "failed",
            "Transaction declined by the bank",
            "E308",
            "Transaction Failed",
            "0",
        ),
        "pending" => ("pending", "Transaction pending", "E000", "No Error", "0"),
        _ => (
            "captured",
            "Transaction Completed Successfully",
            "E000",
            "No Error",
            amount.as_str(),
        ),
    };
    let mut fields: Vec<(&str, String)> = vec![
        ("mihpayid", mihpayid(&spec.payment_id)),
        ("mode", "UPI".into()),
        ("status", status.into()),
        ("unmappedstatus", unmapped.into()),
        ("key", key.to_owned()),
        ("txnid", spec.payment_id.clone()),
        ("amount", amount.clone()),
        ("addedon", payu_ist(spec.timestamp.saturating_sub(4))),
        ("productinfo", "oncehook sample order".into()),
        ("firstname", "Gaurav".into()),
        ("lastname", String::new()),
        ("email", spec.email.clone()),
        ("phone", "9876543210".into()),
        ("udf1", spec.order_ref.clone()),
    ];
    for udf in [
        "udf2", "udf3", "udf4", "udf5", "udf6", "udf7", "udf8", "udf9", "udf10",
    ] {
        fields.push((udf, String::new()));
    }
    fields.extend([
        ("field9", field9.into()),
        ("PG_TYPE", "UPI-PG".into()),
        ("bank_ref_num", "512512345678".into()),
        ("bankcode", "UPI".into()),
        ("error", error.into()),
        ("error_Message", error_message.into()),
        ("net_amount_debit", debited.into()),
        ("payment_source", "payu".into()),
    ]);
    let form = Form::from_pairs(fields.iter().map(|(k, v)| ((*k).to_owned(), v.clone())));
    let hash = hash_hex(salt, &form);
    let mut body = Serializer::new(String::new());
    for (name, value) in &fields {
        body.append_pair(name, value);
    }
    body.append_pair(HASH_FIELD, &hash);
    let headers = Headers::new().with("Content-Type", "application/x-www-form-urlencoded");
    Ok(SignedDelivery {
        headers,
        body: body.finish().into_bytes(),
    })
}
