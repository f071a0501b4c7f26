//! Webhooks received per source, from ingest's own counters: accepted and
//! refused (by reason) in the last hour and the last day. Refused requests
//! never reach the broker or the database, so only ingest counts them; the
//! numbers come from the Prometheus server that scrapes every ingest
//! replica (`ONCEHOOK_PROMETHEUS_URL`), summed over replicas.

use std::collections::BTreeMap;
use std::fmt;
use std::time::Duration;

use anyhow::{Context, bail};
use serde::Serialize;
use serde_json::Value;

use crate::output::table;

/// How long Prometheus may take to answer.
const TIMEOUT: Duration = Duration::from_secs(10);
/// The windows shown, with their PromQL range.
const WINDOWS: [(&str, &str); 2] = [("1h", "1h"), ("24h", "1d")];

/// One source's requests over the last hour and day.
#[derive(Serialize, Default, Clone)]
pub struct SourceReceived {
    pub source: String,
    pub accepted_1h: u64,
    pub refused_1h: u64,
    pub accepted_24h: u64,
    pub refused_24h: u64,
    /// Refusals of the last day by reason (ingest's error code).
    pub refusals_24h: BTreeMap<String, u64>,
}

/// The section: where the numbers came from, and the numbers or why not.
#[derive(Serialize)]
pub struct ReceivedView {
    pub prometheus: String,
    pub error: Option<String>,
    pub sources: Vec<SourceReceived>,
}

/// The requests of each source and outcome within `range`, summed over
/// replicas. `increase()` alone extrapolates to the window's edges, which
/// from a few scrapes of a young counter overshoots (three requests read
/// as 3.75, shown as 4). A counter that did not reset within the window is
/// counted exactly instead: its value now less its value when the window
/// began, or its whole value when it was born within the window (ingest
/// starts every counter at zero). Only a counter that reset (a replica
/// restarted) is counted by `increase()`, which counts through the reset.
fn counted(range: &str) -> String {
    let m = "oncehook_ingest_requests_total";
    let kept = format!("unless (resets({m}[{range}]) > 0)");
    format!(
        "sum by (source, outcome) (\
         (({m} - {m} offset {range}) {kept}) \
         or (({m} unless {m} offset {range}) {kept}) \
         or increase({m}[{range}]))"
    )
}

/// Asks Prometheus for both windows.
pub async fn gather(prometheus: &str) -> ReceivedView {
    let result = async {
        let client = reqwest::Client::builder().timeout(TIMEOUT).build()?;
        let mut by_source: BTreeMap<String, SourceReceived> = BTreeMap::new();
        for (window, range) in WINDOWS {
            let query = counted(range);
            for (source, outcome, n) in query_vector(&client, prometheus, &query).await? {
                let s = by_source.entry(source.clone()).or_default();
                s.source = source;
                match (window, outcome == "accepted") {
                    ("1h", true) => s.accepted_1h += n,
                    ("1h", false) => s.refused_1h += n,
                    (_, true) => s.accepted_24h += n,
                    (_, false) => {
                        s.refused_24h += n;
                        if n > 0 {
                            *s.refusals_24h.entry(outcome).or_default() += n;
                        }
                    }
                }
            }
        }
        anyhow::Ok(by_source.into_values().collect())
    }
    .await;
    match result {
        Ok(sources) => ReceivedView {
            prometheus: prometheus.to_owned(),
            error: None,
            sources,
        },
        Err(e) => ReceivedView {
            prometheus: prometheus.to_owned(),
            error: Some(format!("{e:#}")),
            sources: Vec::new(),
        },
    }
}

/// `(source, outcome, value rounded)` of an instant vector query.
async fn query_vector(
    client: &reqwest::Client,
    prometheus: &str,
    query: &str,
) -> anyhow::Result<Vec<(String, String, u64)>> {
    let url = format!("{prometheus}/api/v1/query");
    let resp = client
        .get(&url)
        .query(&[("query", query)])
        .send()
        .await
        .with_context(|| format!("asking Prometheus at {prometheus}"))?;
    let status = resp.status();
    let text = resp
        .text()
        .await
        .with_context(|| format!("reading Prometheus' answer from {prometheus}"))?;
    let doc: Value = serde_json::from_str(&text).with_context(|| {
        format!("Prometheus at {prometheus} answered {status} with something that is not JSON")
    })?;
    if doc["status"] != "success" {
        bail!(
            "Prometheus at {prometheus} refused the query ({status}): {}",
            doc["error"].as_str().unwrap_or("no reason given")
        );
    }
    let rows = doc["data"]["result"]
        .as_array()
        .cloned()
        .unwrap_or_default();
    Ok(rows
        .iter()
        .filter_map(|r| {
            let source = r["metric"]["source"].as_str()?.to_owned();
            let outcome = r["metric"]["outcome"].as_str()?.to_owned();
            let value: f64 = r["value"][1].as_str()?.parse().ok()?;
            // increase() (across a restart) extrapolates: 2.9 is 3 requests.
            let n = if value.is_finite() && value > 0.0 {
                value.round() as u64
            } else {
                0
            };
            Some((source, outcome, n))
        })
        .collect())
}

impl fmt::Display for ReceivedView {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if let Some(e) = &self.error {
            return writeln!(f, "Webhooks received: unavailable ({e})");
        }
        writeln!(
            f,
            "Webhooks received per source (ingest's counters, from {}):",
            self.prometheus
        )?;
        if self.sources.is_empty() {
            return writeln!(f, "(none)");
        }
        let rows: Vec<Vec<String>> = self
            .sources
            .iter()
            .map(|s| {
                let reasons: Vec<String> = s
                    .refusals_24h
                    .iter()
                    .map(|(k, n)| format!("{k} {n}"))
                    .collect();
                vec![
                    s.source.clone(),
                    s.accepted_1h.to_string(),
                    s.refused_1h.to_string(),
                    s.accepted_24h.to_string(),
                    s.refused_24h.to_string(),
                    if reasons.is_empty() {
                        "-".to_owned()
                    } else {
                        reasons.join(", ")
                    },
                ]
            })
            .collect();
        let headers = [
            "SOURCE",
            "ACCEPTED 1H",
            "REFUSED 1H",
            "ACCEPTED 24H",
            "REFUSED 24H",
            "REFUSED 24H BY REASON",
        ];
        writeln!(f, "{}", table(&headers, &rows))
    }
}
