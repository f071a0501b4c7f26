//! `oncehookctl refunds` (docs/refunds.md): the refund intents the ledger
//! minted — `list` (newest first, by state), `show` (one intent, or every
//! intent of an order, with the gateway's words), `approve` (an intent
//! that waits for an operator, or one the gateway refused, is sent by the
//! refunder's next pass), `cancel` (one nothing was sent for), and the
//! kill switch, `pause` and `resume`, which stop and restart every
//! refunder at once without losing an intent. Every change is recorded in
//! the operators' audit, as the console's are. All through
//! `store::refunds`.

use std::fmt;

use crate::store::audit::{self, NewAuditEntry};
use anyhow::{Context, bail};
use clap::{Args, Subcommand};
use oncehook_common::Config;
use oncehook_common::store::Pooled;
use oncehook_ledger::money;
use oncehook_ledger::store::refund_intents::{self as store, Intent};
use serde::Serialize;
use sqlx::PgConnection;

use crate::output::{Report, table, truncate};
use crate::timefmt::short_time;

#[derive(Subcommand)]
pub enum RefundsCommand {
    /// Refund intents, newest first.
    List(ListArgs),
    /// One intent (`ri_…`), or every intent of an order (its reference).
    Show {
        /// The intent's id or the order's reference.
        id: String,
    },
    /// Approve an intent that waits for an operator (or was refused): the refunder sends it.
    Approve {
        /// The intent's id (`ri_…`).
        id: String,
    },
    /// Cancel an intent nothing was sent for (the money is not refunded by oncehook).
    Cancel {
        /// The intent's id (`ri_…`).
        id: String,
    },
    /// The kill switch: no refunder sends anything until `resume` (intents are kept).
    Pause,
    /// Let the refunders send again.
    Resume,
}

#[derive(Args)]
pub struct ListArgs {
    /// Only intents in this state.
    #[arg(long, value_parser = clap::builder::PossibleValuesParser::new(oncehook_common::refund::STATES))]
    pub state: Option<String>,
    /// At most this many rows.
    #[arg(long, default_value_t = 50, value_parser = clap::value_parser!(i64).range(1..=10_000))]
    pub limit: i64,
}

/// What a `refunds` verb prints.
#[derive(Serialize)]
#[serde(untagged)]
pub enum RefundsReport {
    List {
        intents: Vec<Intent>,
        paused: bool,
    },
    Show {
        intents: Vec<Intent>,
    },
    Changed {
        id: String,
        state: String,
        /// The attempt an approval sends (a new one after a refusal: a
        /// new key); `None` for a cancellation.
        #[serde(skip_serializing_if = "Option::is_none")]
        attempt_no: Option<i32>,
    },
    Switched {
        paused: bool,
    },
}

pub async fn run(settings: &Config, command: RefundsCommand) -> anyhow::Result<RefundsReport> {
    let pool = Pooled::connect(&settings.database, 2, 3)
        .await
        .context("connecting to the database")?;
    let report = async {
        let mut tx = pool.begin().await?;
        let report = verb(&mut tx, command).await?;
        tx.commit().await?;
        anyhow::Ok(report)
    }
    .await;
    pool.close().await;
    report
}

async fn verb(conn: &mut PgConnection, command: RefundsCommand) -> anyhow::Result<RefundsReport> {
    Ok(match command {
        RefundsCommand::List(args) => RefundsReport::List {
            intents: store::list(conn, args.state.as_deref(), args.limit).await?,
            paused: store::paused(conn).await?,
        },
        RefundsCommand::Show { id } => {
            let intents = store::find(conn, &id).await?;
            if intents.is_empty() {
                bail!(
                    "no refund intent has the id {id:?}, and no order with that reference has one"
                );
            }
            RefundsReport::Show { intents }
        }
        RefundsCommand::Approve { id } => change(conn, &id, true).await?,
        RefundsCommand::Cancel { id } => change(conn, &id, false).await?,
        RefundsCommand::Pause => switch(conn, true).await?,
        RefundsCommand::Resume => switch(conn, false).await?,
    })
}

/// Approves or cancels one intent, audited; a clear error where its state
/// does not allow it.
async fn change(conn: &mut PgConnection, id: &str, approve: bool) -> anyhow::Result<RefundsReport> {
    let Some(intent) = store::find(conn, id)
        .await?
        .into_iter()
        .find(|i| i.id == id)
    else {
        bail!("no refund intent has the id {id:?} (`oncehookctl refunds list` lists them)");
    };
    let by = crate::operator::audit_name();
    let done = if approve {
        store::approve(conn, id, intent.source.as_deref(), &by).await?
    } else {
        store::cancel(conn, id, &by).await?
    };
    let action = if approve {
        "refund.approve"
    } else {
        "refund.cancel"
    };
    record(conn, &by, action, id, done, &intent.state).await?;
    if !done {
        let (verb, allowed) = if approve {
            ("approved", "owed or failed")
        } else {
            ("cancelled", "owed, approved or failed")
        };
        bail!(
            "intent {id} is {}: only an intent that is {allowed} can be {verb}",
            intent.state
        );
    }
    let state = if approve { "approved" } else { "cancelled" };
    let attempt_no = if approve {
        let now = store::find(conn, id).await?;
        now.into_iter().find(|i| i.id == id).map(|i| i.attempt_no)
    } else {
        None
    };
    Ok(RefundsReport::Changed {
        id: id.to_owned(),
        state: state.into(),
        attempt_no,
    })
}

async fn switch(conn: &mut PgConnection, paused: bool) -> anyhow::Result<RefundsReport> {
    let by = crate::operator::audit_name();
    store::set_paused(conn, paused, &by).await?;
    let action = if paused {
        "refunds.pause"
    } else {
        "refunds.resume"
    };
    record(conn, &by, action, "", true, "").await?;
    Ok(RefundsReport::Switched { paused })
}

async fn record(
    conn: &mut PgConnection,
    by: &str,
    action: &str,
    id: &str,
    ok: bool,
    was: &str,
) -> anyhow::Result<()> {
    let letters: Vec<String> = if id.is_empty() {
        Vec::new()
    } else {
        vec![id.to_owned()]
    };
    let result = if ok {
        "done".to_owned()
    } else {
        format!("refused: the intent was {was}")
    };
    audit::record(
        conn,
        &NewAuditEntry {
            actor: by,
            role: "operator",
            action,
            letters: &letters,
            scope: Some("refunds"),
            ok,
            result: &result,
            address: None,
        },
    )
    .await?;
    Ok(())
}

fn rows(intents: &[Intent]) -> Vec<Vec<String>> {
    intents
        .iter()
        .map(|i| {
            vec![
                i.id.clone(),
                i.order_ref.clone(),
                format!("{}:{}", i.provider, i.payment_id),
                money(i.amount_minor, &i.currency),
                i.reason.clone(),
                i.state.clone(),
                short_time(i.created_at),
                truncate(
                    i.gateway_message
                        .as_deref()
                        .or(i.held_because.as_deref())
                        .unwrap_or_default(),
                    60,
                ),
            ]
        })
        .collect()
}

const HEADERS: [&str; 8] = [
    "INTENT", "ORDER", "PAYMENT", "AMOUNT", "REASON", "STATE", "CREATED", "NOTE",
];

fn write_one(f: &mut fmt::Formatter<'_>, i: &Intent) -> fmt::Result {
    writeln!(f, "{} ({})", i.id, i.state)?;
    writeln!(f, "  order      {}", i.order_ref)?;
    writeln!(
        f,
        "  payment    {}:{} (source {})",
        i.provider,
        i.payment_id,
        i.source.as_deref().unwrap_or("unknown")
    )?;
    writeln!(
        f,
        "  owed       {} ({}), refunded so far {}",
        money(i.amount_minor, &i.currency),
        i.reason,
        money(i.refunded_minor, &i.currency)
    )?;
    if let Some(by) = &i.approved_by {
        writeln!(
            f,
            "  approved   by {by}{}",
            i.approved_at
                .map(|t| format!(" at {}", short_time(t)))
                .unwrap_or_default()
        )?;
    }
    if i.attempts > 0 {
        let key = i.key();
        writeln!(
            f,
            "  attempts   {} tries; attempt {} under key {key}{}",
            i.attempts,
            i.attempt_no,
            if i.in_doubt {
                ", in doubt (may have reached the gateway: looked up before it is sent again)"
            } else {
                ""
            }
        )?;
    }
    if let (Some(sent), Some(reason)) = (i.sent_minor, &i.sent_reason) {
        writeln!(f, "  sending    {} ({reason})", money(sent, &i.currency))?;
    }
    if let Some(r) = &i.gateway_refund_id {
        writeln!(f, "  refund     {r}")?;
    }
    if let Some(m) = &i.gateway_message {
        writeln!(
            f,
            "  gateway    {}{m}",
            i.gateway_code
                .as_deref()
                .map(|c| format!("{c}: "))
                .unwrap_or_default()
        )?;
    }
    if let Some(h) = &i.held_because {
        writeln!(f, "  waits      {h}")?;
    }
    Ok(())
}

impl fmt::Display for RefundsReport {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            RefundsReport::List { intents, paused } => {
                if *paused {
                    writeln!(f, "refunds are PAUSED (`oncehookctl refunds resume`)")?;
                }
                if intents.is_empty() {
                    write!(f, "no refund intents")
                } else {
                    write!(f, "{}", table(&HEADERS, &rows(intents)))
                }
            }
            RefundsReport::Show { intents } => {
                for i in intents {
                    write_one(f, i)?;
                }
                Ok(())
            }
            RefundsReport::Changed {
                id,
                state,
                attempt_no: Some(n),
            } if *n > 1 => write!(
                f,
                "{id}: {state}, attempt {n} (a new idempotency key: the gateway refused the one before)"
            ),
            RefundsReport::Changed { id, state, .. } => write!(f, "{id}: {state}"),
            RefundsReport::Switched { paused: true } => write!(
                f,
                "refunds paused: no refunder sends anything until `oncehookctl refunds resume`"
            ),
            RefundsReport::Switched { paused: false } => write!(f, "refunds resumed"),
        }
    }
}

impl Report for RefundsReport {}
