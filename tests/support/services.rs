//! Stopping and starting the machine's shared PostgreSQL and RabbitMQ, and
//! raising RabbitMQ's memory alarm, for the tests that take them away
//! mid-flight (`chaos.rs`, `reconciliation_faults.rs`). An [`Outage`]
//! brings its service back when dropped, a [`MemoryAlarm`] is lowered, so a failing assertion never leaves the next test without a
//! database or a broker. Files that use these run their tests one at a
//! time (cargo runs test files one after another).

use std::process::Output;

/// The shared service an outage takes away.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Service {
    Postgres,
    RabbitMq,
}

/// The local PostgreSQL cluster's version (`/etc/postgresql/<version>`).
fn postgres_version() -> String {
    std::fs::read_dir("/etc/postgresql")
        .ok()
        .and_then(|rd| {
            rd.filter_map(|e| e.ok())
                .map(|e| e.file_name().to_string_lossy().into_owned())
                .max()
        })
        .expect("a local PostgreSQL cluster managed by pg_ctlcluster")
}

/// The command that does `action` (`stop`, `start`, `restart`) to `service`.
fn command(service: Service, action: &str) -> (String, Vec<String>) {
    match service {
        Service::Postgres => {
            let mut args = vec![
                "--skip-systemctl-redirect".to_owned(),
                postgres_version(),
                "main".to_owned(),
                action.to_owned(),
            ];
            if action != "start" {
                // Fast: sessions end at once with 57P01, as in a failover.
                args.extend(["-m".to_owned(), "fast".to_owned()]);
            }
            ("pg_ctlcluster".to_owned(), args)
        }
        Service::RabbitMq => {
            let verb = match action {
                "stop" => "stop_app",
                "start" => "start_app",
                other => panic!("rabbitmq: no {other}"),
            };
            ("rabbitmqctl".to_owned(), vec![verb.to_owned()])
        }
    }
}

/// The outcome of `cmd args`, through `sudo -n` when not root and the
/// plain call is refused.
fn output(cmd: &str, args: &[String]) -> std::io::Result<Output> {
    let direct = std::process::Command::new(cmd).args(args).output();
    match direct {
        Ok(out) if out.status.success() => Ok(out),
        first => {
            let sudo = std::process::Command::new("sudo")
                .arg("-n")
                .arg(cmd)
                .args(args)
                .output();
            match (first, sudo) {
                (_, Ok(out)) if out.status.success() => Ok(out),
                (Ok(out), _) => Ok(out),
                (Err(e), _) => Err(e),
            }
        }
    }
}

/// Runs an operator command, failing the test with its output if it fails.
pub async fn run(cmd: &str, args: &[&str]) {
    let (cmd, args): (String, Vec<String>) = (
        cmd.to_owned(),
        args.iter().map(|a| (*a).to_owned()).collect(),
    );
    let out = tokio::task::spawn_blocking(move || {
        let out = output(&cmd, &args);
        (cmd, args, out)
    })
    .await
    .expect("the command's task");
    let (cmd, args, out) = out;
    let out = out.unwrap_or_else(|e| panic!("{cmd} {args:?}: {e}"));
    assert!(
        out.status.success(),
        "{cmd} {args:?} failed: {}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
}

/// Does `action` to `service`, failing the test if it fails.
async fn perform(service: Service, action: &str) {
    let (cmd, args) = command(service, action);
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    run(&cmd, &args).await;
}

/// Restarts the local PostgreSQL cluster (fast shutdown: sessions end with 57P01).
pub async fn restart_postgres() {
    perform(Service::Postgres, "restart").await;
}

/// A service stopped until this is ended or dropped.
pub struct Outage {
    service: Service,
    over: bool,
}

impl Outage {
    /// Stops `service` now.
    pub async fn begin(service: Service) -> Outage {
        perform(service, "stop").await;
        Outage {
            service,
            over: false,
        }
    }

    /// Starts the service again.
    pub async fn end(mut self) {
        self.over = true;
        perform(self.service, "start").await;
    }
}

impl Drop for Outage {
    fn drop(&mut self) {
        if !self.over {
            let (cmd, args) = command(self.service, "start");
            if let Err(e) = output(&cmd, &args) {
                eprintln!("could not start {:?} again: {e}", self.service);
            }
        }
    }
}

/// RabbitMQ's memory alarm raised on purpose: the broker stops reading
/// from every connection that publishes, so a publish is never confirmed
/// (consumers go on). Lowered again when ended or dropped.
pub struct MemoryAlarm {
    watermark: String,
    over: bool,
}

impl MemoryAlarm {
    /// Raises the alarm (a high watermark of 0 goes off at once).
    pub async fn raise() -> MemoryAlarm {
        let out = tokio::task::spawn_blocking(|| {
            output(
                "rabbitmqctl",
                &[
                    "eval".to_owned(),
                    "vm_memory_monitor:get_vm_memory_high_watermark().".to_owned(),
                ],
            )
        })
        .await
        .expect("the command's task")
        .expect("rabbitmqctl eval");
        let watermark = String::from_utf8_lossy(&out.stdout).trim().to_owned();
        assert!(
            watermark.parse::<f64>().is_ok_and(|w| w > 0.0),
            "the broker's memory watermark, as a fraction: {watermark:?}"
        );
        run("rabbitmqctl", &["set_vm_memory_high_watermark", "0"]).await;
        MemoryAlarm {
            watermark,
            over: false,
        }
    }

    /// Sets the watermark back: publishing resumes.
    pub async fn lower(mut self) {
        self.over = true;
        run(
            "rabbitmqctl",
            &["set_vm_memory_high_watermark", &self.watermark],
        )
        .await;
    }
}

impl Drop for MemoryAlarm {
    fn drop(&mut self) {
        if !self.over {
            let args = [
                "set_vm_memory_high_watermark".to_owned(),
                self.watermark.clone(),
            ];
            if let Err(e) = output("rabbitmqctl", &args) {
                eprintln!("could not lower RabbitMQ's memory alarm: {e}");
            }
        }
    }
}
