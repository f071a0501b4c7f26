//! A real PgBouncer (Debian's package) in transaction mode in front of the
//! test's Postgres, for running the pipeline's tests through a pooler:
//! [`TestEnv`](crate::TestEnv) starts one per test when
//! `ONCEHOOK_TEST_POOLER=pgbouncer` and points the service binaries at it
//! (with `ONCEHOOK_DATABASE_POOLER=transaction`). The settings are the ones
//! docs/operations.md asks for: `pool_mode = transaction`, and prepared
//! statements dropped whenever a server connection changes hands.

use std::path::Path;
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
    _proc: Proc,
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
        std::fs::write(
            &ini,
            format!(
                "[databases]\n\
                 * = host={pg_host} port={pg_port}\n\
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
            ),
        )
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
            _proc: proc,
        }
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
        let out = std::process::Command::new("psql")
            .args([
                "-d",
                &self.url("pgbouncer"),
                "-At",
                "-F",
                "|",
                "-c",
                "SHOW STATS",
            ])
            .output()
            .expect("run psql against the pgbouncer admin console");
        let text = String::from_utf8_lossy(&out.stdout);
        // Columns: database, total_xact_count, total_query_count, ...
        text.lines()
            .map(|l| l.split('|').collect::<Vec<_>>())
            .find(|cols| cols.first() == Some(&database))
            .map(|cols| {
                let n = |i: usize| cols.get(i).and_then(|v| v.parse().ok()).unwrap_or(0);
                (n(1), n(2))
            })
            .unwrap_or((0, 0))
    }
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
