//! `oncehookctl migrate`: the schema's two steps (docs/migrations.md,
//! docs/operations.md "Deploying a new version"). Without `--finish`, the
//! expand step: the migrations the running (older) release can live with,
//! opening a rollout window on a database a release already runs on.
//! With `--finish`, once every binary runs this release: the contract
//! step, then the catch-up of what older binaries wrote in the window
//! (their orders recomputed by this release's ledger: state, order events,
//! refund intents) and of every owed payment without a refund intent, and
//! the window closed. Both are idempotent.
//!
//! With [`ENV_SERVICE_ROLE_PASSWORD`] set, either step then gives the
//! binaries' role (`oncehook_service`) that password, for password
//! authentication (docs/tenants.md, "The binaries' role"); the deploy
//! files set it from the same secret as the binaries' database URLs.

use std::fmt;

use anyhow::Context;
use oncehook_common::Config;
use oncehook_common::redact::redact;
use oncehook_common::secret::Secret;
use oncehook_common::store::{self, Pooled};
use oncehook_ledger::rollout;
use serde::Serialize;
use time::OffsetDateTime;

use crate::output::Report;

/// The password `oncehookctl migrate` gives the binaries' role when set:
/// read by this verb only, never printed.
pub const ENV_SERVICE_ROLE_PASSWORD: &str = "ONCEHOOK_SERVICE_ROLE_PASSWORD";

/// `--json`: what the step did.
#[derive(Serialize)]
pub struct MigrateReport {
    /// `migrated` (the expand step) or `finished` (the contract step).
    status: &'static str,
    /// The migrations applied now, by version.
    applied: Vec<i64>,
    /// The database was new: both steps ran.
    fresh: bool,
    /// When the open rollout window began (after `migrate`), or the one
    /// `--finish` closed; none when no release was rolling out.
    #[serde(with = "time::serde::rfc3339::option")]
    window_since: Option<OffsetDateTime>,
    /// `--finish`: orders recomputed because they changed in the window.
    orders_caught_up: u64,
    /// `--finish`: refund intents minted (for owed payments without one).
    intents_minted: u64,
    /// The binaries' role was given the password of
    /// [`ENV_SERVICE_ROLE_PASSWORD`].
    service_role_password_set: bool,
}

/// Runs the expand step, or with `finish` the contract step and its
/// catch-up.
/// Then, with [`ENV_SERVICE_ROLE_PASSWORD`] set, gives the binaries' role
/// its password (on a connection of its own, once the pool is closed).
pub async fn run(settings: &Config, finish: bool) -> anyhow::Result<MigrateReport> {
    let password = service_role_password()?;
    let pool = Pooled::connect(&settings.database, 2, 3)
        .await
        .with_context(|| format!("connecting to {}", redact(settings.database.url.expose())))?;
    let done = if finish {
        contract(&pool).await
    } else {
        expand(&pool).await
    };
    pool.close().await;
    let mut report = done?;
    if let Some(password) = password {
        store::scope::set_service_role_password(&settings.database, &password)
            .await
            .with_context(|| {
                format!(
                    "setting the password of {} ({ENV_SERVICE_ROLE_PASSWORD}); the role needs \
                     CREATEROLE (and from PostgreSQL 16 the admin option on it) to do so",
                    store::scope::SERVICE_ROLE
                )
            })?;
        report.service_role_password_set = true;
    }
    Ok(report)
}

/// [`ENV_SERVICE_ROLE_PASSWORD`]: unset, none; set but empty, refused (a
/// placeholder left empty would leave the role without a password).
fn service_role_password() -> anyhow::Result<Option<Secret>> {
    match std::env::var(ENV_SERVICE_ROLE_PASSWORD) {
        Ok(value) if value.is_empty() => anyhow::bail!(
            "{ENV_SERVICE_ROLE_PASSWORD} is set but empty: give it the password of {}, or unset it",
            store::scope::SERVICE_ROLE
        ),
        Ok(value) => Ok(Some(Secret::new(value))),
        Err(std::env::VarError::NotPresent) => Ok(None),
        Err(std::env::VarError::NotUnicode(_)) => {
            anyhow::bail!("{ENV_SERVICE_ROLE_PASSWORD} is not valid UTF-8")
        }
    }
}

async fn expand(pool: &Pooled) -> anyhow::Result<MigrateReport> {
    let expanded = store::schema::migrate(pool)
        .await
        .context("applying the migrations (expand step)")?;
    if let Some(since) = expanded.window_since {
        tracing::info!(%since, applied = ?expanded.applied, "release rollout open: roll every binary, then `oncehookctl migrate --finish`");
    }
    Ok(MigrateReport {
        status: "migrated",
        applied: expanded.applied,
        fresh: expanded.fresh,
        window_since: expanded.window_since,
        orders_caught_up: 0,
        intents_minted: 0,
        service_role_password_set: false,
    })
}

async fn contract(pool: &Pooled) -> anyhow::Result<MigrateReport> {
    let applied = store::schema::contract(pool)
        .await
        .context("applying the contract step")?;
    let window_since = store::schema::open_window(pool)
        .await
        .context("reading the rollout window")?;
    let mut caught = rollout::CaughtUp::default();
    if let Some(since) = window_since {
        caught = rollout::changed_since(pool, since)
            .await
            .context("catching up the orders changed during the rollout")?;
    }
    let owed = rollout::owed_without_intent(pool)
        .await
        .context("minting the refund intents of owed payments")?;
    let orders = caught.orders + owed.orders;
    let intents = caught.intents_minted + owed.intents_minted;
    store::schema::close_window(
        pool,
        i64::try_from(orders).unwrap_or(i64::MAX),
        i64::try_from(intents).unwrap_or(i64::MAX),
    )
    .await
    .context("closing the rollout window")?;
    tracing::info!(
        applied = ?applied,
        orders_caught_up = orders,
        intents_minted = intents,
        "contract step done"
    );
    Ok(MigrateReport {
        status: "finished",
        applied,
        fresh: false,
        window_since,
        orders_caught_up: orders,
        intents_minted: intents,
        service_role_password_set: false,
    })
}

impl fmt::Display for MigrateReport {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        self.step(f)?;
        if self.service_role_password_set {
            write!(f, "; the password of {} set", store::scope::SERVICE_ROLE)?;
        }
        Ok(())
    }
}

impl MigrateReport {
    /// What the step did.
    fn step(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let applied = if self.applied.is_empty() {
            "no migration was missing".to_owned()
        } else {
            format!("{} migration(s) applied", self.applied.len())
        };
        match (self.status, self.window_since) {
            ("finished", since) => {
                write!(
                    f,
                    "contract step: {applied}; {} order(s) caught up, {} refund intent(s) minted",
                    self.orders_caught_up, self.intents_minted
                )?;
                if let Some(since) = since {
                    write!(f, "; the rollout opened at {since} is closed")?;
                }
                Ok(())
            }
            (_, _) if self.fresh => write!(f, "new database: {applied} (both steps)"),
            (_, Some(since)) => write!(
                f,
                "expand step: {applied}; a release is rolling out since {since}: roll every \
                 binary to this release, then run `oncehookctl migrate --finish`"
            ),
            (_, None) => write!(f, "expand step: {applied}"),
        }
    }
}

impl Report for MigrateReport {}
