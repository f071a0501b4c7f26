//! The local three-node RabbitMQ cluster (`deploy/local/cluster.sh`) as the
//! cluster tests and the bench see it: started on demand (a run with the
//! cluster already up reuses it), its URL list, which node leads a queue,
//! and stopping and starting single nodes. Never touches the system broker.

use std::path::PathBuf;
use std::time::{Duration, Instant};

/// The cluster's nodes, as `cluster.sh` reports them.
#[derive(Debug, Clone)]
pub struct Cluster {
    /// The ONCEHOOK_AMQP_URL value: every node's URL, comma-separated.
    pub urls: String,
    /// Node names (`oncehook-a@localhost`, …), in the order of `urls`.
    pub nodes: Vec<String>,
}

/// One quorum queue's leader and members.
#[derive(Debug, Clone)]
pub struct QueueNodes {
    pub leader: String,
    pub members: Vec<String>,
}

fn script() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../deploy/local/cluster.sh")
}

/// Runs `cluster.sh args` (bounded in time); its stdout, or a panic with its output.
fn run_script(args: &[&str], limit: Duration) -> String {
    let child = std::process::Command::new("timeout")
        .arg(limit.as_secs().to_string())
        .arg("bash")
        .arg(script())
        .args(args)
        .stdin(std::process::Stdio::null())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap_or_else(|e| panic!("cluster.sh {args:?}: {e}"));
    let out = child
        .wait_with_output()
        .unwrap_or_else(|e| panic!("cluster.sh {args:?}: {e}"));
    let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
    assert!(
        out.status.success(),
        "cluster.sh {args:?} failed ({}): {stdout}{}",
        out.status,
        String::from_utf8_lossy(&out.stderr)
    );
    stdout
}

/// `rabbitmqctl` with `args` against `node` (bounded); stdout if it succeeded.
fn rabbitmqctl(node: &str, args: &[&str]) -> Option<String> {
    let out = std::process::Command::new("timeout")
        .args(["30", "rabbitmqctl", "-q", "-n", node])
        .args(args)
        .stdin(std::process::Stdio::null())
        .output()
        .ok()?;
    out.status
        .success()
        .then(|| String::from_utf8_lossy(&out.stdout).into_owned())
}

/// Runs `f` on the blocking pool; a panic in it (a failed `cluster.sh`,
/// with the script's output) is the caller's panic, never a silent `None`.
async fn blocking<T: Send + 'static>(f: impl FnOnce() -> T + Send + 'static) -> T {
    match tokio::task::spawn_blocking(f).await {
        Ok(v) => v,
        Err(e) if e.is_panic() => std::panic::resume_unwind(e.into_panic()),
        Err(e) => panic!("cluster.sh: {e}"),
    }
}

impl Cluster {
    /// Whether the RabbitMQ server the cluster is made of is installed.
    pub fn installed() -> bool {
        std::path::Path::new("/usr/lib/rabbitmq/bin/rabbitmq-server").exists()
    }

    /// Starts the cluster (whichever nodes are down; a no-op when all are
    /// up) and returns it. Panics, failing the test that needs the cluster,
    /// when rabbitmq-server is not installed (`make test` installs it) or
    /// the cluster does not start (with `cluster.sh`'s output): a test
    /// never passes without the cluster it is about.
    pub async fn ensure() -> Cluster {
        assert!(
            Self::installed(),
            "rabbitmq-server is not installed: `make test` installs it (deploy/local/services.sh); \
             the cluster tests need it"
        );
        blocking(|| {
            run_script(&["start"], Duration::from_secs(300));
            let urls = run_script(&["urls"], Duration::from_secs(10))
                .trim()
                .to_owned();
            let nodes: Vec<String> = run_script(&["nodes"], Duration::from_secs(10))
                .lines()
                .map(str::trim)
                .filter(|l| !l.is_empty())
                .map(str::to_owned)
                .collect();
            assert!(
                !urls.is_empty() && !nodes.is_empty(),
                "cluster.sh gave no URLs ({urls:?}) or no nodes ({nodes:?})"
            );
            Cluster { urls, nodes }
        })
        .await
    }

    /// The short name cluster.sh takes (`a` for `oncehook-a@localhost`).
    fn short(node: &str) -> &str {
        node.trim_start_matches("oncehook-")
            .split('@')
            .next()
            .unwrap_or(node)
    }

    /// Stops one node (`rabbitmqctl stop`: the whole node, not just the app).
    pub async fn stop_node(&self, node: &str) {
        let short = Self::short(node).to_owned();
        blocking(move || run_script(&["stop", &short], Duration::from_secs(120))).await;
    }

    /// Starts one node again and waits until it has booted and rejoined.
    pub async fn start_node(&self, node: &str) {
        let short = Self::short(node).to_owned();
        blocking(move || run_script(&["start", &short], Duration::from_secs(180))).await;
    }

    /// A guard that starts every stopped node again if the test panics
    /// while a node is down (the next run's [`Cluster::ensure`] would too).
    pub fn restart_on_panic(&self) -> RestartOnPanic {
        RestartOnPanic
    }

    /// Leader and members of `queue`, asked of the first node that answers.
    pub async fn queue_nodes(&self, queue: &str) -> Option<QueueNodes> {
        let nodes = self.nodes.clone();
        let queue = queue.to_owned();
        tokio::task::spawn_blocking(move || {
            nodes.iter().find_map(|node| {
                let json = rabbitmqctl(
                    node,
                    &[
                        "list_queues",
                        "name",
                        "leader",
                        "members",
                        "--formatter",
                        "json",
                    ],
                )?;
                let rows: serde_json::Value = serde_json::from_str(json.trim()).ok()?;
                let row = rows.as_array()?.iter().find(|r| r["name"] == queue)?;
                Some(QueueNodes {
                    leader: row["leader"].as_str()?.to_owned(),
                    members: row["members"]
                        .as_array()?
                        .iter()
                        .filter_map(|m| m.as_str().map(str::to_owned))
                        .collect(),
                })
            })
        })
        .await
        .ok()
        .flatten()
    }

    /// Waits (up to `limit`) until `queue` has a leader other than `not`;
    /// returns it and how long it took.
    pub async fn new_leader(
        &self,
        queue: &str,
        not: &str,
        limit: Duration,
    ) -> Option<(String, Duration)> {
        let started = Instant::now();
        while started.elapsed() < limit {
            if let Some(q) = self.queue_nodes(queue).await
                && q.leader != not
                && self.nodes.contains(&q.leader)
            {
                return Some((q.leader, started.elapsed()));
            }
            tokio::time::sleep(Duration::from_millis(250)).await;
        }
        None
    }
}

/// See [`Cluster::restart_on_panic`].
pub struct RestartOnPanic;

impl Drop for RestartOnPanic {
    fn drop(&mut self) {
        if std::thread::panicking() {
            eprintln!("cluster: the test failed; starting any stopped node again");
            let _ = std::panic::catch_unwind(|| run_script(&["start"], Duration::from_secs(300)));
        }
    }
}
