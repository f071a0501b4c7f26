//! A bench that notices load: every measured run records the cores that
//! processes other than the bench's own used during it, and a run above
//! [`THRESHOLD`] cores is repeated once (`ONCEHOOK_BENCH_BUSY_REPEATS`, 1;
//! `make bench-smoke`, whose figures mean nothing, sets 0); when the last
//! attempt is still above it, the verdicts that rest on the run are
//! withheld, with the reason
//! ([`machine::goal_on`](crate::machine::goal_on)).
//!
//! The bench's own processes: this process and its ancestors (the `cargo`
//! running it), every process descended from it (the binaries under test,
//! pgbench, PgBouncer), every `postgres` process and the RabbitMQ VM
//! (`beam.smp`) with its helpers. The rest is read from `/proc` at the
//! run's start and end (own and reaped children's ticks, as the survey
//! before measuring reads them, [`crate::machine`]); its CPU over the
//! run's wall time is the other processes' cores. Another client of the
//! same PostgreSQL server shows in the PostgreSQL figures, not here.

use std::collections::{BTreeMap, BTreeSet};
use std::future::Future;
use std::sync::Mutex;
use std::time::Instant;

use crate::cpu;

/// The most cores other processes may use during a run whose figures
/// count.
pub const THRESHOLD: f64 = 0.2;

/// Commands that belong to the system RabbitMQ besides its VM.
const BROKER_HELPERS: [&str; 3] = ["epmd", "erl_child_setup", "inet_gethost"];

/// What other processes did during one run.
#[derive(Debug, Clone, Default)]
pub struct RunLoad {
    /// The run, as the report names it.
    pub label: String,
    /// Cores used by other processes (`None`: `/proc` not readable).
    pub others: Option<f64>,
    /// The heaviest of them: command and cores.
    pub top: Vec<(String, f64)>,
    /// This is the repeat of a run that was above the threshold.
    pub repeat: bool,
    /// Above the threshold with no repeat left: the verdicts that rest on
    /// it are withheld.
    pub withheld: bool,
    /// A phase no goal verdict rests on: its load is only recorded.
    pub recorded_only: bool,
}

impl RunLoad {
    /// Whether other processes used more than [`THRESHOLD`].
    pub fn busy(&self) -> bool {
        self.others.is_some_and(|c| c > THRESHOLD)
    }

    /// "0.45 cores during worker ×1 batch 1, round 2: rustc 0.30, cargo 0.10".
    pub fn reason(&self) -> String {
        let top = if self.top.is_empty() {
            "none named".to_owned()
        } else {
            self.top
                .iter()
                .map(|(c, n)| format!("{c} {n:.2}"))
                .collect::<Vec<_>>()
                .join(", ")
        };
        format!(
            "other processes used {:.2} cores during {}{}: {top}",
            self.others.unwrap_or(0.0),
            self.label,
            if self.repeat { " (its repeat)" } else { "" }
        )
    }
}

/// Every run's load so far, in order (the report's summary).
static RUNS: Mutex<Vec<RunLoad>> = Mutex::new(Vec::new());

/// The other processes at a run's start.
pub struct Watch {
    at: Instant,
    before: Snapshot,
}

/// Every process at one moment, the bench's own marked.
pub struct Snapshot(BTreeMap<u32, Proc>);

/// Every process now, the bench's own marked; PostgreSQL and RabbitMQ count
/// as its own when `servers` (while it measures), as others before it does
/// ([`crate::machine::survey`]).
pub fn snapshot(servers: bool) -> Snapshot {
    Snapshot(processes(servers))
}

/// The cores the processes of `after` used since `before`, `secs` apart,
/// in all and by command (the heaviest first, at most `top`).
pub fn cores_between(
    before: &Snapshot,
    after: &Snapshot,
    secs: f64,
    top: usize,
) -> Option<(f64, Vec<(String, f64)>)> {
    let hz = cpu::clock_ticks().filter(|_| !after.0.is_empty())?;
    let secs = secs.max(0.001);
    let mut by_command: BTreeMap<String, f64> = BTreeMap::new();
    for (pid, used) in used(&before.0, &after.0) {
        let comm = after.0.get(&pid).map_or("?", |p| p.comm.as_str());
        *by_command.entry(comm.to_owned()).or_default() += used as f64 / hz / secs;
    }
    let mut heaviest: Vec<(String, f64)> = by_command.into_iter().collect();
    heaviest.sort_by(|a, b| b.1.total_cmp(&a.1));
    let all = heaviest.iter().map(|(_, c)| c).sum();
    heaviest.retain(|(_, c)| *c >= 0.01);
    heaviest.truncate(top);
    Some((all, heaviest))
}

impl Watch {
    pub fn start() -> Watch {
        Watch {
            at: Instant::now(),
            before: snapshot(true),
        }
    }

    /// The load since [`Watch::start`], recorded for the report under
    /// `label`; `attempt` 1 is the repeat of a run that was busy.
    pub fn finish(&self, label: &str, attempt: usize) -> RunLoad {
        let after = snapshot(true);
        let mut load = RunLoad {
            label: label.to_owned(),
            repeat: attempt > 0,
            ..RunLoad::default()
        };
        if let Some((all, top)) =
            cores_between(&self.before, &after, self.at.elapsed().as_secs_f64(), 5)
        {
            load.others = Some(all);
            load.top = top;
        }
        if let Ok(mut runs) = RUNS.lock() {
            runs.push(load.clone());
        }
        load
    }
}

/// Ticks each other process alive at the end used between the two
/// snapshots: its own (all of them when it started meanwhile), and those of
/// its children that exited meanwhile, less what those had used before the
/// start (a child's whole lifetime lands in its parent's reaped ticks when
/// it exits: a compiler that ran for a minute and exits during a short run
/// did not use a minute of it). Init's reaped ticks are left out: the
/// orphans it reaps are anybody's, the bench's own included (a server's
/// backends when it restarts). An orphan may be reaped by a subreaper, not
/// its parent at the start, so the reaped parts together are held to what
/// the reaped can have used meanwhile: every reaped tick less every tick
/// the other processes' children gone meanwhile had at the start.
fn used(before: &BTreeMap<u32, Proc>, after: &BTreeMap<u32, Proc>) -> Vec<(u32, u64)> {
    // The same process: the same pid started at the same moment (a kernel
    // worker renames itself, a process that execs takes a new name).
    let same = |pid: &u32, p: &Proc| before.get(pid).filter(|b| b.started == p.started);
    let gone = |c: &u32, child: &Proc| after.get(c).is_none_or(|a| a.started != child.started);
    let mut parts: Vec<(u32, u64, u64)> = Vec::new();
    let mut reaped_all = 0u64;
    for (pid, p) in after.iter().filter(|(_, p)| !p.ours) {
        let (own, reaped) = match same(pid, p) {
            None => (p.own, p.reaped),
            Some(b) => (
                p.own.saturating_sub(b.own),
                p.reaped.saturating_sub(b.reaped),
            ),
        };
        let reaped = if *pid == 1 { 0 } else { reaped };
        reaped_all += reaped;
        let children: u64 = before
            .iter()
            .filter(|(c, child)| child.ppid == *pid && gone(c, child))
            .map(|(_, child)| child.own + child.reaped)
            .sum();
        parts.push((*pid, own, reaped.saturating_sub(children)));
    }
    // Gone meanwhile and reaped by another process than init: its parent
    // at the start was one (or its orphan's reaper, a subreaper, is).
    let had: u64 = before
        .iter()
        .filter(|(c, p)| gone(c, p))
        .filter(|(_, p)| p.ppid > 1 && before.get(&p.ppid).is_none_or(|q| !q.ours))
        .map(|(_, p)| p.own + p.reaped)
        .sum();
    let bound = reaped_all.saturating_sub(had);
    let claimed: u64 = parts.iter().map(|(_, _, r)| r).sum();
    parts
        .into_iter()
        .map(|(pid, own, reaped)| {
            let reaped = if claimed > bound {
                (reaped as f64 * bound as f64 / claimed as f64) as u64
            } else {
                reaped
            };
            (pid, own + reaped)
        })
        .collect()
}

/// How many times a busy run is repeated (`ONCEHOOK_BENCH_BUSY_REPEATS`,
/// 1).
fn repeats() -> usize {
    std::env::var("ONCEHOOK_BENCH_BUSY_REPEATS")
        .ok()
        .and_then(|v| v.trim().parse().ok())
        .unwrap_or(1)
        .min(5)
}

/// Whether a run that measured `load` on its `attempt` (0 first) is to be
/// repeated: busy, with a repeat left. Says so on the terminal; a busy run
/// with none left is marked withheld.
pub fn repeat(load: &mut RunLoad, attempt: usize) -> bool {
    if !load.busy() {
        return false;
    }
    if attempt < repeats() {
        eprintln!("bench: {}; repeating the run", load.reason());
        return true;
    }
    eprintln!("bench: {}; its verdicts are withheld", load.reason());
    load.withheld = true;
    if let Ok(mut runs) = RUNS.lock()
        && let Some(last) = runs.iter_mut().rev().find(|r| r.label == load.label)
    {
        last.withheld = true;
    }
    false
}

/// Runs `run` (a measured run whose figures do not depend on earlier
/// attempts) and, when other processes used more than [`THRESHOLD`]
/// during it, once more: the last attempt and its load.
pub async fn settled<T, F, Fut>(label: &str, mut run: F) -> (T, RunLoad)
where
    F: FnMut() -> Fut,
    Fut: Future<Output = T>,
{
    let mut attempt = 0;
    loop {
        let watch = Watch::start();
        let out = run().await;
        let mut load = watch.finish(label, attempt);
        if !repeat(&mut load, attempt) {
            return (out, load);
        }
        attempt += 1;
    }
}

/// Runs `run`, a phase no goal verdict rests on (its rows are figures
/// only), recording its load under `label` without repeating it.
pub async fn recorded<T>(label: &str, run: impl Future<Output = T>) -> T {
    let watch = Watch::start();
    let out = run.await;
    let load = watch.finish(label, 0);
    if load.busy() {
        eprintln!(
            "bench: {} (recorded: no goal verdict rests on it)",
            load.reason()
        );
        if let Ok(mut runs) = RUNS.lock()
            && let Some(last) = runs.iter_mut().rev().find(|r| r.label == load.label)
        {
            last.recorded_only = true;
        }
    }
    out
}

/// The verdict of a goal that rests on runs with these loads: `None` when
/// it may be given, else why not ("verdict withheld: other processes used
/// 0.45 cores during …").
pub fn withheld(loads: &[&RunLoad]) -> Option<String> {
    loads
        .iter()
        .find(|l| l.withheld)
        .map(|l| format!("verdict withheld: {}", l.reason()))
}

/// The report's lines about the runs' load (markdown): the highest, the
/// runs repeated, the verdicts withheld.
pub fn summary() -> String {
    let runs = RUNS.lock().map(|r| r.clone()).unwrap_or_default();
    if runs.is_empty() {
        return String::new();
    }
    let highest = runs
        .iter()
        .filter(|r| r.others.is_some())
        .max_by(|a, b| a.others.unwrap_or(0.0).total_cmp(&b.others.unwrap_or(0.0)));
    let mut out = format!(
        "\nOther processes during the measured runs ({} runs; a run above {THRESHOLD} cores is {}, and the verdicts resting on a run still above it are withheld): ",
        runs.len(),
        match repeats() {
            0 => "not repeated (ONCEHOOK_BENCH_BUSY_REPEATS=0)".to_owned(),
            1 => "repeated once".to_owned(),
            n => format!("repeated up to {n} times"),
        }
    );
    match highest {
        Some(h) => out.push_str(&format!(
            "at most {:.2} cores ({}).\n",
            h.others.unwrap_or(0.0),
            h.label
        )),
        None => out.push_str("not readable.\n"),
    }
    for r in runs.iter().filter(|r| r.busy()) {
        out.push_str(&format!(
            "- {}: {}\n",
            if r.recorded_only {
                "recorded (no goal verdict rests on it)"
            } else if r.withheld {
                "verdicts withheld"
            } else {
                "repeated"
            },
            r.reason()
        ));
    }
    out
}

/// One process as `/proc/<pid>/stat` shows it.
#[derive(Debug, Clone)]
struct Proc {
    comm: String,
    ppid: u32,
    /// utime + stime, and cutime + cstime (its children that exited and
    /// were reaped).
    own: u64,
    reaped: u64,
    /// When it started, in ticks after boot.
    started: u64,
    /// The bench's own (see [`processes`]).
    ours: bool,
}

/// Every process, marked when it is the bench's own: this process, its
/// ancestors and descendants, and PostgreSQL's and RabbitMQ's when
/// `servers`.
fn processes(servers: bool) -> BTreeMap<u32, Proc> {
    let Ok(dir) = std::fs::read_dir("/proc") else {
        return BTreeMap::new();
    };
    let all: BTreeMap<u32, Proc> = dir
        .flatten()
        .filter_map(|e| e.file_name().to_str()?.parse::<u32>().ok())
        .filter_map(|pid| {
            let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
            Some((pid, parse(&stat)?))
        })
        .collect();
    let me = std::process::id();
    let ancestors = lineage(me, &all);
    let ours = |pid: u32| -> bool {
        if ancestors.contains(&pid) {
            return true;
        }
        let mut at = pid;
        for _ in 0..64 {
            if at == me {
                return true;
            }
            let Some(p) = all.get(&at) else {
                return false;
            };
            let comm = p.comm.as_str();
            let server = comm == "postgres" || comm == "beam.smp" || BROKER_HELPERS.contains(&comm);
            if servers && server {
                return true;
            }
            if p.ppid == 0 || at == 1 {
                return false;
            }
            at = p.ppid;
        }
        false
    };
    all.iter()
        .map(|(pid, p)| {
            let ours = ours(*pid);
            (*pid, Proc { ours, ..p.clone() })
        })
        .collect()
}

/// `pid`'s ancestors (its parent, the parent's parent, …), init left out.
fn lineage(pid: u32, all: &BTreeMap<u32, Proc>) -> BTreeSet<u32> {
    let mut out = BTreeSet::new();
    let mut at = pid;
    for _ in 0..64 {
        let Some(p) = all.get(&at) else {
            break;
        };
        // Not init: the machine's, not the bench's.
        if p.ppid <= 1 {
            break;
        }
        out.insert(p.ppid);
        at = p.ppid;
    }
    out
}

/// One `/proc/<pid>/stat` line.
fn parse(stat: &str) -> Option<Proc> {
    let (open, close) = (stat.find('(')?, stat.rfind(')')?);
    let comm = stat.get(open + 1..close)?.to_owned();
    let fields: Vec<&str> = stat.get(close + 1..)?.split_whitespace().collect();
    // After the command: state (0), ppid (1), …, utime (11) to cstime
    // (14), …, starttime (19).
    let ppid = fields.get(1)?.parse().ok()?;
    let tick = |i: usize| fields.get(i).and_then(|f| f.parse::<u64>().ok());
    Some(Proc {
        comm,
        ppid,
        own: tick(11)? + tick(12)?,
        reaped: tick(13)? + tick(14)?,
        started: tick(19)?,
        ours: false,
    })
}
