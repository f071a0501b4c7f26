//! Transaction-scoped advisory locks by name: what an effect serializes on
//! beyond the rows it locks (the ledger's order references and payments,
//! so that a park and a link, or a park and an order's creation, never
//! miss each other). A name is hashed to PostgreSQL's 64-bit lock key by
//! `hashtextextended(name, 7)`; locks are taken by kind, then by key, so
//! every transaction takes them in one order. The pipeline's claim takes a
//! group's locks in its own statement (`dedup::claim_many`); a road that
//! claims nothing takes them with [`lock`].

use sqlx::PgConnection;

/// One advisory lock: its name, and its kind (every lock of a lower kind
/// is taken before any of a higher one).
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct LockName {
    pub kind: i16,
    pub name: String,
}

/// Takes these locks (held until the transaction ends), by kind then key.
pub async fn lock(conn: &mut PgConnection, names: &[LockName]) -> Result<(), sqlx::Error> {
    if names.is_empty() {
        return Ok(());
    }
    sqlx::query_scalar!(
        r#"WITH keys AS MATERIALIZED (
               SELECT DISTINCT t.kind, hashtextextended(t.name, 7) AS k
               FROM unnest($1::int2[], $2::text[]) AS t(kind, name)),
           locked AS MATERIALIZED (
               SELECT pg_advisory_xact_lock(s.k) FROM (SELECT kind, k FROM keys ORDER BY kind, k) s)
           SELECT count(*) AS "locked!" FROM locked"#,
        &names.iter().map(|n| n.kind).collect::<Vec<_>>(),
        &names.iter().map(|n| n.name.clone()).collect::<Vec<_>>(),
    )
    .fetch_one(conn)
    .await?;
    Ok(())
}
