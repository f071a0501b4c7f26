//! The kinds of dead letter: every class of failure that ends a message in
//! `P.dead`, in one list, each with the name its `x-oncehook-error-kind`
//! header carries (a wire format: letters already in a queue and operators'
//! filters use these names, so they never change) and the services that
//! dead-letter with it.
//!
//! A name this version does not know — a letter written by another version,
//! or published by hand — is kept as [`DeadLetterKind::Other`] and reads
//! back as it was written. The `oncehook_dead_letters_total` counter is
//! labelled by kind; [`zero_counters`] makes a service's kinds exist at zero
//! from its start, so `increase()` counts a kind's first dead letter too.

use std::borrow::Cow;
use std::fmt;

use serde::{Serialize, Serializer};

/// Who dead-letters a message with a given kind.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Writer {
    /// The worker: the consume loop and the parked-event sweeper.
    Worker,
    /// The mailer's consume loop.
    Mailer,
    /// RabbitMQ itself (`x-death`); such letters carry no oncehook headers.
    Broker,
}

/// Defines [`DeadLetterKind`] from one list: variant, header name, writers.
macro_rules! kinds {
    ($( $(#[doc = $doc:literal])+ $variant:ident = $name:literal by [$($writer:ident),*]; )+) => {
        /// Why a message was dead-lettered, as its `x-oncehook-error-kind`
        /// header (or, for the broker's letters, `x-death`) says.
        #[derive(Debug, Clone, PartialEq, Eq, Hash)]
        pub enum DeadLetterKind {
            $( $(#[doc = $doc])+ $variant, )+
            /// A kind this version does not know, kept as it was written.
            Other(OtherKind),
        }

        impl DeadLetterKind {
            /// Every kind this version knows, in the order of the list.
            pub const KNOWN: &'static [DeadLetterKind] = &[$(DeadLetterKind::$variant),+];

            /// The known kind named `name` exactly, if any.
            pub fn from_known(name: &str) -> Option<DeadLetterKind> {
                match name {
                    $( $name => Some(DeadLetterKind::$variant), )+
                    _ => None,
                }
            }

            /// The name its header carries.
            pub fn as_str(&self) -> &str {
                match self {
                    $( DeadLetterKind::$variant => $name, )+
                    DeadLetterKind::Other(other) => &other.0,
                }
            }

            /// The name of a kind this version knows (`None` for
            /// [`DeadLetterKind::Other`]).
            pub fn known_name(&self) -> Option<&'static str> {
                match self {
                    $( DeadLetterKind::$variant => Some($name), )+
                    DeadLetterKind::Other(_) => None,
                }
            }

            /// The services that dead-letter with this kind (none for a
            /// kind this version does not know).
            pub fn writers(&self) -> &'static [Writer] {
                match self {
                    $( DeadLetterKind::$variant => &[$(Writer::$writer),*], )+
                    DeadLetterKind::Other(_) => &[],
                }
            }
        }
    };
}

kinds! {
    /// The message is not an envelope ingest writes.
    BadEnvelope = "bad_envelope" by [Worker];
    /// The envelope names a gateway this worker does not know.
    UnknownGateway = "unknown_gateway" by [Worker];
    /// Authentic, but the gateway's payload cannot be read.
    Unparseable = "unparseable" by [Worker];
    /// A payment event without a payment id.
    MissingPaymentId = "missing_payment_id" by [Worker];
    /// A refund event without a refund id.
    MissingRefundId = "missing_refund_id" by [Worker];
    /// A refund event without an amount.
    MissingAmount = "missing_amount" by [Worker];
    /// Neither an order reference nor a payment id oncehook knows.
    MissingOrderRef = "missing_order_ref" by [Worker];
    /// No order matches the event's reference, or no event linked its
    /// payment to an order in time (the parked-event sweeper).
    UnknownOrder = "unknown_order" by [Worker];
    /// The database rejected the statement for good (not a transient error).
    Database = "database" by [Worker, Mailer];
    /// The email message is unreadable.
    BadMessage = "bad_message" by [Mailer];
    /// The outbox row the email message names does not exist.
    UnknownOutboxRow = "unknown_outbox_row" by [Mailer];
    /// Sending kept failing until the attempts ran out.
    SmtpFailed = "smtp_failed" by [Mailer];
    /// The delivery limit: the message crashed or stalled a consumer on
    /// every delivery. Written by the broker, or by the consume loop for a
    /// requeued copy whose carried failures are past the limit.
    DeliveryLimit = "delivery_limit" by [Worker, Mailer, Broker];
    /// A letter that records no kind at all (neither oncehook's header nor
    /// the broker's reason).
    Unrecorded = "unknown" by [];
}

/// A kind name this version does not know. Only [`DeadLetterKind::parse`]
/// makes one, so a known name is never an `Other`.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct OtherKind(String);

impl DeadLetterKind {
    /// The kind named `name`: a known one, else [`DeadLetterKind::Other`]
    /// keeping the name as it is.
    pub fn parse(name: &str) -> DeadLetterKind {
        DeadLetterKind::from_known(name)
            .unwrap_or_else(|| DeadLetterKind::Other(OtherKind(name.to_owned())))
    }

    /// The kinds `writer` dead-letters with.
    pub fn written_by(writer: Writer) -> impl Iterator<Item = &'static DeadLetterKind> {
        DeadLetterKind::KNOWN
            .iter()
            .filter(move |k| k.writers().contains(&writer))
    }

    /// The name as a metric label (borrowed for a known kind).
    pub fn label(&self) -> Cow<'static, str> {
        match self.known_name() {
            Some(name) => Cow::Borrowed(name),
            None => Cow::Owned(self.as_str().to_owned()),
        }
    }
}

/// Counts one dead letter of `kind` published, in
/// `oncehook_dead_letters_total`.
pub fn count(kind: &DeadLetterKind) {
    metrics::counter!("oncehook_dead_letters_total", "kind" => kind.label()).increment(1);
}

/// Makes the dead-letter counter of every kind `writer` dead-letters with
/// exist at zero.
pub fn zero_counters(writer: Writer) {
    for kind in DeadLetterKind::written_by(writer) {
        metrics::counter!("oncehook_dead_letters_total", "kind" => kind.label()).increment(0);
    }
}

impl From<&str> for DeadLetterKind {
    fn from(name: &str) -> DeadLetterKind {
        DeadLetterKind::parse(name)
    }
}

impl From<String> for DeadLetterKind {
    fn from(name: String) -> DeadLetterKind {
        DeadLetterKind::from_known(&name).unwrap_or(DeadLetterKind::Other(OtherKind(name)))
    }
}

impl fmt::Display for DeadLetterKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

impl Serialize for DeadLetterKind {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        serializer.serialize_str(self.as_str())
    }
}

impl PartialEq<str> for DeadLetterKind {
    fn eq(&self, other: &str) -> bool {
        self.as_str() == other
    }
}

impl PartialEq<&str> for DeadLetterKind {
    fn eq(&self, other: &&str) -> bool {
        self.as_str() == *other
    }
}
