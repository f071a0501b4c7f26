//! The report's tables, as aligned plain text for the terminal and as
//! markdown for `target/bench-report.md`.

/// Columns padded to their widest cell, two spaces apart; columns for
/// which `right(index)` holds are right-aligned.
pub fn text<S: AsRef<str>>(header: &[S], rows: &[Vec<String>], right: fn(usize) -> bool) -> String {
    let mut widths: Vec<usize> = header.iter().map(|h| h.as_ref().chars().count()).collect();
    for row in rows {
        for (w, c) in widths.iter_mut().zip(row) {
            *w = (*w).max(c.chars().count());
        }
    }
    let line = |cols: &mut dyn Iterator<Item = &str>| {
        cols.zip(&widths)
            .enumerate()
            .map(|(i, (c, w))| {
                let pad = " ".repeat(w - c.chars().count());
                if right(i) {
                    format!("{pad}{c}")
                } else {
                    format!("{c}{pad}")
                }
            })
            .collect::<Vec<_>>()
            .join("  ")
    };
    let mut out = line(&mut header.iter().map(AsRef::as_ref));
    out.push('\n');
    let rule: Vec<String> = widths.iter().map(|w| "-".repeat(*w)).collect();
    out.push_str(&rule.join("  "));
    out.push('\n');
    for row in rows {
        out.push_str(&line(&mut row.iter().map(String::as_str)));
        out.push('\n');
    }
    out
}

/// A markdown table; right-aligned columns as in [`text`].
pub fn markdown<S: AsRef<str>>(
    header: &[S],
    rows: &[Vec<String>],
    right: fn(usize) -> bool,
) -> String {
    let cells: Vec<&str> = header.iter().map(AsRef::as_ref).collect();
    let mut out = format!("| {} |\n", cells.join(" | "));
    let rule: Vec<&str> = (0..header.len())
        .map(|i| if right(i) { "---:" } else { "---" })
        .collect();
    out.push_str(&format!("|{}|\n", rule.join("|")));
    for row in rows {
        out.push_str(&format!("| {} |\n", row.join(" | ")));
    }
    out
}
