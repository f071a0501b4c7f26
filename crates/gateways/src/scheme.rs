//! The contract every gateway fulfils: the [`GatewayScheme`] trait (its
//! constants, verification, parsing and sample builder, and its API for
//! reconciliation if it has one), the [`Scheme`] entry
//! the registry keeps for each implementation, and the result and error types
//! the trait's functions share. Each gateway's folder (`src/<gateway>/`)
//! implements the trait once; `registry.rs` turns a [`Gateway`] into its
//! [`Scheme`]; nothing outside a gateway's folder matches on gateways.

use sha2::{Digest, Sha256};

#[cfg(doc)]
use crate::Gateway;
use crate::reconcile::GatewayApi;
use crate::refund::GatewayRefunds;
use crate::sample::{SampleError, SampleSpec, SignedDelivery};
use crate::{Headers, NormalizedEvent};

/// What a successful verification established.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Verification {
    /// Index into the `secrets` slice of the secret that matched (rotation visibility).
    pub secret_index: usize,
    /// The signed timestamp (unix seconds), for schemes that sign one.
    pub signed_at: Option<i64>,
}

/// Why a delivery was refused at the edge. `Malformed` maps to HTTP 400, all
/// others to 401. Messages never contain secrets or expected signatures.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum VerifyError {
    /// A required header (or, for PayU, form field) is absent.
    #[error("missing {0}")]
    Missing(&'static str),
    /// A header or field is present but cannot be read.
    #[error("malformed {what}: {reason}")]
    Malformed {
        /// The header or field.
        what: &'static str,
        /// What is wrong with it.
        reason: String,
    },
    /// Well-formed, but no configured secret produces the signature.
    #[error("signature does not match any configured secret")]
    Mismatch,
    /// The signed timestamp is too old or too far in the future.
    #[error("signed timestamp {signed_at} is outside the {tolerance_secs}s tolerance (now {now})")]
    OutsideTolerance {
        /// The signed timestamp, unix seconds.
        signed_at: i64,
        /// The caller's clock, unix seconds.
        now: i64,
        /// The allowed distance in either direction.
        tolerance_secs: u64,
    },
    /// The source has no secrets configured: nothing can verify.
    #[error("no secrets configured")]
    NoSecrets,
    /// A PayU source has no merchant key configured: nothing can verify.
    #[error("no merchant key configured")]
    NoMerchantKey,
}

/// Why an authentic payload could not be understood (the worker dead-letters it).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ParseError {
    /// The body is not valid JSON / form data.
    #[error("body is not valid {0}: {1}")]
    Syntax(&'static str, String),
    /// A field needed to name or identify the event is absent.
    #[error("missing field {0}")]
    MissingField(&'static str),
    /// A field is present but has an unusable value (e.g. a fractional amount in minor units).
    #[error("field {field} is invalid: {reason}")]
    InvalidField {
        /// The field, as a dotted path where nested.
        field: &'static str,
        /// What is wrong with its value.
        reason: String,
    },
}

/// What a source verifies deliveries with: its live secrets and, for PayU,
/// the merchant key. Deliberately not `Debug`: it holds secrets.
#[derive(Clone, Copy)]
pub struct Credentials<'a> {
    /// Live secrets, any of which may match (rotation). PayU: merchant salts.
    pub secrets: &'a [String],
    /// PayU: the merchant key the posted form's `key` field must equal
    /// (the key is covered by the hash, but a salt is per merchant key, so
    /// the key decides whose notification it is). Ignored by other gateways.
    pub merchant_key: Option<&'a str>,
}

impl<'a> Credentials<'a> {
    /// Credentials with `secrets` and no merchant key.
    pub fn new(secrets: &'a [String]) -> Self {
        Credentials {
            secrets,
            merchant_key: None,
        }
    }

    /// The same credentials with `merchant_key` (PayU).
    pub fn with_merchant_key(self, merchant_key: Option<&'a str>) -> Self {
        Credentials {
            merchant_key,
            ..self
        }
    }
}

/// The media type a gateway posts its webhooks with; ingest refuses others
/// with 415 before reading the body.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ContentType {
    /// `application/json`, or any `+json` structured-syntax type.
    Json,
    /// `application/x-www-form-urlencoded`, exactly.
    Form,
}

impl ContentType {
    /// The media type written into sample deliveries and named in 415 answers.
    pub fn as_str(self) -> &'static str {
        match self {
            ContentType::Json => "application/json",
            ContentType::Form => "application/x-www-form-urlencoded",
        }
    }

    /// Whether a `Content-Type` header value (already lower-cased) is this
    /// type: its essence, before any `;` parameters, is compared.
    pub fn accepts(self, value: &str) -> bool {
        let essence = value.split(';').next().unwrap_or("").trim();
        match self {
            ContentType::Json => essence == self.as_str() || essence.ends_with("+json"),
            ContentType::Form => essence == self.as_str(),
        }
    }
}

/// One gateway's webhook scheme: its constants and functions, all given as
/// associated constants so an implementation is a table.
/// Implemented once per gateway, on a unit struct in `src/<gateway>/mod.rs`,
/// and listed once in the registry (`lib.rs`); callers reach it through
/// [`Gateway::scheme`] and the crate's generic [`crate::verify`],
/// [`crate::parse`] and [`crate::sample::build`]. See
/// `docs/adding-a-gateway.md`.
pub trait GatewayScheme {
    /// The configuration name (`gateway = "razorpay"`), also the serialised
    /// [`Gateway`], the routing-key prefix and the `message_id` prefix.
    const NAME: &'static str;
    /// The media type the gateway posts.
    const CONTENT_TYPE: ContentType;
    /// Whether the gateway signs a timestamp (so a replay window applies).
    const SIGNS_TIMESTAMP: bool;
    /// Request headers (lowercase) that verification or parsing needs; ingest
    /// carries exactly these in the envelope so the worker sees what ingest saw.
    const RELEVANT_HEADERS: &'static [&'static str];
    /// The header carrying the signature, or `None` when it travels in the
    /// body (PayU's form field); tells [`crate::sample::tamper`] whose a
    /// delivery is.
    const SIGNATURE_HEADER: Option<&'static str>;
    /// Sample event names [`crate::sample::build`] accepts (matched
    /// case-insensitively), each with the gateway's own event name it builds:
    /// the gateway's names first, then the generic aliases it supports.
    const SAMPLE_EVENTS: &'static [(&'static str, &'static str)];
    /// The accepted names of [`Self::SAMPLE_EVENTS`], in the same order (what
    /// [`crate::sample::event_names`] returns).
    const SAMPLE_EVENT_NAMES: &'static [&'static str];

    /// Verifies a delivery (see [`crate::verify`], which has already refused
    /// empty `credentials.secrets`).
    const VERIFY: VerifyFn;
    /// Parses a verified delivery (see [`crate::parse`]).
    const PARSE: ParseFn;
    /// Builds and signs a sample of `event`, one of the gateway's own names
    /// from [`Self::SAMPLE_EVENTS`] (see [`crate::sample::build`], which has
    /// already refused negative amounts).
    const SAMPLE: SampleFn;
    /// The refund id a single-refund sample carries (see
    /// [`SampleSpec::refund_id`]).
    const SAMPLE_REFUND_ID: fn(&SampleSpec) -> String;
    /// Why a (non-blank) configured secret can never verify a delivery, or
    /// `None` (see [`crate::secret_problem`]).
    const SECRET_PROBLEM: fn(&str) -> Option<&'static str> = |_| None;
    /// Whether a source of this gateway must configure `merchant_key` (PayU).
    const NEEDS_MERCHANT_KEY: bool = false;
    /// The gateway's API for reconciliation (`Some(&Self)` where the folder
    /// implements [`GatewayApi`]), or `None`: its sources cannot have a
    /// `[source.api]`.
    const API: Option<&'static dyn GatewayApi> = None;
    /// The gateway's refund API (`Some(&Self)` where the folder implements
    /// [`GatewayRefunds`]), or `None`: its refund intents wait for a person.
    const REFUNDS: Option<&'static dyn GatewayRefunds> = None;

    /// The registry's entry for this implementation. Not meant to be
    /// overridden.
    const SCHEME: Scheme = Scheme {
        name: Self::NAME,
        content_type: Self::CONTENT_TYPE,
        signs_timestamp: Self::SIGNS_TIMESTAMP,
        relevant_headers: Self::RELEVANT_HEADERS,
        signature_header: Self::SIGNATURE_HEADER,
        sample_events: Self::SAMPLE_EVENTS,
        sample_event_names: Self::SAMPLE_EVENT_NAMES,
        verify: Self::VERIFY,
        parse: Self::PARSE,
        sample: Self::SAMPLE,
        sample_refund_id: Self::SAMPLE_REFUND_ID,
        secret_problem: Self::SECRET_PROBLEM,
        needs_merchant_key: Self::NEEDS_MERCHANT_KEY,
        api: Self::API,
        refunds: Self::REFUNDS,
    };
}

/// The trait items every gateway folder wires the same way, from its
/// `scheme.rs` (`verify`, `parse`) and `sample.rs` (`TABLE`, `EVENT_NAMES`,
/// `build`): write `folder_items!();` inside the `impl GatewayScheme`.
macro_rules! folder_items {
    () => {
        const SAMPLE_EVENTS: &'static [(&'static str, &'static str)] = sample::TABLE;
        const SAMPLE_EVENT_NAMES: &'static [&'static str] = sample::EVENT_NAMES;
        const VERIFY: $crate::scheme::VerifyFn = scheme::verify;
        const PARSE: $crate::scheme::ParseFn = scheme::parse;
        const SAMPLE: $crate::scheme::SampleFn = sample::build;
    };
}
pub(crate) use folder_items;

/// A delivery as ingest received it, with what to check it against: the
/// input of [`GatewayScheme::VERIFY`].
#[derive(Clone, Copy)]
pub struct Request<'a> {
    /// The source's secrets (and, for PayU, merchant key).
    pub credentials: Credentials<'a>,
    /// The request headers (lowercase names).
    pub headers: &'a Headers,
    /// The raw body bytes.
    pub body: &'a [u8],
    /// The caller's clock, unix seconds.
    pub now_unix: i64,
    /// The allowed distance of a signed timestamp from `now_unix`.
    pub tolerance_secs: u64,
}

/// [`GatewayScheme::VERIFY`].
pub type VerifyFn = fn(&Request<'_>) -> Result<Verification, VerifyError>;
/// [`GatewayScheme::PARSE`]: the headers and raw body of a verified delivery.
pub type ParseFn = fn(&Headers, &[u8]) -> Result<NormalizedEvent, ParseError>;
/// [`GatewayScheme::SAMPLE`]: the gateway's event name, the spec, the secret.
pub type SampleFn = fn(&str, &SampleSpec, &str) -> Result<SignedDelivery, SampleError>;

/// A [`GatewayScheme`] implementation as data: what [`Gateway::scheme`]
/// returns. The constants are public; the functions are reached through
/// [`crate::verify`], [`crate::parse`] and [`crate::sample`].
#[derive(Clone, Copy)]
pub struct Scheme {
    /// [`GatewayScheme::NAME`].
    pub name: &'static str,
    /// [`GatewayScheme::CONTENT_TYPE`].
    pub content_type: ContentType,
    /// [`GatewayScheme::SIGNS_TIMESTAMP`].
    pub signs_timestamp: bool,
    /// [`GatewayScheme::RELEVANT_HEADERS`].
    pub relevant_headers: &'static [&'static str],
    /// [`GatewayScheme::SIGNATURE_HEADER`].
    pub signature_header: Option<&'static str>,
    /// [`GatewayScheme::SAMPLE_EVENTS`].
    pub sample_events: &'static [(&'static str, &'static str)],
    /// [`GatewayScheme::SAMPLE_EVENT_NAMES`].
    pub sample_event_names: &'static [&'static str],
    pub(crate) verify: VerifyFn,
    pub(crate) parse: ParseFn,
    pub(crate) sample: SampleFn,
    pub(crate) sample_refund_id: fn(&SampleSpec) -> String,
    pub(crate) secret_problem: fn(&str) -> Option<&'static str>,
    /// [`GatewayScheme::NEEDS_MERCHANT_KEY`].
    pub needs_merchant_key: bool,
    pub(crate) api: Option<&'static dyn GatewayApi>,
    pub(crate) refunds: Option<&'static dyn GatewayRefunds>,
}

impl std::fmt::Debug for Scheme {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Scheme")
            .field("name", &self.name)
            .finish_non_exhaustive()
    }
}

/// A non-empty, trimmed header value.
pub(crate) fn header<'a>(headers: &'a Headers, name: &str) -> Option<&'a str> {
    headers.get(name).map(str::trim).filter(|v| !v.is_empty())
}

/// Last-resort identity for events oncehook ignores: the event type and a
/// digest of the exact body bytes.
pub(crate) fn body_digest_id(event_type: &str, body: &[u8]) -> String {
    let digest = Sha256::digest(body);
    let short = digest.get(..16).unwrap_or_default();
    format!("{event_type}:sha256:{}", hex::encode(short))
}
