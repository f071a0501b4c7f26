//! What every request handler shares: the configuration (whose `[console]`
//! users are the accounts), the sessions, the login throttle and a small
//! database pool for the console's own queries (events, audit).

use oncehook_common::config::{ConsoleRole, ConsoleUser};
use oncehook_common::{Config, Topology};
use sqlx::PgPool;

use crate::session::Sessions;
use crate::throttle::Throttle;

pub struct State {
    pub settings: Config,
    pub topology: Topology,
    pub sessions: Sessions,
    pub throttle: Throttle,
    pub pool: PgPool,
    /// A hash of no one's password: unknown names are checked against it,
    /// so they cost as much as a wrong password.
    pub decoy_hash: String,
}

impl State {
    /// The configured account called `name`.
    pub fn user(&self, name: &str) -> Option<&ConsoleUser> {
        self.settings.console.users.iter().find(|u| u.name == name)
    }

    /// The role of a configured account.
    pub fn role_of(&self, name: &str) -> Option<ConsoleRole> {
        self.user(name).map(|u| u.role)
    }
}
