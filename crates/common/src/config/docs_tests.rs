//! docs/configuration.md held to the code: every key the sections read (a
//! dotted path, found by serializing the sections) and every variable the
//! key tables list must be in it; its table of variables must give each
//! variable the keys it sets in the code, and a default written as one
//! literal must be the code's default. A setting added without its line in
//! the document fails here.

use std::collections::BTreeSet;

use figment::value::Value;

use super::ENV_CONFIG;
use super::api::{AdminKeyEntry, KeyEntry};
use super::console::UserEntry;
use super::keys;
use super::load::Sections;
use super::source_api::FileSourceApi;
use super::sources::FileSource;

const DOC: &str = include_str!("../../../../docs/configuration.md");

/// Every dotted key, with its default as the file would write it (`None`:
/// unset by default, or a list item's key).
fn keys_with_defaults() -> Vec<(String, Option<String>)> {
    let mut sections = Sections::default();
    // One item in each list, so that its keys show.
    let every = || Some(String::new());
    sections.source.push(FileSource {
        api: Some(FileSourceApi {
            base_url: every(),
            // Every credential key any gateway takes.
            keys: oncehook_gateways::reconcile::all_credential_keys()
                .into_iter()
                .map(|k| (k.to_owned(), Value::from("")))
                .collect(),
        }),
        ..FileSource::default()
    });
    sections.console.user.push(UserEntry::default());
    sections.api.key.push(KeyEntry::default());
    sections.api.admin_key.push(AdminKeyEntry::default());
    sections.ingest.rate_limit = std::mem::take(&mut sections.ingest.rate_limit).with_one_of_each();
    let value = Value::serialize(&sections).expect("the sections serialize");
    let mut out = Vec::new();
    walk("", &value, &mut out);
    out
}

fn walk(path: &str, value: &Value, out: &mut Vec<(String, Option<String>)>) {
    match value {
        Value::Dict(_, dict) => {
            for (key, value) in dict {
                let child = if path.is_empty() {
                    key.clone()
                } else {
                    format!("{path}.{key}")
                };
                walk(&child, value, out);
            }
        }
        Value::Array(_, items) if matches!(items.first(), Some(Value::Dict(..))) => {
            let mut item = Vec::new();
            walk(path, &items[0], &mut item);
            out.extend(item.into_iter().map(|(key, _)| (key, None)));
        }
        leaf => out.push((path.to_owned(), written(leaf))),
    }
}

/// A default as the document writes it.
fn written(value: &Value) -> Option<String> {
    match value {
        Value::String(_, s) => Some(s.clone()),
        Value::Bool(_, b) => Some(b.to_string()),
        Value::Num(_, n) => n.to_u128().map(|n| n.to_string()),
        _ => None,
    }
}

/// The text between backticks.
fn quoted(text: &str) -> impl Iterator<Item = &str> {
    text.split('`').skip(1).step_by(2)
}

/// A row of the table of variables.
struct Row<'a> {
    env: &'a str,
    paths: BTreeSet<&'a str>,
    default: &'a str,
}

fn rows() -> Vec<Row<'static>> {
    DOC.lines()
        .filter(|line| line.starts_with("| `ONCEHOOK_") || line.starts_with("| `OTEL_"))
        .map(|line| {
            let cells: Vec<&str> = line.split('|').map(str::trim).collect();
            Row {
                env: quoted(cells[1]).next().expect("a variable"),
                paths: quoted(cells[2]).collect(),
                default: cells[3],
            }
        })
        .collect()
}

#[test]
fn every_key_is_in_the_document() {
    let documented: BTreeSet<&str> = quoted(DOC).collect();
    let missing: Vec<String> = keys_with_defaults()
        .into_iter()
        .map(|(key, _)| key)
        .filter(|key| !documented.contains(key.as_str()))
        .collect();
    assert!(
        missing.is_empty(),
        "keys missing from docs/configuration.md: {missing:?}"
    );
}

#[test]
fn every_variable_has_a_row_with_the_keys_it_sets() {
    let rows = rows();
    let mut variables: BTreeSet<&str> = keys::all().map(|k| k.env).collect();
    variables.insert(ENV_CONFIG);
    for env in variables {
        let row = rows
            .iter()
            .find(|r| r.env == env)
            .unwrap_or_else(|| panic!("{env} has no row in docs/configuration.md"));
        let paths: BTreeSet<&str> = keys::all()
            .filter(|k| k.env == env)
            .map(|k| k.path)
            .collect();
        assert_eq!(row.paths, paths, "the keys {env} sets");
    }
}

#[test]
fn the_document_names_no_variable_the_code_does_not_read() {
    let mut known: BTreeSet<&str> = keys::all().map(|k| k.env).collect();
    known.insert(ENV_CONFIG);
    // A retired variable is read only to be refused; the document says so.
    known.extend(keys::RETIRED.iter().map(|k| k.env));
    // Read when the binaries are built, not at run time ("Releases and
    // versions").
    known.insert(crate::build::COMMIT_VAR);
    let named: BTreeSet<&str> = DOC
        .match_indices("ONCEHOOK_")
        .map(|(at, _)| {
            let rest = &DOC[at..];
            let end = rest
                .find(|c: char| !(c.is_ascii_uppercase() || c == '_'))
                .unwrap_or(rest.len());
            &rest[..end]
        })
        // "the `ONCEHOOK_` prefix" names none.
        .filter(|name| name.len() > "ONCEHOOK_".len())
        .collect();
    let unknown: Vec<&&str> = named.difference(&known).collect();
    assert!(unknown.is_empty(), "not read by the code: {unknown:?}");
    let mut rows: Vec<&str> = self::rows().iter().map(|r| r.env).collect();
    let n = rows.len();
    rows.sort_unstable();
    rows.dedup();
    assert_eq!(rows.len(), n, "a variable with two rows");
}

#[test]
fn every_retired_setting_is_in_the_document_with_its_release() {
    for key in keys::RETIRED {
        let line = DOC
            .lines()
            .find(|line| line.starts_with(&format!("| `{}`", key.path)))
            .unwrap_or_else(|| panic!("{} has no row among the retired settings", key.path));
        assert!(line.contains(key.env), "{line}");
        assert!(line.contains(key.removed_in), "{line}");
    }
}

#[test]
fn a_documented_default_is_the_code_default() {
    let defaults = keys_with_defaults();
    for row in rows() {
        let literal = match quoted(row.default).collect::<Vec<_>>()[..] {
            [one] if row.default == format!("`{one}`") => one,
            _ => continue,
        };
        for path in &row.paths {
            let (_, default) = defaults
                .iter()
                .find(|(key, _)| key == path)
                .unwrap_or_else(|| panic!("{path} is not a key"));
            // A duration may be written in other units (`24h` is `1day`).
            let same_duration = default.as_deref().is_some_and(|d| {
                matches!(
                    (humantime::parse_duration(d), humantime::parse_duration(literal)),
                    (Ok(a), Ok(b)) if a == b
                )
            });
            if same_duration {
                continue;
            }
            assert_eq!(
                default.as_deref(),
                Some(literal),
                "the default of {path} ({})",
                row.env
            );
        }
    }
}
