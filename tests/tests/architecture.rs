//! The crate layout is the architecture: ingest never touches Postgres, the
//! gateways crate does no I/O, and SQL lives only in the store
//! (`crates/common/src/store/`). These checks keep it that way.

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

/// Where SQL lives: the store, one module per table.
const STORE: &str = "crates/common/src/store/";

/// How sqlx is asked to run SQL (looked for in code, not in comments).
const QUERY_CALLS: &[&str] = &["sqlx::query", "query!(", "query_as", "query_scalar"];

/// SQL in a string literal (looked for in literals only, so prose in
/// comments and docs may name them).
const SQL_KEYWORDS: &[&str] = &[
    "SELECT ",
    "INSERT INTO",
    "DELETE FROM",
    "UPDATE ",
    "ON CONFLICT",
    "pg_advisory",
];

/// A Rust source split into its code (comments and literals blanked) and
/// its string literals. Enough of the lexer for the checks: line, nested
/// block and doc comments, plain, byte and raw strings, char literals
/// against lifetimes.
struct Lexed {
    code: String,
    strings: Vec<String>,
}

fn lex(src: &str) -> Lexed {
    let s: Vec<char> = src.chars().collect();
    let (mut code, mut strings, mut i) = (String::new(), Vec::new(), 0);
    while i < s.len() {
        let at = |k: usize| s.get(i + k).copied().unwrap_or('\0');
        if at(0) == '/' && at(1) == '/' {
            while i < s.len() && s[i] != '\n' {
                i += 1;
            }
        } else if at(0) == '/' && at(1) == '*' {
            let mut depth = 0;
            while i < s.len() {
                if s[i] == '/' && s.get(i + 1) == Some(&'*') {
                    depth += 1;
                    i += 2;
                } else if s[i] == '*' && s.get(i + 1) == Some(&'/') {
                    depth -= 1;
                    i += 2;
                    if depth == 0 {
                        break;
                    }
                } else {
                    i += 1;
                }
            }
        } else if let Some(hashes) = raw_string_start(&s, i) {
            // r"…", r#"…"#, br"…": no escapes; ends at '"' plus the hashes.
            let open = s[i..].iter().position(|&c| c == '"').unwrap_or(0) + i + 1;
            let close: String = std::iter::once('"')
                .chain("#".repeat(hashes).chars())
                .collect();
            let rest: String = s[open..].iter().collect();
            let len = rest.find(&close).unwrap_or(rest.len());
            strings.push(rest[..len].to_owned());
            i = open + rest[..len].chars().count() + close.chars().count();
            code.push_str("\"\"");
        } else if at(0) == '"' || (at(0) == 'b' && at(1) == '"' && !ident_char(prev(&s, i))) {
            i += if at(0) == 'b' { 2 } else { 1 };
            let mut lit = String::new();
            while i < s.len() && s[i] != '"' {
                if s[i] == '\\' {
                    lit.push(s[i]);
                    i += 1;
                }
                if i < s.len() {
                    lit.push(s[i]);
                }
                i += 1;
            }
            i += 1;
            strings.push(lit);
            code.push_str("\"\"");
        } else if at(0) == '\'' && (at(1) == '\\' || at(2) == '\'') {
            // A char literal ('x', '\n', '\u{..}'); a lifetime is code.
            i += 2;
            while i < s.len() && s[i] != '\'' {
                i += 1;
            }
            i += 1;
            code.push_str("' '");
        } else {
            code.push(s[i]);
            i += 1;
        }
    }
    Lexed { code, strings }
}

fn ident_char(c: char) -> bool {
    c.is_alphanumeric() || c == '_'
}

fn prev(s: &[char], i: usize) -> char {
    if i == 0 { ' ' } else { s[i - 1] }
}

/// The number of `#`s if a raw (byte) string starts at `i`.
fn raw_string_start(s: &[char], i: usize) -> Option<usize> {
    if ident_char(prev(s, i)) {
        return None;
    }
    let mut j = i;
    if s.get(j) == Some(&'b') {
        j += 1;
    }
    if s.get(j) != Some(&'r') {
        return None;
    }
    j += 1;
    let hashes = s[j..].iter().take_while(|&&c| c == '#').count();
    (s.get(j + hashes) == Some(&'"')).then_some(hashes)
}

/// What in `src` looks like SQL outside the store.
fn sql_findings(src: &str) -> Vec<String> {
    let lexed = lex(src);
    let mut found = Vec::new();
    for call in QUERY_CALLS {
        if lexed.code.contains(call) {
            found.push(format!("calls `{call}`"));
        }
    }
    for lit in &lexed.strings {
        if let Some(kw) = SQL_KEYWORDS.iter().find(|kw| lit.contains(**kw)) {
            let first = lit.lines().map(str::trim).find(|l| !l.is_empty());
            let first = first.unwrap_or_default();
            found.push(format!("SQL ({kw:?}) in a string: {first:?}"));
        }
    }
    found
}

#[test]
fn the_sql_check_reads_code_not_prose() {
    let prose = "//! Uses `sqlx::query!` via the store.\n/* SELECT * FROM x; /* nested */ query_as */\n/// INSERT INTO orders\nfn f<'a>(x: &'a str) -> char { let _ = \"SELECT-less text\"; 'q' }\n";
    assert_eq!(sql_findings(prose), Vec::<String>::new());
    let raw = "fn f() { let q = r#\"UPDATE orders SET status = 'paid'\"#; }";
    assert_eq!(sql_findings(raw).len(), 1, "{:?}", sql_findings(raw));
    let plain = "fn f() { let q = \"SELECT 1\"; }";
    assert_eq!(sql_findings(plain).len(), 1);
    let escaped = "fn f() { let q = \"say \\\"hi\\\"\"; let r = \"INSERT INTO t VALUES (1)\"; }";
    assert_eq!(
        sql_findings(escaped).len(),
        1,
        "{:?}",
        sql_findings(escaped)
    );
    let call =
        "async fn f(p: &PgPool) { sqlx::query_scalar::<_, i64>(\"...\").fetch_one(p).await; }";
    assert!(sql_findings(call).iter().any(|f| f.contains("sqlx::query")));
    let lit_with_comment_marker = "fn f() { let u = \"http://x\"; let q = \"DELETE FROM t\"; }";
    assert_eq!(sql_findings(lit_with_comment_marker).len(), 1);
}

#[test]
fn no_sql_outside_the_store() {
    let mut files = Vec::new();
    rust_sources(&root().join("crates"), &mut files);
    let mut offenders = Vec::new();
    for path in files {
        let rel = path
            .strip_prefix(root())
            .expect("under the workspace")
            .to_string_lossy()
            .replace('\\', "/");
        if rel.starts_with(STORE) {
            continue;
        }
        let text = std::fs::read_to_string(&path).expect("source");
        let found = sql_findings(&text);
        offenders.extend(found.into_iter().map(|f| format!("{rel}: {f}")));
    }
    assert!(
        offenders.is_empty(),
        "SQL belongs in {STORE} (a function in the module that owns the table):\n{}",
        offenders.join("\n")
    );
}
