//! `oncehookctl dlq purge`: delete dead letters for good — chosen ones by ID
//! (looked at first, so nothing is held while a person decides) or all.

use std::fmt;
use std::io::IsTerminal as _;

use anyhow::{Context, bail};
use clap::Args;
use lapin::Connection;
use lapin::options::BasicAckOptions;
use oncehook_common::Topology;
use serde::Serialize;

use super::letter::{LIST_HEADERS, Letter};
use super::{normalise_ids, not_found, not_found_lines};
use crate::broker;
use crate::output::{Output, Report, confirm, table};

#[derive(Args)]
pub struct PurgeArgs {
    /// IDs from `dlq list`.
    #[arg(conflicts_with = "all")]
    pub ids: Vec<String>,
    /// Every dead letter in the queue.
    #[arg(long)]
    pub all: bool,
    /// Do not ask for confirmation (required when stdin is not a terminal).
    #[arg(long)]
    pub yes: bool,
}

/// What a purge deleted.
#[derive(Serialize)]
#[serde(untagged)]
pub enum PurgeReport {
    /// `--all`: the whole queue.
    All {
        purged: u32,
        all: bool,
        #[serde(skip)]
        queue: String,
    },
    /// By ID.
    Chosen {
        purged: usize,
        #[serde(skip_serializing_if = "Option::is_none")]
        ids: Option<Vec<String>>,
        not_found: Vec<String>,
        #[serde(skip)]
        queue: String,
    },
}

pub async fn run(
    conn: &Connection,
    topology: &Topology,
    args: PurgeArgs,
    out: &Output,
) -> anyhow::Result<PurgeReport> {
    if args.all {
        return purge_all(conn, topology, args.yes, out).await;
    }
    let ids = normalise_ids(&args.ids);
    if ids.is_empty() {
        bail!("say what to purge: IDs from `oncehookctl dlq list`, or --all");
    }
    let queue = topology.dead();
    // Look first (and hand everything back) so nothing is held while a person decides.
    let (letters, _) = broker::look(conn, topology).await?;
    let chosen: Vec<&Letter> = letters
        .iter()
        .filter(|l| ids.contains(&l.facts.id))
        .collect();
    let not_found = not_found(&ids, &chosen);
    if chosen.is_empty() {
        return Ok(PurgeReport::Chosen {
            purged: 0,
            ids: None,
            not_found,
            queue,
        });
    }
    if !args.yes {
        let rows: Vec<Vec<String>> = chosen.iter().map(|l| l.summary().row).collect();
        out.preview(&format!("would purge:\n{}", table(&LIST_HEADERS, &rows)));
        ask(chosen.len()).await?;
    }
    let purged = ack_chosen(conn, topology, &ids).await?;
    Ok(PurgeReport::Chosen {
        purged: purged.len(),
        ids: Some(purged),
        not_found,
        queue,
    })
}

async fn purge_all(
    conn: &Connection,
    topology: &Topology,
    yes: bool,
    out: &Output,
) -> anyhow::Result<PurgeReport> {
    let queue = topology.dead();
    let Some((depth, _)) = broker::queue_info(conn, &queue).await? else {
        bail!("queue {queue} does not exist: is ONCEHOOK_AMQP_PREFIX right?");
    };
    if !yes {
        out.preview(&format!(
            "would purge all {depth} dead letter(s) in {queue}"
        ));
        ask(depth as usize).await?;
    }
    let purged = broker::purge_queue(conn, &queue).await?;
    Ok(PurgeReport::All {
        purged,
        all: true,
        queue,
    })
}

/// Takes the dead letters again and acks those with one of `ids`.
async fn ack_chosen(
    conn: &Connection,
    topology: &Topology,
    ids: &[String],
) -> anyhow::Result<Vec<String>> {
    let peek = broker::peek(conn, topology, |_| false).await?;
    let mut purged = Vec::new();
    let mut ack_error = None;
    for letter in peek.letters.iter().filter(|l| ids.contains(&l.facts.id)) {
        match peek
            .channel
            .basic_ack(letter.tag, BasicAckOptions::default())
            .await
        {
            Ok(()) => purged.push(letter.facts.id.clone()),
            Err(err) => {
                ack_error = Some(err);
                break;
            }
        }
    }
    peek.release(conn, purged.len()).await;
    match ack_error {
        Some(err) => Err(anyhow::Error::new(err).context(format!(
            "purging stopped after {} dead letter(s)",
            purged.len()
        ))),
        None => Ok(purged),
    }
}

/// Asks to confirm purging `n` dead letters; refuses outright without a terminal.
async fn ask(n: usize) -> anyhow::Result<()> {
    if !std::io::stdin().is_terminal() {
        bail!(
            "refusing to purge {n} dead letter(s) without confirmation: stdin is not a terminal; pass --yes"
        );
    }
    confirm(format!("Type 'yes' to purge {n} dead letter(s): "))
        .await?
        .then_some(())
        .context("nothing purged")
}

impl fmt::Display for PurgeReport {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            PurgeReport::All { purged, queue, .. } => {
                write!(f, "purged {purged} dead letter(s) from {queue}")
            }
            PurgeReport::Chosen { ids: None, .. } => write!(f, "purged 0 dead letter(s)"),
            PurgeReport::Chosen {
                ids: Some(ids),
                queue,
                ..
            } => {
                for id in ids {
                    writeln!(f, "purged {id}")?;
                }
                write!(f, "purged {} dead letter(s) from {queue}", ids.len())
            }
        }
    }
}

impl Report for PurgeReport {
    fn ok(&self) -> bool {
        match self {
            PurgeReport::All { .. } => true,
            PurgeReport::Chosen { ids, not_found, .. } => ids.is_some() && not_found.is_empty(),
        }
    }

    fn diagnostics(&self) -> Vec<String> {
        match self {
            PurgeReport::All { .. } => Vec::new(),
            PurgeReport::Chosen {
                not_found, queue, ..
            } => not_found_lines(not_found, queue),
        }
    }
}
