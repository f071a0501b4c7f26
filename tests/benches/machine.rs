//! Whether the machine was quiet enough for the goals to mean anything.
//! Before measuring, the bench samples every process's CPU (`/proc`) and
//! the machine's busy time (`/proc/stat`) for [`SURVEY`]; when processes
//! other than the bench's own use more than [`QUIET_CORES`] of a core, or a
//! build (`cargo`, `rustc`) is running that is not the one running the
//! bench, the report says so at its top, lists the top consumers, and
//! gives no goal verdicts (the figures are still printed). The check for
//! builds is repeated when the report is written.

use std::collections::BTreeMap;
use std::sync::OnceLock;
use std::time::Duration;

use crate::cpu;

/// How long the machine is watched before measuring.
const SURVEY: Duration = Duration::from_secs(2);
/// The most CPU other processes may use, in cores, for a quiet machine.
const QUIET_CORES: f64 = 0.25;
/// The line that replaces the goal verdicts on a busy machine.
pub const NOT_REPORTED: &str = "goals not reported: the machine was busy";

/// What the survey found.
#[derive(Debug, Clone, Default)]
pub struct Load {
    /// Cores other processes kept busy, and the whole machine.
    pub others: f64,
    pub machine: Option<f64>,
    /// The heaviest other processes: command and cores.
    pub top: Vec<(String, f64)>,
    /// Builds running (command and pid) that are not the bench's ancestors.
    pub builds: Vec<String>,
}

static SURVEYED: OnceLock<Load> = OnceLock::new();

impl Load {
    pub fn busy(&self) -> bool {
        self.others > QUIET_CORES || !self.builds.is_empty()
    }
}

/// Watches the machine for [`SURVEY`] (once; later calls return the first
/// result).
pub async fn survey() -> Load {
    if let Some(load) = SURVEYED.get() {
        return load.clone();
    }
    let before = crate::load::snapshot(false);
    let machine_before = machine_ticks();
    tokio::time::sleep(SURVEY).await;
    let after = crate::load::snapshot(false);
    let machine_after = machine_ticks();
    let secs = SURVEY.as_secs_f64();
    let ticks = cpu::clock_ticks().unwrap_or(100.0);
    let (others, top) = crate::load::cores_between(&before, &after, secs, 6).unwrap_or_default();
    let machine = match (machine_before, machine_after) {
        (Some(b), Some(a)) => Some(a.saturating_sub(b) as f64 / ticks / secs),
        _ => None,
    };
    let load = Load {
        others,
        machine,
        top,
        builds: builds(),
    };
    SURVEYED.get_or_init(|| load).clone()
}

/// Whether the report may give goal verdicts: the survey found a quiet
/// machine, and no build runs now.
pub fn quiet() -> bool {
    SURVEYED.get().is_none_or(|l| !l.busy()) && builds().is_empty()
}

/// The report's opening lines about the machine (markdown).
pub fn preface() -> String {
    let Some(load) = SURVEYED.get() else {
        return String::new();
    };
    let top = load
        .top
        .iter()
        .map(|(c, n)| format!("{c} {n:.2}"))
        .collect::<Vec<_>>()
        .join(", ");
    let machine = load.machine.map_or("–".to_owned(), |m| format!("{m:.2}"));
    let now = builds();
    let mut out = format!(
        "Machine before measuring ({} s): other processes {:.2} cores, the whole machine {machine} of {} (top: {}).\n",
        SURVEY.as_secs(),
        load.others,
        cpu::cores(),
        if top.is_empty() { "none" } else { &top }
    );
    if load.busy() || !now.is_empty() {
        out.push_str(&format!(
            "\n**The machine was busy** (other processes above {QUIET_CORES} of a core, or a build running{}). The figures stand as measured; {NOT_REPORTED}.\n",
            {
                let mut b = load.builds.clone();
                b.extend(now);
                b.dedup();
                if b.is_empty() {
                    String::new()
                } else {
                    format!(": {}", b.join(", "))
                }
            }
        ));
    }
    out
}

/// Command and ticks (own and reaped) of every process.
fn processes() -> BTreeMap<u32, (String, u64)> {
    let Ok(dir) = std::fs::read_dir("/proc") else {
        return BTreeMap::new();
    };
    dir.flatten()
        .filter_map(|e| e.file_name().to_str()?.parse::<u32>().ok())
        .filter_map(|pid| {
            let comm = std::fs::read_to_string(format!("/proc/{pid}/comm")).ok()?;
            let t = cpu::process_ticks(pid)?;
            Some((pid, (comm.trim_end().to_owned(), t.own + t.reaped)))
        })
        .collect()
}

/// The machine's busy ticks (`/proc/stat`, as [`cpu`] reads them).
fn machine_ticks() -> Option<u64> {
    cpu::machine_busy_ticks()
}

/// This process, its threads' process and its ancestors (the `cargo` that
/// runs the bench is not another build).
fn lineage() -> Vec<u32> {
    let mut out = vec![std::process::id()];
    let mut pid = std::process::id();
    for _ in 0..64 {
        let Some(parent) = parent_of(pid) else { break };
        if parent <= 1 {
            break;
        }
        out.push(parent);
        pid = parent;
    }
    out
}

fn parent_of(pid: u32) -> Option<u32> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    let close = stat.rfind(')')?;
    stat.get(close + 1..)?
        .split_whitespace()
        .nth(1)?
        .parse()
        .ok()
}

/// `cargo` and `rustc` processes that are not the bench's ancestors.
fn builds() -> Vec<String> {
    let ours = lineage();
    processes()
        .into_iter()
        .filter(|(pid, (comm, _))| (comm == "cargo" || comm == "rustc") && !ours.contains(pid))
        .map(|(pid, (comm, _))| format!("{comm} (pid {pid})"))
        .collect()
}

/// The goal verdicts recorded so far (the report prints them, or
/// [`NOT_REPORTED`] on a busy machine).
static GOALS: std::sync::Mutex<Vec<String>> = std::sync::Mutex::new(Vec::new());

/// Records a goal's verdict: `what` measured `value`, met when `met`;
/// withheld, with the reason, when one of the runs it rests on (their
/// `loads`) was still busy after its repeat ([`crate::load`]).
pub fn goal_on(what: &str, value: String, met: bool, loads: &[&crate::load::RunLoad]) {
    let verdict = crate::load::withheld(loads).unwrap_or_else(|| {
        if met {
            "met".to_owned()
        } else {
            "not met".to_owned()
        }
    });
    if let Ok(mut goals) = GOALS.lock() {
        goals.push(format!("{what}: {value} — {verdict}"));
    }
}

/// The goals section (markdown): the verdicts, or why there are none.
pub fn goals() -> String {
    let verdicts = GOALS.lock().map(|g| g.clone()).unwrap_or_default();
    if verdicts.is_empty() {
        return String::new();
    }
    let mut out = "\n## Goals\n\n".to_owned();
    if quiet() {
        for v in verdicts {
            out.push_str(&format!("- {v}\n"));
        }
    } else {
        out.push_str(&format!("{NOT_REPORTED}.\n"));
    }
    out
}
