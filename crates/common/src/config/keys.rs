//! How an environment variable, a dotted key of the file and the flat name
//! of older files relate. Each section declares its own keys next to its
//! settings (`broker::KEYS`, `worker::KEYS`, …); this file holds the shape
//! of a key, the variables no single section owns, and the list of every
//! section's keys that the loader (`load.rs`) and the error messages
//! (`error.rs`) read, and the settings that went away ([`RETIRED`]), which
//! the loader refuses by name.

use super::{
    api, broker, console, database, ingest, mail, notify, rates, reconcile, refunds, secrets,
    telemetry, worker,
};

/// The file named by this variable is read under the environment.
pub const ENV_CONFIG: &str = "ONCEHOOK_CONFIG";
/// Sets `worker.prefetch` and `mail.prefetch` at once.
pub const ENV_PREFETCH: &str = "ONCEHOOK_PREFETCH";
/// Sets `worker.retry.max_attempts` and `mail.retry.max_attempts` at once.
pub const ENV_MAX_ATTEMPTS: &str = "ONCEHOOK_MAX_ATTEMPTS";

/// One setting that an environment variable can set.
#[derive(Debug, Clone, Copy)]
pub(super) struct Key {
    /// The environment variable (`ONCEHOOK_…`). One variable may set the
    /// same setting of several sections (`ONCEHOOK_PREFETCH`): it is then
    /// listed once per section.
    pub env: &'static str,
    /// The dotted path in the sectioned file (`worker.batch.size`).
    pub path: &'static str,
    /// The flat top-level name older configuration files used, if any.
    pub legacy: Option<&'static str>,
    /// Secret values (URLs with passwords, passwords, keys) never appear
    /// in a message, not even a type error's.
    pub secret: bool,
}

impl Key {
    pub const fn new(env: &'static str, path: &'static str) -> Self {
        Key {
            env,
            path,
            legacy: None,
            secret: false,
        }
    }

    /// Older files wrote this setting as the top-level `name`.
    pub const fn legacy(self, name: &'static str) -> Self {
        Key {
            legacy: Some(name),
            ..self
        }
    }

    /// The value is never printed.
    pub const fn secret(self) -> Self {
        Key {
            secret: true,
            ..self
        }
    }
}

/// A setting that went away. Set in the file or the environment, it is
/// refused at start-up with the release it went away in and what to do
/// instead, rather than read and ignored (a variable) or called unknown
/// (a key of the file).
#[derive(Debug, Clone, Copy)]
pub(super) struct Retired {
    pub env: &'static str,
    /// The dotted path it had in the sectioned file.
    pub path: &'static str,
    /// The release that no longer reads it.
    pub removed_in: &'static str,
    /// What to do instead.
    pub instead: &'static str,
}

/// Every retired setting.
pub(super) const RETIRED: &[Retired] = &[Retired {
    env: "ONCEHOOK_WORKER_BATCH_LINGER_MS",
    path: "worker.batch.linger_ms",
    removed_in: "0.5.0",
    instead: "delete it: no delivery waits for a group to fill (a free committer takes what is in flight at once), and `worker.batch.size` alone sizes the groups",
}];

/// Every section's keys.
pub(super) fn all() -> impl Iterator<Item = &'static Key> {
    [
        broker::KEYS,
        database::KEYS,
        telemetry::KEYS,
        ingest::KEYS,
        rates::KEYS,
        worker::KEYS,
        mail::KEYS,
        console::KEYS,
        api::KEYS,
        reconcile::KEYS,
        refunds::KEYS,
        notify::KEYS,
        secrets::KEYS,
    ]
    .into_iter()
    .flatten()
}

/// The key a dotted path belongs to.
pub(super) fn by_path(path: &str) -> Option<&'static Key> {
    all().find(|k| k.path == path)
}

#[cfg(test)]
#[path = "keys_tests.rs"]
mod tests;
