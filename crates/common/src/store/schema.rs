//! The schema and its two steps (docs/migrations.md): the *expand* step
//! (`migrations/`), which only adds and runs while the previous release's
//! binaries still write, and the *contract* step (`migrations/contract/`),
//! which removes what only the previous release needed, once every binary
//! runs this one. `_sqlx_migrations` says which migrations of either step
//! are applied, so a consuming binary can refuse to consume against a
//! schema older than itself (`db::wait_for_schema`), and
//! `schema_rollouts` says whether a release is rolling out (a window is
//! open between `oncehookctl migrate` and `oncehookctl migrate --finish`).

use sqlx::migrate::Migrator;
use time::OffsetDateTime;

/// The expand step, embedded at build time from the workspace's
/// `migrations/`: what every binary of this release needs applied.
pub static MIGRATOR: Migrator = sqlx::migrate!("../../migrations");

/// The contract step, embedded from `migrations/contract/`: applied by
/// [`contract`] once no binary of an older release runs.
pub static CONTRACT: Migrator = sqlx::migrate!("../../migrations/contract");

/// This release, as `schema_rollouts.release` names it.
const RELEASE: &str = crate::build::VERSION;

/// Migrations whose text changed after a release applied them, each with
/// the SHA-384 of the text that release applied: a database that ran it is
/// recognised (its recorded checksum is brought to the text here), since
/// what the new text does is already done or done again harmlessly (every
/// statement of the new text is `IF NOT EXISTS` or a setting). Release
/// 0.5.0 dropped the touch triggers, foreign keys and an index in the
/// expand step, and built two indexes under a lock that stopped writes; the
/// drops moved to the contract step and the builds became `CONCURRENTLY`
/// (and the refund intents' table, whose foreign key locks `orders`, got a
/// lock timeout).
const REWRITTEN: [(i64, &str); 4] = [
    (
        20261216000001,
        "31d3ad3b30b2a86fbe87d00c9fc141f296a842d3e5b5cfac53bde4c5a82b8ecb3035f7517144f1120f0d907679f5b312",
    ),
    (
        20261217000001,
        "016ed5419a0321b1a75b7a777afa88301a9fae30c76e4bba4c0678b7907d32d6d141783ff2b358964232de6aed0727b7",
    ),
    (
        20261218000001,
        "15e657218a658d41804b735af8c117f6d07ef0d804ca46083cc37e6b42047f7e0dc789160212bc3ca7a9f086361105c2",
    ),
    (
        20261219000001,
        "18f3fe25f16e619a56d217510c38d598e37a9a16ecbb7d532e13b63eb0e919b6151888fd303c24faf2cf23ee087645c3",
    ),
];

/// Postgres' `undefined_table`: `_sqlx_migrations` does not exist yet.
const UNDEFINED_TABLE: &str = "42P01";

/// The versions of the migrations applied successfully (either step), in
/// order; empty when nothing was ever migrated (no `_sqlx_migrations`).
pub async fn applied_migrations(db: &super::Pooled) -> Result<Vec<i64>, sqlx::Error> {
    // In a transaction (a transaction-mode pooler needs it); a failed read
    // rolls back when `tx` drops.
    let mut tx = db.begin().await?;
    let applied =
        sqlx::query_scalar!("SELECT version FROM _sqlx_migrations WHERE success ORDER BY version")
            .fetch_all(&mut *tx)
            .await;
    if applied.is_ok() {
        tx.commit().await?;
    }
    match applied {
        Ok(versions) => Ok(versions),
        Err(sqlx::Error::Database(db)) if db.code().as_deref() == Some(UNDEFINED_TABLE) => {
            Ok(Vec::new())
        }
        Err(err) => Err(err),
    }
}

/// Why a step did not run.
#[derive(Debug, thiserror::Error)]
pub enum MigrateError {
    /// Migrations hold a session-level advisory lock for their whole run,
    /// which a transaction-mode pooler cannot keep.
    #[error(
        "migrations need a direct connection to Postgres (they hold a session-level lock), \
         not a transaction-mode pooler: run it with the server's URL and \
         ONCEHOOK_DATABASE_POOLER=none"
    )]
    BehindPooler,
    /// The contract step before the expand step.
    #[error(
        "the expand step is not applied yet (missing {missing:?}): run `oncehookctl migrate`, \
         roll every binary to this release, then `oncehookctl migrate --finish`"
    )]
    NotExpanded { missing: Vec<i64> },
    #[error("applying the migrations: {0}")]
    Migrate(#[from] sqlx::migrate::MigrateError),
    #[error("reading or writing the schema's bookkeeping: {0}")]
    Database(#[from] sqlx::Error),
}

/// What [`migrate`] did.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Expanded {
    /// The migrations it applied (both steps' on a new database).
    pub applied: Vec<i64>,
    /// The database was new: both steps ran, no window opened (no older
    /// binary can be running against it).
    pub fresh: bool,
    /// A release rollout is open (opened now or earlier): older binaries
    /// may still write until `oncehookctl migrate --finish`.
    pub window_since: Option<OffsetDateTime>,
}

/// The expand step: applies [`MIGRATOR`]'s migrations that are missing;
/// idempotent. On a database that already had migrations, opens a
/// rollout window when it applied any (older binaries keep writing until
/// [`contract`]); on a new one, applies the contract step as well.
pub async fn migrate(db: &super::Pooled) -> Result<Expanded, MigrateError> {
    if db.pooler() == crate::config::Pooler::Transaction {
        return Err(MigrateError::BehindPooler);
    }
    let lock = Migrating::take(db).await?;
    let expanded = expand(db).await?;
    lock.release().await?;
    Ok(expanded)
}

/// [`migrate`]'s work, under the lock.
async fn expand(db: &super::Pooled) -> Result<Expanded, MigrateError> {
    // The role the migrations grant to (a cluster's object, made first).
    super::scope::ensure_service_role(db).await?;
    let before = applied_migrations(db).await?;
    let fresh = before.is_empty();
    if !fresh {
        recognise_rewritten(db).await?;
    }
    let started: OffsetDateTime = sqlx::query_scalar!(r#"SELECT now() AS "now!""#)
        .fetch_one(db.pool())
        .await?;
    if fresh {
        both_steps().run(db.pool()).await?;
    } else {
        step(&MIGRATOR).run(db.pool()).await?;
    }
    let after = applied_migrations(db).await?;
    let applied: Vec<i64> = after
        .iter()
        .copied()
        .filter(|v| !before.contains(v))
        .collect();
    let window_since = if fresh {
        None
    } else if applied.is_empty() {
        open_window(db).await?
    } else {
        sqlx::query!(
            "INSERT INTO schema_rollouts (release, expanded_at) VALUES ($1, $2)
             ON CONFLICT ((true)) WHERE finished_at IS NULL DO NOTHING",
            RELEASE,
            started
        )
        .execute(db.pool())
        .await?;
        open_window(db).await?
    };
    Ok(Expanded {
        applied,
        fresh,
        window_since,
    })
}

/// The contract step: refuses until every expand migration is applied,
/// then applies [`CONTRACT`]'s missing migrations (none twice). Returns
/// the versions it applied. Closing the window is the caller's, after it
/// caught up what the older binaries wrote ([`close_window`]).
pub async fn contract(db: &super::Pooled) -> Result<Vec<i64>, MigrateError> {
    if db.pooler() == crate::config::Pooler::Transaction {
        return Err(MigrateError::BehindPooler);
    }
    let lock = Migrating::take(db).await?;
    let before = applied_migrations(db).await?;
    let missing = crate::db::schema_gap(&before, &MIGRATOR).missing;
    if !missing.is_empty() {
        return Err(MigrateError::NotExpanded { missing });
    }
    step(&CONTRACT).run(db.pool()).await?;
    let after = applied_migrations(db).await?;
    lock.release().await?;
    Ok(after.into_iter().filter(|v| !before.contains(v)).collect())
}

/// The advisory lock one migrating process holds for its whole step.
const MIGRATING_LOCK: i64 = 0x6f6e_6365_6d69_6772;

/// How often a process waiting for another's migration asks again.
const MIGRATING_POLL: std::time::Duration = std::time::Duration::from_millis(100);

/// One process migrates a database at a time: it holds [`MIGRATING_LOCK`]
/// on a session of its own. Others ask for it with `pg_try_advisory_lock`
/// until they get it, never blocked in a statement: a session blocked in
/// `pg_advisory_lock` holds a snapshot, which a `CREATE INDEX
/// CONCURRENTLY` of the migrating process waits for, while that session
/// waits for the lock the migrating process holds (sqlx's own migration
/// lock is taken that way: three `oncehookctl migrate` at once deadlocked
/// on the expand step's concurrent index builds). The lock goes with the
/// session: released when the step ends, or when its process dies.
struct Migrating(sqlx::PgConnection);

impl Migrating {
    async fn take(db: &super::Pooled) -> Result<Migrating, sqlx::Error> {
        let mut session = db.pool().acquire().await?.detach();
        let mut said = false;
        loop {
            let got = sqlx::query_scalar!(
                r#"SELECT pg_try_advisory_lock($1) AS "got!""#,
                MIGRATING_LOCK
            )
            .fetch_one(&mut session)
            .await?;
            if got {
                return Ok(Migrating(session));
            }
            if !said {
                tracing::info!(
                    "another process is migrating this database; waiting for it to finish"
                );
                said = true;
            }
            tokio::time::sleep(MIGRATING_POLL).await;
        }
    }

    /// Ends the session, and the lock with it.
    async fn release(self) -> Result<(), sqlx::Error> {
        use sqlx::Connection as _;
        self.0.close().await
    }
}

/// When the open rollout window began, if one is open.
pub async fn open_window(db: &super::Pooled) -> Result<Option<OffsetDateTime>, sqlx::Error> {
    let mut tx = db.begin().await?;
    let since = sqlx::query_scalar!(
        "SELECT expanded_at FROM schema_rollouts WHERE finished_at IS NULL ORDER BY id LIMIT 1"
    )
    .fetch_optional(&mut *tx)
    .await?;
    tx.commit().await?;
    Ok(since)
}

/// Closes the open window (if any) with what the contract step caught up.
pub async fn close_window(
    db: &super::Pooled,
    orders_caught_up: i64,
    intents_minted: i64,
) -> Result<(), sqlx::Error> {
    let mut tx = db.begin().await?;
    sqlx::query!(
        "UPDATE schema_rollouts SET finished_at = now(), orders_caught_up = $1, intents_minted = $2
         WHERE finished_at IS NULL",
        orders_caught_up,
        intents_minted
    )
    .execute(&mut *tx)
    .await?;
    tx.commit().await
}

/// Both steps in one migrator, in version order (each release's contract
/// before the next one's expand): for a new database, which no older
/// binary runs against — [`migrate`]'s, the tests' and the bench's.
pub fn both_steps() -> Migrator {
    let mut both =
        Migrator::with_migrations(MIGRATOR.iter().chain(CONTRACT.iter()).cloned().collect());
    both.set_ignore_missing(true);
    both
}

/// One step's migrator: it applies its own folder's migrations and lets
/// the other step's be (both are recorded in `_sqlx_migrations`).
fn step(embedded: &Migrator) -> Migrator {
    let mut step = Migrator::with_migrations(embedded.iter().cloned().collect());
    step.set_ignore_missing(true);
    step
}

/// Brings the recorded checksum of each [`REWRITTEN`] migration a
/// database applied in its released text to the text embedded here.
async fn recognise_rewritten(db: &super::Pooled) -> Result<(), sqlx::Error> {
    for (version, released) in REWRITTEN {
        let Some(now) = MIGRATOR.iter().find(|m| m.version == version) else {
            continue;
        };
        let updated = sqlx::query!(
            "UPDATE _sqlx_migrations SET checksum = $1
             WHERE version = $2 AND checksum = decode($3, 'hex')",
            now.checksum.as_ref(),
            version,
            released
        )
        .execute(db.pool())
        .await?;
        if updated.rows_affected() > 0 {
            tracing::info!(
                version,
                "migration applied in an earlier release's text recognised"
            );
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_two_steps_share_no_version() {
        for m in CONTRACT.iter() {
            assert!(
                !MIGRATOR.version_exists(m.version),
                "{} is in both steps",
                m.version
            );
        }
    }

    #[test]
    fn every_rewritten_migration_is_embedded_with_a_new_text() {
        for (version, released) in REWRITTEN {
            let now = MIGRATOR
                .iter()
                .find(|m| m.version == version)
                .unwrap_or_else(|| panic!("{version} is not an expand migration"));
            let now: String = now.checksum.iter().map(|b| format!("{b:02x}")).collect();
            assert_ne!(now, released);
        }
    }
}
