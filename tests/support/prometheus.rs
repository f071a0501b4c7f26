//! A real Prometheus server (Debian's `prometheus`, installed by
//! `deploy/local/tools.sh`) that scrapes a test's binaries every second, on
//! a free loopback port with its data in the test's folder; stopped when
//! dropped. For tests of what operators read from Prometheus.

use std::path::Path;
use std::time::Duration;

use serde_json::Value;
use tokio::process::{Child, Command};

pub struct Prometheus {
    /// Base URL of its HTTP API.
    pub url: String,
    _child: Child,
}

impl Prometheus {
    /// Starts one scraping `targets` (`host:port` of metrics listeners) and
    /// waits until it is ready.
    pub async fn start(dir: &Path, targets: &[&str]) -> Prometheus {
        let port = crate::free_port();
        let config = dir.join("prometheus.yml");
        let list: Vec<String> = targets.iter().map(|t| format!("\"{t}\"")).collect();
        std::fs::write(
            &config,
            format!(
                "global:\n  scrape_interval: 1s\n  evaluation_interval: 1s\n\
                 scrape_configs:\n  - job_name: oncehook\n    static_configs:\n      - targets: [{}]\n",
                list.join(", ")
            ),
        )
        .expect("write prometheus.yml");
        let log = std::fs::File::create(dir.join("prometheus.log")).expect("prometheus log");
        let child = Command::new("prometheus")
            .arg(format!("--config.file={}", config.display()))
            .arg(format!(
                "--storage.tsdb.path={}",
                dir.join("prometheus-data").display()
            ))
            .arg(format!("--web.listen-address=127.0.0.1:{port}"))
            .arg("--log.level=warn")
            .stdout(log.try_clone().expect("log handle"))
            .stderr(log)
            .kill_on_drop(true)
            .spawn()
            .expect("run prometheus (Debian's package; `deploy/local/tools.sh` installs it)");
        let me = Prometheus {
            url: format!("http://127.0.0.1:{port}"),
            _child: child,
        };
        let ready = format!("{}/-/ready", me.url);
        crate::eventually("prometheus ready", Duration::from_secs(60), || async {
            let r = reqwest::get(&ready).await.ok()?;
            r.status().is_success().then_some(())
        })
        .await;
        me
    }

    /// The value of an instant query that returns one number, if it has one.
    pub async fn scalar(&self, query: &str) -> Option<f64> {
        let resp = reqwest::Client::new()
            .get(format!("{}/api/v1/query", self.url))
            .query(&[("query", query)])
            .send()
            .await
            .ok()?;
        let doc: Value = serde_json::from_str(&resp.text().await.ok()?).ok()?;
        doc["data"]["result"][0]["value"][1].as_str()?.parse().ok()
    }
}
