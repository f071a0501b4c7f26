//! The registry's machinery: the `registry!` macro that `lib.rs` invokes with
//! one line per gateway, and everything that follows from that list — the
//! [`Gateway`] enum, [`Gateway::ALL`], the one `match` from a gateway to its
//! [`Scheme`], names and serde, and the generic [`verify`] and [`parse`].
//!
//! A registry line reads `module::Type,` (with the variant's doc comment and
//! optionally `#[cfg(...)]` and `#[listed(...)]`, as the toy gateway's): it
//! declares `mod module;` (the folder `src/module/`), the variant
//! `Gateway::Type`, and its entry in [`Gateway::scheme`] (and so in
//! [`Gateway::api`]). The variant's name in configuration, serde, routing
//! keys and message ids is the implementation's [`GatewayScheme::NAME`].

use std::fmt;
use std::str::FromStr;

use crate::scheme::{Credentials, ParseError, Request, Verification, VerifyError};
#[cfg(doc)]
use crate::scheme::{GatewayScheme, Scheme};
use crate::{Gateway, Headers, NormalizedEvent};

/// Declares the gateway modules, the [`Gateway`] enum and its dispatch from
/// one list: `/// doc` lines, an optional `#[cfg(...)]` (where the gateway
/// exists), an optional `#[listed(...)]` (where it is also in
/// [`Gateway::ALL`]; without it, wherever it exists), then `module::Type,`
/// where `Type` implements [`GatewayScheme`].
macro_rules! registry {
    ($( $(#[doc = $doc:literal])* $(#[cfg($cfg:meta)])? $(#[listed($listed:meta)])? $module:ident :: $scheme:ident, )+) => {
        $( $(#[cfg($cfg)])? mod $module; )+

        /// A payment gateway, named in configuration (`gateway =
        /// "razorpay"`), routing keys and `message_id`s by its
        /// [`GatewayScheme::NAME`](crate::GatewayScheme::NAME). Outside this
        /// crate nothing matches on its variants: callers ask it (its
        /// [`scheme`](Gateway::scheme), its [`api`](Gateway::api)).
        #[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
        #[non_exhaustive]
        pub enum Gateway {
            $( $(#[doc = $doc])* $(#[cfg($cfg)])? $scheme, )+
        }

        impl Gateway {
            const COUNT: usize = {
                let mut n = 0;
                $( $(#[cfg($cfg)])? $(#[cfg($listed)])? { n += 1; } )+
                n
            };

            const KNOWN_COUNT: usize = {
                let mut n = 0;
                $( $(#[cfg($cfg)])? { n += 1; } )+
                n
            };

            /// Every gateway, in registry order.
            pub const ALL: [Gateway; Gateway::COUNT] =
                [ $( $(#[cfg($cfg)])? $(#[cfg($listed)])? Gateway::$scheme, )+ ];

            /// Every gateway that exists in this build, listed or not (what
            /// a name is looked up in).
            const KNOWN: [Gateway; Gateway::KNOWN_COUNT] =
                [ $( $(#[cfg($cfg)])? Gateway::$scheme, )+ ];

            /// The gateway's registry entry: its constants and functions.
            pub fn scheme(self) -> &'static $crate::Scheme {
                use $crate::GatewayScheme as _;
                match self {
                    $( $(#[cfg($cfg)])? Gateway::$scheme => &$module::$scheme::SCHEME, )+
                }
            }
        }
    };
}

/// Every registered gateway, in registry order ([`Gateway::ALL`]), for
/// callers that serve each one (a metric per gateway, a list to choose
/// from) without naming any.
pub fn registered() -> &'static [Gateway] {
    &Gateway::ALL
}

/// The names of every registered gateway, in registry order.
pub fn names() -> Vec<&'static str> {
    Gateway::ALL.iter().map(|g| g.as_str()).collect()
}

/// A gateway name that is not one of [`Gateway::ALL`].
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("unknown gateway {0:?} (expected one of {expected})", expected = expected_names())]
pub struct UnknownGateway(pub String);

/// `razorpay, cashfree, …`: every registered name.
fn expected_names() -> String {
    names().join(", ")
}

impl Gateway {
    /// The configuration name (`razorpay`, `cashfree`, `payu`, `stripe`, `standard`).
    pub fn as_str(self) -> &'static str {
        self.scheme().name
    }

    /// Whether this gateway signs a timestamp (so a replay window applies).
    pub fn signs_timestamp(self) -> bool {
        self.scheme().signs_timestamp
    }

    /// Request headers (lowercase) that verification or parsing needs; ingest
    /// carries exactly these in the envelope so the worker sees what ingest saw.
    pub fn relevant_headers(self) -> &'static [&'static str] {
        self.scheme().relevant_headers
    }

    /// The media type the gateway posts (ingest answers 415 to others).
    pub fn content_type(self) -> crate::ContentType {
        self.scheme().content_type
    }

    /// Whether the gateway posts its deliveries as a form
    /// (`application/x-www-form-urlencoded`, PayU's) rather than JSON: a
    /// tool showing a stored delivery's body decodes it as a form.
    pub fn posts_forms(self) -> bool {
        self.content_type() == crate::ContentType::Form
    }
}

impl fmt::Display for Gateway {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

impl FromStr for Gateway {
    type Err = UnknownGateway;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        Gateway::KNOWN
            .into_iter()
            .find(|g| g.as_str() == s)
            .ok_or_else(|| UnknownGateway(s.to_owned()))
    }
}

/// Serialised as its name (`"razorpay"`), the same string configuration uses.
impl serde::Serialize for Gateway {
    fn serialize<S: serde::Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        serializer.serialize_str(self.as_str())
    }
}

/// Read from its name; an unknown name is an error naming the known ones.
impl<'de> serde::Deserialize<'de> for Gateway {
    fn deserialize<D: serde::Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        let name = <std::borrow::Cow<'de, str>>::deserialize(deserializer)?;
        name.parse().map_err(serde::de::Error::custom)
    }
}

/// Verifies a delivery's signature over the raw `body` bytes against any of
/// the `credentials`' secrets, and (for schemes that sign a timestamp) that
/// the timestamp is within `tolerance_secs` of `now_unix` in either
/// direction.
///
/// Headers are read first (`Missing` / `Malformed`), then the timestamp
/// window, then the signature. For PayU the secrets are merchant salts, the
/// form's `key` must equal `credentials.merchant_key` (`Missing` without the
/// field, `Mismatch` for another key, [`VerifyError::NoMerchantKey`] when
/// none is configured), and no hash-covered field may contain `|`.
pub fn verify(
    gateway: Gateway,
    credentials: Credentials<'_>,
    headers: &Headers,
    body: &[u8],
    now_unix: i64,
    tolerance_secs: u64,
) -> Result<Verification, VerifyError> {
    if credentials.secrets.is_empty() {
        return Err(VerifyError::NoSecrets);
    }
    (gateway.scheme().verify)(&Request {
        credentials,
        headers,
        body,
        now_unix,
        tolerance_secs,
    })
}

/// Parses an (already verified) delivery into a [`NormalizedEvent`].
///
/// Event identity (`event_id`) per gateway:
/// - Razorpay: header `x-razorpay-event-id`, else `{event}:{entity id}`.
/// - Cashfree: header `x-idempotency-key`, else
///   `{type}:{cf_payment_id}:{payment_status}` (refunds:
///   `{type}:{refund_id}:{refund_status}`).
/// - PayU: `{txnid}:{status}` (both covered by the hash; a new `txnid` per
///   attempt, so `txnid` is also the payment id).
/// - Stripe: the body's `id`.
/// - Standard Webhooks: header `webhook-id`.
///
/// Events of a kind oncehook does not act on ([`crate::EventKind::Other`])
/// that carry none of those fall back to `{type}:sha256:{digest of the body}`,
/// which is stable across redeliveries of the same bytes.
pub fn parse(
    gateway: Gateway,
    headers: &Headers,
    body: &[u8],
) -> Result<NormalizedEvent, ParseError> {
    (gateway.scheme().parse)(headers, body)
}

#[cfg(test)]
mod tests {
    use crate::Gateway;

    #[test]
    fn only_payu_posts_forms() {
        assert!(Gateway::Payu.posts_forms());
        for json in [
            Gateway::Razorpay,
            Gateway::Cashfree,
            Gateway::Stripe,
            Gateway::Standard,
            Gateway::Toy,
        ] {
            assert!(!json.posts_forms(), "{json}");
        }
    }
}
