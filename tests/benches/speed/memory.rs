//! Peak resident memory of the binaries under the bench's load: the kernel
//! keeps each process's high-water mark (`VmHWM` in `/proc/<pid>/status`),
//! read just before the process is stopped, so nothing has to sample
//! during a phase. Reported against the limits of the "Throughput" issue.

use std::collections::BTreeMap;

use super::super::{Row, Stats};

/// The RSS each binary should stay under during the bench, in MiB.
pub const LIMITS_MB: [(&str, f64); 3] = [
    ("oncehook-ingest", 30.0),
    ("oncehook-worker", 50.0),
    ("oncehook-mailer", 30.0),
];

/// A `/proc/<pid>/status` field in kB (`VmHWM`, `VmRSS`).
pub fn status_kb(pid: u32, field: &str) -> Option<u64> {
    let text = std::fs::read_to_string(format!("/proc/{pid}/status")).ok()?;
    text.lines()
        .find_map(|l| l.strip_prefix(field)?.strip_prefix(':'))
        .and_then(|v| v.split_whitespace().next())
        .and_then(|v| v.parse().ok())
}

/// The highest peak seen per binary, and where it was seen.
#[derive(Default)]
pub struct Peaks {
    peaks: BTreeMap<String, (u64, String)>,
}

impl Peaks {
    /// Reads the peak of `pid` (a `name` process, under `load`) and keeps it
    /// if it is the highest so far for `name`.
    pub fn record(&mut self, name: &str, pid: u32, load: &str) {
        let Some(kb) = status_kb(pid, "VmHWM") else {
            eprintln!("bench: warning: no VmHWM for {name} (pid {pid})");
            return;
        };
        let entry = self
            .peaks
            .entry(name.to_owned())
            .or_insert((0, String::new()));
        if kb > entry.0 {
            *entry = (kb, load.to_owned());
        }
    }

    /// One row per binary: peak RSS against its limit.
    pub fn rows(&self) -> Vec<Row> {
        LIMITS_MB
            .iter()
            .filter_map(|(name, limit)| {
                let (kb, load) = self.peaks.get(*name)?;
                let mb = *kb as f64 / 1024.0;
                let verdict = if mb <= *limit { "within" } else { "OVER" };
                let mut row = Row::new(
                    format!("peak RSS {name} ({load})"),
                    "",
                    &Stats::default(),
                    format!(
                        "{mb:.1} MiB of {limit:.0} MiB: {:.2}× the limit, {verdict}",
                        mb / limit
                    ),
                );
                row.throughput = format!("{mb:.1} MiB");
                Some(row)
            })
            .collect()
    }
}
