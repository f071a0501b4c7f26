//! What the reconciler reads and writes besides the orders it asks about
//! (`oncehook_gateway_api::store`): which facts the ledger has recorded
//! already, `reconcile_checks` (when each order was last asked about) and
//! `reconcile_runs` (when the last scheduled run finished), and the
//! advisory lock that lets one process at a time reconcile.
//!
//! The lock is a transaction-level advisory lock held by a transaction
//! that does nothing else, so it works the same straight to Postgres and
//! behind a transaction-mode pooler (which would hand a session lock's
//! connection to someone else), and it is released however the holder
//! ends: commit, rollback, a dropped connection, a killed process.

use std::time::Duration;

use oncehook_common::store::Pooled;
use serde::Serialize;
use sqlx::{PgConnection, Postgres, Transaction};
use time::OffsetDateTime;

/// The advisory lock key of the reconciler (`hashtext('oncehook.reconcile')`
/// would do as well; a constant is easier to find in `pg_locks`).
pub const LOCK_KEY: i64 = 0x6f6e_6365_7265_636f;

/// Records that these orders were asked about now.
pub async fn mark_checked(db: &Pooled, order_ids: &[i64]) -> Result<(), sqlx::Error> {
    if order_ids.is_empty() {
        return Ok(());
    }
    let mut tx = db.begin().await?;
    sqlx::query!(
        "INSERT INTO reconcile_checks (order_id)
         SELECT DISTINCT unnest($1::bigint[]) ORDER BY 1
         ON CONFLICT (order_id) DO UPDATE
             SET checked_at = now(), checks = reconcile_checks.checks + 1",
        order_ids,
    )
    .execute(&mut *tx)
    .await?;
    tx.commit().await
}

/// A fact as the ledger keys it: an attempt by `(provider, payment id,
/// status)`, a refund by `(provider, refund id)`.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum FactKey {
    Attempt {
        provider: String,
        payment_id: String,
        status: String,
    },
    Refund {
        provider: String,
        refund_id: String,
    },
}

/// Which of `facts` the ledger has recorded, in the order given.
pub async fn recorded(db: &Pooled, facts: &[FactKey]) -> Result<Vec<bool>, sqlx::Error> {
    if facts.is_empty() {
        return Ok(Vec::new());
    }
    let (mut kinds, mut providers, mut ids, mut statuses) = (vec![], vec![], vec![], vec![]);
    for f in facts {
        match f {
            FactKey::Attempt {
                provider,
                payment_id,
                status,
            } => {
                kinds.push("attempt".to_owned());
                providers.push(provider.clone());
                ids.push(payment_id.clone());
                statuses.push(status.clone());
            }
            FactKey::Refund {
                provider,
                refund_id,
            } => {
                kinds.push("refund".to_owned());
                providers.push(provider.clone());
                ids.push(refund_id.clone());
                statuses.push(String::new());
            }
        }
    }
    let mut tx = db.begin().await?;
    let found = sqlx::query_scalar!(
        r#"SELECT (CASE WHEN f.kind = 'attempt' THEN EXISTS (
                       SELECT 1 FROM payments p
                       WHERE p.provider = f.provider AND p.payment_id = f.id AND p.status = f.status)
                   ELSE EXISTS (
                       SELECT 1 FROM refunds r WHERE r.provider = f.provider AND r.refund_id = f.id)
                   END) AS "found!"
           FROM unnest($1::text[], $2::text[], $3::text[], $4::text[]) WITH ORDINALITY
                AS f(kind, provider, id, status, n)
           ORDER BY f.n"#,
        &kinds,
        &providers,
        &ids,
        &statuses,
    )
    .fetch_all(&mut *tx)
    .await?;
    tx.commit().await?;
    Ok(found)
}

/// Which events name an order oncehook has — by the shop's reference, a
/// gateway reference of `provider`, or a payment the ledger knows — in the
/// order given. (A gateway account may serve more than this shop: its
/// other events are none of oncehook's business.)
pub async fn name_known_orders(
    db: &Pooled,
    provider: &str,
    events: &[(Option<String>, Option<String>)],
) -> Result<Vec<bool>, sqlx::Error> {
    if events.is_empty() {
        return Ok(Vec::new());
    }
    let refs: Vec<Option<String>> = events.iter().map(|(r, _)| r.clone()).collect();
    let payments: Vec<Option<String>> = events.iter().map(|(_, p)| p.clone()).collect();
    let mut tx = db.begin().await?;
    let known = sqlx::query_scalar!(
        r#"SELECT (EXISTS (SELECT 1 FROM orders o WHERE o.order_ref = e.order_ref)
                OR EXISTS (SELECT 1 FROM order_gateway_refs g
                           WHERE g.gateway = $1 AND g.gateway_ref IN (e.order_ref, e.payment_id))
                OR EXISTS (SELECT 1 FROM payments p WHERE p.provider = $1 AND p.payment_id = e.payment_id)
                OR EXISTS (SELECT 1 FROM payment_links l
                           WHERE l.provider = $1 AND l.payment_id = e.payment_id)) AS "known!"
           FROM unnest($2::text[], $3::text[]) WITH ORDINALITY AS e(order_ref, payment_id, n)
           ORDER BY e.n"#,
        provider,
        &refs as &[Option<String>],
        &payments as &[Option<String>],
    )
    .fetch_all(&mut *tx)
    .await?;
    tx.commit().await?;
    Ok(known)
}

/// The reconciler's lock, held until this is dropped or [`RunLock::release`]d.
pub struct RunLock {
    tx: Transaction<'static, Postgres>,
}

impl RunLock {
    /// Takes the lock if no one holds it; `None`: another process does.
    pub async fn try_take(db: &Pooled) -> Result<Option<RunLock>, sqlx::Error> {
        let mut tx = db.begin().await?;
        let taken = sqlx::query_scalar!(
            r#"SELECT pg_try_advisory_xact_lock($1) AS "taken!""#,
            LOCK_KEY
        )
        .fetch_one(&mut *tx)
        .await?;
        Ok(taken.then_some(RunLock { tx }))
    }

    /// Lets the next holder in.
    pub async fn release(self) -> Result<(), sqlx::Error> {
        self.tx.commit().await
    }
}

/// When the last scheduled run finished, if one ever did.
pub async fn last_run(db: &Pooled) -> Result<Option<OffsetDateTime>, sqlx::Error> {
    let mut tx = db.begin().await?;
    let at = sqlx::query_scalar!("SELECT finished_at FROM reconcile_runs WHERE id = 1")
        .fetch_optional(&mut *tx)
        .await?;
    tx.commit().await?;
    Ok(at)
}

/// Records that a scheduled run finished now.
pub async fn finish_run(db: &Pooled) -> Result<(), sqlx::Error> {
    let mut tx = db.begin().await?;
    sqlx::query!(
        "INSERT INTO reconcile_runs (id, finished_at) VALUES (1, now())
         ON CONFLICT (id) DO UPDATE SET finished_at = now(), runs = reconcile_runs.runs + 1"
    )
    .execute(&mut *tx)
    .await?;
    tx.commit().await
}

/// What `oncehookctl stats` and the console's Overview say about
/// reconciliation.
#[derive(Debug, Clone, Serialize)]
pub struct Summary {
    /// When the last scheduled run finished.
    #[serde(with = "time::serde::rfc3339::option")]
    pub last_run_at: Option<OffsetDateTime>,
    /// Pending orders inside the `after..horizon` window now.
    pub pending_in_window: i64,
    /// Of those, the ones never asked about yet.
    pub never_asked: i64,
    /// Per source, deliveries that came from reconciliation within the
    /// window (payment states no webhook had brought).
    pub from_reconciliation: Vec<SourceCount>,
}

/// A count for one source.
#[derive(Debug, Clone, Serialize)]
pub struct SourceCount {
    pub source: String,
    pub deliveries: i64,
}

/// [`Summary`] over `window`, for the `after..horizon` window of the config.
pub async fn summary(
    conn: &mut PgConnection,
    window: Duration,
    after: Duration,
    horizon: Duration,
) -> Result<Summary, sqlx::Error> {
    let head = sqlx::query!(
        r#"SELECT (SELECT finished_at FROM reconcile_runs WHERE id = 1) AS last_run_at,
                  count(*) AS "pending!",
                  count(*) FILTER (WHERE c.order_id IS NULL) AS "never!"
           FROM orders o LEFT JOIN reconcile_checks c ON c.order_id = o.id
           WHERE o.status = 'pending'
             AND o.created_at <= now() - make_interval(secs => $1)
             AND o.created_at >= now() - make_interval(secs => $2)"#,
        after.as_secs_f64(),
        horizon.as_secs_f64(),
    )
    .fetch_one(&mut *conn)
    .await?;
    let from_reconciliation = sqlx::query_as!(
        SourceCount,
        r#"SELECT source, count(*) AS "deliveries!" FROM processed_webhooks
           WHERE origin = 'reconciliation' AND processed_at > now() - make_interval(secs => $1)
           GROUP BY source ORDER BY source"#,
        window.as_secs_f64(),
    )
    .fetch_all(conn)
    .await?;
    Ok(Summary {
        last_run_at: head.last_run_at,
        pending_in_window: head.pending,
        never_asked: head.never,
        from_reconciliation,
    })
}
