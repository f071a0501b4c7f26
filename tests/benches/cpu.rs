//! CPU time per operation: where a measurement spends the machine's cores.
//!
//! Around a measured window (ceilings B, B′, C and D, ingest, every worker
//! run, the shop API) the bench reads the CPU time (user + system, all
//! threads, from `/proc/<pid>/stat`) of each group of processes taking
//! part, and the busy time of the whole machine (`/proc/stat`):
//!
//! * the bench itself — HTTP clients, publishers, pollers — its own threads
//!   only (the children it reaps are counted where they belong); while
//!   workers run, the PostgreSQL CPU of the bench's own queries (progress,
//!   wait sampling) is moved from PostgreSQL to the bench
//!   ([`CpuUse::reattribute`]);
//! * pgbench: the CPU of the bench's children reaped during the window;
//! * the oncehook binaries of the run (ingest, workers, the shop API), by
//!   pid;
//! * PostgreSQL: every `postgres` process, including backends that exited
//!   meanwhile (added to their parent's `cutime`/`cstime`); the whole
//!   server, so other load on it counts too;
//! * RabbitMQ: the node that listens on the system broker's AMQP port (the
//!   local cluster's nodes listen on other ports and are not counted);
//! * PgBouncer: the pooler a run goes through, by pid (only in the runs
//!   through it).
//!
//! Divided by the operations of the window this is a CPU budget per
//! operation. With the cores available it bounds the rate the machine can
//! reach once CPU is what runs out (cores ÷ CPU per operation), and two
//! budgets bound a ratio ([`limit_line`]): on this machine, the ceiling's
//! total against the pipeline's total; on a machine where each service has
//! cores of its own, the one service that does not scale out (PostgreSQL
//! for the workers, RabbitMQ for ingest) against the same service in the
//! ceiling.

use std::future::Future;
use std::sync::OnceLock;
use std::time::{Duration, Instant};

use crate::table;

/// A group of processes whose CPU time is measured together.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Who {
    /// This process: the load generator and its pollers.
    Bench,
    Ingest,
    Worker,
    /// The shop API (`oncehook-api`).
    Api,
    /// The bench's children reaped during the window (pgbench).
    Pgbench,
    Postgres,
    Rabbitmq,
    /// The PgBouncer a run goes through (`routes::Pooler`).
    Pgbouncer,
}

impl Who {
    /// Report order (one column each).
    const ALL: [Who; 8] = [
        Who::Bench,
        Who::Ingest,
        Who::Worker,
        Who::Api,
        Who::Pgbench,
        Who::Postgres,
        Who::Pgbouncer,
        Who::Rabbitmq,
    ];

    pub fn label(self) -> &'static str {
        match self {
            Who::Bench => "bench",
            Who::Ingest => "ingest",
            Who::Worker => "worker",
            Who::Api => "api",
            Who::Pgbench => "pgbench",
            Who::Postgres => "postgres",
            Who::Rabbitmq => "rabbitmq",
            Who::Pgbouncer => "pgbouncer",
        }
    }
}

/// Clock ticks of one process from `/proc/<pid>/stat`.
#[derive(Debug, Clone, Copy, Default)]
pub struct ProcTicks {
    /// utime + stime: every thread of the process.
    pub own: u64,
    /// cutime + cstime: its children that exited and were reaped.
    pub reaped: u64,
}

/// The command name and ticks in one `/proc/<pid>/stat` line.
fn parse_stat(stat: &str) -> Option<(&str, ProcTicks)> {
    let (open, close) = (stat.find('(')?, stat.rfind(')')?);
    // After the command: state, ppid, …; utime, stime, cutime, cstime are
    // the 12th to 15th fields.
    let fields: Vec<u64> = stat
        .get(close + 1..)?
        .split_whitespace()
        .skip(11)
        .take(4)
        .map(|f| f.parse().unwrap_or(0))
        .collect();
    let [utime, stime, cutime, cstime] = fields[..] else {
        return None;
    };
    let ticks = ProcTicks {
        own: utime + stime,
        reaped: cutime + cstime,
    };
    Some((stat.get(open + 1..close)?, ticks))
}

/// Ticks of process `pid` (`None` once it is gone or unreadable).
pub fn process_ticks(pid: u32) -> Option<ProcTicks> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    parse_stat(&stat).map(|(_, ticks)| ticks)
}

fn self_ticks() -> Option<ProcTicks> {
    let stat = std::fs::read_to_string("/proc/self/stat").ok()?;
    parse_stat(&stat).map(|(_, ticks)| ticks)
}

/// Pids of every process whose command name is `comm`.
fn pids_named(comm: &str) -> Vec<u32> {
    let Ok(dir) = std::fs::read_dir("/proc") else {
        return Vec::new();
    };
    dir.flatten()
        .filter_map(|e| e.file_name().to_str()?.parse::<u32>().ok())
        .filter(|pid| {
            std::fs::read_to_string(format!("/proc/{pid}/comm")).is_ok_and(|c| c.trim_end() == comm)
        })
        .collect()
}

/// All ticks (own and reaped children) of every process named `comm`;
/// `None` if there is none.
fn named_ticks(comm: &str) -> Option<u64> {
    let all: Vec<ProcTicks> = pids_named(comm)
        .into_iter()
        .filter_map(process_ticks)
        .collect();
    (!all.is_empty()).then(|| all.iter().map(|t| t.own + t.reaped).sum())
}

/// The kernel's clock ticks per second (`getconf CLK_TCK`; almost always
/// 100), asked once.
pub fn clock_ticks() -> Option<f64> {
    static TICKS: OnceLock<Option<f64>> = OnceLock::new();
    *TICKS.get_or_init(|| {
        let out = std::process::Command::new("getconf")
            .arg("CLK_TCK")
            .output()
            .ok()?;
        String::from_utf8_lossy(&out.stdout)
            .trim()
            .parse::<f64>()
            .ok()
            .filter(|t| *t > 0.0)
    })
}

pub fn ticks_to_duration(ticks: u64) -> Option<Duration> {
    Some(Duration::from_secs_f64(ticks as f64 / clock_ticks()?))
}

/// Cores this process may run on (affinity and cgroup limits included).
pub fn cores() -> usize {
    std::thread::available_parallelism().map_or(1, |n| n.get())
}

/// Busy ticks of the whole machine so far (`/proc/stat`: user, nice,
/// system, irq, softirq, steal — guest time is inside user).
pub fn machine_busy_ticks() -> Option<u64> {
    let text = std::fs::read_to_string("/proc/stat").ok()?;
    let line = text.lines().find(|l| l.starts_with("cpu "))?;
    let f: Vec<u64> = line
        .split_whitespace()
        .skip(1)
        .map(|v| v.parse().unwrap_or(0))
        .collect();
    let [user, nice, system, _idle, _iowait, irq, softirq, steal, ..] = f[..] else {
        return None;
    };
    Some(user + nice + system + irq + softirq + steal)
}

// ---------------------------------------------------------------- broker

/// The system RabbitMQ node: the process listening on `port`, looked up once.
fn broker_pid(port: u16) -> Option<u32> {
    static PID: OnceLock<Option<u32>> = OnceLock::new();
    *PID.get_or_init(|| {
        let pid = listener_pid(port).or_else(sole_rabbit_vm);
        if pid.is_none() {
            eprintln!(
                "bench: warning: RabbitMQ's process not found (port {port}): its CPU is not measured"
            );
        }
        pid
    })
}

/// The `beam.smp` process owning the socket that listens on `port`: its
/// inode from `/proc/net/tcp{,6}`, then the process whose descriptors hold
/// it (readable by root or the broker's user only).
fn listener_pid(port: u16) -> Option<u32> {
    let inodes: Vec<String> = ["/proc/net/tcp", "/proc/net/tcp6"]
        .iter()
        .filter_map(|path| std::fs::read_to_string(path).ok())
        .flat_map(|text| listening_inodes(&text, port))
        .collect();
    if inodes.is_empty() {
        return None;
    }
    let wanted: Vec<String> = inodes.iter().map(|i| format!("socket:[{i}]")).collect();
    pids_named("beam.smp").into_iter().find(|pid| {
        std::fs::read_dir(format!("/proc/{pid}/fd")).is_ok_and(|fds| {
            fds.flatten().any(|fd| {
                std::fs::read_link(fd.path())
                    .is_ok_and(|l| wanted.iter().any(|w| l.as_os_str() == w.as_str()))
            })
        })
    })
}

/// Inodes of the sockets listening (state `0A`) on `port` in a
/// `/proc/net/tcp` table.
fn listening_inodes(table: &str, port: u16) -> Vec<String> {
    let port_hex = format!(":{port:04X}");
    table
        .lines()
        .skip(1)
        .filter_map(|line| {
            let f: Vec<&str> = line.split_whitespace().collect();
            let (local, state, inode) = (f.get(1)?, f.get(3)?, f.get(9)?);
            (local.ends_with(&port_hex) && *state == "0A").then(|| (*inode).to_owned())
        })
        .collect()
}

/// Without access to other users' descriptors: the one Erlang VM running
/// RabbitMQ, if there is exactly one.
fn sole_rabbit_vm() -> Option<u32> {
    let rabbits: Vec<u32> = pids_named("beam.smp")
        .into_iter()
        .filter(|pid| {
            std::fs::read(format!("/proc/{pid}/cmdline"))
                .is_ok_and(|c| String::from_utf8_lossy(&c).contains("rabbit"))
        })
        .collect();
    match rabbits[..] {
        [pid] => Some(pid),
        _ => None,
    }
}

/// The port of an `amqp://user:pass@host:port/vhost` URL (5672 if absent).
fn amqp_port(url: &str) -> u16 {
    let authority = url
        .split_once("://")
        .map_or(url, |(_, rest)| rest)
        .split('/')
        .next()
        .unwrap_or_default();
    let host_port = authority.rsplit_once('@').map_or(authority, |(_, hp)| hp);
    host_port
        .rsplit_once(':')
        .and_then(|(_, p)| p.parse().ok())
        .unwrap_or(5672)
}

// ---------------------------------------------------------------- meter

/// The groups of one measurement; [`CpuMeter::read`] before and
/// [`CpuMeter::since`] after the window.
pub struct CpuMeter {
    groups: Vec<(Who, Vec<u32>)>,
}

/// Ticks of every group (and of the machine) at one instant.
pub struct Reading {
    at: Instant,
    groups: Vec<Option<u64>>,
    machine: Option<u64>,
}

impl Default for CpuMeter {
    fn default() -> Self {
        CpuMeter::new()
    }
}

impl CpuMeter {
    /// The groups every measurement has: the bench, PostgreSQL, RabbitMQ.
    pub fn new() -> Self {
        CpuMeter {
            groups: vec![
                (Who::Bench, Vec::new()),
                (Who::Postgres, Vec::new()),
                (Who::Rabbitmq, Vec::new()),
            ],
        }
    }

    /// Adds a group: the processes `pids` (ingest, workers, the API,
    /// PgBouncer), or for
    /// [`Who::Pgbench`] the bench's children reaped meanwhile.
    pub fn with(mut self, who: Who, pids: impl IntoIterator<Item = u32>) -> Self {
        self.groups.push((who, pids.into_iter().collect()));
        self
    }

    fn ticks(who: Who, pids: &[u32]) -> Option<u64> {
        match who {
            Who::Bench => self_ticks().map(|t| t.own),
            Who::Pgbench => self_ticks().map(|t| t.reaped),
            Who::Postgres => named_ticks("postgres"),
            Who::Rabbitmq => {
                let t = process_ticks(broker_pid(amqp_port(oncehook_e2e::broker::AMQP_URL))?)?;
                Some(t.own + t.reaped)
            }
            Who::Ingest | Who::Worker | Who::Api | Who::Pgbouncer => {
                let all: Vec<ProcTicks> = pids.iter().filter_map(|p| process_ticks(*p)).collect();
                (!all.is_empty()).then(|| all.iter().map(|t| t.own + t.reaped).sum())
            }
        }
    }

    pub fn read(&self) -> Reading {
        Reading {
            at: Instant::now(),
            groups: self
                .groups
                .iter()
                .map(|(who, pids)| Self::ticks(*who, pids))
                .collect(),
            machine: machine_busy_ticks(),
        }
    }

    /// CPU used by each group since `before`.
    pub fn since(&self, before: &Reading) -> CpuUse {
        let now = self.read();
        let delta = |b: Option<u64>, n: Option<u64>| ticks_to_duration(n?.saturating_sub(b?));
        CpuUse {
            window: now.at.saturating_duration_since(before.at),
            parts: self
                .groups
                .iter()
                .zip(before.groups.iter().zip(&now.groups))
                .map(|((who, _), (b, n))| (*who, delta(*b, *n)))
                .collect(),
            machine_busy: delta(before.machine, now.machine),
        }
    }
}

/// Runs `load`, a closed loop that warms up for `warmup` and then measures
/// for `window`, and meters exactly that window.
pub async fn during<T>(
    meter: &CpuMeter,
    warmup: Duration,
    window: Duration,
    load: impl Future<Output = T>,
) -> (T, CpuUse) {
    let timer = async {
        tokio::time::sleep(warmup).await;
        let before = meter.read();
        tokio::time::sleep(window).await;
        meter.since(&before)
    };
    tokio::join!(load, timer)
}

/// CPU time per group over one window.
#[derive(Debug, Clone, Default)]
pub struct CpuUse {
    pub window: Duration,
    /// `None`: the group was not readable.
    pub parts: Vec<(Who, Option<Duration>)>,
    /// The whole machine's busy time, every process included.
    pub machine_busy: Option<Duration>,
}

impl CpuUse {
    pub fn of(&self, who: Who) -> Option<Duration> {
        self.parts.iter().find(|(w, _)| *w == who)?.1
    }

    /// Moves `cpu` of `from`'s time to `to` (the bench's own queries, spent
    /// in PostgreSQL, belong to the bench).
    pub fn reattribute(&mut self, from: Who, to: Who, cpu: Duration) {
        let Some(moved) = self.of(from).map(|f| f.min(cpu)) else {
            return;
        };
        for (who, part) in &mut self.parts {
            if *who == from {
                *part = part.map(|p| p.saturating_sub(moved));
            } else if *who == to {
                *part = part.map(|p| p + moved);
            }
        }
    }
}

// ---------------------------------------------------------------- budgets

/// CPU per operation of one measurement.
#[derive(Debug, Clone)]
pub struct Budget {
    pub label: String,
    /// One operation: "event", "tx", "msg", "req".
    pub unit: &'static str,
    /// Operations done within the metered window.
    pub ops: f64,
    /// The measured throughput (operations per second), as in the table.
    pub rate: f64,
    pub cpu: CpuUse,
}

impl Budget {
    /// A closed-loop measurement metered over its window: the operations
    /// are its rate times the metered window.
    pub fn of_rate(label: String, unit: &'static str, rate: f64, cpu: CpuUse) -> Budget {
        let ops = rate * cpu.window.as_secs_f64();
        Budget {
            label,
            unit,
            ops,
            rate,
            cpu,
        }
    }

    /// Milliseconds of `who`'s CPU per operation.
    pub fn ms(&self, who: Who) -> Option<f64> {
        let cpu = self.cpu.of(who)?;
        (self.ops > 0.0).then(|| cpu.as_secs_f64() * 1000.0 / self.ops)
    }

    /// The groups' CPU per operation, summed.
    pub fn total_ms(&self) -> Option<f64> {
        let parts: Vec<f64> = Who::ALL.iter().filter_map(|w| self.ms(*w)).collect();
        (!parts.is_empty()).then(|| parts.iter().sum())
    }

    /// Cores busy on average over the window: these groups, and the machine.
    fn busy_cores(&self) -> (f64, Option<f64>) {
        let secs = self.cpu.window.as_secs_f64().max(0.001);
        let ours: f64 = self
            .cpu
            .parts
            .iter()
            .filter_map(|(_, d)| d.map(|d| d.as_secs_f64()))
            .sum();
        let machine = self.cpu.machine_busy.map(|d| d.as_secs_f64() / secs);
        (ours / secs, machine)
    }

    /// "1.48 / 2.00 of 2": these groups' busy cores, the machine's, the cores.
    fn busy(&self) -> String {
        let (ours, machine) = self.busy_cores();
        let machine = machine.map_or("–".to_owned(), |m| format!("{m:.2}"));
        format!("{ours:.2} / {machine} of {}", cores())
    }

    /// "C 1.48 / 2.00 of 2".
    fn busy_line(&self) -> String {
        format!("{} {}", short(&self.label), self.busy())
    }

    /// "C yes": whether the machine was at least 90 % busy — if not, this
    /// run's rate was set by latency (work in flight ÷ time per operation),
    /// not by CPU.
    fn saturation(&self) -> String {
        let answer = match self.busy_cores().1 {
            Some(m) if m >= 0.9 * cores() as f64 => "yes",
            Some(_) => "no",
            None => "unknown",
        };
        format!("{} {answer}", short(&self.label))
    }

    /// Operations per second this machine's cores allow at this CPU cost.
    pub fn cpu_bound_rate(&self) -> Option<f64> {
        let total = self.total_ms().filter(|t| *t > 0.0)?;
        Some(cores() as f64 * 1000.0 / total)
    }

    /// The part with the most CPU per operation.
    fn busiest(&self) -> Option<(Who, f64)> {
        Who::ALL
            .iter()
            .filter_map(|w| Some((*w, self.ms(*w)?)))
            .max_by(|a, b| a.1.total_cmp(&b.1))
    }

    /// "pgbench 0.30 + postgres 1.20 = 1.50 ms per tx".
    pub fn sum_line(&self) -> String {
        let parts: Vec<String> = Who::ALL
            .iter()
            .filter_map(|w| Some(format!("{} {:.2}", w.label(), self.ms(*w)?)))
            .collect();
        match self.total_ms() {
            Some(total) => format!("{} = {total:.2} ms per {}", parts.join(" + "), self.unit),
            None => "not measured".to_owned(),
        }
    }
}

/// The CPU section of the report: a budget per measurement and what they
/// say about the goals.
#[derive(Default)]
pub struct Report {
    pub budgets: Vec<Budget>,
    pub notes: Vec<String>,
}

impl Report {
    pub fn extend(&mut self, other: Report) {
        self.budgets.extend(other.budgets);
        self.notes.extend(other.notes);
    }

    fn header() -> Vec<String> {
        let mut h = vec!["measurement".to_owned(), "per".to_owned()];
        h.extend(Who::ALL.iter().map(|w| format!("{} ms", w.label())));
        h.extend(
            [
                "total ms",
                "cores busy: these / machine",
                "CPU-bound max rate",
            ]
            .map(str::to_owned),
        );
        h
    }

    fn cells(&self) -> Vec<Vec<String>> {
        self.budgets
            .iter()
            .map(|b| {
                let mut row = vec![b.label.clone(), b.unit.to_owned()];
                row.extend(Who::ALL.iter().map(|w| {
                    let present = b.cpu.parts.iter().any(|(p, _)| p == w);
                    match b.ms(*w) {
                        Some(ms) => format!("{ms:.2}"),
                        None if present => "n/a".to_owned(),
                        None => "–".to_owned(),
                    }
                }));
                row.push(b.total_ms().map_or("–".to_owned(), |t| format!("{t:.2}")));
                row.push(b.busy());
                row.push(b.cpu_bound_rate().map_or("–".to_owned(), |r| {
                    format!("{r:.0}/s = {}", crate::ratio(r, b.rate))
                }));
                row
            })
            .collect()
    }

    fn right_aligned(col: usize) -> bool {
        col >= 2
    }

    /// The section as plain text, for the terminal.
    pub fn text(&self) -> String {
        if self.budgets.is_empty() {
            return String::new();
        }
        let mut out = format!(
            "CPU per operation (ms; last column: cores ÷ total, and its ratio to the measured rate)\n\n{}\n",
            table::text(&Self::header(), &self.cells(), Self::right_aligned)
        );
        for line in self.lines() {
            out.push_str(&format!("cpu: {line}\n"));
        }
        out
    }

    /// The section as markdown, for the report file.
    pub fn markdown(&self) -> String {
        if self.budgets.is_empty() {
            return String::new();
        }
        let mut out = format!(
            "\n## CPU per operation\n\nms of CPU per operation by group; \"cores busy\" is these groups' CPU ÷ the window, then the whole machine's; \"CPU-bound max rate\" is {} cores ÷ the total, and its ratio to the measured rate.\n\n{}\n",
            cores(),
            table::markdown(&Self::header(), &self.cells(), Self::right_aligned)
        );
        for line in self.lines() {
            out.push_str(&format!("- {line}\n"));
        }
        out
    }

    /// A sum per budget, then the notes.
    fn lines(&self) -> Vec<String> {
        self.budgets
            .iter()
            .map(|b| format!("{}: {}", b.label, b.sum_line()))
            .chain(self.notes.iter().cloned())
            .chain(std::iter::once(ABOUT.to_owned()))
            .collect()
    }
}

const ABOUT: &str = "CPU is user + system time from /proc, summed over every thread (PostgreSQL: every \
     postgres process, exited backends included; RabbitMQ: the node on the system AMQP port); \
     PostgreSQL's and RabbitMQ's figures include any other load on them, the machine's busy \
     cores everything that ran";

/// What CPU allows `measured` against `ceiling`: on this machine (both
/// CPU-bound on the same cores: the ratio of their totals, and cores ÷ the
/// pipeline's total against the ceiling's measured rate), and on a machine
/// where every service has cores of its own (the limit is `shared`, the
/// service that does not scale out, per operation in both).
pub fn limit_line(goal: &str, measured: &Budget, ceiling: &Budget, shared: Who) -> String {
    let (Some(m), Some(c)) = (measured.total_ms(), ceiling.total_ms()) else {
        return format!("{goal}: CPU not measured");
    };
    let n = cores();
    let max = n as f64 * 1000.0 / m;
    let here = format!(
        "{goal}: measured {} (cores busy, these processes / the machine: {}, {}; machine \
         saturated, i.e. ≥ 90 % busy: {}, {}). \
         CPU {m:.2} ms per {} against {c:.2} ms per {} ⇒ on these {n} cores \
         at most {max:.0} {}/s = {} of {}'s {:.0}/s; CPU-bound limit of the ratio here {} \
         ({c:.2} / {m:.2})",
        crate::ratio(measured.rate, ceiling.rate),
        measured.busy_line(),
        ceiling.busy_line(),
        measured.saturation(),
        ceiling.saturation(),
        measured.unit,
        ceiling.unit,
        plural(measured.unit),
        crate::ratio(max, ceiling.rate),
        short(&ceiling.label),
        ceiling.rate,
        crate::ratio(c, m),
    );
    let bigger = match (measured.ms(shared), ceiling.ms(shared)) {
        (Some(ms), Some(cs)) if ms > 0.0 => format!(
            "; with each service on cores of its own, {} is the limit: {cs:.2} / {ms:.2} ms = {:.2}×",
            shared.label(),
            cs / ms
        ),
        _ => String::new(),
    };
    let busiest = measured
        .busiest()
        .map(|(w, ms)| {
            format!(
                "; busiest part per {}: {} {ms:.2} ms",
                measured.unit,
                w.label()
            )
        })
        .unwrap_or_default();
    format!("{here}{bigger}{busiest}")
}

/// "events" for "event", "orders" for "order"; the abbreviations stay as
/// they are ("msg", "tx").
fn plural(unit: &str) -> String {
    if unit == "event" || unit == "order" {
        format!("{unit}s")
    } else {
        unit.to_owned()
    }
}

/// The first word of a budget's label ("C", "B′", "worker", "ingest").
fn short(label: &str) -> &str {
    let word = label.split_whitespace().next().unwrap_or(label);
    word.trim_end_matches(',')
}
