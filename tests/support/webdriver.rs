//! A minimal W3C WebDriver client for the console's browser tests: starts
//! Debian's `chromedriver` on a free loopback port, opens a headless
//! `chromium` session and speaks the handful of endpoints the tests need
//! (navigate, find, type, click, page source, screenshot) as JSON over the
//! reqwest client the suite already has. `deploy/local/tools.sh` installs
//! both (`make test` runs it).

use std::path::{Path, PathBuf};
use std::time::Duration;

use base64::Engine as _;
use serde_json::{Value, json};

use crate::Proc;

/// The key W3C WebDriver wraps an element reference in.
const ELEMENT: &str = "element-6066-11e4-a52e-4f735466cecf";

fn find_program(names: &[&str]) -> PathBuf {
    for dir in std::env::var("PATH")
        .unwrap_or_default()
        .split(':')
        .chain(["/usr/bin", "/usr/lib/chromium"])
    {
        for name in names {
            let p = Path::new(dir).join(name);
            if p.exists() {
                return p;
            }
        }
    }
    panic!(
        "{} not found: install Debian's chromium and chromium-driver (`deploy/local/tools.sh`, run by `make test`)",
        names.join(" / ")
    )
}

/// A headless browser driven through chromedriver.
pub struct Browser {
    base: String,
    session: String,
    http: reqwest::Client,
    _driver: Proc,
}

impl Browser {
    /// Starts chromedriver (its log in `dir`) and a headless chromium session.
    pub async fn start(dir: &Path) -> Browser {
        let driver_bin = find_program(&["chromedriver"]);
        let chromium = find_program(&["chromium", "chromium-browser"]);
        let port = crate::free_port();
        let driver = Proc::spawn_program(
            &driver_bin.display().to_string(),
            "chromedriver",
            dir.join("chromedriver.log"),
            &[("HOME".to_owned(), dir.display().to_string())],
            &[&format!("--port={port}"), "--allowed-ips=127.0.0.1"],
        );
        let base = format!("http://127.0.0.1:{port}");
        let http = reqwest::Client::builder()
            .timeout(Duration::from_secs(60))
            .build()
            .expect("http client");
        let status = format!("{base}/status");
        crate::eventually("chromedriver ready", Duration::from_secs(30), || async {
            let r = http.get(&status).send().await.ok()?;
            let v: Value = serde_json::from_str(&r.text().await.ok()?).ok()?;
            (v["value"]["ready"] == true).then_some(())
        })
        .await;
        let profile = dir.join("chromium-profile");
        let caps = json!({"capabilities": {"alwaysMatch": {
            "browserName": "chrome",
            "goog:chromeOptions": {
                "binary": chromium.display().to_string(),
                "args": ["--headless=new", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage",
                         "--window-size=1280,900", "--no-first-run", "--disable-extensions",
                         format!("--user-data-dir={}", profile.display())]
            }
        }}});
        let mut browser = Browser {
            base,
            session: String::new(),
            http,
            _driver: driver,
        };
        let v = browser
            .call(reqwest::Method::POST, "/session", Some(caps))
            .await;
        browser.session = v["sessionId"]
            .as_str()
            .unwrap_or_else(|| panic!("no session: {v}"))
            .to_owned();
        browser
    }

    async fn call(&self, method: reqwest::Method, path: &str, body: Option<Value>) -> Value {
        let url = if path == "/session" {
            format!("{}{path}", self.base)
        } else {
            format!("{}/session/{}{path}", self.base, self.session)
        };
        let mut req = self.http.request(method, &url);
        if let Some(b) = body {
            req = req
                .header("content-type", "application/json")
                .body(b.to_string());
        }
        let resp = req.send().await.unwrap_or_else(|e| panic!("{url}: {e}"));
        let text = resp.text().await.unwrap_or_default();
        let v: Value = serde_json::from_str(&text).unwrap_or_else(|e| panic!("{url}: {e}: {text}"));
        if v["value"]["error"].is_string() {
            panic!("webdriver {path}: {}", v["value"]);
        }
        v["value"].clone()
    }

    pub async fn goto(&self, url: &str) {
        self.call(reqwest::Method::POST, "/url", Some(json!({"url": url})))
            .await;
    }

    pub async fn url(&self) -> String {
        self.call(reqwest::Method::GET, "/url", None)
            .await
            .as_str()
            .unwrap_or_default()
            .to_owned()
    }

    pub async fn source(&self) -> String {
        self.call(reqwest::Method::GET, "/source", None)
            .await
            .as_str()
            .unwrap_or_default()
            .to_owned()
    }

    /// The page source once it contains `needle` (a click's navigation may
    /// still be under way); panics after 15 s.
    pub async fn wait_for(&self, needle: &str) -> String {
        let started = std::time::Instant::now();
        loop {
            let page = self.source().await;
            if page.contains(needle) {
                return page;
            }
            assert!(
                started.elapsed() < Duration::from_secs(15),
                "the page never showed {needle:?}:\n{page}"
            );
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }

    /// Every element matching a CSS selector.
    pub async fn all(&self, css: &str) -> Vec<String> {
        let v = self
            .call(
                reqwest::Method::POST,
                "/elements",
                Some(json!({"using": "css selector", "value": css})),
            )
            .await;
        v.as_array()
            .map(|items| {
                items
                    .iter()
                    .filter_map(|e| e[ELEMENT].as_str().map(str::to_owned))
                    .collect()
            })
            .unwrap_or_default()
    }

    /// The first element matching a CSS selector.
    pub async fn find(&self, css: &str) -> String {
        let found = self.all(css).await;
        found
            .into_iter()
            .next()
            .unwrap_or_else(|| panic!("no element matches {css:?}"))
    }

    pub async fn type_into(&self, css: &str, text: &str) {
        let e = self.find(css).await;
        self.call(
            reqwest::Method::POST,
            &format!("/element/{e}/value"),
            Some(json!({"text": text})),
        )
        .await;
    }

    pub async fn click(&self, css: &str) {
        let e = self.find(css).await;
        self.call(
            reqwest::Method::POST,
            &format!("/element/{e}/click"),
            Some(json!({})),
        )
        .await;
    }

    /// Runs `script` in the page (as a user with the developer tools could;
    /// the page's CSP does not apply) and returns what it returns.
    pub async fn execute(&self, script: &str) -> Value {
        self.call(
            reqwest::Method::POST,
            "/execute/sync",
            Some(json!({"script": script, "args": []})),
        )
        .await
    }

    /// Writes a PNG of the viewport to `path`.
    pub async fn screenshot(&self, path: &Path) {
        let v = self.call(reqwest::Method::GET, "/screenshot", None).await;
        let png = base64::engine::general_purpose::STANDARD
            .decode(v.as_str().unwrap_or_default())
            .expect("screenshot is base64");
        if let Some(parent) = path.parent() {
            std::fs::create_dir_all(parent).expect("screenshot folder");
        }
        std::fs::write(path, png).expect("write screenshot");
    }

    /// Ends the browser session.
    pub async fn quit(self) {
        let _ = self.call(reqwest::Method::DELETE, "", None).await;
    }
}
