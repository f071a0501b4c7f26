//! `oncehookctl dlq`: inspect, replay and purge dead letters.
//!
//! [`letter`] reads one dead letter; [`list`], [`show`], [`replay`] and
//! [`purge`] each build a report; broker access is in [`crate::broker`].
//! Replay republishes a message to the exchange of the queue it came from
//! (with a publisher confirm, `mandatory`) and acks it in the dead-letter
//! queue only after a clean confirm; everything else goes back untouched.
//! Identical copies of one message share an ID; `show`, `replay` and `purge`
//! act on every copy.

pub mod letter;
pub mod list;
pub mod mask;
pub mod purge;
pub mod replay;
pub mod show;

use std::collections::BTreeSet;
use std::process::ExitCode;
use std::time::Duration;

use clap::{Args, Subcommand};
use oncehook_common::{Config, Topology};
use time::OffsetDateTime;

use crate::broker;
use crate::output::Output;
use crate::timefmt::parse_duration;
use letter::Letter;

pub use list::ListArgs;
pub use purge::PurgeArgs;
pub use replay::ReplayArgs;

#[derive(Subcommand)]
pub enum DlqCommand {
    /// List dead letters without consuming them (queue order, oldest first).
    List(ListArgs),
    /// Everything about one dead letter: headers, error, envelope, payload.
    /// Signature headers, hashes, tokens and other secrets are masked as the
    /// console masks them (text and --json) unless --reveal.
    Show {
        /// The ID `dlq list` prints.
        id: String,
        /// Show signatures, hashes and other secrets in full (and the whole
        /// message body in --json). Not written to the console's audit trail
        /// (the console never reveals them): a warning naming the operator
        /// ($USER) and the letter is printed on stderr for the session's log.
        #[arg(long)]
        reveal: bool,
    },
    /// Republish dead letters to the exchange they came from, then remove them from the DLQ.
    Replay(ReplayArgs),
    /// Delete dead letters for good.
    Purge(PurgeArgs),
}

#[derive(Args, Default, Clone)]
pub struct Filter {
    /// Only dead letters of this gateway (`razorpay`, …, or `email`).
    #[arg(long)]
    pub gateway: Option<String>,
    /// Only dead letters from this source (the `{source}` of `/webhooks/{source}`).
    #[arg(long)]
    pub source: Option<String>,
    /// Only dead letters of this kind (`unknown_order`, `unparseable`, `delivery_limit`, …).
    #[arg(long = "error-kind")]
    pub error_kind: Option<String>,
    /// Only dead letters that failed within this window (e.g. 30m, 2h, 7d).
    #[arg(long, value_parser = parse_duration)]
    pub since: Option<Duration>,
    /// Only dead letters of events of these tenants (`--tenant` once per
    /// tenant; docs/tenants.md); a letter that is no event (an email)
    /// belongs to no tenant.
    #[arg(long = "tenant")]
    pub tenants: Vec<String>,
}

impl Filter {
    pub fn is_empty(&self) -> bool {
        self.gateway.is_none()
            && self.source.is_none()
            && self.error_kind.is_none()
            && self.since.is_none()
            && self.tenants.is_empty()
    }

    pub fn matches(&self, letter: &Letter, now: OffsetDateTime) -> bool {
        let same = |want: &Option<String>, have: &str| {
            want.as_ref().is_none_or(|w| have.eq_ignore_ascii_case(w))
        };
        same(&self.gateway, &letter.facts.gateway)
            && self
                .source
                .as_ref()
                .is_none_or(|want| letter.facts.source.as_deref() == Some(want.as_str()))
            && same(&self.error_kind, letter.facts.kind.as_str())
            && self.since.is_none_or(|window| within(letter, window, now))
            && self.of_tenants(letter)
    }

    /// Whether `letter` is of one of `--tenant`'s tenants (any, without
    /// one). It holds for letters named by id too: an id of another
    /// tenant's letter is not found.
    pub fn of_tenants(&self, letter: &Letter) -> bool {
        self.tenants.is_empty()
            || self
                .tenants
                .iter()
                .any(|want| letter.tenant() == Some(want.as_str()))
    }
}

/// Whether `letter` failed at most `window` before `now` (never, if its
/// failure time is unknown).
fn within(letter: &Letter, window: Duration, now: OffsetDateTime) -> bool {
    let Some(at) = letter.failed_at else {
        return false;
    };
    let cutoff = time::Duration::try_from(window)
        .ok()
        .and_then(|d| now.checked_sub(d));
    cutoff.is_none_or(|cutoff| at >= cutoff)
}

pub async fn run(settings: &Config, command: DlqCommand, out: &Output) -> anyhow::Result<ExitCode> {
    let topology = Topology::new(settings.broker.prefix.clone());
    let conn = broker::connect(settings).await?;
    let result = match command {
        DlqCommand::List(args) => list::run(&conn, &topology, args)
            .await
            .map(|r| out.finish(&r)),
        DlqCommand::Show { id, reveal } => show::run(&conn, &topology, &id).await.map(|r| {
            if reveal {
                eprintln!("{}", reveal_warning(&r.summary.facts.id));
                out.finish(&r)
            } else {
                out.finish(&r.masked())
            }
        }),
        DlqCommand::Replay(args) => replay::run(settings, &conn, &topology, args, out)
            .await
            .map(|r| out.finish(&r)),
        DlqCommand::Purge(args) => purge::run(&conn, &topology, args, out)
            .await
            .map(|r| out.finish(&r)),
    };
    broker::close(conn).await;
    result
}

/// The warning `dlq show --reveal` prints: who saw which letter's secrets.
fn reveal_warning(id: &str) -> String {
    let user = crate::operator::login().unwrap_or_else(|| "unknown ($USER not set)".to_owned());
    format!(
        "warning: dlq show --reveal: the secrets of dead letter {id} shown in full to operator {user}"
    )
}

/// IDs as users type them.
fn normalise_ids(ids: &[String]) -> Vec<String> {
    let mut seen = BTreeSet::new();
    ids.iter()
        .map(|i| i.trim().to_ascii_lowercase())
        .filter(|i| !i.is_empty() && seen.insert(i.clone()))
        .collect()
}

/// The `ids` that none of `chosen` has.
fn not_found(ids: &[String], chosen: &[&Letter]) -> Vec<String> {
    let found: BTreeSet<&str> = chosen.iter().map(|l| l.facts.id.as_str()).collect();
    ids.iter()
        .filter(|i| !found.contains(i.as_str()))
        .cloned()
        .collect()
}

/// The stderr line for each ID that is not in the dead-letter queue.
fn not_found_lines(ids: &[String], dead: &str) -> Vec<String> {
    ids.iter()
        .map(|id| format!("error: no dead letter with ID {id} in {dead}"))
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ids_are_trimmed_lowercased_and_deduplicated() {
        let ids = ["  ABC ", "abc", "", "def"].map(String::from);
        assert_eq!(normalise_ids(&ids), vec!["abc", "def"]);
    }
}
