//! What this build is: the release's version (the workspace's
//! `[workspace.package] version`, CHANGELOG.md) and, when the build was
//! given one, the git commit it was built from. The one place every binary
//! reads it from: `--version` ([`exit_on_version_flag`], or clap's for
//! `oncehookctl`) and the `oncehook_build_info` gauge
//! ([`crate::telemetry::init_metrics`]).
//!
//! The commit comes from `ONCEHOOK_BUILD_COMMIT` at compile time
//! (`ONCEHOOK_BUILD_COMMIT=$(git rev-parse --short HEAD) cargo build …`);
//! without it the commit is `unknown`. Nothing here needs `.git`: container
//! builds have none.

use std::ffi::OsString;
use std::io::Write as _;
use std::sync::LazyLock;

/// The release this binary belongs to, e.g. `0.6.0`.
pub const VERSION: &str = env!("CARGO_PKG_VERSION");

/// The variable [`COMMIT`] is read from when the binaries are built (never
/// at run time); `option_env!` below needs it spelled out.
pub const COMMIT_VAR: &str = "ONCEHOOK_BUILD_COMMIT";

/// The git commit the build was told it was made from, or `unknown`.
pub const COMMIT: &str = match option_env!("ONCEHOOK_BUILD_COMMIT") {
    Some(commit) if !commit.is_empty() => commit,
    _ => "unknown",
};

/// What `--version` prints after the binary's name: `0.6.0`, or
/// `0.6.0 (commit 1a2b3c4)` when the commit is known.
pub fn version_text() -> &'static str {
    static TEXT: LazyLock<String> = LazyLock::new(|| describe(VERSION, COMMIT));
    TEXT.as_str()
}

fn describe(version: &str, commit: &str) -> String {
    if commit == "unknown" {
        version.to_owned()
    } else {
        format!("{version} (commit {commit})")
    }
}

/// The binaries without a command line of their own call this first thing
/// in `main`: when their first argument is `--version` or `-V` it prints
/// `<binary> <version>` on stdout and exits (0, or 1 when stdout cannot be
/// written), before any configuration is read. Any other arguments are
/// left alone, as before.
pub fn exit_on_version_flag(binary: &str) {
    if asks_for_version(std::env::args_os()) {
        let written = writeln!(std::io::stdout().lock(), "{binary} {}", version_text());
        std::process::exit(if written.is_ok() { 0 } else { 1 });
    }
}

/// Whether a command line (program name first) asks for the version.
fn asks_for_version(args: impl IntoIterator<Item = OsString>) -> bool {
    args.into_iter()
        .nth(1)
        .is_some_and(|first| first == "--version" || first == "-V")
}

#[cfg(test)]
mod tests {
    use super::*;

    fn line(args: &[&str]) -> Vec<OsString> {
        args.iter().map(OsString::from).collect()
    }

    #[test]
    fn the_version_flag_is_the_first_argument() {
        assert!(asks_for_version(line(&["oncehook-worker", "--version"])));
        assert!(asks_for_version(line(&["oncehook-worker", "-V"])));
        assert!(!asks_for_version(line(&["oncehook-worker"])));
        assert!(!asks_for_version(line(&["oncehook-worker", "--verbose"])));
        assert!(!asks_for_version(line(&[
            "oncehook-worker",
            "x",
            "--version"
        ])));
    }

    #[test]
    fn the_commit_shows_only_when_known() {
        assert_eq!(describe("0.6.0", "unknown"), "0.6.0");
        assert_eq!(describe("0.6.0", "1a2b3c4"), "0.6.0 (commit 1a2b3c4)");
        assert!(version_text().starts_with(VERSION));
        assert!(!COMMIT.is_empty());
    }
}
