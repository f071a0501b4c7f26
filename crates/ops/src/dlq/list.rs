//! `oncehookctl dlq list`: the dead letters, oldest first, without consuming them.

use std::fmt;

use clap::Args;
use lapin::Connection;
use oncehook_common::Topology;
use serde::{Serialize, Serializer};
use time::OffsetDateTime;

use super::Filter;
use super::letter::{LIST_HEADERS, LetterSummary};
use crate::broker;
use crate::output::{Report, table};

#[derive(Args)]
pub struct ListArgs {
    /// Show at most this many.
    #[arg(long, default_value_t = 50)]
    pub limit: usize,
    #[command(flatten)]
    pub filter: Filter,
}

/// The shown dead letters (`--json`: an array of them) and the counts behind them.
pub struct ListReport {
    pub shown: Vec<LetterSummary>,
    /// Dead letters in the queue (at least this many when `truncated`).
    pub total: usize,
    pub truncated: bool,
    /// How many match the filter, when there is one.
    pub matching: Option<usize>,
    pub queue: String,
}

pub async fn run(
    conn: &Connection,
    topology: &Topology,
    args: ListArgs,
) -> anyhow::Result<ListReport> {
    let (letters, truncated) = broker::look(conn, topology).await?;
    let now = OffsetDateTime::now_utc();
    let matching: Vec<_> = letters
        .iter()
        .filter(|l| args.filter.matches(l, now))
        .collect();
    Ok(ListReport {
        shown: matching
            .iter()
            .take(args.limit)
            .map(|l| l.summary())
            .collect(),
        total: letters.len(),
        truncated,
        matching: (!args.filter.is_empty()).then_some(matching.len()),
        queue: topology.dead(),
    })
}

impl Serialize for ListReport {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        self.shown.serialize(serializer)
    }
}

impl fmt::Display for ListReport {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if !self.shown.is_empty() {
            let rows: Vec<Vec<String>> = self.shown.iter().map(|l| l.row.clone()).collect();
            writeln!(f, "{}", table(&LIST_HEADERS, &rows))?;
        }
        write!(
            f,
            "{}{} dead letter(s) in {} (showing {})",
            if self.truncated { "at least " } else { "" },
            self.total,
            self.queue,
            self.shown.len()
        )?;
        if let Some(n) = self.matching {
            write!(f, "; {n} match the filter")?;
        }
        if self.matching.unwrap_or(self.total) > self.shown.len() {
            write!(f, "; raise --limit to see more")?;
        }
        Ok(())
    }
}

impl Report for ListReport {}
