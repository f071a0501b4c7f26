//! The PgBouncer pass's proof that it means what it says: while a
//! [`TestEnv`](crate::TestEnv) runs behind PgBouncer, a [`DirectWatch`]
//! looks at every backend of the test's databases (the test database and
//! any database whose name starts with it) every 50 ms and finds, for each
//! new TCP backend, the process at the other end of its socket (the
//! client's port in `pg_stat_activity`, looked up in `/proc/net/tcp` and
//! the processes' descriptors). The test's own connections (its pool, the
//! helpers' connections) and PgBouncer's server connections are expected;
//! one opened by a binary of the project is not (but for `oncehookctl
//! migrate`, which must go straight, and the binaries the deploy files
//! connect straight, [`STRAIGHT_TO_POSTGRES`](crate::env::STRAIGHT_TO_POSTGRES),
//! unless the test put them behind the pooler too): the environment fails
//! the test when it is dropped, naming the binary, its log and the
//! database.
//!
//! Every service binary keeps its pool's connections open while it runs,
//! so a binary pointed straight at Postgres is seen within one look; a
//! one-shot command connecting for less than 50 ms could slip between two
//! looks (`oncehookctl` goes through [`TestEnv::ctl`](crate::TestEnv::ctl),
//! which routes it).

use std::collections::{HashMap, HashSet};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
use std::time::Duration;

use sqlx::{Connection, PgConnection};

/// The processes a test spawned.
pub type Spawned = Arc<Mutex<Vec<SpawnedProc>>>;

/// One process a test spawned.
#[derive(Debug, Clone)]
pub struct SpawnedProc {
    pub pid: u32,
    /// What to call it (the binary and its log).
    pub name: String,
    /// Started straight to Postgres on purpose, as the deploy files run it
    /// ([`STRAIGHT_TO_POSTGRES`](crate::env::STRAIGHT_TO_POSTGRES)).
    pub straight: bool,
}

/// Watches the test's databases for backends a project binary opened
/// without PgBouncer; stopped by [`DirectWatch::stop`].
pub struct DirectWatch {
    stop: Arc<AtomicBool>,
    found: Arc<Mutex<Vec<String>>>,
    looks: Arc<Mutex<u64>>,
    thread: Option<JoinHandle<()>>,
}

/// What the watch needs to know.
pub struct Watched {
    /// A URL of the server's administrative database (the watch's own
    /// connection goes there, not to the databases it watches).
    pub admin_url: String,
    /// The test database's name: it and every database whose name starts
    /// with it are watched.
    pub db_name: String,
    /// The Postgres server's port, the remote end of a direct connection.
    pub server_port: u16,
    /// PgBouncer's process: its connections are the pooled ones.
    pub pooler_pid: u32,
    pub spawned: Spawned,
    /// The binaries that may reach Postgres straight (as the deploy files
    /// run them) when a test started them some other way than
    /// [`TestEnv::spawn`](crate::TestEnv::spawn) (which says so per process)…
    pub straight: &'static [&'static str],
    /// …unless the test put them behind the pooler too
    /// ([`TestEnv::pool_worker_too`](crate::TestEnv::pool_worker_too)).
    pub pool_straight: Arc<AtomicBool>,
}

impl DirectWatch {
    pub fn start(watched: Watched) -> DirectWatch {
        let stop = Arc::new(AtomicBool::new(false));
        let found = Arc::new(Mutex::new(Vec::new()));
        let looks = Arc::new(Mutex::new(0));
        let thread = {
            let (stop, found, looks) = (stop.clone(), found.clone(), looks.clone());
            std::thread::spawn(move || {
                let Ok(rt) = tokio::runtime::Builder::new_current_thread()
                    .enable_all()
                    .build()
                else {
                    return;
                };
                rt.block_on(watch(watched, stop, found, looks));
            })
        };
        DirectWatch {
            stop,
            found,
            looks,
            thread: Some(thread),
        }
    }

    /// The direct connections found so far, one sentence each.
    pub fn found(&self) -> Vec<String> {
        self.found.lock().map(|f| f.clone()).unwrap_or_default()
    }

    /// Like [`DirectWatch::found`], forgetting them (a test that connects
    /// directly on purpose).
    pub fn take(&self) -> Vec<String> {
        self.found
            .lock()
            .map(|mut f| std::mem::take(&mut *f))
            .unwrap_or_default()
    }

    /// How many times the watch has looked.
    pub fn looks(&self) -> u64 {
        self.looks.lock().map(|l| *l).unwrap_or(0)
    }

    /// Looks a last time, stops and returns what was found.
    pub fn stop(mut self) -> Vec<String> {
        self.stop.store(true, Ordering::SeqCst);
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
        self.found()
    }
}

impl Drop for DirectWatch {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::SeqCst);
    }
}

async fn watch(
    w: Watched,
    stop: Arc<AtomicBool>,
    found: Arc<Mutex<Vec<String>>>,
    looks: Arc<Mutex<u64>>,
) {
    let mut conn = None;
    // Backends already judged, by (pid, start), and how often the socket of
    // one not yet judged was missing.
    let mut judged: HashSet<(i32, String)> = HashSet::new();
    let mut missing: HashMap<(i32, String), u32> = HashMap::new();
    loop {
        let last = stop.load(Ordering::SeqCst);
        if conn.is_none() {
            // Postgres may be restarting (db_trouble, chaos): connect again.
            conn = PgConnection::connect(&w.admin_url).await.ok();
        }
        if let Some(c) = conn.as_mut() {
            let rows: Result<Vec<(i32, String, i32, String)>, _> = sqlx::query_as(
                "SELECT pid, backend_start::text, client_port, datname::text
                 FROM pg_stat_activity
                 WHERE left(datname, length($1)) = $1 AND client_port > 0",
            )
            .bind(&w.db_name)
            .fetch_all(&mut *c)
            .await;
            match rows {
                Ok(rows) => {
                    for (pid, start, port, db) in rows {
                        let key = (pid, start);
                        if judged.contains(&key) {
                            continue;
                        }
                        match judge(&w, port as u16) {
                            Some(None) => {
                                judged.insert(key);
                            }
                            Some(Some(who)) => {
                                judged.insert(key);
                                if let Ok(mut f) = found.lock() {
                                    f.push(format!(
                                        "{who} connected straight to Postgres (database {db}, backend pid {pid}, client port {port})"
                                    ));
                                }
                            }
                            None => {
                                // The socket is gone already (or not yet
                                // listed): ask again, a few times.
                                let n = missing.entry(key.clone()).or_default();
                                *n += 1;
                                if *n > 20 {
                                    judged.insert(key);
                                }
                            }
                        }
                    }
                }
                Err(_) => conn = None,
            }
            if let Ok(mut l) = looks.lock() {
                *l += 1;
            }
        }
        if last {
            break;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// Who holds the local end of the TCP connection from `client_port` to the
/// server: `Some(None)` the test itself, PgBouncer or a program that is not
/// one of the project's; `Some(Some(name))` a project binary; `None` when
/// no such socket is open (any more).
fn judge(w: &Watched, client_port: u16) -> Option<Option<String>> {
    let inode = socket_inode(client_port, w.server_port)?;
    if socket_inodes("self").contains(&inode)
        || socket_inodes(&w.pooler_pid.to_string()).contains(&inode)
    {
        return Some(None);
    }
    let spawned = w.spawned.lock().map(|s| s.clone()).unwrap_or_default();
    for p in &spawned {
        if socket_inodes(&p.pid.to_string()).contains(&inode) {
            let flagged = project_binary(&p.pid.to_string()).filter(|_| !p.straight);
            return Some(flagged.map(|_| format!("{} (pid {})", p.name, p.pid)));
        }
    }
    // Not one the test started itself: any process holding it.
    let straight_ok = !w.pool_straight.load(Ordering::SeqCst);
    let procs = std::fs::read_dir("/proc").ok()?;
    for entry in procs.flatten() {
        let pid = entry.file_name().to_string_lossy().into_owned();
        if !pid.bytes().all(|b| b.is_ascii_digit()) || !socket_inodes(&pid).contains(&inode) {
            continue;
        }
        let flagged = project_binary(&pid)
            .filter(|name| !(straight_ok && w.straight.contains(&name.as_str())));
        return Some(flagged.map(|name| format!("{name} (pid {pid})")));
    }
    None
}

/// The name of process `pid` when it is one of the project's binaries that
/// must not reach Postgres straight behind the pooler: any `oncehook*`
/// program but `oncehookctl migrate`, which must (a migration holds a
/// session-level lock), as `TestEnv` routes it. (The binaries the deploy
/// files connect straight are let through by the caller.)
fn project_binary(pid: &str) -> Option<String> {
    let cmdline = std::fs::read(format!("/proc/{pid}/cmdline")).ok()?;
    let mut argv = cmdline
        .split(|b| *b == 0)
        .map(|a| String::from_utf8_lossy(a).into_owned());
    let program = argv.next()?;
    let name = std::path::Path::new(&program)
        .file_name()?
        .to_string_lossy()
        .into_owned();
    let migrate = name == "oncehookctl" && argv.next().as_deref() == Some("migrate");
    (name.starts_with("oncehook") && !migrate).then_some(name)
}

/// The inode of the open TCP socket from local port `local` to remote
/// port `remote` (`/proc/net/tcp` and `tcp6`).
fn socket_inode(local: u16, remote: u16) -> Option<u64> {
    for table in ["/proc/net/tcp", "/proc/net/tcp6"] {
        let Ok(text) = std::fs::read_to_string(table) else {
            continue;
        };
        for line in text.lines().skip(1) {
            let cols: Vec<&str> = line.split_whitespace().collect();
            let port = |addr: &str| {
                addr.rsplit_once(':')
                    .and_then(|(_, p)| u16::from_str_radix(p, 16).ok())
            };
            if cols.len() > 9
                && port(cols[1]) == Some(local)
                && port(cols[2]) == Some(remote)
                && let Ok(inode) = cols[9].parse::<u64>()
                && inode != 0
            {
                return Some(inode);
            }
        }
    }
    None
}

/// The socket inodes among process `pid`'s descriptors.
fn socket_inodes(pid: &str) -> HashSet<u64> {
    let Ok(fds) = std::fs::read_dir(format!("/proc/{pid}/fd")) else {
        return HashSet::new();
    };
    fds.flatten()
        .filter_map(|fd| {
            let target = std::fs::read_link(fd.path()).ok()?;
            let target = target.to_string_lossy();
            target
                .strip_prefix("socket:[")?
                .strip_suffix(']')?
                .parse()
                .ok()
        })
        .collect()
}
