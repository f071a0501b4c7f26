//! The observability files and the runbook must agree with each other and
//! with the code: every metric the Grafana dashboard or the alert rules use
//! is documented in the Metrics table of `docs/operations.md`; every metric
//! the code exports is documented and every documented metric is exported;
//! every alert links to a section of the runbook that exists.
//!
//! No services needed: this reads files only.

use std::collections::{BTreeMap, BTreeSet};
use std::fs;
use std::path::{Path, PathBuf};

const RUNBOOK: &str = "docs/operations.md";
const DASHBOARD: &str = "deploy/observability/grafana-dashboard.json";
const ALERTS: &str = "deploy/observability/alerts.yaml";
const ALERT_TESTS: &str = "deploy/observability/alerts.test.yaml";

fn repo_root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .expect("the e2e crate lives one level below the repository root")
        .to_path_buf()
}

fn read(rel: &str) -> String {
    let path = repo_root().join(rel);
    fs::read_to_string(&path).unwrap_or_else(|e| panic!("cannot read {rel}: {e}"))
}

/// Lines of a markdown document that are not inside a fenced code block.
fn prose_lines(markdown: &str) -> Vec<&str> {
    let mut in_fence = false;
    let mut out = Vec::new();
    for line in markdown.lines() {
        let trimmed = line.trim_start();
        if trimmed.starts_with("```") || trimmed.starts_with("~~~") {
            in_fence = !in_fence;
            continue;
        }
        if !in_fence {
            out.push(line);
        }
    }
    out
}

/// Heading level and text, if the line is an ATX heading (`## Title`).
fn heading(line: &str) -> Option<(usize, &str)> {
    let level = line.chars().take_while(|&c| c == '#').count();
    if (1..=6).contains(&level) && line[level..].starts_with(' ') {
        Some((level, line[level..].trim().trim_end_matches('#').trim()))
    } else {
        None
    }
}

/// The anchor GitHub generates for a heading: lower case, punctuation
/// dropped, spaces turned into hyphens.
fn github_slug(text: &str) -> String {
    text.to_lowercase()
        .chars()
        .filter_map(|c| match c {
            ' ' => Some('-'),
            c if c.is_alphanumeric() || c == '-' || c == '_' => Some(c),
            _ => None,
        })
        .collect()
}

/// Every anchor of the document, with GitHub's `-1`, `-2` suffixes for
/// repeated headings.
fn anchors(markdown: &str) -> BTreeSet<String> {
    let mut seen: BTreeMap<String, usize> = BTreeMap::new();
    let mut out = BTreeSet::new();
    for line in prose_lines(markdown) {
        if let Some((_, text)) = heading(line) {
            let slug = github_slug(text);
            let n = seen.entry(slug.clone()).or_insert(0);
            out.insert(if *n == 0 {
                slug.clone()
            } else {
                format!("{slug}-{n}")
            });
            *n += 1;
        }
    }
    out
}

/// The first backticked name of every table row in the `Metrics` section.
fn documented_metrics(markdown: &str) -> BTreeSet<String> {
    let lines = prose_lines(markdown);
    let start = lines
        .iter()
        .position(|l| heading(l).is_some_and(|(_, t)| t == "Metrics"))
        .unwrap_or_else(|| panic!("{RUNBOOK} has no `Metrics` heading"));
    let level = heading(lines[start]).map_or(2, |(l, _)| l);
    let mut names = BTreeSet::new();
    for line in &lines[start + 1..] {
        if heading(line).is_some_and(|(l, _)| l <= level) {
            break;
        }
        let row = line.trim();
        if !row.starts_with('|') {
            continue;
        }
        let Some(open) = row.find('`') else {
            continue; // the header and the separator row
        };
        let rest = &row[open + 1..];
        let close = rest
            .find('`')
            .unwrap_or_else(|| panic!("unclosed backtick in {RUNBOOK} Metrics row: {row}"));
        let name = &rest[..close];
        assert!(
            name.starts_with("oncehook_"),
            "{RUNBOOK} Metrics table: the first backticked name of a row must be a metric, got `{name}` in: {row}"
        );
        assert!(
            names.insert(name.to_owned()),
            "{RUNBOOK} Metrics table lists `{name}` twice"
        );
    }
    assert!(
        !names.is_empty(),
        "{RUNBOOK}: no metric rows found in the Metrics table"
    );
    names
}

/// Every `oncehook_[a-z_]+` identifier in `text`, with the histogram series
/// suffixes removed.
fn metric_identifiers(text: &str) -> BTreeSet<String> {
    const PREFIX: &str = "oncehook_";
    let bytes = text.as_bytes();
    let mut out = BTreeSet::new();
    let mut from = 0;
    while let Some(found) = text[from..].find(PREFIX) {
        let start = from + found;
        let mut end = start + PREFIX.len();
        while end < bytes.len() && (bytes[end].is_ascii_lowercase() || bytes[end] == b'_') {
            end += 1;
        }
        let boundary_before =
            start == 0 || !(bytes[start - 1].is_ascii_alphanumeric() || bytes[start - 1] == b'_');
        if boundary_before && end > start + PREFIX.len() {
            out.insert(strip_series_suffix(&text[start..end]).to_owned());
        }
        from = end;
    }
    out
}

fn strip_series_suffix(name: &str) -> &str {
    ["_bucket", "_sum", "_count"]
        .iter()
        .find_map(|s| name.strip_suffix(s))
        .unwrap_or(name)
}

/// Every string in a JSON document (keys excluded), depth first.
fn json_strings<'a>(value: &'a serde_json::Value, out: &mut Vec<&'a str>) {
    match value {
        serde_json::Value::String(s) => out.push(s),
        serde_json::Value::Array(items) => items.iter().for_each(|v| json_strings(v, out)),
        serde_json::Value::Object(map) => map.values().for_each(|v| json_strings(v, out)),
        _ => {}
    }
}

fn undocumented(used: &BTreeSet<String>, documented: &BTreeSet<String>, file: &str) -> Vec<String> {
    used.difference(documented)
        .map(|m| {
            format!(
                "metric `{m}` used in {file} is not documented in the Metrics table of {RUNBOOK}"
            )
        })
        .collect()
}

fn fail_if_any(problems: Vec<String>) {
    assert!(
        problems.is_empty(),
        "{} problem(s):\n  - {}",
        problems.len(),
        problems.join("\n  - ")
    );
}

#[test]
fn dashboard_is_valid_json_and_uses_only_documented_metrics() {
    let documented = documented_metrics(&read(RUNBOOK));
    let text = read(DASHBOARD);
    let dashboard: serde_json::Value = serde_json::from_str(&text)
        .unwrap_or_else(|e| panic!("{DASHBOARD} is not valid JSON: {e}"));

    let panels = dashboard["panels"]
        .as_array()
        .unwrap_or_else(|| panic!("{DASHBOARD} has no `panels` array"));
    assert!(!panels.is_empty(), "{DASHBOARD} has no panels");
    let mut problems = Vec::new();
    let mut ids = BTreeSet::new();
    for panel in panels {
        let title = panel["title"].as_str().unwrap_or("<untitled>");
        if !ids.insert(panel["id"].to_string()) {
            problems.push(format!(
                "{DASHBOARD}: panel id {} is used twice",
                panel["id"]
            ));
        }
        if panel["type"] == "row" {
            continue;
        }
        if panel["datasource"]["uid"] != "${DS_PROMETHEUS}" {
            problems.push(format!(
                "{DASHBOARD}: panel {title:?} does not use the ${{DS_PROMETHEUS}} datasource variable"
            ));
        }
        let targets = panel["targets"].as_array().map_or(&[][..], Vec::as_slice);
        if targets.is_empty() || targets.iter().any(|t| t["expr"].as_str().is_none()) {
            problems.push(format!(
                "{DASHBOARD}: panel {title:?} has a target without `expr`"
            ));
        }
    }

    let mut strings = Vec::new();
    json_strings(&dashboard, &mut strings);
    let used: BTreeSet<String> = strings.iter().flat_map(|s| metric_identifiers(s)).collect();
    assert!(
        !used.is_empty(),
        "{DASHBOARD} uses no oncehook metric at all"
    );
    problems.extend(undocumented(&used, &documented, DASHBOARD));
    fail_if_any(problems);
}

#[test]
fn alerts_use_only_documented_metrics_and_link_to_existing_runbook_sections() {
    let runbook = read(RUNBOOK);
    let documented = documented_metrics(&runbook);
    let sections = anchors(&runbook);
    let text = read(ALERTS);

    let used = metric_identifiers(&text);
    assert!(!used.is_empty(), "{ALERTS} uses no oncehook metric at all");
    let mut problems = undocumented(&used, &documented, ALERTS);

    // alert name -> runbook annotations found in its block
    let mut alerts: Vec<(String, Vec<String>)> = Vec::new();
    for line in text.lines() {
        let trimmed = line.trim();
        if trimmed.starts_with('#') {
            continue;
        }
        if let Some(name) = trimmed.strip_prefix("- alert:") {
            alerts.push((unquote(name), Vec::new()));
        } else if let Some(link) = trimmed.strip_prefix("runbook:") {
            match alerts.last_mut() {
                Some((_, links)) => links.push(unquote(link)),
                None => problems.push(format!("{ALERTS}: `runbook:` before any alert")),
            }
        }
    }
    assert!(!alerts.is_empty(), "{ALERTS} defines no alert");

    for (alert, links) in &alerts {
        let [link] = links.as_slice() else {
            problems.push(format!(
                "alert {alert} in {ALERTS} must have exactly one `runbook` annotation, found {}",
                links.len()
            ));
            continue;
        };
        match link.split_once('#') {
            Some((doc, anchor)) if doc == RUNBOOK => {
                if !sections.contains(anchor) {
                    problems.push(format!(
                        "alert {alert}: runbook link {link:?} points to #{anchor}, but {RUNBOOK} has no such heading (anchors: {})",
                        sections.iter().cloned().collect::<Vec<_>>().join(", ")
                    ));
                }
            }
            _ => problems.push(format!(
                "alert {alert}: runbook annotation {link:?} must look like {RUNBOOK}#section-anchor"
            )),
        }
    }
    fail_if_any(problems);
}

#[test]
fn exported_metrics_and_documented_metrics_match() {
    let documented = documented_metrics(&read(RUNBOOK));
    let mut exported: BTreeMap<String, String> = BTreeMap::new();
    let crates = repo_root().join("crates");
    for file in rust_files(&crates) {
        let text = fs::read_to_string(&file).unwrap_or_default();
        let rel = file
            .strip_prefix(repo_root())
            .unwrap_or(&file)
            .display()
            .to_string();
        for name in metric_macro_names(&text) {
            exported.entry(name).or_insert_with(|| rel.clone());
        }
    }
    assert!(
        !exported.is_empty(),
        "found no metrics::counter!/gauge!/histogram! call under crates/"
    );

    let mut problems: Vec<String> = exported
        .iter()
        .filter(|(name, _)| !documented.contains(*name))
        .map(|(name, file)| {
            format!("metric `{name}` is exported by {file} but not documented in the Metrics table of {RUNBOOK}")
        })
        .collect();
    problems.extend(
        documented
            .iter()
            .filter(|name| !exported.contains_key(*name))
            .map(|name| {
                format!("metric `{name}` is documented in {RUNBOOK} but no code under crates/ exports it")
            }),
    );
    fail_if_any(problems);
}

fn unquote(s: &str) -> String {
    s.trim().trim_matches(|c| c == '"' || c == '\'').to_owned()
}

fn rust_files(dir: &Path) -> Vec<PathBuf> {
    let mut out = Vec::new();
    let Ok(entries) = fs::read_dir(dir) else {
        return out;
    };
    for entry in entries.flatten() {
        let path = entry.path();
        if path.is_dir() {
            if path.file_name().is_some_and(|n| n == "target") {
                continue;
            }
            out.extend(rust_files(&path));
        } else if path.extension().is_some_and(|e| e == "rs") {
            out.push(path);
        }
    }
    out
}

/// Names given as string literals to `counter!`, `gauge!` and `histogram!`
/// (and their `describe_*` forms).
fn metric_macro_names(source: &str) -> BTreeSet<String> {
    let mut out = BTreeSet::new();
    for mac in ["counter!(", "gauge!(", "histogram!("] {
        let mut from = 0;
        while let Some(found) = source[from..].find(mac) {
            let after = from + found + mac.len();
            from = after;
            let rest = source[after..].trim_start();
            let Some(literal) = rest.strip_prefix('"') else {
                continue;
            };
            if let Some(end) = literal.find('"') {
                let name = &literal[..end];
                if name.starts_with("oncehook_") {
                    out.insert(name.to_owned());
                }
            }
        }
    }
    out
}

#[test]
fn helpers_behave() {
    assert_eq!(github_slug("Ingest answering 5xx"), "ingest-answering-5xx");
    assert_eq!(
        github_slug("No consumers on the events queue"),
        "no-consumers-on-the-events-queue"
    );
    assert_eq!(
        github_slug("Graceful restarts & deploys"),
        "graceful-restarts--deploys"
    );
    assert_eq!(github_slug("`oncehookctl` stats"), "oncehookctl-stats");

    let ids = metric_identifiers(
        r#"histogram_quantile(0.99, sum by (le) (rate(oncehook_ingest_publish_duration_seconds_bucket[5m]))) x-oncehook-error not_oncehook_x oncehook_outbox_backlog"#,
    );
    assert_eq!(
        ids.into_iter().collect::<Vec<_>>(),
        [
            "oncehook_ingest_publish_duration_seconds",
            "oncehook_outbox_backlog"
        ]
    );

    let md = "# T\n## Metrics\n| metric | type |\n|---|---|\n| `oncehook_a_total` | counter |\n```\n## not a heading\n```\n## Next\n| `oncehook_b` | gauge |\n";
    assert_eq!(
        documented_metrics(md).into_iter().collect::<Vec<_>>(),
        ["oncehook_a_total"]
    );
    assert!(anchors(md).contains("metrics") && !anchors(md).contains("not-a-heading"));

    let code = "metrics::counter!(\n    \"oncehook_x_total\", \"k\" => v).increment(1); gauge!(NAME); histogram!(\"other\")";
    assert_eq!(
        metric_macro_names(code).into_iter().collect::<Vec<_>>(),
        ["oncehook_x_total"]
    );
}

#[test]
fn every_alert_is_in_the_runbook_table_and_has_a_promtool_test() {
    let runbook = read(RUNBOOK);
    let tests = read(ALERT_TESTS);
    let mut problems = Vec::new();
    let names: Vec<String> = read(ALERTS)
        .lines()
        .filter_map(|l| l.trim().strip_prefix("- alert:").map(unquote))
        .collect();
    assert!(names.len() >= 12, "{ALERTS}: only {names:?}");
    for name in &names {
        if !runbook.contains(&format!("| `{name}` |")) {
            problems.push(format!(
                "alert {name} is missing from the Alerts table of {RUNBOOK}"
            ));
        }
        if !tests.contains(&format!("alertname: {name}\n")) {
            problems.push(format!("alert {name} has no test in {ALERT_TESTS}"));
        }
    }
    fail_if_any(problems);
}
