//! The crate layout is the architecture: ingest never touches Postgres, and
//! the gateways crate does no I/O. These checks keep it that way.

use std::path::{Path, PathBuf};

fn root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("..")
}

fn read(rel: &str) -> String {
    std::fs::read_to_string(root().join(rel)).unwrap_or_else(|e| panic!("read {rel}: {e}"))
}

fn rust_sources(dir: &Path, out: &mut Vec<PathBuf>) {
    for entry in std::fs::read_dir(dir).unwrap_or_else(|e| panic!("read {}: {e}", dir.display())) {
        let path = entry.expect("dir entry").path();
        if path.is_dir() {
            rust_sources(&path, out);
        } else if path.extension().is_some_and(|x| x == "rs") {
            out.push(path);
        }
    }
}

#[test]
fn ingest_does_not_depend_on_the_database() {
    let manifest = read("crates/ingest/Cargo.toml");
    assert!(!manifest.contains("sqlx"), "ingest must not depend on sqlx");
    let common_line = manifest
        .lines()
        .find(|l| l.trim_start().starts_with("oncehook-common"))
        .expect("ingest depends on oncehook-common");
    assert!(
        !common_line.contains("db"),
        "ingest must not enable common's `db` feature: {common_line}"
    );
    let mut files = Vec::new();
    rust_sources(&root().join("crates/ingest/src"), &mut files);
    for f in files {
        let text = std::fs::read_to_string(&f).expect("source");
        assert!(!text.contains("sqlx"), "{} mentions sqlx", f.display());
        assert!(
            !text.contains("common::db"),
            "{} uses the database module",
            f.display()
        );
    }
}

#[test]
fn the_gateways_crate_does_no_io() {
    let manifest = read("crates/gateways/Cargo.toml");
    let deps = manifest
        .split("[dependencies]")
        .nth(1)
        .and_then(|rest| rest.split("\n[").next())
        .expect("a [dependencies] section");
    for dep in ["tokio", "lapin", "sqlx", "reqwest", "actix", "lettre"] {
        assert!(!deps.contains(dep), "gateways must not depend on {dep}");
    }
    let mut files = Vec::new();
    rust_sources(&root().join("crates/gateways/src"), &mut files);
    assert!(!files.is_empty());
    for f in files {
        let text = std::fs::read_to_string(&f).expect("source");
        for io in [
            "std::fs",
            "std::net",
            "std::process",
            "std::time::SystemTime",
            "std::env",
        ] {
            assert!(
                !text.contains(io),
                "{} uses {io}: the gateways crate is pure",
                f.display()
            );
        }
    }
}
