//! What a pass found, for the log and for `oncehookctl reconcile`: per
//! source, each call made and what the gateway answered, each fact and
//! whether the ledger had it already or it was missing (and published).

use std::fmt;

use oncehook_gateways::{EventKind, NormalizedEvent};
use serde::Serialize;

use oncehook_gateway_api::ApiSource;

/// Whether a fact found was news to the ledger.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Found {
    /// The API knew a payment state no webhook had delivered.
    MissingWebhook,
    /// The ledger has it (a webhook brought it, or an earlier run).
    AlreadyRecorded,
}

impl Found {
    /// The `found` label of `oncehook_reconcile_facts_total`.
    pub fn as_str(self) -> &'static str {
        match self {
            Found::MissingWebhook => "missing_webhook",
            Found::AlreadyRecorded => "already_recorded",
        }
    }
}

/// One pass.
#[derive(Debug, Clone, Serialize)]
pub struct Report {
    pub dry_run: bool,
    /// The orders asked about (their shop references).
    pub orders: Vec<String>,
    pub sources: Vec<SourceReport>,
    /// Facts published (none in a dry run).
    pub published: usize,
}

impl Report {
    /// Facts found missing (published, or to be in a dry run).
    pub fn missing(&self) -> usize {
        self.facts()
            .filter(|f| f.found == Found::MissingWebhook)
            .count()
    }

    /// Every fact found, in every source.
    pub fn facts(&self) -> impl Iterator<Item = &FactReport> {
        self.sources
            .iter()
            .flat_map(|s| &s.calls)
            .flat_map(|c| &c.facts)
    }

    /// Sources with a call that failed.
    pub fn failing(&self) -> Vec<&str> {
        self.sources
            .iter()
            .filter(|s| !s.ok)
            .map(|s| s.source.as_str())
            .collect()
    }
}

/// One source's part of a pass.
#[derive(Debug, Clone, Serialize)]
pub struct SourceReport {
    pub source: String,
    pub gateway: String,
    pub calls: Vec<CallReport>,
    /// Every call answered.
    pub ok: bool,
    /// Why the source was given up before its list was done (refused
    /// credentials, a call still failing after its retries, the run's
    /// budget spent): nothing more was asked of it in the pass.
    pub stopped: Option<String>,
    /// The orders it did not get to, or did not answer every call about:
    /// not marked as asked, so the next run asks them first.
    pub not_asked: Vec<String>,
}

impl SourceReport {
    pub fn new(source: &ApiSource) -> SourceReport {
        SourceReport {
            source: source.name.clone(),
            gateway: source.gateway.as_str().to_owned(),
            calls: Vec::new(),
            ok: true,
            stopped: None,
            not_asked: Vec::new(),
        }
    }
}

/// One API call and its answer.
#[derive(Debug, Clone, Serialize)]
pub struct CallReport {
    /// The order it asked about (`None`: Stripe's undelivered events).
    pub order_ref: Option<String>,
    pub call: String,
    /// The HTTP status of the answer read (not a 2xx: the gateway's "no
    /// such id", nothing known).
    pub status: Option<u16>,
    /// Why it failed, after its retries.
    pub error: Option<String>,
    /// The gateway's own references for the order this call found
    /// (Razorpay's orders by receipt), registered with the order.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub refs: Vec<String>,
    pub facts: Vec<FactReport>,
    /// The facts read, before they are looked up in the ledger.
    #[serde(skip)]
    pub events: Vec<NormalizedEvent>,
}

impl CallReport {
    /// A report of the call `call` (the gateway's words for it).
    pub fn new(order_ref: Option<String>, call: String) -> CallReport {
        CallReport {
            order_ref,
            call,
            status: None,
            error: None,
            refs: Vec::new(),
            facts: Vec::new(),
            events: Vec::new(),
        }
    }
}

/// One fact a gateway answered with.
#[derive(Debug, Clone, Serialize)]
pub struct FactReport {
    pub event_id: String,
    /// `captured attempt pay_1`, `refund rfnd_1`.
    pub fact: String,
    pub order_ref: Option<String>,
    pub amount_minor: Option<i64>,
    pub currency: Option<String>,
    pub found: Found,
    pub published: bool,
}

impl FactReport {
    pub fn of(event: &NormalizedEvent, found: Found) -> FactReport {
        let fact = match (event.kind, &event.refund_id, &event.payment_id) {
            (EventKind::Refunded, Some(r), _) => format!("refund {r}"),
            (kind, _, Some(p)) => format!("{} attempt {p}", kind.as_str()),
            (kind, _, None) => kind.as_str().to_owned(),
        };
        FactReport {
            event_id: event.event_id.clone(),
            fact,
            order_ref: event.order_ref.clone(),
            amount_minor: event.amount_minor,
            currency: event.currency.clone(),
            found,
            published: false,
        }
    }
}

impl fmt::Display for Report {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        writeln!(
            f,
            "{} order(s) asked about{}",
            self.orders.len(),
            if self.dry_run {
                " (dry run: nothing published)"
            } else {
                ""
            }
        )?;
        for s in &self.sources {
            writeln!(
                f,
                "\nsource {} ({}): {} call(s)",
                s.source,
                s.gateway,
                s.calls.len()
            )?;
            if let Some(why) = &s.stopped {
                writeln!(f, "  stopped: {why}")?;
            }
            if !s.not_asked.is_empty() {
                writeln!(
                    f,
                    "  {} order(s) not answered in full (asked first next run): {}",
                    s.not_asked.len(),
                    s.not_asked.join(", ")
                )?;
            }
            for c in &s.calls {
                let order = c.order_ref.as_deref().unwrap_or("-");
                match (&c.error, c.status) {
                    (Some(e), _) => writeln!(f, "  {order}  {}  FAILED: {e}", c.call)?,
                    (None, Some(status)) if !(200..300).contains(&status) => writeln!(
                        f,
                        "  {order}  {}  {status}: the gateway knows nothing of it",
                        c.call
                    )?,
                    (None, status) => writeln!(
                        f,
                        "  {order}  {}  {}: {} fact(s)",
                        c.call,
                        status.unwrap_or(0),
                        c.facts.len()
                    )?,
                }
                for r in &c.refs {
                    writeln!(f, "      the gateway's order {r} (registered with {order})")?;
                }
                for fact in &c.facts {
                    writeln!(
                        f,
                        "      {} {} — {}{}",
                        fact.fact,
                        fact.event_id,
                        match fact.found {
                            Found::MissingWebhook => "missing (no webhook brought it)",
                            Found::AlreadyRecorded => "already recorded",
                        },
                        if fact.published { ", published" } else { "" }
                    )?;
                }
            }
        }
        write!(
            f,
            "\n{} fact(s) found, {} missing, {} published",
            self.facts().count(),
            self.missing(),
            self.published
        )?;
        let failing = self.failing();
        if !failing.is_empty() {
            write!(f, "; calls failed for: {}", failing.join(", "))?;
        }
        writeln!(f)
    }
}
