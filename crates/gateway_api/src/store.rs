//! The orders a caller of the gateways' APIs asks about, with what they
//! are known as there: the gateways' own references and the payments the
//! ledger knows (which gateway to ask, what to ask for). The reconciler
//! reads a window of them (pending orders, and paid ones not asked about
//! lately: `reconcile_checks`), the refunder one by its reference. Reads
//! only: the ledger writes these tables, the reconciler its checks.

use std::time::Duration;

use oncehook_common::store::Pooled;
use time::OffsetDateTime;

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
pub async fn due_orders(db: &Pooled, which: &Selection) -> Result<Vec<DueOrder>, sqlx::Error> {
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
