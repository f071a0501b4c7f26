//! `processed_webhooks`: one row per delivery, inserted first in the
//! worker's transaction (never checked, then inserted). A conflicting
//! insert waits for the first transaction and then reports a duplicate,
//! counting the sighting on the row; `xmax = 0` tells a fresh insert from
//! that update.
//!
//! The conflict is on the source and the digest of the signed body, so a
//! copy of a signed body under another event id (the gateway's event-id
//! header is not signed, see `docs/architecture.md`) is a duplicate too: it
//! is counted in `body_redeliveries` of the first delivery of that body,
//! while copies under the same event id count in `deliveries`. (Rows from
//! before bodies were digested have an empty digest, which that partial
//! unique index leaves out.)
//!
//! The primary key `(source, event_id, body_sha256)` stays beside it, and a
//! claim racing a copy under the same event id can pass the conflict check
//! before the copy's row is there and then fail on the primary key once the
//! copy commits ([`lost_claim_race`]); claimed again, it is a duplicate.

use std::collections::HashMap;
use std::time::Duration;

use serde::Serialize;
use sqlx::PgConnection;

use super::advisory::LockName;
use super::outbox::NewEmail;
use time::OffsetDateTime;
use uuid::Uuid;

/// The identity of one delivery: the source (two accounts of one gateway
/// never share a namespace), the gateway's event id, and a digest of the
/// signed body (an unsigned event-id header cannot make another body a
/// duplicate, nor the same body a new delivery).
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct DeliveryKey {
    pub source: String,
    pub event_id: String,
    pub body_sha256: String,
}

impl DeliveryKey {
    /// What the claim conflicts on: the source and the signed body's digest.
    pub fn signed_body(&self) -> (&str, &str) {
        (&self.source, &self.body_sha256)
    }
}

/// What claiming a delivery found.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Claimed {
    /// The first delivery of its signed body: the caller applies the effect.
    Fresh,
    /// A copy of a delivery already claimed, under the same event id.
    Duplicate,
    /// The same signed body, already claimed under this other event id.
    SameBodyAs(String),
}

impl Claimed {
    /// How a claim's answer reads: inserted, or the event id of the row it
    /// counted on.
    fn of(inserted: bool, existing_event_id: String, claimed_event_id: &str) -> Claimed {
        if inserted {
            Claimed::Fresh
        } else if existing_event_id == claimed_event_id {
            Claimed::Duplicate
        } else {
            Claimed::SameBodyAs(existing_event_id)
        }
    }
}

/// What is recorded about a delivery when it is claimed.
#[derive(Debug, Clone, Copy)]
pub struct Claim<'a> {
    pub key: &'a DeliveryKey,
    pub provider: &'a str,
    pub event_type: &'a str,
    pub order_ref: Option<&'a str>,
    pub payment_id: Option<&'a str>,
    pub receipt_id: Uuid,
    pub received_at: OffsetDateTime,
    /// `webhook` or `reconciliation` (`Origin::as_str`).
    pub origin: &'a str,
    /// The delivery's trace id (32 hex digits), when traced.
    pub trace_id: Option<&'a str>,
    /// The advisory locks its effect takes if the claim is fresh (taken by
    /// the claim's own statement, after every insert of the group).
    pub locks: &'a [LockName],
}

/// Whether a claim failed only because a copy of the same delivery (same
/// source, event id and body) committed between the claim's conflict check
/// and its insert: the primary key caught what the conflict target had not
/// seen yet. The copy is committed, so claimed again (in a new transaction)
/// the delivery is a plain duplicate.
pub fn lost_claim_race(err: &sqlx::Error) -> bool {
    match err {
        sqlx::Error::Database(db) => {
            db.code().as_deref() == Some(UNIQUE_VIOLATION) && db.constraint() == Some(PRIMARY_KEY)
        }
        _ => false,
    }
}

/// Postgres' `unique_violation`.
const UNIQUE_VIOLATION: &str = "23505";
/// The table's primary key, `(source, event_id, body_sha256)`.
const PRIMARY_KEY: &str = "processed_webhooks_pkey";

/// Claims several deliveries in one statement (group commit); returns what
/// each claim found, in the order of `claims`. The signed bodies
/// ([`DeliveryKey::signed_body`]) must be distinct; they are inserted in
/// that order, so concurrent batches wait for each other's claims in one
/// order. The same statement then takes the advisory locks of the fresh
/// claims ([`Claim::locks`], by kind then key, as `advisory::lock`): the
/// locks' sort reads every claim first, so no lock is taken before the
/// last insert — one round trip where the effect's locks took another.
pub async fn claim_many(
    conn: &mut PgConnection,
    claims: &[Claim<'_>],
) -> Result<Vec<Claimed>, sqlx::Error> {
    let mut sorted: Vec<&Claim<'_>> = claims.iter().collect();
    sorted.sort_by(|a, b| {
        (a.key.signed_body(), &a.key.event_id).cmp(&(b.key.signed_body(), &b.key.event_id))
    });
    let col = |f: fn(&Claim<'_>) -> String| sorted.iter().map(|c| f(c)).collect::<Vec<_>>();
    let opt = |f: fn(&Claim<'_>) -> Option<String>| sorted.iter().map(|c| f(c)).collect::<Vec<_>>();
    let locks: Vec<(&Claim<'_>, &LockName)> = sorted
        .iter()
        .flat_map(|c| c.locks.iter().map(move |l| (*c, l)))
        .collect();
    let rows = sqlx::query!(
        r#"WITH claimed AS (
           INSERT INTO processed_webhooks
               (source, event_id, body_sha256, provider, event_type, order_ref, receipt_id, outcome, received_at, payment_id, origin, trace_id)
           SELECT c.source, c.event_id, c.body_sha256, c.provider, c.event_type, c.order_ref, c.receipt_id,
                  'applied', c.received_at, c.payment_id, c.origin, c.trace_id
           FROM unnest($1::text[], $2::text[], $3::text[], $4::text[], $5::text[], $6::text[],
                       $7::uuid[], $8::timestamptz[], $9::text[], $10::text[], $11::text[]) WITH ORDINALITY
                AS c(source, event_id, body_sha256, provider, event_type, order_ref, receipt_id, received_at, payment_id, origin, trace_id, n)
           ORDER BY c.n
           ON CONFLICT (source, body_sha256) WHERE body_sha256 <> '' DO UPDATE
               SET deliveries = processed_webhooks.deliveries
                       + (processed_webhooks.event_id = EXCLUDED.event_id)::int,
                   body_redeliveries = processed_webhooks.body_redeliveries
                       + (processed_webhooks.event_id <> EXCLUDED.event_id)::int,
                   last_seen_at = now()
           RETURNING source, event_id, body_sha256, (xmax = 0) AS inserted),
           keys AS MATERIALIZED (
               SELECT DISTINCT l.kind, hashtextextended(l.name, 7) AS k
               FROM unnest($12::text[], $13::text[], $14::int2[], $15::text[]) AS l(source, body_sha256, kind, name)
               JOIN claimed c ON c.source = l.source AND c.body_sha256 = l.body_sha256 AND c.inserted),
           locked AS MATERIALIZED (
               SELECT pg_advisory_xact_lock(s.k) FROM (SELECT kind, k FROM keys ORDER BY kind, k) s)
           SELECT c.source AS "source!", c.event_id AS "event_id!", c.body_sha256 AS "body_sha256!",
                  c.inserted AS "inserted!", (SELECT count(*) FROM locked) AS "locked!"
           FROM claimed c"#,
        &col(|c| c.key.source.clone()),
        &col(|c| c.key.event_id.clone()),
        &col(|c| c.key.body_sha256.clone()),
        &col(|c| c.provider.to_owned()),
        &col(|c| c.event_type.to_owned()),
        &opt(|c| c.order_ref.map(str::to_owned)) as &[Option<String>],
        &sorted.iter().map(|c| c.receipt_id).collect::<Vec<_>>(),
        &sorted.iter().map(|c| c.received_at).collect::<Vec<_>>(),
        &opt(|c| c.payment_id.map(str::to_owned)) as &[Option<String>],
        &col(|c| c.origin.to_owned()),
        &opt(|c| c.trace_id.map(str::to_owned)) as &[Option<String>],
        &locks.iter().map(|(c, _)| c.key.source.clone()).collect::<Vec<_>>(),
        &locks.iter().map(|(c, _)| c.key.body_sha256.clone()).collect::<Vec<_>>(),
        &locks.iter().map(|(_, l)| l.kind).collect::<Vec<_>>(),
        &locks.iter().map(|(_, l)| l.name.clone()).collect::<Vec<_>>(),
    )
    .fetch_all(conn)
    .await?;
    // Every claim's row comes back: the one it inserted, or the existing
    // row of its signed body that it counted on.
    let by_body: HashMap<(String, String), (bool, String)> = rows
        .into_iter()
        .map(|r| ((r.source, r.body_sha256), (r.inserted, r.event_id)))
        .collect();
    claims
        .iter()
        .map(|c| {
            let (source, body) = c.key.signed_body();
            by_body
                .get(&(source.to_owned(), body.to_owned()))
                .map(|(inserted, event_id)| {
                    Claimed::of(*inserted, event_id.clone(), &c.key.event_id)
                })
                .ok_or(sqlx::Error::RowNotFound)
        })
        .collect()
}

/// A claimed delivery's outcome, recorded with others in one statement.
#[derive(Debug, Clone, Copy)]
pub struct Finish<'a> {
    pub key: &'a DeliveryKey,
    pub outcome: &'a str,
    pub detail: &'a str,
}

/// The last statement of an effect's transaction: records the outcomes of
/// its claimed deliveries and writes the emails the effect queued
/// (`email_outbox`, skipping a `dedup_key` written before) — one round
/// trip where it took two. Returns how many emails were written.
pub async fn finish_many(
    conn: &mut PgConnection,
    done: &[Finish<'_>],
    emails: &[NewEmail],
) -> Result<i64, sqlx::Error> {
    if done.is_empty() && emails.is_empty() {
        return Ok(0);
    }
    let col = |f: fn(&Finish<'_>) -> String| done.iter().map(f).collect::<Vec<_>>();
    let mail = |f: fn(&NewEmail) -> String| emails.iter().map(f).collect::<Vec<_>>();
    sqlx::query_scalar!(
        r#"WITH finished AS (
               UPDATE processed_webhooks p SET outcome = f.outcome, detail = f.detail, processed_at = now()
               FROM unnest($1::text[], $2::text[], $3::text[], $4::text[], $5::text[])
                    AS f(source, event_id, body_sha256, outcome, detail)
               WHERE p.source = f.source AND p.event_id = f.event_id AND p.body_sha256 = f.body_sha256
               RETURNING 1),
           mail AS (
               INSERT INTO email_outbox (id, order_id, kind, dedup_key, to_addr, subject, body, trace_parent)
               SELECT * FROM unnest($6::uuid[], $7::bigint[], $8::text[], $9::text[], $10::text[], $11::text[],
                                    $12::text[], $13::text[])
               ON CONFLICT (dedup_key) DO NOTHING
               RETURNING 1)
           SELECT count(*) AS "emails!" FROM mail"#,
        &col(|f| f.key.source.clone()),
        &col(|f| f.key.event_id.clone()),
        &col(|f| f.key.body_sha256.clone()),
        &col(|f| f.outcome.to_owned()),
        &col(|f| f.detail.to_owned()),
        &emails.iter().map(|_| Uuid::new_v4()).collect::<Vec<_>>(),
        &emails.iter().map(|e| e.order_id).collect::<Vec<_>>(),
        &mail(|e| e.kind.clone()),
        &mail(|e| e.dedup_key.clone()),
        &mail(|e| e.to.clone()),
        &mail(|e| e.subject.clone()),
        &mail(|e| e.body.clone()),
        &emails
            .iter()
            .map(|e| e.trace_parent.clone())
            .collect::<Vec<_>>() as &[Option<String>],
    )
    .fetch_one(conn)
    .await
}

/// Removes a delivery's record, so a replay of it is processed, not absorbed.
pub async fn forget(conn: &mut PgConnection, key: &DeliveryKey) -> Result<(), sqlx::Error> {
    sqlx::query!(
        "DELETE FROM processed_webhooks WHERE source = $1 AND event_id = $2 AND body_sha256 = $3",
        key.source,
        key.event_id,
        key.body_sha256,
    )
    .execute(conn)
    .await?;
    Ok(())
}

/// A `processed_webhooks` row as operators read it (`oncehookctl trace`).
#[derive(Debug, Clone, Serialize, sqlx::FromRow)]
pub struct WebhookRow {
    pub provider: String,
    pub event_id: String,
    pub event_type: String,
    pub order_ref: Option<String>,
    pub payment_id: Option<String>,
    pub source: String,
    pub receipt_id: Option<Uuid>,
    pub outcome: String,
    pub detail: Option<String>,
    pub deliveries: i32,
    /// Copies of this signed body that arrived under another event id
    /// (absorbed like duplicates).
    pub body_redeliveries: i32,
    /// `webhook`, or `reconciliation` (read from the gateway's API).
    pub origin: String,
    /// The trace of its first delivery (OpenTelemetry), when traced.
    pub trace_id: Option<String>,
    #[serde(with = "time::serde::rfc3339")]
    pub received_at: OffsetDateTime,
    #[serde(with = "time::serde::rfc3339")]
    pub processed_at: OffsetDateTime,
    #[serde(with = "time::serde::rfc3339")]
    pub last_seen_at: OffsetDateTime,
}

/// `sqlx::query_as!` for [`WebhookRow`]s: the columns operators read, from
/// `processed_webhooks`, then `$rest` (the query's `WHERE`, `ORDER BY`, …)
/// and its arguments. sqlx still checks the query at compile time (its
/// macros take string literals joined with `+`, not a constant); the one
/// query built at run time ([`recent`]) starts from [`WEBHOOK_ROWS`], the
/// same text, which the Events tests read through `FromRow`.
const WEBHOOK_ROWS: &str =
    "SELECT provider, event_id, event_type, order_ref, payment_id, source, receipt_id,
                    outcome, detail, deliveries, body_redeliveries, origin, trace_id, received_at, processed_at, last_seen_at
             FROM processed_webhooks ";

macro_rules! webhook_rows {
    ($rest:literal $(, $arg:expr)* $(,)?) => {
        sqlx::query_as!(
            WebhookRow,
            "SELECT provider, event_id, event_type, order_ref, payment_id, source, receipt_id,
                    outcome, detail, deliveries, body_redeliveries, origin, trace_id, received_at, processed_at, last_seen_at
             FROM processed_webhooks " + $rest
            $(, $arg)*
        )
    };
}

/// The delivery a gateway's event id names (if several sources saw that
/// event id, one of them).
pub async fn find_event(
    conn: &mut PgConnection,
    provider: &str,
    event_id: &str,
) -> Result<Option<WebhookRow>, sqlx::Error> {
    webhook_rows!("WHERE provider = $1 AND event_id = $2", provider, event_id)
        .fetch_optional(conn)
        .await
}

/// How many processed deliveries name this order reference.
pub async fn count_naming_order(
    conn: &mut PgConnection,
    order_ref: &str,
) -> Result<i64, sqlx::Error> {
    sqlx::query_scalar!(
        r#"SELECT count(*) AS "n!" FROM processed_webhooks WHERE order_ref = $1"#,
        order_ref
    )
    .fetch_one(conn)
    .await
}

/// Every delivery that touched an order: those naming its reference or one
/// of its gateway references (Razorpay's `order_…`), and those naming one of
/// its payments (by a payment, link or refund).
pub async fn touching_order(
    conn: &mut PgConnection,
    order_ref: &str,
    order_id: i64,
) -> Result<Vec<WebhookRow>, sqlx::Error> {
    webhook_rows!(
        "WHERE order_ref = $1
            OR (provider, order_ref) IN (
                SELECT gateway, gateway_ref FROM order_gateway_refs WHERE order_id = $2)
            OR (provider, payment_id) IN (
                SELECT provider, payment_id FROM payments WHERE order_id = $2
                UNION SELECT provider, payment_id FROM payment_links WHERE order_id = $2
                UNION SELECT provider, payment_id FROM refunds WHERE order_id = $2)
         ORDER BY received_at, processed_at",
        order_ref,
        order_id
    )
    .fetch_all(conn)
    .await
}

/// One provider's outcomes over a window.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ProviderOutcomes {
    pub provider: String,
    pub applied: i64,
    pub ignored: i64,
    pub flagged: i64,
    /// Copies absorbed as duplicates (under the same event id, or the
    /// same signed body under another).
    pub duplicates: i64,
}

/// Outcomes per provider of the deliveries processed within `window`,
/// ordered by provider.
pub async fn outcomes_within(
    conn: &mut PgConnection,
    window: Duration,
) -> Result<Vec<ProviderOutcomes>, sqlx::Error> {
    sqlx::query_as!(
        ProviderOutcomes,
        r#"SELECT provider,
                  count(*) FILTER (WHERE outcome = 'applied') AS "applied!",
                  count(*) FILTER (WHERE outcome = 'ignored') AS "ignored!",
                  count(*) FILTER (WHERE outcome = 'flagged') AS "flagged!",
                  COALESCE(sum(deliveries - 1 + body_redeliveries), 0)::bigint AS "duplicates!"
           FROM processed_webhooks
           WHERE processed_at > now() - make_interval(secs => $1)
           GROUP BY provider ORDER BY provider"#,
        window.as_secs_f64()
    )
    .fetch_all(conn)
    .await
}

/// Where a page of [`recent`] starts: just after this row, in the list's
/// order (newest first; ties broken by source, then event id).
#[derive(Debug, Clone)]
pub struct RecentCursor {
    pub processed_at: OffsetDateTime,
    pub source: String,
    pub event_id: String,
}

impl RecentCursor {
    /// The cursor that continues after `row`.
    pub fn after(row: &WebhookRow) -> RecentCursor {
        RecentCursor {
            processed_at: row.processed_at,
            source: row.source.clone(),
            event_id: row.event_id.clone(),
        }
    }
}

/// Every outcome a processed delivery can have (the table's CHECK).
pub const OUTCOMES: [&str; 4] = ["applied", "ignored", "flagged", "parked"];

/// Which processed deliveries [`recent`] lists.
#[derive(Debug, Clone, Copy, Default)]
pub struct RecentFilter<'a> {
    pub provider: Option<&'a str>,
    pub source: Option<&'a str>,
    pub outcome: Option<&'a str>,
    /// Only deliveries processed at or after this time.
    pub since: Option<OffsetDateTime>,
    /// Only deliveries after this one in the list (the next page).
    pub after: Option<&'a RecentCursor>,
}

/// Processed deliveries, newest first, at most `limit`: a page that starts
/// after `filter.after` (keyset pagination, so page 1,000 costs what page 1
/// does). Only the filters given go into the statement, so the planner can
/// use the index each one has (`processed_webhooks_{provider,source}_at`,
/// `processed_webhooks_unusual_at` for outcomes other than applied, else
/// `processed_webhooks_processed_at`).
pub async fn recent(
    conn: &mut PgConnection,
    filter: RecentFilter<'_>,
    limit: i64,
) -> Result<Vec<WebhookRow>, sqlx::Error> {
    let mut q = sqlx::QueryBuilder::new(WEBHOOK_ROWS);
    q.push("WHERE true");
    if let Some(v) = filter.provider {
        q.push(" AND provider = ").push_bind(v);
    }
    if let Some(v) = filter.source {
        q.push(" AND source = ").push_bind(v);
    }
    match filter.outcome {
        // A known outcome goes in as a literal: only then can a generic
        // plan prove that the partial index covers it.
        Some(v) if OUTCOMES.contains(&v) => {
            q.push(format_args!(" AND outcome = '{v}'"));
        }
        Some(v) => {
            q.push(" AND outcome = ").push_bind(v);
        }
        None => {}
    }
    if let Some(t) = filter.since {
        q.push(" AND processed_at >= ").push_bind(t);
    }
    if let Some(c) = filter.after {
        q.push(" AND (processed_at, source, event_id) < (")
            .push_bind(c.processed_at)
            .push(", ")
            .push_bind(c.source.as_str())
            .push(", ")
            .push_bind(c.event_id.as_str())
            .push(")");
    }
    q.push(" ORDER BY processed_at DESC, source DESC, event_id DESC LIMIT ")
        .push_bind(limit);
    q.build_query_as::<WebhookRow>().fetch_all(conn).await
}
