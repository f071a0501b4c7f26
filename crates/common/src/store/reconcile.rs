//! What the reconciler (`crates/reconcile`) reads and writes: the orders
//! it asks the gateways about (with the references and payments that say
//! which gateway to ask and what to ask for), which facts the ledger has
//! recorded already, `reconcile_checks` (when each order was last asked
//! about) and `reconcile_runs` (when the last scheduled run finished), and
//! the advisory lock that lets one process at a time reconcile.
//!
//! The lock is a transaction-level advisory lock held by a transaction
//! that does nothing else, so it works the same straight to Postgres and
//! behind a transaction-mode pooler (which would hand a session lock's
//! connection to someone else), and it is released however the holder
//! ends: commit, rollback, a dropped connection, a killed process.

use std::time::Duration;

use serde::Serialize;
use sqlx::{PgConnection, Postgres, Transaction};
use time::OffsetDateTime;

/// The advisory lock key of the reconciler (`hashtext('oncehook.reconcile')`
/// would do as well; a constant is easier to find in `pg_locks`).
pub const LOCK_KEY: i64 = 0x6f6e_6365_7265_636f;

/// An order the reconciler may ask about.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DueOrder {
    pub id: i64,
    pub order_ref: String,
    pub status: String,
    pub created_at: OffsetDateTime,
    /// `(gateway, reference)`: the gateways' own ids for the order.
    pub refs: Vec<(String, String)>,
    /// `(provider, payment id)`: payments the ledger knows for the order
    /// (attempts, links and refunds).
    pub payments: Vec<(String, String)>,
}

/// Which orders a run takes.
#[derive(Debug, Clone)]
pub enum Selection {
    /// `pending` orders created between `horizon` and `after` ago, and
    /// with `paid`, the orders paid (or partly refunded) within its horizon
    /// that were not asked about within its interval; least recently asked
    /// first (a paid order never asked counts as asked when it was paid),
    /// at most `limit`.
    Window {
        after: Duration,
        horizon: Duration,
        paid: Option<PaidWindow>,
        limit: i64,
    },
    /// One order by the shop's reference, whatever its status and age.
    One(String),
}

/// Which paid orders a run also asks about: for refunds whose webhook was
/// lost.
#[derive(Debug, Clone, Copy)]
pub struct PaidWindow {
    /// Asked about at most once per this long.
    pub interval: Duration,
    /// Paid at most this long ago.
    pub horizon: Duration,
}

#[derive(sqlx::FromRow)]
struct Row {
    id: i64,
    order_ref: String,
    status: String,
    created_at: OffsetDateTime,
    ref_gateways: Option<Vec<String>>,
    ref_values: Option<Vec<String>>,
    pay_providers: Option<Vec<String>>,
    pay_ids: Option<Vec<String>>,
}

impl From<Row> for DueOrder {
    fn from(r: Row) -> DueOrder {
        let zip = |a: Option<Vec<String>>, b: Option<Vec<String>>| {
            a.unwrap_or_default()
                .into_iter()
                .zip(b.unwrap_or_default())
                .collect()
        };
        DueOrder {
            id: r.id,
            order_ref: r.order_ref,
            status: r.status,
            created_at: r.created_at,
            refs: zip(r.ref_gateways, r.ref_values),
            payments: zip(r.pay_providers, r.pay_ids),
        }
    }
}

/// The orders a run asks about.
pub async fn due_orders(
    db: &super::Pooled,
    which: &Selection,
) -> Result<Vec<DueOrder>, sqlx::Error> {
    let mut tx = db.begin().await?;
    let (order_ref, after, horizon, paid, limit) = match which {
        Selection::Window {
            after,
            horizon,
            paid,
            limit,
        } => (
            None,
            after.as_secs_f64(),
            horizon.as_secs_f64(),
            *paid,
            *limit,
        ),
        Selection::One(r) => (Some(r.clone()), 0.0, 0.0, None, 1),
    };
    let paid_interval = paid.map(|p| p.interval.as_secs_f64());
    let paid_horizon = paid.map(|p| p.horizon.as_secs_f64());
    let rows = sqlx::query_as!(
        Row,
        r#"SELECT o.id, o.order_ref, o.status, o.created_at,
                  r.gateways AS ref_gateways, r.refs AS ref_values,
                  p.providers AS pay_providers, p.ids AS pay_ids
           FROM orders o
           LEFT JOIN reconcile_checks c ON c.order_id = o.id
           LEFT JOIN LATERAL (
               SELECT array_agg(gateway ORDER BY gateway, gateway_ref) AS gateways,
                      array_agg(gateway_ref ORDER BY gateway, gateway_ref) AS refs
               FROM order_gateway_refs WHERE order_id = o.id) r ON true
           LEFT JOIN LATERAL (
               SELECT array_agg(provider ORDER BY provider, payment_id) AS providers,
                      array_agg(payment_id ORDER BY provider, payment_id) AS ids
               FROM (SELECT provider, payment_id FROM payments WHERE order_id = o.id
                     UNION SELECT provider, payment_id FROM payment_links WHERE order_id = o.id
                     UNION SELECT provider, payment_id FROM refunds
                           WHERE order_id = o.id AND payment_id IS NOT NULL) known) p ON true
           WHERE ($1::text IS NOT NULL AND o.order_ref = $1)
              OR ($1::text IS NULL
                  AND o.status = 'pending'
                  AND o.created_at <= now() - make_interval(secs => $2)
                  AND o.created_at >= now() - make_interval(secs => $3))
              OR ($1::text IS NULL AND $5::float8 IS NOT NULL
                  AND o.status IN ('paid', 'partially_refunded')
                  AND o.paid_at >= now() - make_interval(secs => $6::float8)
                  AND COALESCE(c.checked_at, o.paid_at) <= now() - make_interval(secs => $5::float8))
           ORDER BY COALESCE(c.checked_at, CASE WHEN o.status = 'pending' THEN '-infinity'::timestamptz
                                                ELSE o.paid_at END),
                    o.created_at, o.id
           LIMIT $4"#,
        order_ref,
        after,
        horizon,
        limit,
        paid_interval,
        paid_horizon,
    )
    .fetch_all(&mut *tx)
    .await?;
    tx.commit().await?;
    Ok(rows.into_iter().map(DueOrder::from).collect())
}

/// Records that these orders were asked about now.
pub async fn mark_checked(db: &super::Pooled, order_ids: &[i64]) -> Result<(), sqlx::Error> {
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
pub async fn recorded(db: &super::Pooled, facts: &[FactKey]) -> Result<Vec<bool>, sqlx::Error> {
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
    db: &super::Pooled,
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
    pub async fn try_take(db: &super::Pooled) -> Result<Option<RunLock>, sqlx::Error> {
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
pub async fn last_run(db: &super::Pooled) -> Result<Option<OffsetDateTime>, sqlx::Error> {
    let mut tx = db.begin().await?;
    let at = sqlx::query_scalar!("SELECT finished_at FROM reconcile_runs WHERE id = 1")
        .fetch_optional(&mut *tx)
        .await?;
    tx.commit().await?;
    Ok(at)
}

/// Records that a scheduled run finished now.
pub async fn finish_run(db: &super::Pooled) -> Result<(), sqlx::Error> {
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
