//! Child processes of a test: one of the oncehook binaries, its output going
//! to a log file in the test's folder, killed when dropped.

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

/// Where the compiled binaries are.
pub fn bin_dir() -> PathBuf {
    if let Ok(dir) = std::env::var("ONCEHOOK_BIN_DIR") {
        return PathBuf::from(dir);
    }
    let target = std::env::var("CARGO_TARGET_DIR")
        .map(PathBuf::from)
        .unwrap_or_else(|_| Path::new(env!("CARGO_MANIFEST_DIR")).join("../target"));
    target.join("debug")
}

/// Path of one binary, with a clear message if it was not built.
pub fn bin(name: &str) -> PathBuf {
    let path = bin_dir().join(name);
    assert!(
        path.exists(),
        "{} is missing: build the binaries first (`cargo build --workspace --bins`; `make test` does it)",
        path.display()
    );
    path
}

/// A running binary.
pub struct Proc {
    pub name: String,
    pub log: PathBuf,
    /// Base URL of its metrics listener (`/metrics`, `/healthz`, `/readyz`), if it has one.
    pub metrics: Option<String>,
    child: Child,
}

impl Proc {
    pub fn spawn(name: &str, log: PathBuf, envs: &[(String, String)], args: &[&str]) -> Proc {
        Proc::spawn_program(&bin(name).display().to_string(), name, log, envs, args)
    }

    /// Starts any program (a helper such as PgBouncer) the same way.
    pub fn spawn_program(
        program: &str,
        name: &str,
        log: PathBuf,
        envs: &[(String, String)],
        args: &[&str],
    ) -> Proc {
        let file = std::fs::File::create(&log).expect("create log file");
        let err = file.try_clone().expect("clone log handle");
        let mut cmd = Command::new(program);
        cmd.args(args)
            .env_clear()
            .env("PATH", std::env::var("PATH").unwrap_or_default())
            .envs(envs.iter().map(|(k, v)| (k.as_str(), v.as_str())))
            .stdin(Stdio::null())
            .stdout(file)
            .stderr(err);
        let child = cmd.spawn().unwrap_or_else(|e| panic!("spawn {name}: {e}"));
        Proc {
            name: name.to_owned(),
            log,
            metrics: None,
            child,
        }
    }

    /// Base URL of the metrics listener; panics if the process was started without one.
    pub fn metrics_url(&self) -> &str {
        self.metrics
            .as_deref()
            .unwrap_or_else(|| panic!("{} was started with its metrics listener off", self.name))
    }

    pub fn pid(&self) -> u32 {
        self.child.id()
    }

    /// Sends a signal by name (`TERM`, `KILL`, `INT`).
    pub fn signal(&self, sig: &str) {
        let _ = Command::new("kill")
            .arg(format!("-{sig}"))
            .arg(self.pid().to_string())
            .status();
    }

    /// Whether the process is still running.
    pub fn is_running(&mut self) -> bool {
        matches!(self.child.try_wait(), Ok(None))
    }

    /// Waits up to `timeout` for the process to exit; its exit code if it did.
    pub fn wait_exit(&mut self, timeout: Duration) -> Option<i32> {
        let started = Instant::now();
        while started.elapsed() < timeout {
            if let Ok(Some(status)) = self.child.try_wait() {
                return Some(status.code().unwrap_or(-1));
            }
            std::thread::sleep(Duration::from_millis(50));
        }
        None
    }

    pub fn kill(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }

    pub fn log_text(&self) -> String {
        std::fs::read_to_string(&self.log).unwrap_or_default()
    }
}

impl Drop for Proc {
    fn drop(&mut self) {
        self.kill();
    }
}
