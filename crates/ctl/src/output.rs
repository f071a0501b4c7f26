//! Output for humans or scripts: every verb prints either text or one JSON
//! document on stdout; errors go to stderr.

use serde_json::Value;

/// How to print results.
#[derive(Debug, Clone, Copy)]
pub struct Output {
    pub json: bool,
}

impl Output {
    /// Prints `text` for humans or `value` for `--json`.
    pub fn done(&self, text: &str, value: Value) {
        if self.json {
            println!(
                "{}",
                serde_json::to_string_pretty(&value).unwrap_or_default()
            );
        } else {
            println!("{text}");
        }
    }

    /// Progress lines for long operations (humans only, on stderr).
    pub fn progress(&self, text: &str) {
        if !self.json {
            eprintln!("{text}");
        }
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
    let line = |cells: Vec<String>| {
        cells
            .iter()
            .enumerate()
            .map(|(i, c)| format!("{c:<w$}", w = widths.get(i).copied().unwrap_or(0)))
            .collect::<Vec<_>>()
            .join("  ")
            .trim_end()
            .to_owned()
    };
    let mut out = line(headers.iter().map(|h| h.to_string()).collect());
    for row in rows {
        out.push('\n');
        out.push_str(&line(row.clone()));
    }
    out
}

/// Parses a duration like `90s`, `30m`, `2h`, `7d` or `1w` (a bare number is seconds).
pub fn parse_duration(text: &str) -> Result<std::time::Duration, String> {
    let t = text.trim();
    let split = t.find(|c: char| !c.is_ascii_digit()).unwrap_or(t.len());
    let (digits, unit) = t.split_at(split);
    let n: u64 = digits
        .parse()
        .map_err(|_| format!("{text:?} is not a duration (expected e.g. 30m, 2h, 7d)"))?;
    let unit_secs = match unit.trim() {
        "" | "s" | "sec" | "secs" => 1,
        "m" | "min" | "mins" => 60,
        "h" | "hour" | "hours" => 3_600,
        "d" | "day" | "days" => 86_400,
        "w" | "week" | "weeks" => 7 * 86_400,
        other => {
            return Err(format!(
                "unknown unit {other:?} in {text:?} (use s, m, h, d or w)"
            ));
        }
    };
    n.checked_mul(unit_secs)
        .map(std::time::Duration::from_secs)
        .ok_or_else(|| format!("{text:?} is too long"))
}

/// A compact age or window: `45s`, `12m 5s`, `3h 2m`, `2d 4h`.
pub fn human_duration(secs: u64) -> String {
    let (d, h, m, s) = (
        secs / 86_400,
        secs % 86_400 / 3_600,
        secs % 3_600 / 60,
        secs % 60,
    );
    match (d, h, m) {
        (0, 0, 0) => format!("{s}s"),
        (0, 0, _) if s == 0 => format!("{m}m"),
        (0, 0, _) => format!("{m}m {s}s"),
        (0, _, 0) => format!("{h}h"),
        (0, _, _) => format!("{h}h {m}m"),
        (_, 0, _) => format!("{d}d"),
        _ => format!("{d}d {h}h"),
    }
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

/// A UTC time as `2026-11-30 10:42:03Z` for tables.
pub fn short_time(t: time::OffsetDateTime) -> String {
    let t = t.to_offset(time::UtcOffset::UTC);
    format!(
        "{:04}-{:02}-{:02} {:02}:{:02}:{:02}Z",
        t.year(),
        u8::from(t.month()),
        t.day(),
        t.hour(),
        t.minute(),
        t.second()
    )
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn durations_parse_and_print() {
        assert_eq!(
            parse_duration("30m"),
            Ok(std::time::Duration::from_secs(1_800))
        );
        assert_eq!(
            parse_duration("2h"),
            Ok(std::time::Duration::from_secs(7_200))
        );
        assert_eq!(
            parse_duration("7d"),
            Ok(std::time::Duration::from_secs(604_800))
        );
        assert_eq!(parse_duration("45"), Ok(std::time::Duration::from_secs(45)));
        assert!(parse_duration("h").is_err());
        assert!(parse_duration("3y").is_err());
        assert!(parse_duration("99999999999999999999d").is_err());
        assert_eq!(human_duration(59), "59s");
        assert_eq!(human_duration(3_723), "1h 2m");
        assert_eq!(human_duration(90_000), "1d 1h");
    }

    #[test]
    fn truncation_counts_characters() {
        assert_eq!(truncate("abc", 5), "abc");
        assert_eq!(truncate("₹₹₹₹₹₹", 4), "₹₹₹…");
        assert_eq!(truncate("a\nb", 5), "a b");
    }
}
