//! The PgBouncer pass of `make test` (the Makefile's `POOLED_FILES`, run
//! with `ONCEHOOK_TEST_POOLER=pgbouncer`) covers every binary that uses the
//! database, as the deploy files can run each behind PgBouncer in
//! transaction mode: a new binary, or a file dropped from the list, fails
//! here instead of shipping untested behind the pooler.

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};

use oncehook_e2e::env::DATABASE_BINARIES;

fn root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("..")
}

/// How a test file starts each binary that uses the database: a file that
/// contains one of these starts it. A binary missing here fails
/// [`every_database_binary_runs_in_the_pooled_pass`], naming what to add.
const STARTED_BY: &[(&str, &[&str])] = &[
    (
        "oncehook-worker",
        &["\"oncehook-worker\"", "start_worker(", ".pipeline("],
    ),
    (
        "oncehook-mailer",
        &["\"oncehook-mailer\"", "start_mailer(", ".pipeline("],
    ),
    ("oncehook-notifier", &["\"oncehook-notifier\""]),
    ("oncehook-api", &["Api::start("]),
    ("oncehook-console", &["Console::start("]),
    ("oncehookctl", &[".ctl(", "ctl_ok(", "ctl_json("]),
];

/// The workspace's binaries whose crate turns on the common crate's `db`
/// feature (the store), read from each crate's Cargo.toml.
fn database_binaries() -> BTreeSet<String> {
    let mut found = BTreeSet::new();
    let crates = std::fs::read_dir(root().join("crates")).expect("read crates/");
    for entry in crates {
        let manifest = entry.expect("a crate folder").path().join("Cargo.toml");
        let Ok(text) = std::fs::read_to_string(&manifest) else {
            continue;
        };
        let uses_db = text
            .lines()
            .any(|l| l.trim_start().starts_with("oncehook-common") && l.contains("\"db\""));
        if !uses_db {
            continue;
        }
        for bin in text.split("[[bin]]").skip(1) {
            let name = bin
                .lines()
                .find_map(|l| l.trim().strip_prefix("name = "))
                .map(|n| n.trim_matches('"').to_owned())
                .unwrap_or_else(|| panic!("a [[bin]] without a name in {}", manifest.display()));
            found.insert(name);
        }
    }
    found
}

/// The Makefile's `POOLED_FILES`, as make expands it.
fn pooled_files() -> Vec<String> {
    let out = std::process::Command::new("make")
        .args(["-s", "--no-print-directory", "pooled-files"])
        .current_dir(root())
        .env_remove("MAKEFLAGS")
        .env_remove("MFLAGS")
        .env_remove("MAKELEVEL")
        .output()
        .expect("run make pooled-files");
    assert!(
        out.status.success(),
        "make pooled-files failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout)
        .split_whitespace()
        .map(str::to_owned)
        .collect()
}

#[test]
fn the_test_support_routes_every_database_binary_through_the_pooler() {
    let support: BTreeSet<String> = DATABASE_BINARIES.iter().map(|b| (*b).to_owned()).collect();
    assert_eq!(
        support,
        database_binaries(),
        "tests/support/env.rs DATABASE_BINARIES must list exactly the binaries that use the database"
    );
}

#[test]
fn every_database_binary_runs_in_the_pooled_pass() {
    let files = pooled_files();
    let mut sources = Vec::new();
    for f in &files {
        let path = root().join("tests/tests").join(format!("{f}.rs"));
        let text = std::fs::read_to_string(&path)
            .unwrap_or_else(|e| panic!("POOLED_FILES names {f}, but {}: {e}", path.display()));
        sources.push((f.clone(), text));
    }
    let mut missing = Vec::new();
    for bin in database_binaries() {
        let Some((_, markers)) = STARTED_BY.iter().find(|(b, _)| *b == bin) else {
            missing.push(format!(
                "{bin}: say in STARTED_BY ({}) how a test starts it, and add a file that does to the Makefile's POOLED_FILES",
                file!()
            ));
            continue;
        };
        let covered = sources
            .iter()
            .any(|(_, text)| markers.iter().any(|m| text.contains(m)));
        if !covered {
            missing.push(format!(
                "{bin}: no file in POOLED_FILES starts it (looked for {markers:?})"
            ));
        }
    }
    assert!(
        missing.is_empty(),
        "the PgBouncer pass leaves binaries out:\n{}",
        missing.join("\n")
    );
}

#[test]
fn the_pooled_pass_keeps_the_files_the_deployments_depend_on() {
    // The files that drive the read side and the operators' tools, which
    // once failed only behind PgBouncer.
    let files = pooled_files();
    for needed in [
        "notify",
        "api",
        "reconciliation",
        "console",
        "console_notify",
        "ops_stats",
        "ops_trace",
        "mail_tls",
        "chaos",
    ] {
        assert!(
            files.iter().any(|f| f == needed),
            "POOLED_FILES lacks {needed}: {files:?}"
        );
    }
    let pipeline: Vec<_> = std::fs::read_dir(root().join("tests/tests"))
        .expect("read tests/tests")
        .filter_map(|e| {
            let name = e.ok()?.file_name().to_string_lossy().into_owned();
            let stem = name.strip_prefix("pipeline_")?.strip_suffix(".rs")?;
            Some(format!("pipeline_{stem}"))
        })
        .collect();
    for p in pipeline {
        assert!(files.contains(&p), "POOLED_FILES lacks {p}");
    }
}
