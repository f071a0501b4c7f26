//! The one place that prints a verb's result. Every verb returns a typed
//! report (`Serialize + Display`); [`Output::finish`] writes its text for
//! humans or one JSON document for scripts on stdout, its diagnostics on
//! stderr, and turns it into the exit code. Also the text helpers reports
//! share (tables, truncation) and the terminal confirmation.

use std::fmt::Display;
use std::process::ExitCode;

use serde::Serialize;

/// What a verb returns: text via `Display`, `--json` via `Serialize`.
pub trait Report: Serialize + Display {
    /// Whether the verb did everything it was asked (exit code 0).
    fn ok(&self) -> bool {
        true
    }

    /// Lines for stderr, printed in both modes (e.g. IDs that were not found).
    fn diagnostics(&self) -> Vec<String> {
        Vec::new()
    }
}

/// How to print results.
#[derive(Debug, Clone, Copy)]
pub struct Output {
    pub json: bool,
}

impl Output {
    /// Prints `report` (text or JSON) and its diagnostics; returns the exit code.
    pub fn finish<R: Report>(&self, report: &R) -> ExitCode {
        if self.json {
            // Through `Value`, whose maps are sorted: keys print in a stable order.
            let value = serde_json::to_value(report).unwrap_or_default();
            println!(
                "{}",
                serde_json::to_string_pretty(&value).unwrap_or_default()
            );
        } else {
            println!("{report}");
        }
        for line in report.diagnostics() {
            eprintln!("{line}");
        }
        if report.ok() {
            ExitCode::SUCCESS
        } else {
            ExitCode::FAILURE
        }
    }

    /// Progress lines for long operations (humans only, on stderr).
    pub fn progress(&self, text: &str) {
        if !self.json {
            eprintln!("{text}");
        }
    }

    /// What is about to happen, before asking for confirmation (stdout).
    pub fn preview(&self, text: &str) {
        println!("{text}");
    }
}

/// A simple left-aligned text table.
pub fn table(headers: &[&str], rows: &[Vec<String>]) -> String {
    let mut widths: Vec<usize> = headers.iter().map(|h| h.len()).collect();
    for row in rows {
        for (i, cell) in row.iter().enumerate() {
            if let Some(w) = widths.get_mut(i) {
                *w = (*w).max(cell.chars().count());
            }
        }
    }
    let line = |cells: &[String]| {
        cells
            .iter()
            .enumerate()
            .map(|(i, c)| format!("{c:<w$}", w = widths.get(i).copied().unwrap_or(0)))
            .collect::<Vec<_>>()
            .join("  ")
            .trim_end()
            .to_owned()
    };
    let header: Vec<String> = headers.iter().map(|h| h.to_string()).collect();
    let mut out = line(&header);
    for row in rows {
        out.push('\n');
        out.push_str(&line(row));
    }
    out
}

/// At most `max` characters of `text` on one line, with `…` when cut.
pub fn truncate(text: &str, max: usize) -> String {
    let one_line: String = text
        .chars()
        .map(|c| if c.is_control() { ' ' } else { c })
        .collect();
    if one_line.chars().count() <= max {
        return one_line;
    }
    let mut cut: String = one_line.chars().take(max.saturating_sub(1)).collect();
    cut.push('…');
    cut
}

/// `"-"` for a missing value, the value's text otherwise.
pub fn or_dash(v: Option<impl ToString>) -> String {
    v.map_or_else(|| "-".to_owned(), |v| v.to_string())
}

/// `--dry-run` and `--yes`, for the verbs that change what cannot be had
/// back (`dlq replay`, `retention`): look first, or skip the question. A
/// verb words their help for itself (`#[command(mut_arg(…))]`).
#[derive(clap::Args, Debug, Clone, Copy, Default)]
pub struct Caution {
    /// Show what would change; change nothing.
    #[arg(long)]
    pub dry_run: bool,
    /// Do not ask for confirmation (asked only on a terminal; where a
    /// question is needed and stdin is no terminal, required).
    #[arg(long)]
    pub yes: bool,
}

/// Asks `question` on the terminal; `true` only if the answer is `yes`.
/// Callers check that stdin is a terminal first.
pub async fn confirm(question: String) -> anyhow::Result<bool> {
    let answer = tokio::task::spawn_blocking(move || {
        use std::io::Write as _;
        let mut err = std::io::stderr();
        let _ = write!(err, "{question}");
        let _ = err.flush();
        let mut line = String::new();
        std::io::stdin().read_line(&mut line).map(|_| line)
    })
    .await??;
    Ok(answer.trim() == "yes")
}

/// Asks a person to confirm `action` (e.g. "delete every processed_webhooks
/// row"): `Ok(true)` only for "yes"; refuses outright when stdin is not a
/// terminal, naming `--yes`, so a script never does it by accident.
pub async fn approve(action: &str) -> anyhow::Result<bool> {
    use std::io::IsTerminal as _;
    if !std::io::stdin().is_terminal() {
        anyhow::bail!(
            "refusing to {action} without confirmation: stdin is not a terminal; pass --yes"
        );
    }
    confirm(format!("Type 'yes' to {action}: ")).await
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn truncation_counts_characters() {
        assert_eq!(truncate("abc", 5), "abc");
        assert_eq!(truncate("₹₹₹₹₹₹", 4), "₹₹₹…");
        assert_eq!(truncate("a\nb", 5), "a b");
    }

    #[test]
    fn tables_align_on_characters() {
        let t = table(&["A", "BB"], &[vec!["₹₹₹".into(), "x".into()]]);
        assert_eq!(t, "A    BB\n₹₹₹  x");
    }
}
