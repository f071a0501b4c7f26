//! What every request handler shares: the configuration (whose `[console]`
//! users are the accounts), the sessions, the login throttle and the bound
//! on password checks, the snapshot of the dead letters and a small
//! database pool for the console's own queries (events, audit).

use oncehook_common::config::{ConsoleRole, ConsoleUser};
use oncehook_common::{Config, Topology};
use oncehook_ops::store::audit::{self, NewAuditEntry};
use std::sync::Arc;

use oncehook_common::store::Pooled;
use oncehook_common::store::scope::Scope;
use tokio::sync::Semaphore;

use crate::dead_letters::DeadLetters;
use crate::session::Sessions;
use crate::throttle::Throttle;

pub struct State {
    pub settings: Config,
    pub topology: Topology,
    pub sessions: Sessions,
    pub throttle: Throttle,
    /// Permits for password checks: [`crate::throttle::MAX_CHECKS`] at once.
    pub password_checks: Arc<Semaphore>,
    pub pool: Pooled,
    pub dead_letters: Arc<DeadLetters>,
    /// A hash of no one's password: unknown names are checked against it,
    /// so they cost as much as a wrong password.
    pub decoy_hash: String,
}

impl State {
    /// The configured account called `name`.
    pub fn user(&self, name: &str) -> Option<&ConsoleUser> {
        self.settings.console.users.iter().find(|u| u.name == name)
    }

    /// Writes one row of the audit trail; a failure is logged (the action
    /// it records has happened either way) and returned as `false`.
    pub async fn audit(&self, entry: &NewAuditEntry<'_>) -> bool {
        let recorded = async {
            // The platform's: the audit trail is the operators' own (a
            // login has no tenant yet).
            let mut conn = self.pool.single_in(&Scope::Platform).await?;
            let done = audit::record(&mut conn, entry).await?;
            conn.finish().await?;
            Ok::<_, sqlx::Error>(done)
        }
        .await;
        if let Err(e) = &recorded {
            tracing::error!(error = %e, user = %entry.actor, action = %entry.action, "could not write the audit row");
        }
        recorded.is_ok()
    }

    /// The role of a configured account.
    pub fn role_of(&self, name: &str) -> Option<ConsoleRole> {
        self.user(name).map(|u| u.role)
    }
}
