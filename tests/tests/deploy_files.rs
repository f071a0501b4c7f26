//! The files we ship to deploy oncehook, held to the code by reading files
//! only (no engine, no services, so it runs in `make test`):
//!
//! * Images: every Dockerfile in deploy/compose ships every binary of the
//!   workspace (each member's `[[bin]]`, or its `src/main.rs`), and a
//!   Dockerfile that copies binaries from the host lets exactly those into
//!   its build context, through its own `.dockerignore` (BuildKit) and the
//!   root one (the classic builder, Compose v1).
//! * Variables: compose.yaml (anchors resolved by the parser, merge keys
//!   here) and the Kubernetes manifests give each binary only `ONCEHOOK_*`
//!   variables it reads — the key tables `keys::all()` lists in
//!   crates/common/src/config/, narrowed to the sections the binary takes
//!   (`binaries.rs`) — and what it needs: the database URL where it uses
//!   the database, `ONCEHOOK_DATABASE_POOLER=transaction` wherever that URL
//!   is PgBouncer's, `ONCEHOOK_CONFIG` where it reads `[[source]]`,
//!   `[[api.key]]`, `[[notify.endpoint]]` or `[[console.user]]`, and the
//!   route deploy/README.md ("Database connections") gives it: through
//!   PgBouncer or straight to Postgres.
//! * Merge lists: a YAML merge list (`<<: [*a, *b]`) whose mappings share a
//!   key means one thing to PyYAML (Compose v1: the first wins) and another
//!   to a library where the last wins; compose.yaml must read the same
//!   both ways.
//! * Images: every image a YAML file or a Dockerfile under deploy/ names is
//!   pinned (a tag other than `latest`, or a digest), and PgBouncer's is
//!   1.25.2 or later (CVE-2026-6664, CVE-2026-6666).
//! * Database roles (docs/tenants.md, "The binaries' role"): only
//!   `oncehookctl migrate` (and `--finish`) connects as the tables' owner,
//!   and is given `ONCEHOOK_SERVICE_ROLE_PASSWORD`; every other binary's
//!   URL names `oncehook_service` with that same password, and PgBouncer
//!   (its userlist, the role it logs in to Postgres as) knows that role
//!   and not the owner.
//! * PgBouncer's settings: the ones a client depends on (`pool_mode`,
//!   `server_reset_query`, `server_reset_query_always`,
//!   `ignore_startup_parameters`, `max_prepared_statements`) are the test
//!   harness's (`pgbouncer::SHIPPED_SETTINGS`) in compose.yaml and in
//!   deploy/k8s alike.
//! * The connection budget: deploy/README.md's tables, recomputed from the
//!   files (replicas, autoscalers' maximums, surges, pool sizes), fit
//!   Postgres' `max_connections`.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

use serde_yaml::{Mapping, Value};

fn root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("..")
}

fn read(rel: &str) -> String {
    std::fs::read_to_string(root().join(rel)).unwrap_or_else(|e| panic!("read {rel}: {e}"))
}

fn files_in(rel: &str) -> Vec<String> {
    let mut out: Vec<String> = std::fs::read_dir(root().join(rel))
        .unwrap_or_else(|e| panic!("read {rel}: {e}"))
        .map(|e| {
            e.expect("dir entry")
                .file_name()
                .to_string_lossy()
                .into_owned()
        })
        .collect();
    out.sort();
    out
}

// --- the workspace's binaries ------------------------------------------------

/// One binary of the workspace.
#[derive(Debug, Clone)]
struct Binary {
    /// The crate's folder, relative to the root.
    dir: String,
    /// Its main source file, relative to the root.
    main: String,
}

/// Every binary of every workspace member: `[[bin]]` entries, else
/// `src/main.rs` (named after the package), and `src/bin/*.rs`.
fn workspace_binaries() -> BTreeMap<String, Binary> {
    let workspace: toml::Table = toml::from_str(&read("Cargo.toml")).expect("Cargo.toml");
    let members = workspace["workspace"]["members"]
        .as_array()
        .expect("workspace.members");
    let mut out = BTreeMap::new();
    for member in members {
        let dir = member.as_str().expect("a member path").to_owned();
        let manifest: toml::Table = toml::from_str(&read(&format!("{dir}/Cargo.toml")))
            .unwrap_or_else(|e| panic!("{dir}/Cargo.toml: {e}"));
        let bins = manifest
            .get("bin")
            .and_then(|b| b.as_array())
            .cloned()
            .unwrap_or_default();
        for bin in &bins {
            let name = bin["name"].as_str().expect("[[bin]] name").to_owned();
            let path = bin
                .get("path")
                .and_then(|p| p.as_str())
                .unwrap_or("src/main.rs");
            out.insert(name, main_binary_of(&dir, path));
        }
        let autobins = manifest
            .get("package")
            .and_then(|p| p.get("autobins"))
            .and_then(|a| a.as_bool())
            .unwrap_or(true);
        if bins.is_empty() && autobins && root().join(&dir).join("src/main.rs").exists() {
            let name = manifest["package"]["name"]
                .as_str()
                .expect("package.name")
                .to_owned();
            out.insert(name, main_binary_of(&dir, "src/main.rs"));
        }
        if autobins && root().join(&dir).join("src/bin").is_dir() {
            for file in files_in(&format!("{dir}/src/bin")) {
                if let Some(stem) = file.strip_suffix(".rs") {
                    out.insert(
                        stem.to_owned(),
                        main_binary_of(&dir, &format!("src/bin/{file}")),
                    );
                }
            }
        }
    }
    out
}

fn main_binary_of(dir: &str, path: &str) -> Binary {
    Binary {
        dir: dir.to_owned(),
        main: format!("{dir}/{path}"),
    }
}

// --- Dockerfiles and their .dockerignore files -------------------------------

/// A Dockerfile's instructions: continuation lines joined, comments dropped.
fn instructions(dockerfile: &str) -> Vec<String> {
    let mut out = Vec::new();
    let mut current = String::new();
    for line in dockerfile.lines() {
        let trimmed = line.trim();
        if trimmed.starts_with('#') || (trimmed.is_empty() && current.is_empty()) {
            continue;
        }
        match trimmed.strip_suffix('\\') {
            Some(head) => {
                current.push_str(head);
                current.push(' ');
            }
            None => {
                current.push_str(trimmed);
                if !current.trim().is_empty() {
                    out.push(current.trim().to_owned());
                }
                current.clear();
            }
        }
    }
    out
}

/// What the Dockerfile's `COPY` (and `ADD`) instructions take from
/// `target/release/` of the build context.
fn copied_from_context(dockerfile: &str) -> BTreeSet<String> {
    let mut out = BTreeSet::new();
    for ins in instructions(dockerfile) {
        let mut words = ins.split_whitespace();
        let verb = words.next().unwrap_or("").to_ascii_uppercase();
        if verb != "COPY" && verb != "ADD" {
            continue;
        }
        let args: Vec<&str> = words.filter(|w| !w.starts_with("--")).collect();
        if ins.contains("--from=") {
            continue;
        }
        let Some((_, sources)) = args.split_last() else {
            continue;
        };
        out.extend(
            sources
                .iter()
                .filter_map(|s| s.strip_prefix("target/release/"))
                .map(str::to_owned),
        );
    }
    out
}

/// Every `target/release/NAME` the Dockerfile names (COPY from the host,
/// or `cp` out of a build stage): the binaries its image ships.
fn shipped(dockerfile: &str) -> BTreeSet<String> {
    instructions(dockerfile)
        .iter()
        .flat_map(|ins| {
            ins.split_whitespace()
                .map(str::to_owned)
                .collect::<Vec<_>>()
        })
        .filter_map(|w| w.strip_prefix("target/release/").map(str::to_owned))
        .filter(|w| !w.is_empty() && !w.contains('*'))
        .collect()
}

/// The `!target/release/NAME` lines of a .dockerignore.
fn let_in(dockerignore: &str) -> BTreeSet<String> {
    dockerignore
        .lines()
        .map(str::trim)
        .filter_map(|l| l.strip_prefix("!target/release/"))
        .map(str::to_owned)
        .collect()
}

#[test]
fn every_dockerfile_ships_every_binary_and_its_dockerignore_lets_them_in() {
    let binaries: BTreeSet<String> = workspace_binaries().into_keys().collect();
    assert!(
        binaries.contains("oncehook-ingest") && binaries.contains("oncehookctl"),
        "the workspace's binaries were not found: {binaries:?}"
    );
    let dockerfiles: Vec<String> = files_in("deploy/compose")
        .into_iter()
        .filter(|f| f.starts_with("Dockerfile") && !f.ends_with(".dockerignore"))
        .collect();
    assert!(!dockerfiles.is_empty(), "no Dockerfile in deploy/compose");
    let root_ignore = let_in(&read(".dockerignore"));
    let mut from_host = BTreeSet::new();
    let mut problems = Vec::new();
    for name in &dockerfiles {
        let text = read(&format!("deploy/compose/{name}"));
        let ships = shipped(&text);
        if ships != binaries {
            problems.push(format!(
                "deploy/compose/{name} ships {ships:?}; the workspace's binaries are {binaries:?}"
            ));
        }
        let copied = copied_from_context(&text);
        let ignore_file = format!("deploy/compose/{name}.dockerignore");
        if !root().join(&ignore_file).exists() {
            problems.push(format!(
                "{ignore_file} is missing: BuildKit would send the whole repository"
            ));
            continue;
        }
        let allowed = let_in(&read(&ignore_file));
        if allowed != copied {
            problems.push(format!(
                "deploy/compose/{name} copies {copied:?} from target/release; {ignore_file} lets in {allowed:?}"
            ));
        }
        from_host.extend(copied);
    }
    if root_ignore != from_host {
        problems.push(format!(
            "the Dockerfiles copy {from_host:?} from target/release; the root .dockerignore (the classic builder's) lets in {root_ignore:?}"
        ));
    }
    assert!(problems.is_empty(), "{}", problems.join("\n"));
}

#[test]
fn the_dockerfile_checks_see_a_binary_left_out() {
    let dockerfile =
        "FROM x\nCOPY target/release/a \\\n     target/release/b \\\n     /usr/local/bin/\n";
    assert_eq!(
        copied_from_context(dockerfile),
        BTreeSet::from(["a".to_owned(), "b".to_owned()])
    );
    let ignore = "*\n!target/release/a\n";
    assert_ne!(let_in(ignore), copied_from_context(dockerfile));
    let staged = "RUN cargo build \\\n && cp target/release/a target/release/b /out/\nCOPY --from=builder /out/ /usr/local/bin/\n";
    assert!(copied_from_context(staged).is_empty());
    assert_eq!(
        shipped(staged),
        BTreeSet::from(["a".to_owned(), "b".to_owned()])
    );
}

// --- the configuration's variables, per binary -------------------------------

/// The `const NAME: &str = "VALUE";` items of a Rust source.
fn string_consts(source: &str) -> BTreeMap<String, String> {
    let mut out = BTreeMap::new();
    for piece in source.split("const ").skip(1) {
        let Some(item) = piece.split(';').next() else {
            continue;
        };
        let item: String = item.split_whitespace().collect::<Vec<_>>().join(" ");
        let Some((name, rest)) = item.split_once(": &str = ") else {
            continue;
        };
        if let Some(value) = rest.strip_prefix('"').and_then(|r| r.strip_suffix('"')) {
            out.insert(name.trim().to_owned(), value.to_owned());
        }
    }
    out
}

/// The `"ONCEHOOK_…"` literals of a Rust source.
fn oncehook_literals(source: &str) -> BTreeSet<String> {
    source
        .split('"')
        .skip(1)
        .step_by(2)
        .filter(|s| {
            s.starts_with("ONCEHOOK_")
                && s.len() > 9
                && s.chars().all(|c| c.is_ascii_uppercase() || c == '_')
        })
        .map(str::to_owned)
        .collect()
}

/// What the configuration code says about variables and sections.
struct ConfigCode {
    /// Every variable a key table lists, with the sections it sets.
    sections_of: BTreeMap<String, BTreeSet<String>>,
    /// Every section.
    sections: BTreeSet<String>,
    /// `ONCEHOOK_CONFIG`: read by every binary (`Config::load`).
    config_var: String,
    /// The sections each `into_*` of binaries.rs gives its binary.
    into: BTreeMap<String, BTreeSet<String>>,
}

fn config_code() -> ConfigCode {
    let dir = "crates/common/src/config";
    let mut consts = BTreeMap::new();
    for file in files_in(dir) {
        if file.ends_with(".rs") && !file.ends_with("_tests.rs") && file != "testing.rs" {
            consts.extend(string_consts(&read(&format!("{dir}/{file}"))));
        }
    }
    // keys::all(): the one list of every section's key table.
    let keys = read(&format!("{dir}/keys.rs"));
    let all = keys
        .split("fn all()")
        .nth(1)
        .and_then(|rest| rest.split("\n}").next())
        .expect("keys::all() in keys.rs");
    let modules: Vec<&str> = all
        .split(|c: char| !(c.is_ascii_alphanumeric() || c == '_' || c == ':'))
        .filter_map(|w| w.strip_suffix("::KEYS"))
        .collect();
    assert!(modules.len() >= 5, "keys::all() lists {modules:?}");
    let mut sections_of: BTreeMap<String, BTreeSet<String>> = BTreeMap::new();
    for module in &modules {
        let source = read(&format!("{dir}/{module}.rs"));
        let table = source
            .split("KEYS: &[Key] = &[")
            .nth(1)
            .and_then(|rest| rest.split("\n];").next())
            .unwrap_or_else(|| panic!("{module}.rs has no KEYS table"));
        for call in table.split("Key::new(").skip(1) {
            let args = call.split(')').next().unwrap_or("");
            let mut args = args.split(',').map(str::trim);
            let constant = args.next().unwrap_or("").rsplit("::").next().unwrap_or("");
            let path = args.next().unwrap_or("").trim_matches('"');
            let env = consts
                .get(constant)
                .unwrap_or_else(|| panic!("{module}.rs: no string const {constant}"));
            let section = path.split('.').next().unwrap_or(path);
            assert!(
                !section.is_empty(),
                "{module}.rs: Key::new({constant}, {path:?})"
            );
            sections_of
                .entry(env.clone())
                .or_default()
                .insert(section.to_owned());
        }
    }
    let sections = sections_of.values().flatten().cloned().collect();
    let config_var = consts.get("ENV_CONFIG").expect("ENV_CONFIG").clone();

    // binaries.rs: each XSettings struct's *Config fields are its sections;
    // each into_x(self) -> … XSettings names its struct.
    let binaries = read(&format!("{dir}/binaries.rs"));
    let mut structs: BTreeMap<String, BTreeSet<String>> = BTreeMap::new();
    for piece in binaries.split("pub struct ").skip(1) {
        let name = piece.split_whitespace().next().unwrap_or("").to_owned();
        let body = piece.split('}').next().unwrap_or("");
        let fields = body
            .lines()
            .filter_map(|l| l.trim().strip_prefix("pub "))
            .filter_map(|l| l.split_once(':'))
            .filter(|(_, ty)| ty.trim().trim_end_matches(',').ends_with("Config"))
            .map(|(field, _)| field.trim().to_owned())
            .collect();
        structs.insert(name, fields);
    }
    let mut into = BTreeMap::new();
    for piece in binaries.split("pub fn into_").skip(1) {
        let name = format!("into_{}", piece.split('(').next().unwrap_or(""));
        let signature = piece.split('{').next().unwrap_or("");
        let settings = signature
            .split(|c: char| !c.is_ascii_alphanumeric())
            .find(|w| w.ends_with("Settings"))
            .unwrap_or_else(|| panic!("binaries.rs: {name} returns no *Settings"));
        into.insert(name, structs[settings].clone());
    }
    ConfigCode {
        sections_of,
        sections,
        config_var,
        into,
    }
}

/// What one binary (or `oncehookctl migrate`) reads and needs.
#[derive(Debug, Clone)]
struct Role {
    name: String,
    /// The sections its settings are made of.
    primary: BTreeSet<String>,
    /// Every `ONCEHOOK_*` variable it reads.
    known: BTreeSet<String>,
}

/// Sections read beyond a binary's `into_*` settings, each with the line of
/// its main.rs that shows why (checked to be still there).
const EXTRA_SECTIONS: &[(&str, &[&str], &str)] = &[(
    "oncehook-worker",
    &["ingest", "reconcile"],
    // The reconciler takes the whole configuration: [reconcile] and the
    // sources' APIs.
    "Reconciler::new(&reconcile_config",
)];

/// Sections whose entries live in the file only: a binary whose settings
/// hold one needs ONCEHOOK_CONFIG (`[[source]]` is in the ingest section's
/// settings, then `[[api.key]]`, `[[notify.endpoint]]`, `[[console.user]]`).
const FILE_SECTIONS: &[&str] = &["ingest", "api", "notify", "console"];

/// The directories of the workspace libraries the crate in `dir` depends
/// on, but the two every binary shares (the common crate's variables are
/// its configuration's, counted by section; the gateways crate reads none).
fn own_libraries(dir: &str) -> Vec<String> {
    let workspace: toml::Table = read("Cargo.toml").parse().expect("Cargo.toml");
    let paths = workspace["workspace"]["dependencies"]
        .as_table()
        .expect("workspace.dependencies");
    let manifest: toml::Table = read(&format!("{dir}/Cargo.toml"))
        .parse()
        .expect("a member's manifest");
    manifest
        .get("dependencies")
        .and_then(|d| d.as_table())
        .map(|deps| {
            deps.keys()
                .filter(|dep| !["oncehook-common", "oncehook-gateways"].contains(&dep.as_str()))
                .filter_map(|dep| paths.get(dep)?.get("path")?.as_str().map(str::to_owned))
                .collect()
        })
        .unwrap_or_default()
}

fn roles(code: &ConfigCode) -> BTreeMap<String, Role> {
    let mut out = BTreeMap::new();
    for (name, bin) in workspace_binaries() {
        let main = read(&bin.main);
        let called: Vec<&String> = code
            .into
            .keys()
            .filter(|f| main.contains(&format!(".{f}()")))
            .collect();
        let mut primary = match called.as_slice() {
            [] => code.sections.clone(),
            [one] => code.into[*one].clone(),
            more => panic!("{}: calls {more:?}", bin.main),
        };
        // Sections the binary reads and the settings struct does not show.
        let mut read_too = primary.clone();
        for (binary, extra, why) in EXTRA_SECTIONS {
            if *binary == name {
                assert!(
                    main.contains(why),
                    "{}: no longer contains {why:?}: update EXTRA_SECTIONS",
                    bin.main
                );
                read_too.extend(extra.iter().map(|s| (*s).to_owned()));
            }
        }
        let mut known: BTreeSet<String> = code
            .sections_of
            .iter()
            .filter(|(_, sections)| !sections.is_disjoint(&read_too))
            .map(|(var, _)| var.clone())
            .collect();
        known.insert(code.config_var.clone());
        // Variables the binary's own crate reads, or a library of its own
        // that it links (oncehookctl's ONCEHOOK_API_KEY, read by its verbs).
        let mut sources = Vec::new();
        for dir in std::iter::once(bin.dir.clone()).chain(own_libraries(&bin.dir)) {
            rust_files(&root().join(dir).join("src"), &mut sources);
        }
        for file in sources {
            let text = std::fs::read_to_string(&file).expect("read a source");
            known.extend(oncehook_literals(&text));
        }
        primary.retain(|s| code.sections.contains(s));
        out.insert(
            name.clone(),
            Role {
                name: name.clone(),
                primary,
                known,
            },
        );
    }
    // `oncehookctl migrate`: the database only.
    let ctl = out.get("oncehookctl").expect("oncehookctl").clone();
    out.insert(
        "oncehookctl migrate".to_owned(),
        Role {
            name: "oncehookctl migrate".to_owned(),
            primary: BTreeSet::from(["database".to_owned(), "telemetry".to_owned()]),
            known: ctl.known,
        },
    );
    out
}

fn rust_files(dir: &Path, out: &mut Vec<PathBuf>) {
    for entry in std::fs::read_dir(dir).unwrap_or_else(|e| panic!("read {}: {e}", dir.display())) {
        let path = entry.expect("dir entry").path();
        let name = path.file_name().map(|n| n.to_string_lossy().into_owned());
        let name = name.unwrap_or_default();
        if path.is_dir() {
            if name != "tests" {
                rust_files(&path, out);
            }
        } else if name.ends_with(".rs") && !name.ends_with("_tests.rs") && name != "tests.rs" {
            out.push(path);
        }
    }
}

/// Where deploy/README.md ("Database connections") says a binary's database
/// connection goes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Route {
    PgBouncer,
    Postgres,
    None,
}

fn documented_routes() -> BTreeMap<String, Route> {
    let readme = read("deploy/README.md");
    let section = readme
        .split("\n## Database connections")
        .nth(1)
        // Up to the next heading: the budget's tables are not routes.
        .and_then(|rest| rest.split("\n#").next())
        .expect("deploy/README.md has a \"## Database connections\" section");
    let mut out = BTreeMap::new();
    for row in section.lines().filter(|l| l.starts_with("| `")) {
        let cells: Vec<&str> = row.split('|').map(str::trim).collect();
        let route = match cells.get(2).and_then(|c| c.split_whitespace().next()) {
            Some("PgBouncer") => Route::PgBouncer,
            Some("Postgres") => Route::Postgres,
            Some("none") => Route::None,
            other => panic!("deploy/README.md: {row}: route {other:?}"),
        };
        for name in cells[1].split('`').skip(1).step_by(2) {
            out.insert(name.to_owned(), route);
        }
    }
    out
}

/// The host of a `postgres://` URL.
fn url_host(url: &str) -> &str {
    let rest = url.split_once("://").map_or(url, |(_, r)| r);
    let rest = rest.rsplit_once('@').map_or(rest, |(_, r)| r);
    rest.split([':', '/', '?']).next().unwrap_or(rest)
}

/// One process a deploy file runs: its binary, role and environment.
#[derive(Debug, Clone)]
struct Launch {
    /// Where (`compose.yaml services.worker`).
    at: String,
    /// What runs it: the compose service's name, or the Kubernetes
    /// object's `Kind/name`.
    object: String,
    role: String,
    env: BTreeMap<String, String>,
}

/// The problems of one launch, against the code and the documented routes.
fn check_launch(
    launch: &Launch,
    roles: &BTreeMap<String, Role>,
    routes: &BTreeMap<String, Route>,
    pgbouncer_hosts: &BTreeSet<String>,
    config_var: &str,
) -> Vec<String> {
    let mut problems = Vec::new();
    let at = &launch.at;
    let Some(role) = roles.get(&launch.role) else {
        return vec![format!(
            "{at}: runs {}, no binary of the workspace",
            launch.role
        )];
    };
    for var in launch.env.keys().filter(|v| v.starts_with("ONCEHOOK_")) {
        if !role.known.contains(var) {
            problems.push(format!(
                "{at}: {} is given {var}, which it does not read",
                role.name
            ));
        }
    }
    let needs = |section: &str| role.primary.contains(section);
    let url = launch
        .env
        .get("ONCEHOOK_DATABASE_URL")
        .filter(|u| !u.is_empty());
    let binary = role.name.split_whitespace().next().unwrap_or(&role.name);
    let route = routes
        .get(&role.name)
        .or_else(|| routes.get(binary))
        .copied();
    match (needs("database"), url) {
        (true, None) => problems.push(format!("{at}: {} needs ONCEHOOK_DATABASE_URL", role.name)),
        (false, Some(_)) => problems.push(format!(
            "{at}: {} never uses the database but is given ONCEHOOK_DATABASE_URL",
            role.name
        )),
        _ => {}
    }
    if let Some(url) = url {
        let pooled = pgbouncer_hosts.contains(url_host(url));
        let pooler = launch
            .env
            .get("ONCEHOOK_DATABASE_POOLER")
            .map(String::as_str);
        if pooled && pooler != Some("transaction") {
            problems.push(format!(
                "{at}: {} reaches PgBouncer ({}) without ONCEHOOK_DATABASE_POOLER=transaction (got {pooler:?})",
                role.name,
                url_host(url)
            ));
        }
        match route {
            Some(Route::PgBouncer) if !pooled => problems.push(format!(
                "{at}: deploy/README.md routes {} through PgBouncer; it is given {}",
                role.name,
                url_host(url)
            )),
            Some(Route::Postgres) if pooled => problems.push(format!(
                "{at}: deploy/README.md sends {} straight to Postgres; it is given PgBouncer ({})",
                role.name,
                url_host(url)
            )),
            Some(Route::None) => problems.push(format!(
                "{at}: deploy/README.md says {} never talks to Postgres",
                role.name
            )),
            None => problems.push(format!(
                "{at}: deploy/README.md (\"Database connections\") does not say where {} connects",
                role.name
            )),
            _ => {}
        }
    }
    if needs("broker")
        && role.name != "oncehookctl migrate"
        && launch
            .env
            .get("ONCEHOOK_AMQP_URL")
            .is_none_or(|u| u.is_empty())
    {
        problems.push(format!("{at}: {} needs ONCEHOOK_AMQP_URL", role.name));
    }
    let reads_file = FILE_SECTIONS.iter().any(|s| needs(s)) && role.name != "oncehookctl migrate";
    if reads_file && launch.env.get(config_var).is_none_or(|v| v.is_empty()) {
        problems.push(format!(
            "{at}: {} reads entries of {FILE_SECTIONS:?} from the file, and is given no {config_var}",
            role.name
        ));
    }
    problems
}

// --- YAML: merge keys, both ways ---------------------------------------------

/// `value` with every merge key (`<<`) applied: the mapping's own keys win;
/// among the mappings of a merge list the first (PyYAML, so Compose v1) or
/// the last wins a key they share.
fn merged(value: &Value, first_wins: bool) -> Value {
    match value {
        Value::Mapping(map) => {
            let mut out = Mapping::new();
            let mut inherited = Mapping::new();
            for (key, v) in map {
                if key.as_str() == Some("<<") {
                    let sources: Vec<&Value> = match v {
                        Value::Sequence(items) => items.iter().collect(),
                        other => vec![other],
                    };
                    for source in sources {
                        let Value::Mapping(source) = merged(source, first_wins) else {
                            panic!("a merge key's value must be mappings: {v:?}");
                        };
                        for (k, sv) in source {
                            if first_wins && inherited.contains_key(&k) {
                                continue;
                            }
                            inherited.insert(k, sv);
                        }
                    }
                } else {
                    out.insert(key.clone(), merged(v, first_wins));
                }
            }
            for (k, v) in inherited {
                if !out.contains_key(&k) {
                    out.insert(k, v);
                }
            }
            Value::Mapping(out)
        }
        Value::Sequence(items) => {
            Value::Sequence(items.iter().map(|i| merged(i, first_wins)).collect())
        }
        other => other.clone(),
    }
}

/// Where two readings of a document differ, as dotted paths.
fn differences(a: &Value, b: &Value, path: &str, out: &mut Vec<String>) {
    match (a, b) {
        (Value::Mapping(x), Value::Mapping(y)) => {
            let keys: BTreeSet<String> = x
                .keys()
                .chain(y.keys())
                .map(|k| scalar(k).unwrap_or_default())
                .collect();
            for key in keys {
                let k = Value::String(key.clone());
                let child = format!("{path}.{key}");
                match (x.get(&k), y.get(&k)) {
                    (Some(p), Some(q)) => differences(p, q, &child, out),
                    (p, q) => out.push(format!("{child}: {p:?} / {q:?}")),
                }
            }
        }
        (Value::Sequence(x), Value::Sequence(y)) if x.len() == y.len() => {
            for (i, (p, q)) in x.iter().zip(y).enumerate() {
                differences(p, q, &format!("{path}[{i}]"), out);
            }
        }
        (p, q) if p != q => out.push(format!("{path}: {p:?} / {q:?}")),
        _ => {}
    }
}

fn scalar(v: &Value) -> Option<String> {
    match v {
        Value::String(s) => Some(s.clone()),
        Value::Number(n) => Some(n.to_string()),
        Value::Bool(b) => Some(b.to_string()),
        _ => None,
    }
}

fn compose_file() -> Value {
    serde_yaml::from_str(&read("deploy/compose/compose.yaml")).expect("compose.yaml parses")
}

#[test]
fn compose_merge_lists_mean_the_same_whichever_mapping_wins() {
    let file = compose_file();
    let mut out = Vec::new();
    differences(&merged(&file, true), &merged(&file, false), "", &mut out);
    assert!(
        out.is_empty(),
        "compose.yaml reads differently when the first mapping of a merge list wins a shared key (PyYAML, Compose v1) and when the last does (first / last):\n{}",
        out.join("\n")
    );
}

#[test]
fn a_merge_list_whose_winner_depends_on_the_library_is_caught() {
    let doc: Value = serde_yaml::from_str(
        "a: &a {URL: direct, LOG: info}\nb: &b {URL: pooled, POOLER: transaction}\n\
         s: {env: {<<: [*b, *a], OWN: x}}\nt: {env: {<<: [*b, *a], URL: own}}\n",
    )
    .expect("yaml");
    let first = merged(&doc, true);
    let last = merged(&doc, false);
    assert_eq!(first["s"]["env"]["URL"], Value::from("pooled"));
    assert_eq!(last["s"]["env"]["URL"], Value::from("direct"));
    assert_eq!(first["t"]["env"]["URL"], Value::from("own"));
    let mut out = Vec::new();
    differences(&first, &last, "", &mut out);
    assert_eq!(out.len(), 1, "{out:?}");
    assert!(out[0].starts_with(".s.env.URL"), "{out:?}");
}

/// The environment of a compose service or a container, as strings.
fn environment(value: Option<&Value>) -> BTreeMap<String, String> {
    match value {
        Some(Value::Mapping(map)) => map
            .iter()
            .filter_map(|(k, v)| Some((scalar(k)?, scalar(v).unwrap_or_default())))
            .collect(),
        Some(Value::Sequence(items)) => items
            .iter()
            .filter_map(|i| i.as_str())
            .map(|i| {
                let (k, v) = i.split_once('=').unwrap_or((i, ""));
                (k.to_owned(), v.to_owned())
            })
            .collect(),
        _ => BTreeMap::new(),
    }
}

fn strings(value: Option<&Value>) -> Vec<String> {
    match value {
        Some(Value::Sequence(items)) => items.iter().filter_map(scalar).collect(),
        Some(Value::String(s)) => s.split_whitespace().map(str::to_owned).collect(),
        _ => Vec::new(),
    }
}

/// The role a command line runs, if it runs a binary of the workspace.
fn role_of(argv: &[String], binaries: &BTreeSet<String>) -> Option<String> {
    let program = argv.first()?.rsplit('/').next()?.to_owned();
    if !binaries.contains(&program) {
        return None;
    }
    if program == "oncehookctl" && argv.get(1).map(String::as_str) == Some("migrate") {
        return Some("oncehookctl migrate".to_owned());
    }
    Some(program)
}

/// Every oncehook process compose.yaml runs (read the first-wins way; the
/// merge test above holds the other reading to it).
fn compose_launches(binaries: &BTreeSet<String>) -> (Vec<Launch>, BTreeSet<String>) {
    let file = merged(&compose_file(), true);
    let services = file["services"].as_mapping().expect("services");
    let mut launches = Vec::new();
    let mut pgbouncer = BTreeSet::new();
    for (name, service) in services {
        let name = scalar(name).expect("a service name");
        let image = service["image"].as_str().unwrap_or("");
        if image.contains("pgbouncer") {
            pgbouncer.insert(name.clone());
        }
        let mut argv = strings(service.get("entrypoint"));
        argv.extend(strings(service.get("command")));
        if let Some(role) = role_of(&argv, binaries) {
            launches.push(Launch {
                at: format!("compose.yaml services.{name}"),
                object: name.clone(),
                role,
                env: environment(service.get("environment")),
            });
        }
    }
    (launches, pgbouncer)
}

#[test]
fn compose_gives_each_binary_what_it_reads_and_needs() {
    let code = config_code();
    let roles = roles(&code);
    let routes = documented_routes();
    let binaries: BTreeSet<String> = workspace_binaries().into_keys().collect();
    let (launches, pgbouncer) = compose_launches(&binaries);
    assert!(
        !pgbouncer.is_empty(),
        "compose.yaml has no PgBouncer service"
    );
    let mut problems = Vec::new();
    let run: BTreeSet<String> = launches
        .iter()
        .map(|l| l.role.split_whitespace().next().unwrap_or("").to_owned())
        .collect();
    for missing in binaries.difference(&run) {
        problems.push(format!("compose.yaml runs no {missing}"));
    }
    for b in &binaries {
        if !routes.contains_key(b) {
            problems.push(format!(
                "deploy/README.md (\"Database connections\") does not list {b}"
            ));
        }
    }
    for launch in &launches {
        problems.extend(check_launch(
            launch,
            &roles,
            &routes,
            &pgbouncer,
            &code.config_var,
        ));
    }
    assert!(problems.is_empty(), "{}", problems.join("\n"));
}

// --- Kubernetes --------------------------------------------------------------

/// Every object of every manifest in deploy/k8s.
fn k8s_objects() -> Vec<(String, Value)> {
    let mut out = Vec::new();
    for file in files_in("deploy/k8s") {
        if !(file.ends_with(".yaml") || file.ends_with(".yml")) {
            continue;
        }
        let text = read(&format!("deploy/k8s/{file}"));
        // Documents are separated by a line `---`.
        let mut docs = vec![String::new()];
        for line in text.lines() {
            if line.trim_end() == "---" {
                docs.push(String::new());
            } else if let Some(doc) = docs.last_mut() {
                doc.push_str(line);
                doc.push('\n');
            }
        }
        let content = |d: &String| {
            d.lines()
                .any(|l| !l.trim().is_empty() && !l.trim_start().starts_with('#'))
        };
        for doc in docs.into_iter().filter(content) {
            let value: Value =
                serde_yaml::from_str(&doc).unwrap_or_else(|e| panic!("deploy/k8s/{file}: {e}"));
            if value.get("kind").is_some() {
                out.push((file.clone(), merged(&value, true)));
            }
        }
    }
    out
}

/// A ConfigMap's or Secret's keys and (example) values.
fn data_of(object: &Value) -> BTreeMap<String, String> {
    let mut out = environment(object.get("data"));
    out.extend(environment(object.get("stringData")));
    out
}

fn k8s_launches(binaries: &BTreeSet<String>) -> (Vec<Launch>, BTreeSet<String>) {
    let objects = k8s_objects();
    let by_kind = |kind: &str| -> BTreeMap<String, Value> {
        objects
            .iter()
            .filter(|(_, o)| o["kind"].as_str() == Some(kind))
            .filter_map(|(_, o)| Some((o["metadata"]["name"].as_str()?.to_owned(), o.clone())))
            .collect()
    };
    let config_maps = by_kind("ConfigMap");
    let secrets = by_kind("Secret");
    let pgbouncer: BTreeSet<String> = by_kind("Service")
        .into_keys()
        .filter(|n| n.contains("pgbouncer"))
        .collect();
    let lookup = |kind: &str, reference: &Value| -> BTreeMap<String, String> {
        let name = reference["name"].as_str().unwrap_or("");
        let source = if kind == "configMap" {
            &config_maps
        } else {
            &secrets
        };
        let object = source
            .get(name)
            .unwrap_or_else(|| panic!("deploy/k8s: no {kind} named {name}"));
        data_of(object)
    };
    let mut launches = Vec::new();
    for (file, object) in &objects {
        let spec = match object["kind"].as_str() {
            Some("Deployment" | "StatefulSet" | "DaemonSet" | "Job") => {
                &object["spec"]["template"]["spec"]
            }
            Some("CronJob") => &object["spec"]["jobTemplate"]["spec"]["template"]["spec"],
            _ => continue,
        };
        let containers = spec["containers"]
            .as_sequence()
            .into_iter()
            .chain(spec["initContainers"].as_sequence())
            .flatten();
        for container in containers {
            let mut argv = strings(container.get("command"));
            argv.extend(strings(container.get("args")));
            let Some(role) = role_of(&argv, binaries) else {
                continue;
            };
            let mut env = BTreeMap::new();
            for from in container["envFrom"].as_sequence().into_iter().flatten() {
                let prefix = from["prefix"].as_str().unwrap_or("");
                for (kind, key) in [("configMap", "configMapRef"), ("secret", "secretRef")] {
                    if let Some(reference) = from.get(key) {
                        for (k, v) in lookup(kind, reference) {
                            env.insert(format!("{prefix}{k}"), v);
                        }
                    }
                }
            }
            for var in container["env"].as_sequence().into_iter().flatten() {
                let name = var["name"].as_str().expect("env name").to_owned();
                let value = if let Some(v) = var.get("value") {
                    scalar(v).unwrap_or_default()
                } else if let Some(r) = var["valueFrom"].get("configMapKeyRef") {
                    let key = r["key"].as_str().unwrap_or("");
                    lookup("configMap", r).get(key).cloned().unwrap_or_default()
                } else if let Some(r) = var["valueFrom"].get("secretKeyRef") {
                    let key = r["key"].as_str().unwrap_or("");
                    lookup("secret", r).get(key).cloned().unwrap_or_default()
                } else {
                    String::new()
                };
                env.insert(name, value);
            }
            launches.push(Launch {
                at: format!(
                    "deploy/k8s/{file} {} {}",
                    object["metadata"]["name"].as_str().unwrap_or("?"),
                    container["name"].as_str().unwrap_or("?")
                ),
                object: format!(
                    "{}/{}",
                    object["kind"].as_str().unwrap_or("?"),
                    object["metadata"]["name"].as_str().unwrap_or("?")
                ),
                role,
                env,
            });
        }
    }
    (launches, pgbouncer)
}

#[test]
fn kubernetes_gives_each_binary_what_it_reads_and_needs() {
    let code = config_code();
    let roles = roles(&code);
    let routes = documented_routes();
    let binaries: BTreeSet<String> = workspace_binaries().into_keys().collect();
    let (launches, pgbouncer) = k8s_launches(&binaries);
    assert!(!pgbouncer.is_empty(), "deploy/k8s has no PgBouncer Service");
    let mut problems = Vec::new();
    let run: BTreeSet<String> = launches
        .iter()
        .map(|l| l.role.split_whitespace().next().unwrap_or("").to_owned())
        .collect();
    for missing in binaries.difference(&run) {
        problems.push(format!("deploy/k8s runs no {missing}"));
    }
    for launch in &launches {
        problems.extend(check_launch(
            launch,
            &roles,
            &routes,
            &pgbouncer,
            &code.config_var,
        ));
    }
    assert!(problems.is_empty(), "{}", problems.join("\n"));
}

#[test]
fn the_variable_checks_see_what_is_wrong() {
    let code = config_code();
    let roles = roles(&code);
    assert!(
        roles["oncehook-api"].known.contains("ONCEHOOK_API_ADDR")
            && !roles["oncehook-api"].known.contains("ONCEHOOK_AMQP_URL"),
        "{:?}",
        roles["oncehook-api"]
    );
    assert!(roles["oncehookctl"].known.contains("ONCEHOOK_API_KEY"));
    assert!(
        roles["oncehook-worker"]
            .known
            .contains("ONCEHOOK_RECONCILE_INTERVAL")
    );
    let routes = BTreeMap::from([
        ("oncehook-worker".to_owned(), Route::PgBouncer),
        ("oncehook-ingest".to_owned(), Route::None),
    ]);
    let pgbouncer = BTreeSet::from(["pgbouncer".to_owned()]);
    let launch = |role: &str, env: &[(&str, &str)]| Launch {
        at: "here".to_owned(),
        object: "here".to_owned(),
        role: role.to_owned(),
        env: env
            .iter()
            .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
            .collect(),
    };
    let check = |l: &Launch| check_launch(l, &roles, &routes, &pgbouncer, &code.config_var);
    let good = launch(
        "oncehook-worker",
        &[
            ("ONCEHOOK_DATABASE_URL", "postgres://u:p@pgbouncer:6432/db"),
            ("ONCEHOOK_DATABASE_POOLER", "transaction"),
            ("ONCEHOOK_AMQP_URL", "amqp://rabbitmq"),
        ],
    );
    assert!(check(&good).is_empty(), "{:?}", check(&good));
    let around = launch(
        "oncehook-worker",
        &[
            ("ONCEHOOK_DATABASE_URL", "postgres://u:p@postgres:5432/db"),
            ("ONCEHOOK_AMQP_URL", "amqp://rabbitmq"),
            ("ONCEHOOK_SMTP_URL", "smtp://mail"),
        ],
    );
    let found = check(&around).join("\n");
    assert!(
        found.contains("through PgBouncer") && found.contains("ONCEHOOK_SMTP_URL"),
        "{found}"
    );
    let unpooled = launch(
        "oncehook-worker",
        &[
            ("ONCEHOOK_DATABASE_URL", "postgres://u:p@pgbouncer:6432/db"),
            ("ONCEHOOK_AMQP_URL", "amqp://rabbitmq"),
        ],
    );
    assert!(
        check(&unpooled)
            .join("\n")
            .contains("ONCEHOOK_DATABASE_POOLER"),
        "{:?}",
        check(&unpooled)
    );
    let ingest = launch("oncehook-ingest", &[("ONCEHOOK_AMQP_URL", "amqp://r")]);
    let found = check(&ingest).join("\n");
    assert!(found.contains("ONCEHOOK_CONFIG"), "{found}");
}

// --- database roles: the owner migrates, every binary is oncehook_service ----

/// The variable `oncehookctl migrate` gives the binaries' role its
/// password from (crates/ops/src/migrate.rs).
const SERVICE_ROLE_PASSWORD: &str = "ONCEHOOK_SERVICE_ROLE_PASSWORD";

/// The user and password of a `postgres://user:password@host…` URL.
fn url_credentials(url: &str) -> (&str, &str) {
    let rest = url.split_once("://").map_or(url, |(_, r)| r);
    let userinfo = rest.rsplit_once('@').map_or("", |(u, _)| u);
    userinfo.split_once(':').unwrap_or((userinfo, ""))
}

/// What is wrong with the roles a deploy file's launches connect as
/// (docs/tenants.md, "The binaries' role"): `oncehookctl migrate` (and
/// `migrate --finish`) as the tables' owner, never as the binaries' role,
/// and given the binaries' role's password; every other launch that uses
/// the database as [`SERVICE_ROLE`], never as the owner (which bypasses
/// row-level security), with the password the migrate step sets. Returns
/// the problems and that password, as the file writes it.
fn role_problems(launches: &[Launch]) -> (Vec<String>, BTreeSet<String>) {
    use oncehook_common::store::scope::SERVICE_ROLE;
    let mut problems = Vec::new();
    let mut owners = BTreeSet::new();
    let mut passwords = BTreeSet::new();
    for launch in launches.iter().filter(|l| l.role == "oncehookctl migrate") {
        let Some(url) = launch.env.get("ONCEHOOK_DATABASE_URL") else {
            continue;
        };
        let (user, _) = url_credentials(url);
        if user == SERVICE_ROLE {
            problems.push(format!(
                "{}: oncehookctl migrate connects as {SERVICE_ROLE}, which owns no table: the migrate step runs as the tables' owner",
                launch.at
            ));
        } else {
            owners.insert(user.to_owned());
        }
        match launch.env.get(SERVICE_ROLE_PASSWORD) {
            Some(p) if !p.is_empty() => {
                passwords.insert(p.clone());
            }
            _ => problems.push(format!(
                "{}: oncehookctl migrate is not given {SERVICE_ROLE_PASSWORD}: {SERVICE_ROLE} would have no password to log in with",
                launch.at
            )),
        }
    }
    if owners.is_empty() {
        problems.push("no oncehookctl migrate connects as the tables' owner".to_owned());
    }
    for launch in launches.iter().filter(|l| l.role != "oncehookctl migrate") {
        let Some(url) = launch.env.get("ONCEHOOK_DATABASE_URL") else {
            continue;
        };
        let (user, password) = url_credentials(url);
        if owners.contains(user) {
            problems.push(format!(
                "{}: {} connects as {user}, the tables' owner (the migrate step's role), which row-level security does not hold: give it {SERVICE_ROLE}'s URL",
                launch.at, launch.role
            ));
        } else if user != SERVICE_ROLE {
            problems.push(format!(
                "{}: {} connects as {user:?}, not as the binaries' role {SERVICE_ROLE}",
                launch.at, launch.role
            ));
        } else {
            passwords.insert(password.to_owned());
        }
    }
    if passwords.len() > 1 {
        problems.push(format!(
            "{SERVICE_ROLE}'s password comes from more than one place: {passwords:?}"
        ));
    }
    (problems, passwords)
}

/// PgBouncer's users (a `userlist.txt`): name and password per line.
fn userlist(text: &str) -> BTreeMap<String, String> {
    text.lines()
        .filter_map(|l| {
            let mut quoted = l.trim().split('"').skip(1).step_by(2);
            Some((quoted.next()?.to_owned(), quoted.next()?.to_owned()))
        })
        .collect()
}

#[test]
fn compose_connects_every_binary_as_the_service_role() {
    use oncehook_common::store::scope::SERVICE_ROLE;
    let binaries: BTreeSet<String> = workspace_binaries().into_keys().collect();
    let (launches, _) = compose_launches(&binaries);
    let (mut problems, passwords) = role_problems(&launches);
    // PgBouncer logs in to Postgres as DB_USER, with DB_PASSWORD: the
    // binaries' role and its password, never the owner.
    let pgbouncer = compose_pgbouncer_env();
    if pgbouncer.get("DB_USER").map(String::as_str) != Some(SERVICE_ROLE) {
        problems.push(format!(
            "compose.yaml's PgBouncer logs in to Postgres as {:?}, not {SERVICE_ROLE}",
            pgbouncer.get("DB_USER")
        ));
    }
    match pgbouncer.get("DB_PASSWORD") {
        Some(p) if passwords.contains(p) => {}
        other => problems.push(format!(
            "compose.yaml's PgBouncer has {SERVICE_ROLE}'s password from {other:?}; the binaries and the migrate step from {passwords:?}"
        )),
    }
    assert!(problems.is_empty(), "{}", problems.join("\n"));
}

#[test]
fn kubernetes_connects_every_binary_as_the_service_role() {
    use oncehook_common::store::scope::SERVICE_ROLE;
    let binaries: BTreeSet<String> = workspace_binaries().into_keys().collect();
    let (launches, _) = k8s_launches(&binaries);
    let (mut problems, passwords) = role_problems(&launches);
    // The userlist lets the binaries' role in, with the same password, and
    // not the owner; PgBouncer logs in to Postgres as its client did.
    let users = k8s_objects()
        .into_iter()
        .filter(|(_, o)| o["kind"].as_str() == Some("Secret"))
        .find_map(|(_, o)| data_of(&o).get("userlist.txt").cloned())
        .map(|text| userlist(&text))
        .expect("a Secret with PgBouncer's userlist.txt in deploy/k8s");
    match users.get(SERVICE_ROLE) {
        Some(p) if passwords.contains(p) => {}
        other => problems.push(format!(
            "PgBouncer's userlist has {SERVICE_ROLE} with {other:?}; the binaries' URLs and the migrate Jobs have {passwords:?}"
        )),
    }
    for user in users.keys().filter(|u| *u != SERVICE_ROLE) {
        problems.push(format!(
            "PgBouncer's userlist lets in {user}: only the binaries' role goes through it"
        ));
    }
    for (name, entry) in ini_section(&k8s_pgbouncer_ini(), "databases") {
        for user in entry
            .split_whitespace()
            .filter_map(|w| w.strip_prefix("user="))
        {
            if user != SERVICE_ROLE {
                problems.push(format!(
                    "pgbouncer.ini's database {name} logs in to Postgres as {user}"
                ));
            }
        }
    }
    assert!(problems.is_empty(), "{}", problems.join("\n"));
}

#[test]
fn the_role_check_sees_a_binary_given_the_owners_url() {
    let launch = |role: &str, env: &[(&str, &str)]| Launch {
        at: "here".to_owned(),
        object: "here".to_owned(),
        role: role.to_owned(),
        env: env
            .iter()
            .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
            .collect(),
    };
    let migrate = launch(
        "oncehookctl migrate",
        &[
            (
                "ONCEHOOK_DATABASE_URL",
                "postgres://owner:o@postgres:5432/db",
            ),
            (SERVICE_ROLE_PASSWORD, "s"),
        ],
    );
    let worker = |url: &str| launch("oncehook-worker", &[("ONCEHOOK_DATABASE_URL", url)]);
    let good = [
        migrate,
        worker("postgres://oncehook_service:s@postgres:5432/db"),
    ];
    let (problems, passwords) = role_problems(&good);
    assert!(problems.is_empty(), "{problems:?}");
    assert_eq!(passwords, BTreeSet::from(["s".to_owned()]));
    let owner = [
        good[0].clone(),
        worker("postgres://owner:o@pgbouncer:6432/db"),
    ];
    let found = role_problems(&owner).0.join("\n");
    assert!(
        found.contains("connects as owner, the tables' owner"),
        "{found}"
    );
    let other = [
        good[0].clone(),
        worker("postgres://oncehook_service:t@postgres:5432/db"),
    ];
    let found = role_problems(&other).0.join("\n");
    assert!(found.contains("more than one place"), "{found}");
    let no_password = [launch(
        "oncehookctl migrate",
        &[(
            "ONCEHOOK_DATABASE_URL",
            "postgres://owner:o@postgres:5432/db",
        )],
    )];
    let found = role_problems(&no_password).0.join("\n");
    assert!(found.contains(SERVICE_ROLE_PASSWORD), "{found}");
    assert_eq!(
        userlist("\"oncehook_service\" \"pw\"\n"),
        BTreeMap::from([("oncehook_service".to_owned(), "pw".to_owned())])
    );
}

// --- images: pinned, and a PgBouncer without the known holes -----------------

/// The oldest PgBouncer without CVE-2026-6664 (a remote crash through a
/// malformed SCRAM packet) and CVE-2026-6666 (a crash on a server error
/// without SQLSTATE).
const PGBOUNCER_AT_LEAST: (u32, u32, u32) = (1, 25, 2);

/// Every file under `rel`, recursively, relative to the root.
fn files_under(rel: &str, out: &mut Vec<String>) {
    for name in files_in(rel) {
        let path = format!("{rel}/{name}");
        if root().join(&path).is_dir() {
            files_under(&path, out);
        } else {
            out.push(path);
        }
    }
}

/// `${VAR:-default}` (and `${VAR-default}`) as Compose resolves it with the
/// variable unset; a value without a default stays as it is.
fn compose_default(value: &str) -> String {
    let Some(inner) = value.strip_prefix("${").and_then(|v| v.strip_suffix('}')) else {
        return value.to_owned();
    };
    match inner.split_once(":-").or_else(|| inner.split_once('-')) {
        Some((_, default)) => default.to_owned(),
        None => value.to_owned(),
    }
}

/// Every `image:` value of a YAML value, with where it is.
fn yaml_images(value: &Value, path: &str, out: &mut Vec<(String, String)>) {
    match value {
        Value::Mapping(map) => {
            for (k, v) in map {
                let key = scalar(k).unwrap_or_default();
                let here = format!("{path}.{key}");
                match (key.as_str(), v) {
                    ("image", Value::String(image)) => out.push((here, image.clone())),
                    _ => yaml_images(v, &here, out),
                }
            }
        }
        Value::Sequence(items) => {
            for (i, v) in items.iter().enumerate() {
                yaml_images(v, &format!("{path}[{i}]"), out);
            }
        }
        _ => {}
    }
}

/// The images a Dockerfile's `FROM` lines name, `ARG` defaults substituted;
/// `FROM` an earlier stage is not an image.
fn dockerfile_images(text: &str) -> Vec<String> {
    let mut args: BTreeMap<String, String> = BTreeMap::new();
    let mut stages = BTreeSet::new();
    let mut out = Vec::new();
    for ins in instructions(text) {
        let mut words = ins.split_whitespace();
        match words.next().map(str::to_ascii_uppercase).as_deref() {
            Some("ARG") => {
                if let Some((name, value)) = words.next().and_then(|a| a.split_once('=')) {
                    args.insert(name.to_owned(), value.trim_matches('"').to_owned());
                }
            }
            Some("FROM") => {
                let rest: Vec<&str> = words.filter(|w| !w.starts_with("--")).collect();
                let Some(image) = rest.first() else { continue };
                let mut image = (*image).to_owned();
                for (name, value) in &args {
                    image = image
                        .replace(&format!("${{{name}}}"), value)
                        .replace(&format!("${name}"), value);
                }
                if !stages.contains(&image) {
                    out.push(image);
                }
                if let [_, as_word, stage] = rest.as_slice()
                    && as_word.eq_ignore_ascii_case("as")
                {
                    stages.insert((*stage).to_owned());
                }
            }
            _ => {}
        }
    }
    out
}

/// The kustomization's `images:` overrides: name → the reference they make.
fn kustomize_images() -> BTreeMap<String, String> {
    let k: Value =
        serde_yaml::from_str(&read("deploy/k8s/kustomization.yaml")).expect("kustomization.yaml");
    let mut out = BTreeMap::new();
    for entry in k["images"].as_sequence().into_iter().flatten() {
        let Some(name) = entry["name"].as_str() else {
            continue;
        };
        let new_name = entry["newName"].as_str().unwrap_or(name);
        let reference = match (entry.get("digest"), entry.get("newTag")) {
            (Some(d), _) => format!("{new_name}@{}", scalar(d).unwrap_or_default()),
            (None, Some(t)) => format!("{new_name}:{}", scalar(t).unwrap_or_default()),
            (None, None) => new_name.to_owned(),
        };
        out.insert(name.to_owned(), reference);
    }
    out
}

/// Every image named under deploy/: `(where, reference)`, Compose's
/// defaults and the kustomization's overrides applied.
fn deploy_images() -> Vec<(String, String)> {
    let overrides = kustomize_images();
    let mut files = Vec::new();
    files_under("deploy", &mut files);
    let mut out = Vec::new();
    for file in files {
        let name = file.rsplit('/').next().unwrap_or(&file);
        if file.ends_with(".yaml") || file.ends_with(".yml") {
            let text = read(&file);
            let mut found = Vec::new();
            for (i, doc) in text.split("\n---").enumerate() {
                let Ok(value) = serde_yaml::from_str::<Value>(doc) else {
                    continue;
                };
                yaml_images(&value, &format!("{file}#{i}"), &mut found);
            }
            for (at, image) in found {
                let image = compose_default(&image);
                let image = if file.starts_with("deploy/k8s/") {
                    overrides.get(&image).cloned().unwrap_or(image)
                } else {
                    image
                };
                out.push((at, image));
            }
        } else if name.starts_with("Dockerfile") && !name.ends_with(".dockerignore") {
            for image in dockerfile_images(&read(&file)) {
                out.push((file.clone(), image));
            }
        }
    }
    out
}

/// Why `image` is not pinned, if it is not: no tag and no digest, the tag
/// `latest`, or a variable left unresolved.
fn unpinned(image: &str) -> Option<String> {
    if image.contains('$') {
        return Some("a variable without a default".to_owned());
    }
    if image.contains("@sha256:") {
        return None;
    }
    let last = image.rsplit('/').next().unwrap_or(image);
    match last.split_once(':') {
        None => Some("no tag".to_owned()),
        Some((_, "latest")) => Some("the tag `latest`".to_owned()),
        Some((_, "")) => Some("an empty tag".to_owned()),
        Some(_) => None,
    }
}

/// The PgBouncer version an image's tag names (`v1.25.2-p0`, `1.25.2`,
/// `1.22.1-16`): the first `major.minor[.patch]` in it.
fn tag_version(image: &str) -> Option<(u32, u32, u32)> {
    let without_digest = image.split('@').next().unwrap_or(image);
    let last = without_digest.rsplit('/').next().unwrap_or(without_digest);
    let (_, tag) = last.split_once(':')?;
    let start = tag.find(|c: char| c.is_ascii_digit())?;
    let numbers: Vec<u32> = tag[start..]
        .split(|c: char| !(c.is_ascii_digit() || c == '.'))
        .next()?
        .split('.')
        .filter_map(|n| n.parse().ok())
        .collect();
    match numbers.as_slice() {
        [major, minor] => Some((*major, *minor, 0)),
        [major, minor, patch, ..] => Some((*major, *minor, *patch)),
        _ => None,
    }
}

/// The problems of the images: unpinned, or a PgBouncer too old (or whose
/// version its tag does not tell).
fn image_problems(images: &[(String, String)]) -> Vec<String> {
    let mut problems = Vec::new();
    for (at, image) in images {
        if let Some(why) = unpinned(image) {
            problems.push(format!("{at}: {image} is not pinned ({why})"));
            continue;
        }
        let name = image.split(['@', ':']).next().unwrap_or(image);
        if !name
            .rsplit('/')
            .next()
            .unwrap_or(name)
            .contains("pgbouncer")
        {
            continue;
        }
        match tag_version(image) {
            Some(v) if v >= PGBOUNCER_AT_LEAST => {}
            Some((a, b, c)) => problems.push(format!(
                "{at}: {image} runs PgBouncer {a}.{b}.{c}, before 1.25.2 (CVE-2026-6664, CVE-2026-6666)"
            )),
            None => problems.push(format!(
                "{at}: {image}: its tag does not say which PgBouncer it runs (1.25.2 or later is needed)"
            )),
        }
    }
    problems
}

#[test]
fn every_image_under_deploy_is_pinned_and_pgbouncer_has_no_known_hole() {
    let images = deploy_images();
    let names: Vec<&str> = images.iter().map(|(_, i)| i.as_str()).collect();
    assert!(
        names.iter().any(|i| i.contains("pgbouncer"))
            && names.iter().filter(|i| i.contains("pgbouncer")).count() >= 2
            && names.iter().any(|i| i.starts_with("debian:"))
            && names
                .iter()
                .any(|i| i.ends_with("oncehook:0.6.0") || i.contains("/oncehook:")),
        "the images under deploy/ were not all found: {images:#?}"
    );
    let problems = image_problems(&images);
    assert!(problems.is_empty(), "{}", problems.join("\n"));
}

#[test]
fn the_image_checks_see_an_unpinned_image_and_an_old_pgbouncer() {
    let bad = [
        "edoburu/pgbouncer:latest",
        "edoburu/pgbouncer",
        "edoburu/pgbouncer:v1.23.1-p3",
        "edoburu/pgbouncer:v1.25.1-p0",
        "ghcr.io/example/pgbouncer:1.22.1-16",
        "axllent/mailpit",
        "registry.example.com:5000/oncehook",
        "${UNSET}",
    ];
    for image in bad {
        let found = image_problems(&[("here".to_owned(), image.to_owned())]);
        assert_eq!(found.len(), 1, "{image}: {found:?}");
    }
    let good = [
        "edoburu/pgbouncer:v1.25.2-p0",
        "edoburu/pgbouncer:v1.26.0-p1@sha256:0123",
        "postgres:16",
        "registry.example.com:5000/oncehook:0.6.0",
        "debian:bookworm-slim",
        "x@sha256:abcd",
    ];
    for image in good {
        let found = image_problems(&[("here".to_owned(), image.to_owned())]);
        assert!(found.is_empty(), "{image}: {found:?}");
    }
    assert_eq!(
        compose_default("${A:-edoburu/pgbouncer}"),
        "edoburu/pgbouncer"
    );
    assert_eq!(
        dockerfile_images(
            "ARG R=bookworm\nFROM rust:1.94-${R} AS builder\nFROM builder\nFROM debian:${R}-slim\n"
        ),
        vec![
            "rust:1.94-bookworm".to_owned(),
            "debian:bookworm-slim".to_owned()
        ]
    );
}

// --- PgBouncer's settings: the tests' own ------------------------------------

/// The `[pgbouncer]` section of a `pgbouncer.ini`.
fn ini_section(text: &str, section: &str) -> BTreeMap<String, String> {
    let mut out = BTreeMap::new();
    let mut inside = false;
    for line in text.lines().map(str::trim) {
        if line.starts_with('[') {
            inside = line == format!("[{section}]");
            continue;
        }
        if !inside || line.starts_with(';') || line.starts_with('#') {
            continue;
        }
        if let Some((k, v)) = line.split_once('=') {
            out.insert(k.trim().to_owned(), v.trim().to_owned());
        }
    }
    out
}

/// deploy/k8s's `pgbouncer.ini` (the ConfigMap that carries one).
fn k8s_pgbouncer_ini() -> String {
    k8s_objects()
        .into_iter()
        .filter(|(_, o)| o["kind"].as_str() == Some("ConfigMap"))
        .find_map(|(_, o)| data_of(&o).get("pgbouncer.ini").cloned())
        .expect("a ConfigMap with pgbouncer.ini in deploy/k8s")
}

/// compose.yaml's PgBouncer service: its environment.
fn compose_pgbouncer_env() -> BTreeMap<String, String> {
    let file = merged(&compose_file(), true);
    let services = file["services"].as_mapping().expect("services");
    let (_, service) = services
        .iter()
        .find(|(_, s)| compose_default(s["image"].as_str().unwrap_or("")).contains("pgbouncer"))
        .expect("a PgBouncer service in compose.yaml");
    environment(service.get("environment"))
}

/// The settings a client of the pooler depends on — `pool_mode`,
/// `server_reset_query`, `server_reset_query_always`,
/// `ignore_startup_parameters` and `max_prepared_statements` — are the test
/// harness's (`oncehook_e2e::pgbouncer::SHIPPED_SETTINGS`, which every
/// PgBouncer of the tests runs) in compose.yaml (the image's variables,
/// `POOL_MODE`, …), in deploy/k8s/pgbouncer.yaml's `pgbouncer.ini`, and the
/// compose stand-in's entrypoint writes each of them. The tested
/// configuration is the shipped one.
#[test]
fn pgbouncer_runs_the_tests_settings_in_compose_and_kubernetes() {
    use oncehook_e2e::pgbouncer::SHIPPED_SETTINGS;
    let compared: Vec<&str> = SHIPPED_SETTINGS.iter().map(|(k, _)| *k).collect();
    for needed in [
        "pool_mode",
        "server_reset_query",
        "server_reset_query_always",
        "ignore_startup_parameters",
        "max_prepared_statements",
    ] {
        assert!(
            compared.contains(&needed),
            "SHIPPED_SETTINGS lacks {needed}"
        );
    }
    let compose = compose_pgbouncer_env();
    let k8s = ini_section(&k8s_pgbouncer_ini(), "pgbouncer");
    let standin = read("deploy/compose/standins/pgbouncer-entrypoint.sh");
    let mut problems = Vec::new();
    for (name, tested) in SHIPPED_SETTINGS {
        let var = name.to_ascii_uppercase();
        match compose.get(&var) {
            Some(v) if v == tested => {}
            other => problems.push(format!(
                "compose.yaml pgbouncer: {var} is {other:?}; the tests run {name} = {tested}"
            )),
        }
        match k8s.get(name) {
            Some(v) if v == tested => {}
            other => problems.push(format!(
                "deploy/k8s/pgbouncer.yaml: {name} is {other:?}; the tests run {name} = {tested}"
            )),
        }
        if !standin.contains(&format!("${{{var}")) {
            problems.push(format!(
                "deploy/compose/standins/pgbouncer-entrypoint.sh does not read {var}"
            ));
        }
    }
    assert!(
        problems.is_empty(),
        "PgBouncer's settings ({}) differ from the tests':\n{}",
        compared.join(", "),
        problems.join("\n")
    );
    eprintln!(
        "compared in compose.yaml, deploy/k8s/pgbouncer.yaml and the tests' PgBouncer: {}",
        compared.join(", ")
    );
}

// --- the connection budget ---------------------------------------------------

/// A line of deploy/README.md's budget tables, by how its first cell starts.
const BUDGET_LINES: &[(&str, &str)] = &[
    ("workers", "workers"),
    ("API", "api"),
    ("console", "console"),
    ("PgBouncer", "pgbouncer"),
    ("the migration job", "migration"),
    ("operators", "operators"),
    ("`superuser_reserved_connections`", "superuser"),
    ("total", "total"),
    ("Postgres `max_connections`", "max_connections"),
];

/// The budget table of deploy/README.md whose header starts with `header`
/// ("Kubernetes, at the most"): each line's key and the number of its last
/// cell.
fn documented_budget(header: &str) -> BTreeMap<String, u64> {
    let readme = read("deploy/README.md");
    let table = readme
        .split(&format!("| {header}"))
        .nth(1)
        .unwrap_or_else(|| panic!("deploy/README.md has no budget table \"{header}\""));
    let mut out = BTreeMap::new();
    for row in table.lines().skip(2).take_while(|l| l.starts_with('|')) {
        let cells: Vec<&str> = row.split('|').map(str::trim).collect();
        let first = cells.get(1).copied().unwrap_or("");
        let number = cells
            .iter()
            .rev()
            .find(|c| !c.is_empty())
            .and_then(|c| c.parse::<u64>().ok())
            .unwrap_or_else(|| panic!("deploy/README.md: {row}: no number in its last cell"));
        let key = BUDGET_LINES
            .iter()
            .find(|(start, _)| first.starts_with(start))
            .map(|(_, key)| *key)
            .unwrap_or_else(|| panic!("deploy/README.md: {row}: not a line of the budget"));
        out.insert(key.to_owned(), number);
    }
    out
}

/// What is wrong with a budget: a line the files give another figure than
/// the README, a total that is not the sum of its lines, a total above
/// `max_connections`.
fn budget_problems(
    what: &str,
    computed: &BTreeMap<String, u64>,
    documented: &BTreeMap<String, u64>,
) -> Vec<String> {
    let mut problems = Vec::new();
    for (key, value) in computed {
        match documented.get(key) {
            Some(d) if d == value => {}
            other => problems.push(format!(
                "{what}: deploy/README.md's line \"{key}\" says {other:?}, the files give {value}"
            )),
        }
    }
    let reserves = ["operators", "superuser"];
    for key in reserves.iter().chain(&["total", "max_connections"]) {
        if !documented.contains_key(*key) {
            problems.push(format!("{what}: deploy/README.md has no line \"{key}\""));
        }
    }
    let sum: u64 = computed.values().sum::<u64>()
        + reserves
            .iter()
            .filter_map(|k| documented.get(*k))
            .sum::<u64>();
    let total = documented.get("total").copied().unwrap_or(0);
    if total != sum {
        problems.push(format!(
            "{what}: deploy/README.md's total is {total}, its lines (as the files give them) add up to {sum}"
        ));
    }
    let max = documented.get("max_connections").copied().unwrap_or(0);
    if sum > max {
        problems.push(format!(
            "{what}: {sum} connections straight to Postgres at the most, above its max_connections ({max}): lower the replicas (KEDA's maxReplicaCount) or the pools, or raise max_connections"
        ));
    }
    problems
}

/// How many connections `oncehookctl migrate` opens (crates/ops/src/migrate.rs).
fn migrate_pool() -> u64 {
    let source = read("crates/ops/src/migrate.rs");
    source
        .split("Pooled::connect(&settings.database, ")
        .nth(1)
        .and_then(|rest| rest.split(',').next())
        .and_then(|n| n.trim().parse().ok())
        .expect("crates/ops/src/migrate.rs: Pooled::connect(&settings.database, N, …)")
}

/// A Deployment's pods at the most: its autoscaler's maximum (or its
/// replicas), plus what a rolling update adds (`maxSurge`, 25% by default;
/// none for `Recreate`).
fn peak_pods(deployment: &Value, autoscaler_max: Option<u64>) -> u64 {
    let most =
        autoscaler_max.unwrap_or_else(|| deployment["spec"]["replicas"].as_u64().unwrap_or(1));
    let strategy = &deployment["spec"]["strategy"];
    if strategy["type"].as_str() == Some("Recreate") {
        return most;
    }
    let surge = match strategy["rollingUpdate"].get("maxSurge") {
        Some(Value::Number(n)) => n.as_u64().unwrap_or(0),
        Some(Value::String(p)) if p.ends_with('%') => {
            let pct: u64 = p.trim_end_matches('%').parse().unwrap_or(25);
            (most * pct).div_ceil(100)
        }
        _ => (most * 25).div_ceil(100),
    };
    most + surge
}

/// The budget line a binary going straight to Postgres counts in.
fn budget_line_of(role: &str) -> Option<&'static str> {
    match role {
        "oncehook-worker" => Some("workers"),
        "oncehook-api" => Some("api"),
        "oncehook-console" => Some("console"),
        "oncehookctl migrate" => Some("migration"),
        _ => None,
    }
}

fn pool_size_of(launch: &Launch, problems: &mut Vec<String>) -> u64 {
    match launch
        .env
        .get("ONCEHOOK_DATABASE_MAX_CONNECTIONS")
        .and_then(|v| v.parse().ok())
    {
        Some(n) => n,
        None => {
            problems.push(format!(
                "{}: {} goes straight to Postgres without ONCEHOOK_DATABASE_MAX_CONNECTIONS: the budget cannot count it",
                launch.at, launch.role
            ));
            0
        }
    }
}

#[test]
fn the_kubernetes_connection_budget_fits_max_connections() {
    let binaries: BTreeSet<String> = workspace_binaries().into_keys().collect();
    let (launches, pgbouncer_hosts) = k8s_launches(&binaries);
    let objects = k8s_objects();
    let mut autoscaled: BTreeMap<String, u64> = BTreeMap::new();
    for (_, o) in &objects {
        let target = o["spec"]["scaleTargetRef"]["name"].as_str();
        let max = match o["kind"].as_str() {
            Some("ScaledObject") => o["spec"]["maxReplicaCount"].as_u64(),
            Some("HorizontalPodAutoscaler") => o["spec"]["maxReplicas"].as_u64(),
            _ => None,
        };
        if let (Some(target), Some(max)) = (target, max) {
            autoscaled.insert(format!("Deployment/{target}"), max);
        }
    }
    let deployment = |object: &str| {
        objects
            .iter()
            .find(|(_, o)| {
                format!(
                    "{}/{}",
                    o["kind"].as_str().unwrap_or(""),
                    o["metadata"]["name"].as_str().unwrap_or("")
                ) == object
            })
            .map(|(_, o)| o.clone())
    };
    let mut computed: BTreeMap<String, u64> = BTreeMap::new();
    let mut problems = Vec::new();
    for launch in &launches {
        let Some(url) = launch.env.get("ONCEHOOK_DATABASE_URL") else {
            continue;
        };
        if pgbouncer_hosts.contains(url_host(url)) {
            continue;
        }
        let Some(line) = budget_line_of(&launch.role) else {
            problems.push(format!(
                "{}: {} goes straight to Postgres and has no line in deploy/README.md's budget",
                launch.at, launch.role
            ));
            continue;
        };
        let connections = if launch.object.starts_with("Job/") {
            migrate_pool()
        } else {
            let object = deployment(&launch.object).expect("the launch's object");
            peak_pods(&object, autoscaled.get(&launch.object).copied())
                * pool_size_of(launch, &mut problems)
        };
        // Two migration Jobs never run at once: the larger one counts.
        let entry = computed.entry(line.to_owned()).or_default();
        *entry = if launch.object.starts_with("Job/") {
            (*entry).max(connections)
        } else {
            *entry + connections
        };
    }
    let ini = ini_section(&k8s_pgbouncer_ini(), "pgbouncer");
    let pool: u64 = ini
        .get("default_pool_size")
        .and_then(|v| v.parse().ok())
        .expect("default_pool_size in deploy/k8s's pgbouncer.ini");
    assert!(
        !ini.contains_key("reserve_pool_size") && !ini.contains_key("min_pool_size"),
        "count PgBouncer's reserve pool in the budget too"
    );
    let pgbouncers: Vec<Value> = objects
        .iter()
        .filter(|(_, o)| o["kind"].as_str() == Some("Deployment"))
        .filter(|(_, o)| {
            o["spec"]["template"]["spec"]["containers"]
                .as_sequence()
                .into_iter()
                .flatten()
                .any(|c| c["image"].as_str().unwrap_or("").contains("pgbouncer"))
        })
        .map(|(_, o)| o.clone())
        .collect();
    assert!(
        !pgbouncers.is_empty(),
        "no PgBouncer Deployment in deploy/k8s"
    );
    computed.insert(
        "pgbouncer".to_owned(),
        pgbouncers.iter().map(|d| peak_pods(d, None) * pool).sum(),
    );
    for line in ["workers", "api", "console", "migration"] {
        if !computed.contains_key(line) {
            problems.push(format!(
                "deploy/k8s: nothing counted for the line \"{line}\""
            ));
        }
    }
    let documented = documented_budget("Kubernetes, at the most");
    problems.extend(budget_problems("deploy/k8s", &computed, &documented));
    assert!(problems.is_empty(), "{}", problems.join("\n"));
    eprintln!("deploy/k8s: {computed:?} + reserves, of {documented:?}");
}

#[test]
fn the_compose_connection_budget_fits_max_connections() {
    let binaries: BTreeSet<String> = workspace_binaries().into_keys().collect();
    let (launches, pgbouncer_services) = compose_launches(&binaries);
    let file = merged(&compose_file(), true);
    let services = &file["services"];
    let replicas = |service: &str| {
        services[service]["deploy"]["replicas"]
            .as_u64()
            .unwrap_or(1)
    };
    let mut computed: BTreeMap<String, u64> = BTreeMap::new();
    let mut problems = Vec::new();
    for launch in &launches {
        let Some(url) = launch.env.get("ONCEHOOK_DATABASE_URL") else {
            continue;
        };
        // The ctl service (profile "tools") is the operators' reserve.
        if pgbouncer_services.contains(url_host(url)) || launch.role == "oncehookctl" {
            continue;
        }
        let Some(line) = budget_line_of(&launch.role) else {
            problems.push(format!(
                "{}: {} goes straight to Postgres and has no line in deploy/README.md's budget",
                launch.at, launch.role
            ));
            continue;
        };
        let connections = if launch.role == "oncehookctl migrate" {
            migrate_pool()
        } else {
            replicas(&launch.object) * pool_size_of(launch, &mut problems)
        };
        *computed.entry(line.to_owned()).or_default() += connections;
    }
    let pool: u64 = pgbouncer_services
        .iter()
        .map(|s| {
            let env = environment(services[s.as_str()].get("environment"));
            replicas(s)
                * env
                    .get("DEFAULT_POOL_SIZE")
                    .and_then(|v| v.parse::<u64>().ok())
                    .expect("DEFAULT_POOL_SIZE in compose.yaml's PgBouncer")
        })
        .sum();
    computed.insert("pgbouncer".to_owned(), pool);
    let documented = documented_budget("Compose, at the most");
    problems.extend(budget_problems("compose.yaml", &computed, &documented));
    assert!(problems.is_empty(), "{}", problems.join("\n"));
    eprintln!("compose.yaml: {computed:?} + reserves, of {documented:?}");
}

#[test]
fn the_budget_check_sees_a_maximum_that_does_not_fit() {
    let documented: BTreeMap<String, u64> = [
        ("workers", 126),
        ("pgbouncer", 30),
        ("operators", 5),
        ("superuser", 3),
        ("total", 164),
        ("max_connections", 200),
    ]
    .into_iter()
    .map(|(k, v)| (k.to_owned(), v))
    .collect();
    let fits: BTreeMap<String, u64> = [("workers", 126), ("pgbouncer", 30)]
        .into_iter()
        .map(|(k, v)| (k.to_owned(), v))
        .collect();
    assert!(budget_problems("here", &fits, &documented).is_empty());
    // KEDA's maximum raised to 30 (31 pods × 6) with nothing else changed.
    let mut raised = fits.clone();
    raised.insert("workers".to_owned(), 186);
    let found = budget_problems("here", &raised, &documented).join("\n");
    assert!(
        found.contains("\"workers\" says Some(126), the files give 186")
            && found.contains("above its max_connections (200)"),
        "{found}"
    );
    let worker: Value =
        serde_yaml::from_str("spec: {replicas: 3, strategy: {rollingUpdate: {maxSurge: 1}}}")
            .expect("yaml");
    assert_eq!(peak_pods(&worker, Some(20)), 21);
    let api: Value = serde_yaml::from_str("spec: {replicas: 2}").expect("yaml");
    assert_eq!(peak_pods(&api, None), 3);
    let console: Value =
        serde_yaml::from_str("spec: {replicas: 1, strategy: {type: Recreate}}").expect("yaml");
    assert_eq!(peak_pods(&console, None), 1);
}

/// The test harness runs each binary the way deploy/README.md (to which the
/// tests above hold both deploy files) routes it: the binaries it leaves
/// straight to Postgres behind PgBouncer (`env::STRAIGHT_TO_POSTGRES`, the
/// worker) are routed straight there, and none the files put behind
/// PgBouncer is among them.
#[test]
fn the_harness_routes_the_worker_as_the_deploy_files_do() {
    use oncehook_e2e::env::STRAIGHT_TO_POSTGRES;
    let routes = documented_routes();
    assert!(STRAIGHT_TO_POSTGRES.contains(&"oncehook-worker"));
    for bin in STRAIGHT_TO_POSTGRES {
        assert_eq!(
            routes.get(bin),
            Some(&Route::Postgres),
            "tests/support/env.rs runs {bin} straight to Postgres; deploy/README.md does not"
        );
    }
    for (bin, route) in &routes {
        if *route == Route::PgBouncer {
            assert!(
                !STRAIGHT_TO_POSTGRES.contains(&bin.as_str()),
                "deploy/README.md routes {bin} through PgBouncer; the harness runs it straight"
            );
        }
    }
}
