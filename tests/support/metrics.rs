//! Reading a binary's `/metrics` page, for tests that assert what an
//! operator's dashboard would show.

/// The `/metrics` page of the listener at `base` (`http://host:port`);
/// `None` while it does not answer (a binary still starting or stopping).
pub async fn text(base: &str) -> Option<String> {
    let client = reqwest::Client::new();
    let answer = client.get(format!("{base}/metrics")).send().await.ok()?;
    answer.error_for_status().ok()?.text().await.ok()
}

/// The `/metrics` page at `base`; panics, naming `base`, if it does not
/// answer.
pub async fn scrape(base: &str) -> String {
    text(base)
        .await
        .unwrap_or_else(|| panic!("{base}/metrics did not answer"))
}

/// The sum of a counter, gauge or histogram count `name` over its label
/// sets in `text` (0 when absent).
pub fn sum(text: &str, name: &str) -> f64 {
    text.lines()
        .filter(|l| {
            l.strip_prefix(name)
                .is_some_and(|rest| rest.starts_with(' ') || rest.starts_with('{'))
        })
        .filter_map(|l| l.rsplit(' ').next())
        .filter_map(|v| v.parse::<f64>().ok())
        .sum()
}

/// The value of the series `name` in `text` that carry every one of
/// `labels`, summed (0 when absent).
pub fn series(text: &str, name: &str, labels: &[(&str, &str)]) -> f64 {
    text.lines()
        .filter(|l| l.starts_with(&format!("{name}{{")))
        .filter(|l| {
            labels
                .iter()
                .all(|(k, v)| l.contains(&format!("{k}=\"{v}\"")))
        })
        .filter_map(|l| l.rsplit(' ').next()?.parse::<f64>().ok())
        .sum()
}

#[cfg(test)]
mod tests {
    use super::sum;

    #[test]
    fn sums_a_metric_over_its_labels_and_nothing_else() {
        let text =
            "# TYPE a_total counter\na_total{k=\"x\"} 2\na_total{k=\"y\"} 3\na_total_more 7\nb 1\n";
        assert_eq!(sum(text, "a_total"), 5.0);
        assert_eq!(sum(text, "b"), 1.0);
        assert_eq!(sum(text, "c"), 0.0);
    }
}
