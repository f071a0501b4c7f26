//! Loading: three figment layers, each later one winning — the sections'
//! own defaults, then the TOML file named by `ONCEHOOK_CONFIG`, then the
//! `ONCEHOOK_*` variables — extracted straight into the typed sections
//! ([`Sections`]), whose value types check every setting as it is read.
//!
//! Numbers and yes/no settings are read leniently (`extract_lossy`): the
//! environment gives text, so `"16"` is a number and `"true"`, `"yes"`,
//! `"on"` or `"1"` a yes wherever one is expected, in the file too. Older
//! files' flat top-level keys move into their sections before the merge. A
//! TOML syntax error gives the line and column, never the line. A setting
//! that went away (`keys::RETIRED`), in the file or the environment, is
//! refused by name with the release it went away in.

use std::collections::HashMap;
use std::path::Path;

use figment::Figment;
use figment::providers::Serialized;
use serde::{Deserialize, Serialize};

use super::api::ApiSection;
use super::broker::BrokerSection;
use super::console::ConsoleSection;
use super::database::DatabaseSection;
use super::error::{ConfigError, describe, retired};
use super::ingest::IngestSection;
use super::keys::{self, ENV_CONFIG};
use super::mail::MailSection;
use super::notify::NotifySection;
use super::reconcile::ReconcileSection;
use super::refunds::RefundsSection;
use super::secrets::SecretsSection;
use super::sources::FileSource;
use super::telemetry::TelemetrySection;
use super::worker::WorkerSection;

/// The whole file, section by section, typed and checked.
#[derive(Debug, Clone, Default, Deserialize, Serialize)]
#[serde(deny_unknown_fields, default)]
pub(super) struct Sections {
    pub broker: BrokerSection,
    pub database: DatabaseSection,
    pub telemetry: TelemetrySection,
    pub ingest: IngestSection,
    pub worker: WorkerSection,
    pub mail: MailSection,
    pub console: ConsoleSection,
    pub api: ApiSection,
    pub reconcile: ReconcileSection,
    pub notify: NotifySection,
    pub refunds: RefundsSection,
    pub secrets: SecretsSection,
    /// `[[source]]` stays a top-level table (the documented layout).
    pub source: Vec<FileSource>,
}

/// Layers the defaults, the file and `env`, and extracts the sections.
pub(super) fn layered(env: &HashMap<String, String>) -> Result<Sections, ConfigError> {
    if let Some(key) = keys::RETIRED
        .iter()
        .find(|key| env.get(key.env).is_some_and(|v| !v.is_empty()))
    {
        return Err(retired(key));
    }
    let mut figment = Figment::from(Serialized::defaults(Sections::default()));
    if let Some(path) = env.get(ENV_CONFIG).filter(|p| !p.is_empty()) {
        figment = figment.merge(Serialized::defaults(read_file(Path::new(path))?));
    }
    for key in keys::all() {
        // Unset and empty variables leave the file's value or the default.
        if let Some(value) = env.get(key.env).filter(|v| !v.is_empty()) {
            figment = figment.merge(Serialized::default(key.path, value.as_str()));
        }
    }
    figment.extract_lossy::<Sections>().map_err(describe)
}

/// Reads and parses the file; older flat keys move into their sections.
fn read_file(path: &Path) -> Result<toml::Table, ConfigError> {
    let text = std::fs::read_to_string(path).map_err(|source| ConfigError::Read {
        path: path.to_owned(),
        source,
    })?;
    let mut table: toml::Table = toml::from_str(&text).map_err(|e| {
        let (line, column) = e
            .span()
            .map(|span| line_column(&text, span.start))
            .unwrap_or((0, 0));
        ConfigError::Toml {
            path: path.to_owned(),
            line,
            column,
            message: e.message().to_owned(),
        }
    })?;
    if let Some(key) = keys::RETIRED
        .iter()
        .find(|key| lookup(&table, key.path).is_some())
    {
        return Err(retired(key));
    }
    let flat: Vec<(&str, toml::Value)> = keys::all()
        .filter_map(|key| Some((key.path, table.get(key.legacy?)?.clone())))
        .collect();
    for name in keys::all().filter_map(|key| key.legacy) {
        table.remove(name);
    }
    for (path, value) in flat {
        insert(&mut table, path, value);
    }
    Ok(table)
}

/// The value at the dotted `path` of `table`, if any.
fn lookup<'a>(table: &'a toml::Table, path: &str) -> Option<&'a toml::Value> {
    let (parents, last) = match path.rsplit_once('.') {
        Some((parents, last)) => (Some(parents), last),
        None => (None, path),
    };
    let mut current = table;
    for part in parents.into_iter().flat_map(|p| p.split('.')) {
        current = current.get(part)?.as_table()?;
    }
    current.get(last)
}

/// 1-based line and column of a byte offset.
fn line_column(text: &str, offset: usize) -> (usize, usize) {
    let before = text.get(..offset).unwrap_or(text);
    let line = before.matches('\n').count() + 1;
    let column = before.rsplit('\n').next().map_or(0, |l| l.chars().count()) + 1;
    (line, column)
}

/// Sets the dotted `path` of `table` to `value`, making tables on the way.
fn insert(table: &mut toml::Table, path: &str, value: toml::Value) {
    let mut parts = path.split('.').peekable();
    let mut current = table;
    while let Some(part) = parts.next() {
        if parts.peek().is_none() {
            current.insert(part.to_owned(), value);
            return;
        }
        let entry = current
            .entry(part.to_owned())
            .or_insert_with(|| toml::Value::Table(toml::Table::new()));
        if !entry.is_table() {
            *entry = toml::Value::Table(toml::Table::new());
        }
        let toml::Value::Table(next) = entry else {
            return;
        };
        current = next;
    }
}

#[cfg(test)]
#[path = "load_tests.rs"]
mod tests;
