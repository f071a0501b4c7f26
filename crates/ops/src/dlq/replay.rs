//! `oncehookctl dlq replay`: republish dead letters — an email to the
//! mailer's exchange, a webhook to its tenant's bulk lane ([`destination`])
//! — with a publisher confirm, and remove each from the dead-letter queue
//! only after its confirm.

use std::fmt;
use std::io::IsTerminal as _;

use anyhow::{Context, bail};
use clap::Args;
use lapin::options::BasicAckOptions;
use lapin::{Channel, Connection};
use oncehook_common::amqp;
use oncehook_common::dead_letter::replay_headers;
use oncehook_common::store::Pooled;
use oncehook_common::store::outbox;
use oncehook_common::tenant::TenantId;
use oncehook_common::{Config, Topology};
use serde::Serialize;
use time::OffsetDateTime;

use super::letter::{LIST_HEADERS, Letter, LetterSummary};
use super::{Filter, normalise_ids, not_found, not_found_lines};
use crate::broker::{self, PEEK_LIMIT};
use crate::output::{Caution, Output, Report, confirm, table};

/// Replays at most this many are listed one by one in text output.
const LIST_EACH_UP_TO: usize = 50;

#[derive(Args)]
#[command(mut_arg("dry_run", |a| a.help("Show what would be replayed; change nothing")))]
#[command(mut_arg("yes", |a| a.help("Do not ask for confirmation (only asked on a terminal, for --all and filters)")))]
pub struct ReplayArgs {
    /// IDs from `dlq list`.
    #[arg(conflicts_with_all = ["all", "gateway", "source", "error_kind", "since"])]
    pub ids: Vec<String>,
    /// Every dead letter (narrowed by --gateway / --error-kind / --since if given).
    #[arg(long)]
    pub all: bool,
    #[command(flatten)]
    pub filter: Filter,
    #[command(flatten)]
    pub caution: Caution,
}

/// What a replay did (or, with `--dry-run`, would do).
#[derive(Serialize)]
#[serde(untagged)]
pub enum ReplayReport {
    DryRun(DryRun),
    Aborted(Aborted),
    Done(Done),
}

#[derive(Serialize)]
pub struct DryRun {
    dry_run: bool,
    would_replay: usize,
    ids: Vec<String>,
    dead_letters: Vec<LetterSummary>,
    not_found: Vec<String>,
    #[serde(skip)]
    context: Scope,
}

/// The person at the terminal said no.
#[derive(Serialize)]
pub struct Aborted {
    replayed: usize,
    failed: usize,
    aborted: bool,
}

#[derive(Serialize)]
pub struct Done {
    replayed: usize,
    failed: usize,
    not_found: Vec<String>,
    results: Vec<Replayed>,
    #[serde(skip)]
    context: Scope,
}

/// What the diagnostics need beyond the JSON.
#[derive(Default)]
struct Scope {
    queue: String,
    truncated: bool,
}

/// Outcome of replaying one dead letter.
#[derive(Serialize)]
pub struct Replayed {
    id: String,
    gateway: String,
    event_id: String,
    exchange: String,
    routing_key: String,
    status: &'static str,
    error: Option<String>,
}

pub async fn run(
    settings: &Config,
    conn: &Connection,
    topology: &Topology,
    args: ReplayArgs,
    out: &Output,
) -> anyhow::Result<ReplayReport> {
    let ids = normalise_ids(&args.ids);
    if ids.is_empty() && !args.all && args.filter.is_empty() {
        bail!(
            "say what to replay: IDs from `oncehookctl dlq list`, --all, --gateway G, --source S, --error-kind K or --since D (try --dry-run first)"
        );
    }
    refuse_unconfirmed_all(&args)?;
    let now = OffsetDateTime::now_utc();
    let selected = |l: &Letter| {
        if ids.is_empty() {
            args.filter.matches(l, now)
        } else {
            ids.contains(&l.facts.id) && args.filter.of_tenants(l)
        }
    };
    let peek = broker::peek(conn, topology, |l| !args.caution.dry_run && selected(l)).await?;
    let chosen: Vec<&Letter> = peek.letters.iter().filter(|l| selected(l)).collect();
    let context = Scope {
        queue: topology.dead(),
        truncated: peek.truncated,
    };
    let not_found = not_found(&ids, &chosen);
    let (report, acked) = if args.caution.dry_run {
        (
            ReplayReport::DryRun(DryRun::of(&chosen, not_found, context)),
            0,
        )
    } else if ids.is_empty() && !approved(&args, chosen.len(), &context.queue).await? {
        let aborted = Aborted {
            replayed: 0,
            failed: 0,
            aborted: true,
        };
        (ReplayReport::Aborted(aborted), 0)
    } else {
        let results = Republisher::new(settings, conn, topology)
            .replay_all(&peek.channel, &chosen, out)
            .await;
        let acked = results.iter().filter(|r| r.error.is_none()).count();
        (
            ReplayReport::Done(Done::of(results, not_found, context)),
            acked,
        )
    };
    drop(chosen);
    peek.release(conn, acked).await;
    Ok(report)
}

/// `--all` without a filter replays the whole queue: without a terminal to
/// ask on, it needs `--yes` (refused before anything is peeked).
fn refuse_unconfirmed_all(args: &ReplayArgs) -> anyhow::Result<()> {
    let everything = args.all && args.filter.is_empty() && !args.caution.dry_run;
    if everything && !args.caution.yes && !std::io::stdin().is_terminal() {
        bail!(
            "refusing to replay every dead letter without confirmation: stdin is not a terminal; pass --yes (or narrow it with --gateway, --source, --error-kind or --since)"
        );
    }
    Ok(())
}

/// Asks on a terminal before replaying by filter or `--all` (without one,
/// a filtered replay goes ahead; see [`refuse_unconfirmed_all`]).
async fn approved(args: &ReplayArgs, n: usize, queue: &str) -> anyhow::Result<bool> {
    if n == 0 || args.caution.yes || !std::io::stdin().is_terminal() {
        return Ok(true);
    }
    confirm(format!(
        "Type 'yes' to replay {n} dead letter(s) from {queue}: "
    ))
    .await
}

/// Publishes dead letters back, opening the confirm channel (and, for
/// emails, the database) once, when first needed.
struct Republisher<'a> {
    settings: &'a Config,
    conn: &'a Connection,
    topology: &'a Topology,
    channel: Option<Channel>,
    pool: Option<oncehook_common::store::Pooled>,
}

impl<'a> Republisher<'a> {
    fn new(settings: &'a Config, conn: &'a Connection, topology: &'a Topology) -> Self {
        Republisher {
            settings,
            conn,
            topology,
            channel: None,
            pool: None,
        }
    }

    async fn replay_all(
        mut self,
        get_ch: &Channel,
        chosen: &[&Letter],
        out: &Output,
    ) -> Vec<Replayed> {
        let total = chosen.len();
        let mut results = Vec::with_capacity(total);
        for (i, letter) in chosen.iter().enumerate() {
            let outcome = self.replay_one(get_ch, letter).await;
            results.push(Replayed::of(
                letter,
                outcome.err().map(|e| format!("{e:#}")),
            ));
            if total > 100 && (i + 1) % 100 == 0 {
                out.progress(&format!("replayed {} of {total} …", i + 1));
            }
        }
        if let Some(ch) = self.channel {
            let _ = ch.close(200, "replay done".into()).await;
        }
        if let Some(pool) = self.pool {
            pool.close().await;
        }
        results
    }

    /// Republishes one dead letter with a confirm, then acks it on `get_ch`.
    async fn replay_one(&mut self, get_ch: &Channel, letter: &Letter) -> anyhow::Result<()> {
        let (exchange, routing_key) = destination(self.topology, letter)?;
        if exchange == self.topology.emails()
            && let Some(msg) = &letter.email
        {
            self.clear_email_failure(msg.outbox_id).await?;
        }
        let ch = self.channel().await?;
        let properties = letter
            .properties
            .clone()
            .with_headers(replay_headers(letter.properties.headers().as_ref()))
            .with_delivery_mode(2);
        amqp::publish_confirmed(
            &ch,
            &exchange,
            &routing_key,
            &letter.body,
            properties,
            self.settings.broker.publish_timeout,
        )
        .await
        .with_context(|| format!("republishing to {exchange} with routing key {routing_key}"))?;
        get_ch
            .basic_ack(letter.tag, BasicAckOptions::default())
            .await
            .context(
                "republished, but removing it from the dead-letter queue failed; it stays there and replaying it again is absorbed as a duplicate",
            )
    }

    async fn channel(&mut self) -> anyhow::Result<Channel> {
        if let Some(ch) = &self.channel
            && ch.status().connected()
        {
            return Ok(ch.clone());
        }
        let ch = amqp::confirm_channel(self.conn)
            .await
            .context("opening a confirm channel")?;
        self.channel = Some(ch.clone());
        Ok(ch)
    }

    /// A failed email is marked in its outbox row; the mark goes before the
    /// email goes back to the mailer.
    async fn clear_email_failure(&mut self, outbox_id: uuid::Uuid) -> anyhow::Result<()> {
        if self.pool.is_none() {
            let pool = Pooled::connect(&self.settings.database, 1, 1)
                .await
                .context("connecting to the database to clear the email's failure mark")?;
            self.pool = Some(pool);
        }
        let Some(pool) = &self.pool else {
            return Ok(());
        };
        let cleared = async {
            let mut conn = pool.single().await?;
            outbox::clear_failure(&mut conn, outbox_id).await?;
            conn.finish().await
        }
        .await;
        cleared.with_context(|| format!("clearing the failure mark of outbox row {outbox_id}"))
    }
}

/// The exchange and routing key a dead letter goes back to.
/// Where a letter goes back: an email to the mailer's exchange; a webhook,
/// from the main lane or a bulk one, to its tenant's bulk lane, so a replay
/// of many queues behind that tenant's own deliveries, never in front of
/// another tenant's (docs/tenants.md, "Fairness"). A letter whose envelope
/// does not read goes to the default tenant's lane (the worker dead-letters
/// it again, with the reason).
fn destination(topology: &Topology, letter: &Letter) -> anyhow::Result<(String, String)> {
    let emails = topology.emails();
    let Some(origin) = letter.facts.origin.clone() else {
        bail!("cannot tell which queue it came from (no x-oncehook-origin or x-death header)");
    };
    if origin == emails {
        let key = letter.facts.routing_key.as_deref();
        return Ok((
            emails,
            key.unwrap_or(topology.email_routing_key()).to_owned(),
        ));
    }
    if !topology.is_events_queue(&origin) {
        bail!(
            "it came from {origin:?}, which is not {}, a bulk lane ({}.N) or {emails} of this deployment",
            topology.events(),
            topology.bulk()
        );
    }
    let Some(routing_key) = letter.facts.routing_key.as_deref() else {
        bail!("its original routing key is unknown");
    };
    let tenant = letter
        .tenant()
        .and_then(|t| TenantId::parse(t).ok())
        .unwrap_or_else(TenantId::default_tenant);
    Ok(topology.bulk_route(&tenant, routing_key))
}

impl Replayed {
    fn of(letter: &Letter, error: Option<String>) -> Replayed {
        Replayed {
            id: letter.facts.id.clone(),
            gateway: letter.facts.gateway.clone(),
            event_id: letter.facts.event_id.clone().unwrap_or_else(|| "-".into()),
            exchange: letter.facts.origin.clone().unwrap_or_default(),
            routing_key: letter.facts.routing_key.clone().unwrap_or_default(),
            status: if error.is_some() {
                "failed"
            } else {
                "replayed"
            },
            error,
        }
    }
}

impl DryRun {
    fn of(chosen: &[&Letter], not_found: Vec<String>, context: Scope) -> DryRun {
        DryRun {
            dry_run: true,
            would_replay: chosen.len(),
            ids: chosen.iter().map(|l| l.facts.id.clone()).collect(),
            dead_letters: chosen.iter().map(|l| l.summary()).collect(),
            not_found,
            context,
        }
    }
}

impl Done {
    fn of(results: Vec<Replayed>, not_found: Vec<String>, context: Scope) -> Done {
        let failed = results.iter().filter(|r| r.error.is_some()).count();
        Done {
            replayed: results.len() - failed,
            failed,
            not_found,
            results,
            context,
        }
    }
}

impl fmt::Display for ReplayReport {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            ReplayReport::DryRun(d) => {
                if !d.dead_letters.is_empty() {
                    let rows: Vec<Vec<String>> =
                        d.dead_letters.iter().map(|l| l.row.clone()).collect();
                    writeln!(f, "{}", table(&LIST_HEADERS, &rows))?;
                }
                write!(
                    f,
                    "would replay {} dead letter(s) from {} (dry run: nothing was changed)",
                    d.would_replay, d.context.queue
                )
            }
            ReplayReport::Aborted(_) => write!(f, "nothing replayed"),
            ReplayReport::Done(d) => {
                if d.results.len() <= LIST_EACH_UP_TO {
                    for r in d.results.iter().filter(|r| r.error.is_none()) {
                        writeln!(
                            f,
                            "replayed {} ({} {}) to {} with routing key {}",
                            r.id, r.gateway, r.event_id, r.exchange, r.routing_key
                        )?;
                    }
                }
                write!(f, "replayed {}, failed {}", d.replayed, d.failed)?;
                if !d.not_found.is_empty() {
                    write!(f, ", not found {}", d.not_found.len())?;
                }
                Ok(())
            }
        }
    }
}

impl Report for ReplayReport {
    fn ok(&self) -> bool {
        match self {
            ReplayReport::DryRun(d) => d.not_found.is_empty(),
            ReplayReport::Aborted(_) => false,
            ReplayReport::Done(d) => d.failed == 0 && d.not_found.is_empty(),
        }
    }

    fn diagnostics(&self) -> Vec<String> {
        let (not_found, context) = match self {
            ReplayReport::DryRun(d) => (&d.not_found, &d.context),
            ReplayReport::Done(d) => (&d.not_found, &d.context),
            ReplayReport::Aborted(_) => return Vec::new(),
        };
        let mut lines = not_found_lines(not_found, &context.queue);
        if context.truncated {
            lines.push(format!(
                "warning: not every dead letter was read (at most {PEEK_LIMIT} at a time); run the replay again for the rest"
            ));
        }
        if let ReplayReport::Done(d) = self {
            lines.extend(d.results.iter().filter_map(|r| {
                let err = r.error.as_ref()?;
                Some(format!(
                    "failed {} ({} {}): {err}",
                    r.id, r.gateway, r.event_id
                ))
            }));
        }
        lines
    }
}
