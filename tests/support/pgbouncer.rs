//! A real PgBouncer (Debian's package) in transaction mode in front of the
//! test's Postgres, for running the pipeline's tests through a pooler:
//! [`TestEnv`](crate::TestEnv) starts one per test when
//! `ONCEHOOK_TEST_POOLER=pgbouncer` and points every binary that uses the
//! database at it (with `ONCEHOOK_DATABASE_POOLER=transaction`), for any
//! database of the server and any user ([`PgBouncer::url_for`]). The settings are the ones
//! docs/operations.md asks for: `pool_mode = transaction`, and prepared
//! statements dropped whenever a server connection changes hands.

use std::path::{Path, PathBuf};
use std::sync::Mutex;
use std::time::{Duration, Instant};

use crate::env::{postgres_host_port, postgres_url};
use crate::process::Proc;

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
    /// Postgres server of `database_url`; waits until it accepts
    /// connections.
    pub fn start(dir: &Path, database_url: &str) -> PgBouncer {
        let (pg_host, pg_port) = postgres_host_port(database_url);
        let dir = dir.join("pgbouncer");
        std::fs::create_dir_all(&dir).expect("create the pgbouncer folder");
        let port = crate::free_port();
        let userlist = dir.join("userlist.txt");
        std::fs::write(&userlist, "\"postgres\" \"\"\n").expect("write userlist");
        let ini = dir.join("pgbouncer.ini");
        let server = format!("host={pg_host} port={pg_port}");
        std::fs::write(&ini, ini_text(&server, &[], port, &userlist)).expect("write pgbouncer.ini");
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
                        ini_text(&self.server, &added.aliases, self.port, &self.userlist),
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

/// The configuration: every database of the server (`server`, the `*`
/// line), plus the aliases [`PgBouncer::url_for`] added.
fn ini_text(server: &str, aliases: &[(String, String)], port: u16, userlist: &Path) -> String {
    let mut databases = String::new();
    for (alias, line) in aliases {
        databases.push_str(&format!("{alias} = {line}\n"));
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
         pool_mode = transaction\n\
         server_reset_query = DEALLOCATE ALL\n\
         server_reset_query_always = 1\n\
         ignore_startup_parameters = extra_float_digits\n\
         admin_users = postgres\n\
         max_client_conn = 200\n\
         default_pool_size = 10\n",
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
