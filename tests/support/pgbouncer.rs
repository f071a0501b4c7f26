//! A real PgBouncer (Debian's package) in transaction mode in front of the
//! test's Postgres, for running the pipeline's tests through a pooler:
//! [`TestEnv`](crate::TestEnv) starts one per test when
//! `ONCEHOOK_TEST_POOLER=pgbouncer` and points the binaries the deploy
//! files put behind PgBouncer at it (with
//! `ONCEHOOK_DATABASE_POOLER=transaction`), for any database of the server
//! and any user ([`PgBouncer::url_for`]). Its settings that decide what a
//! client may rely on are [`SHIPPED_SETTINGS`], the ones both deploy files
//! set (`tests/tests/deploy_files.rs` compares them): `pool_mode =
//! transaction`, and prepared statements dropped whenever a server
//! connection changes hands.

use std::path::{Path, PathBuf};
use std::sync::Mutex;
use std::time::{Duration, Instant};

use crate::env::{postgres_host_port, postgres_url};
use crate::process::Proc;

/// The settings of `pgbouncer.ini` a client of the pooler depends on, as
/// deploy/compose/compose.yaml (`POOL_MODE`, `SERVER_RESET_QUERY`, …) and
/// deploy/k8s/pgbouncer.yaml set them: the harness runs exactly these, and
/// `tests/tests/deploy_files.rs` fails when either deploy file differs.
///
/// `server_reset_query = DEALLOCATE ALL` with `server_reset_query_always =
/// 1` is what makes sqlx safe here: with its statement cache off
/// (`ONCEHOOK_DATABASE_POOLER=transaction`) sqlx still prepares each
/// statement under a name, `sqlx_s_1`, `sqlx_s_2`, … counted from 1 on
/// every client connection, and never closes it. Without the reset a server
/// connection handed to another client still holds the first one's
/// `sqlx_s_1`, and that client's first statement fails ("prepared statement
/// \"sqlx_s_1\" already exists"); `tests/tests/pooler.rs` shows it.
///
/// `max_prepared_statements = 0`: PgBouncer 1.21+ can track prepared
/// statements itself, on by default from 1.24 (200); the deploy files turn
/// it off so the pinned 1.25 behaves as the 1.18 tested here, which has no
/// such setting (and refuses the line: [`PgBouncer::start`] writes it only
/// for a PgBouncer that knows it). Nothing here relies on it: the worker,
/// the one client that would gain from statements kept prepared, connects
/// straight to PostgreSQL.
pub const SHIPPED_SETTINGS: [(&str, &str); 5] = [
    ("pool_mode", "transaction"),
    ("server_reset_query", "DEALLOCATE ALL"),
    ("server_reset_query_always", "1"),
    ("ignore_startup_parameters", "extra_float_digits"),
    ("max_prepared_statements", "0"),
];

/// The first PgBouncer release with `max_prepared_statements`.
const PREPARED_STATEMENTS_SINCE: (u32, u32) = (1, 21);

/// The variable that routes the service binaries through PgBouncer.
pub const POOLER_ENV: &str = "ONCEHOOK_TEST_POOLER";

/// Whether this test run goes through PgBouncer.
pub fn wanted() -> bool {
    std::env::var(POOLER_ENV).is_ok_and(|v| v == "pgbouncer")
}

/// A running PgBouncer; stopped when dropped.
pub struct PgBouncer {
    pub port: u16,
    /// The test database's URL, which this PgBouncer's URLs are built from.
    database_url: String,
    /// `pgbouncer.ini` and `userlist.txt`, which [`PgBouncer::url_for`]
    /// extends at run time (then `RELOAD`).
    ini: PathBuf,
    userlist: PathBuf,
    /// The `[databases]` section's `*` line: every database of the server.
    server: String,
    /// The `[pgbouncer]` section's settings but the listener and the files.
    settings: Vec<(String, String)>,
    /// Users added to the userlist and aliases added to `[databases]`.
    added: Mutex<Added>,
    proc: Proc,
}

#[derive(Default)]
struct Added {
    users: Vec<String>,
    /// `(alias, its [databases] line)`.
    aliases: Vec<(String, String)>,
}

impl PgBouncer {
    /// Starts PgBouncer on a free port, forwarding every database to the
    /// Postgres server of `database_url`, with the deploy files' settings
    /// ([`SHIPPED_SETTINGS`]); waits until it accepts connections.
    pub fn start(dir: &Path, database_url: &str) -> PgBouncer {
        PgBouncer::start_with(dir, database_url, &[])
    }

    /// [`PgBouncer::start`] with some `[pgbouncer]` settings replaced (or
    /// added): `(name, value)`, an empty value writes `name =`. For a test
    /// that shows what a setting is for (`tests/tests/pooler.rs` drops the
    /// reset query).
    pub fn start_with(dir: &Path, database_url: &str, changed: &[(&str, &str)]) -> PgBouncer {
        let (pg_host, pg_port) = postgres_host_port(database_url);
        let settings = settings(changed);
        let dir = dir.join("pgbouncer");
        std::fs::create_dir_all(&dir).expect("create the pgbouncer folder");
        let port = crate::free_port();
        let userlist = dir.join("userlist.txt");
        std::fs::write(&userlist, "\"postgres\" \"\"\n").expect("write userlist");
        let ini = dir.join("pgbouncer.ini");
        let server = format!("host={pg_host} port={pg_port}");
        std::fs::write(&ini, ini_text(&server, &[], port, &userlist, &settings))
            .expect("write pgbouncer.ini");
        // PgBouncer refuses to run as root: drop to the postgres user, who
        // must be able to read the folder.
        let as_root = std::process::Command::new("id")
            .arg("-u")
            .output()
            .is_ok_and(|o| o.stdout.starts_with(b"0\n"));
        let mut args = vec![ini.display().to_string()];
        if as_root {
            for path in [dir.as_path(), ini.as_path(), userlist.as_path()] {
                let _ = std::process::Command::new("chmod")
                    .args(["a+rX", &path.display().to_string()])
                    .status();
            }
            let mut parent = dir.parent();
            while let Some(p) = parent {
                let _ = std::process::Command::new("chmod")
                    .args(["a+x", &p.display().to_string()])
                    .status();
                parent = p.parent().filter(|p| p.starts_with(std::env::temp_dir()));
            }
            args.insert(0, "postgres".to_owned());
            args.insert(0, "-u".to_owned());
        }
        let args: Vec<&str> = args.iter().map(String::as_str).collect();
        let proc = Proc::spawn_program(
            &pgbouncer_path(),
            "pgbouncer",
            dir.join("pgbouncer.log"),
            &[],
            &args,
        );
        let started = Instant::now();
        while std::net::TcpStream::connect(("127.0.0.1", port)).is_err() {
            assert!(
                started.elapsed() < Duration::from_secs(10),
                "pgbouncer did not listen on {port} within 10 s; log: {}",
                proc.log_text()
            );
            std::thread::sleep(Duration::from_millis(50));
        }
        PgBouncer {
            port,
            database_url: database_url.to_owned(),
            ini,
            userlist,
            server,
            settings,
            added: Mutex::new(Added::default()),
            proc,
        }
    }

    /// PgBouncer's process id (its sockets are the pooled connections'
    /// ends).
    pub fn pid(&self) -> u32 {
        self.proc.pid()
    }

    /// The URL through this PgBouncer that reaches what `direct` (a URL
    /// of the test's Postgres server) reaches: the same database as the
    /// same user, its query parameters kept (`application_name` passes
    /// through). PgBouncer does not pass a startup `options` parameter
    /// on; a URL with `options=-c name=value…` gets a database alias of
    /// its own whose server connections run `SET name = value` once when
    /// they open (`connect_query`), which is how a pooled deployment sets
    /// a session setting. A user other than `postgres` is added to the
    /// userlist. Both take effect by `RELOAD`.
    pub fn url_for(&self, direct: &str) -> String {
        let rest = direct.split_once("://").map_or(direct, |(_, r)| r);
        let (authority, path) = rest.split_once('/').unwrap_or((rest, ""));
        let user = authority
            .rsplit_once('@')
            .map(|(u, _)| u.split(':').next().unwrap_or(u).to_owned())
            .unwrap_or_else(|| "postgres".to_owned());
        let (database, query) = path.split_once('?').unwrap_or((path, ""));
        let mut settings = Vec::new();
        let mut kept = Vec::new();
        for pair in query.split('&').filter(|p| !p.is_empty()) {
            match pair.split_once('=') {
                Some(("options", value)) => {
                    let value = percent_decode(value);
                    let mut words = value.split_whitespace();
                    while let Some(word) = words.next() {
                        let setting = match word {
                            "-c" => words.next().unwrap_or_default().to_owned(),
                            w => w.strip_prefix("-c").unwrap_or(w).to_owned(),
                        };
                        let (name, val) = setting.split_once('=').unwrap_or_else(|| {
                            panic!("options {value:?}: only `-c name=value` is supported")
                        });
                        settings.push(format!("SET {name} = $${val}$$"));
                    }
                }
                _ => kept.push(pair),
            }
        }
        let mut reload = false;
        let mut added = self.added.lock().expect("pgbouncer additions");
        if user != "postgres" && !added.users.contains(&user) {
            added.users.push(user.clone());
            let mut text = std::fs::read_to_string(&self.userlist).expect("read userlist");
            text.push_str(&format!("\"{user}\" \"\"\n"));
            std::fs::write(&self.userlist, text).expect("write userlist");
            reload = true;
        }
        let mut target = database.to_owned();
        if !settings.is_empty() {
            let line = format!(
                "{} dbname={database} connect_query='{}'",
                self.server,
                settings.join("; ")
            );
            match added.aliases.iter().find(|(_, l)| *l == line) {
                Some((alias, _)) => target = alias.clone(),
                None => {
                    let alias = format!("{database}_s{}", added.aliases.len() + 1);
                    added.aliases.push((alias.clone(), line));
                    std::fs::write(
                        &self.ini,
                        ini_text(
                            &self.server,
                            &added.aliases,
                            self.port,
                            &self.userlist,
                            &self.settings,
                        ),
                    )
                    .expect("write pgbouncer.ini");
                    target = alias;
                    reload = true;
                }
            }
        }
        drop(added);
        if reload {
            self.admin("RELOAD");
        }
        let mut url = format!("postgres://{user}@127.0.0.1:{}/{target}", self.port);
        if !kept.is_empty() {
            url.push('?');
            url.push_str(&kept.join("&"));
        }
        url
    }

    /// Runs `command` on the admin console (simple protocol only: through
    /// psql); its rows, columns split on `|`.
    fn admin(&self, command: &str) -> Vec<Vec<String>> {
        let out = std::process::Command::new("psql")
            .args([
                "-d",
                &self.url("pgbouncer"),
                "-At",
                "-F",
                "|",
                "-c",
                command,
            ])
            .output()
            .expect("run psql against the pgbouncer admin console");
        assert!(
            out.status.success(),
            "pgbouncer {command}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        String::from_utf8_lossy(&out.stdout)
            .lines()
            .map(|l| l.split('|').map(str::to_owned).collect())
            .collect()
    }

    /// How many clients of `database` named `application_name` PgBouncer
    /// has now (`SHOW CLIENTS`).
    pub fn clients_named(&self, database: &str, application_name: &str) -> usize {
        let rows = self.admin("SHOW CLIENTS");
        // Columns: type, user, database, state, addr, port, local_addr,
        // local_port, connect_time, request_time, wait, wait_us,
        // close_needed, ptr, link, remote_pid, tls, application_name.
        rows.iter()
            .filter(|cols| {
                cols.get(2).is_some_and(|d| d == database)
                    && cols.last().is_some_and(|a| a == application_name)
            })
            .count()
    }

    /// The URL of `database` through this PgBouncer (`pgbouncer` is its
    /// admin console).
    pub fn url(&self, database: &str) -> String {
        postgres_url(&self.database_url, Some(("127.0.0.1", self.port)), database)
    }

    /// `(total_xact_count, total_query_count)` of `database` from the
    /// admin console's `SHOW STATS` (which speaks only the simple protocol:
    /// asked through psql).
    pub fn counts(&self, database: &str) -> (u64, u64) {
        // Columns: database, total_xact_count, total_query_count, ...
        self.admin("SHOW STATS")
            .into_iter()
            .find(|cols| cols.first().is_some_and(|d| d == database))
            .map(|cols| {
                let n = |i: usize| cols.get(i).and_then(|v| v.parse().ok()).unwrap_or(0);
                (n(1), n(2))
            })
            .unwrap_or((0, 0))
    }
}

/// The `[pgbouncer]` settings: [`SHIPPED_SETTINGS`] (but a setting the
/// installed PgBouncer does not know, which it would refuse), the harness's
/// own sizes, then `changed` replacing or adding.
fn settings(changed: &[(&str, &str)]) -> Vec<(String, String)> {
    let knows_prepared = version() >= PREPARED_STATEMENTS_SINCE;
    let mut out: Vec<(String, String)> = SHIPPED_SETTINGS
        .iter()
        .filter(|(name, _)| *name != "max_prepared_statements" || knows_prepared)
        .chain(&[
            ("admin_users", "postgres"),
            ("max_client_conn", "200"),
            ("default_pool_size", "10"),
        ])
        .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
        .collect();
    for (name, value) in changed {
        match out.iter_mut().find(|(k, _)| k == name) {
            Some(setting) => setting.1 = (*value).to_owned(),
            None => out.push(((*name).to_owned(), (*value).to_owned())),
        }
    }
    out
}

/// The installed PgBouncer's `(major, minor)`, from `pgbouncer --version`
/// ("PgBouncer 1.18.0"); asked once.
pub fn version() -> (u32, u32) {
    static VERSION: std::sync::OnceLock<(u32, u32)> = std::sync::OnceLock::new();
    *VERSION.get_or_init(|| {
        let out = std::process::Command::new(pgbouncer_path())
            .arg("--version")
            .output()
            .expect("run pgbouncer --version");
        let text = String::from_utf8_lossy(&out.stdout).into_owned();
        let number = text
            .lines()
            .find_map(|l| l.strip_prefix("PgBouncer "))
            .unwrap_or_else(|| panic!("pgbouncer --version said {text:?}"));
        let mut parts = number.trim().split('.').map(|p| p.parse().unwrap_or(0));
        (parts.next().unwrap_or(0), parts.next().unwrap_or(0))
    })
}

/// The configuration: every database of the server (`server`, the `*`
/// line), plus the aliases [`PgBouncer::url_for`] added, and `settings`.
fn ini_text(
    server: &str,
    aliases: &[(String, String)],
    port: u16,
    userlist: &Path,
    settings: &[(String, String)],
) -> String {
    let mut databases = String::new();
    for (alias, line) in aliases {
        databases.push_str(&format!("{alias} = {line}\n"));
    }
    let mut pgbouncer = String::new();
    for (name, value) in settings {
        pgbouncer.push_str(&format!("{name} = {value}\n"));
    }
    format!(
        "[databases]\n\
         {databases}\
         * = {server}\n\
         [pgbouncer]\n\
         listen_addr = 127.0.0.1\n\
         listen_port = {port}\n\
         unix_socket_dir =\n\
         auth_type = trust\n\
         auth_file = {userlist}\n\
         {pgbouncer}",
        userlist = userlist.display(),
    )
}

/// `%XX` escapes decoded (the query values of the tests' URLs).
fn percent_decode(s: &str) -> String {
    let bytes = s.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        if bytes[i] == b'%'
            && let Some(b) = s
                .get(i + 1..i + 3)
                .and_then(|h| u8::from_str_radix(h, 16).ok())
        {
            out.push(b);
            i += 3;
            continue;
        }
        out.push(if bytes[i] == b'+' { b' ' } else { bytes[i] });
        i += 1;
    }
    String::from_utf8_lossy(&out).into_owned()
}

/// Debian installs the binary outside the usual PATH of a test.
fn pgbouncer_path() -> String {
    for candidate in ["/usr/sbin/pgbouncer", "/usr/bin/pgbouncer"] {
        if Path::new(candidate).exists() {
            return candidate.to_owned();
        }
    }
    panic!("pgbouncer is not installed: `make test` installs it (deploy/local/tools.sh)")
}
