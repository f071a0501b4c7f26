//! Releases are named: every binary of the workspace answers `--version`
//! and `-V` with its name and the workspace's version (`[workspace.package]
//! version`), before it reads any configuration, and that version has its
//! section in CHANGELOG.md. (The `oncehook_build_info` gauge on each
//! metrics listener is checked with the other metrics, in ops_metrics.rs.)

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};
use std::time::Duration;

use oncehook_e2e::process::bin;

/// The workspace's version: this crate's is `version.workspace = true`.
const VERSION: &str = env!("CARGO_PKG_VERSION");

fn root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("..")
}

fn read(rel: &str) -> String {
    std::fs::read_to_string(root().join(rel)).unwrap_or_else(|e| panic!("read {rel}: {e}"))
}

/// Every binary of every workspace member: its `[[bin]]` entries, else
/// `src/main.rs` under the package's name.
fn workspace_binaries() -> BTreeSet<String> {
    let workspace: toml::Table = toml::from_str(&read("Cargo.toml")).expect("Cargo.toml");
    let members = workspace["workspace"]["members"]
        .as_array()
        .expect("workspace.members");
    let mut out = BTreeSet::new();
    for member in members {
        let dir = member.as_str().expect("a member path");
        let manifest: toml::Table = toml::from_str(&read(&format!("{dir}/Cargo.toml")))
            .unwrap_or_else(|e| panic!("{dir}/Cargo.toml: {e}"));
        let bins = manifest.get("bin").and_then(|b| b.as_array());
        match bins {
            Some(bins) => out.extend(
                bins.iter()
                    .map(|b| b["name"].as_str().expect("[[bin]] name").to_owned()),
            ),
            None if root().join(dir).join("src/main.rs").exists() => {
                out.insert(
                    manifest["package"]["name"]
                        .as_str()
                        .expect("package.name")
                        .to_owned(),
                );
            }
            None => {}
        }
    }
    out
}

/// Runs `name flag` with a configuration file that does not exist (a
/// binary that read its configuration first would fail); its exit code,
/// stdout and stderr.
async fn run(name: &str, flag: &str) -> (Option<i32>, String, String) {
    let mut command = tokio::process::Command::new(bin(name));
    command
        .arg(flag)
        .env("ONCEHOOK_CONFIG", "/nonexistent/oncehook-release-test.toml")
        .env("ONCEHOOK_METRICS_ADDR", "off")
        .env("RUST_BACKTRACE", "0")
        .stdin(std::process::Stdio::null())
        .kill_on_drop(true);
    let output = tokio::time::timeout(Duration::from_secs(30), command.output())
        .await
        .unwrap_or_else(|_| panic!("`{name} {flag}` did not exit within 30 s"))
        .unwrap_or_else(|e| panic!("run `{name} {flag}`: {e}"));
    (
        output.status.code(),
        String::from_utf8_lossy(&output.stdout).into_owned(),
        String::from_utf8_lossy(&output.stderr).into_owned(),
    )
}

#[tokio::test]
async fn every_binary_answers_version_with_the_workspace_version() {
    let binaries = workspace_binaries();
    for expected in oncehook_e2e::env::binaries() {
        assert!(
            binaries.contains(expected),
            "{expected} not among the workspace's binaries: {binaries:?}"
        );
    }
    let mut problems = Vec::new();
    for name in &binaries {
        for flag in ["--version", "-V"] {
            let (code, stdout, stderr) = run(name, flag).await;
            // `name 0.6.0`, or `name 0.6.0 (commit abc1234)` when the build
            // was given ONCEHOOK_BUILD_COMMIT.
            let line = stdout.trim_end();
            let named = line
                .strip_prefix(&format!("{name} {VERSION}"))
                .is_some_and(|rest| rest.is_empty() || rest.starts_with(" (commit "));
            if code != Some(0) || !named || line.lines().count() != 1 {
                problems.push(format!(
                    "`{name} {flag}` exited {code:?}, printed {stdout:?} (stderr {stderr:?}); \
                     expected exit 0 and one line `{name} {VERSION}`"
                ));
            }
        }
    }
    assert!(problems.is_empty(), "{}", problems.join("\n"));
}

#[test]
fn the_workspace_version_has_its_section_in_the_changelog() {
    let changelog = read("CHANGELOG.md");
    let heading = format!("## [{VERSION}]");
    assert!(
        changelog.lines().any(|l| l.starts_with(&heading)),
        "CHANGELOG.md has no `{heading}` section for the workspace's version"
    );
}
