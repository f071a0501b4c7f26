//! The operators' console under test: [`Console::start`] writes a config
//! with console accounts (their hashes made by `oncehookctl console-user`,
//! which is tested on the way), starts `oncehook-console` on a free
//! loopback port and waits for its login page; [`Console::login`] and the
//! request helpers speak plain HTTP with the session cookie by hand (no
//! redirects followed), so tests see every status and header.
//! [`Console::login_burst`] fires many logins at the same moment, each on
//! its own connection and, if asked, from its own loopback address.

use std::net::IpAddr;
use std::time::Duration;

use reqwest::header::{COOKIE, HeaderMap, LOCATION, SET_COOKIE};

use crate::{Proc, TestEnv};

/// The demo accounts every console test gets.
pub const OPERATOR: (&str, &str) = ("olga", "operator-password-1");
pub const VIEWER: (&str, &str) = ("victor", "viewer-password-1");

/// A running console.
pub struct Console {
    pub base: String,
    pub proc: Proc,
    http: reqwest::Client,
}

/// One answer: status, headers and body text.
pub struct Answer {
    pub status: u16,
    pub headers: HeaderMap,
    pub body: String,
}

impl Answer {
    pub fn header(&self, name: &str) -> String {
        self.headers
            .get(name)
            .and_then(|v| v.to_str().ok())
            .unwrap_or_default()
            .to_owned()
    }

    /// The IDs of the dead letters a page links to, in page order.
    pub fn letter_ids(&self) -> Vec<String> {
        self.body
            .split("href=\"/letters/")
            .skip(1)
            .filter_map(|rest| rest.split('"').next())
            .filter(|id| !id.is_empty() && id.chars().all(|c| c.is_ascii_hexdigit()))
            .map(str::to_owned)
            .collect()
    }

    /// The target of the page's "older →" link (a list's next page).
    pub fn older_link(&self) -> Option<String> {
        self.body
            .split("<a href=\"")
            .filter_map(|s| s.split_once("\">older →"))
            .map(|(href, _)| href.replace("&amp;", "&"))
            .next()
    }

    /// The value of the first `<input name="csrf" …>` of the page.
    pub fn csrf(&self) -> String {
        let marker = "name=\"csrf\" value=\"";
        let start = self
            .body
            .find(marker)
            .unwrap_or_else(|| panic!("no CSRF field in:\n{}", self.body))
            + marker.len();
        self.body[start..]
            .split('"')
            .next()
            .unwrap_or_default()
            .to_owned()
    }
}

/// Hashes `password` with `oncehookctl console-user NAME --role ROLE`.
pub async fn hash_line(env: &TestEnv, name: &str, role: &str, password: &str) -> String {
    use tokio::io::AsyncWriteExt as _;
    let mut child = tokio::process::Command::new(crate::process::bin("oncehookctl"))
        .args(["console-user", name, "--role", role])
        .env_clear()
        .env("PATH", std::env::var("PATH").unwrap_or_default())
        .envs(env.envs())
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .expect("run oncehookctl console-user");
    let mut stdin = child.stdin.take().expect("stdin");
    stdin
        .write_all(format!("{password}\n").as_bytes())
        .await
        .expect("write the password");
    drop(stdin);
    let out = tokio::time::timeout(Duration::from_secs(30), child.wait_with_output())
        .await
        .expect("console-user finishes")
        .expect("console-user output");
    let text = String::from_utf8_lossy(&out.stdout).into_owned();
    assert!(
        out.status.success() && text.contains("password_hash = \"$argon2id$"),
        "console-user: {text}{}",
        String::from_utf8_lossy(&out.stderr)
    );
    text
}

impl Console {
    /// Starts a console with [`OPERATOR`] and [`VIEWER`] and `extra` settings.
    pub async fn start(env: &mut TestEnv, extra: &[(&str, &str)]) -> Console {
        let mut config = std::fs::read_to_string(&env.config_path).expect("test config");
        config.push('\n');
        config.push_str(&hash_line(env, OPERATOR.0, "operator", OPERATOR.1).await);
        config.push('\n');
        config.push_str(&hash_line(env, VIEWER.0, "viewer", VIEWER.1).await);
        config.push('\n');
        let path = env.dir.join(format!("console-{}.toml", crate::free_port()));
        std::fs::write(&path, config).expect("write console config");
        let addr = format!("127.0.0.1:{}", crate::free_port());
        let path_text = path.display().to_string();
        let mut all = vec![
            ("ONCEHOOK_CONFIG", path_text.as_str()),
            ("ONCEHOOK_CONSOLE_ADDR", addr.as_str()),
            ("ONCEHOOK_CONSOLE_SECURE_COOKIES", "false"),
        ];
        all.extend_from_slice(extra);
        let proc = env.spawn("oncehook-console", &all, &[]);
        let console = Console {
            base: format!("http://{addr}"),
            proc,
            http: reqwest::Client::builder()
                .redirect(reqwest::redirect::Policy::none())
                .timeout(Duration::from_secs(60))
                .build()
                .expect("http client"),
        };
        let login = format!("{}/login", console.base);
        crate::eventually(
            "the console's login page",
            Duration::from_secs(30),
            || async {
                match console.http.get(&login).send().await {
                    Ok(r) if r.status().as_u16() == 200 => Some(()),
                    _ => None,
                }
            },
        )
        .await;
        console
    }

    async fn answer(resp: reqwest::Response) -> Answer {
        Answer {
            status: resp.status().as_u16(),
            headers: resp.headers().clone(),
            body: resp.text().await.unwrap_or_default(),
        }
    }

    /// `GET path` with the session cookie (if any).
    pub async fn get(&self, path: &str, cookie: Option<&str>) -> Answer {
        let mut req = self.http.get(format!("{}{path}", self.base));
        if let Some(c) = cookie {
            req = req.header(COOKIE, c);
        }
        Console::answer(req.send().await.expect("GET")).await
    }

    /// `POST path` with a form and the session cookie (if any).
    pub async fn post(&self, path: &str, cookie: Option<&str>, form: &[(&str, &str)]) -> Answer {
        let mut req = self.http.post(format!("{}{path}", self.base)).form(form);
        if let Some(c) = cookie {
            req = req.header(COOKIE, c);
        }
        Console::answer(req.send().await.expect("POST")).await
    }

    /// `POST path` with a body that is already form-encoded, sent byte for
    /// byte (to send exactly the escapes a hostile link would carry).
    pub async fn post_raw(&self, path: &str, cookie: Option<&str>, body: &str) -> Answer {
        let mut req = self
            .http
            .post(format!("{}{path}", self.base))
            .header(
                reqwest::header::CONTENT_TYPE,
                "application/x-www-form-urlencoded",
            )
            .body(body.to_owned());
        if let Some(c) = cookie {
            req = req.header(COOKIE, c);
        }
        Console::answer(req.send().await.expect("POST")).await
    }

    /// Fires every login of `logins` (name, password, the loopback address
    /// it comes from, or `None` for the usual one) at the same moment, each
    /// on a connection of its own; the answers, in the same order. The
    /// whole burst is given 120 s.
    pub async fn login_burst(&self, logins: &[(String, String, Option<IpAddr>)]) -> Vec<Answer> {
        let mut clients = Vec::with_capacity(logins.len());
        for (_, _, from) in logins {
            let client = reqwest::Client::builder()
                .redirect(reqwest::redirect::Policy::none())
                .timeout(Duration::from_secs(60))
                .local_address(*from)
                .pool_max_idle_per_host(0)
                .build()
                .expect("http client");
            clients.push(client);
        }
        let start = std::sync::Arc::new(tokio::sync::Barrier::new(logins.len()));
        let url = format!("{}/login", self.base);
        let tasks: Vec<_> = logins
            .iter()
            .zip(clients)
            .map(|((user, password, _), client)| {
                let (start, url) = (start.clone(), url.clone());
                let form = [
                    ("user", user.clone()),
                    ("password", password.clone()),
                    ("next", "/".to_owned()),
                ];
                tokio::spawn(async move {
                    start.wait().await;
                    let resp = client
                        .post(url)
                        .form(&form)
                        .send()
                        .await
                        .expect("POST /login");
                    Console::answer(resp).await
                })
            })
            .collect();
        tokio::time::timeout(Duration::from_secs(120), async move {
            let mut answers = Vec::with_capacity(tasks.len());
            for t in tasks {
                answers.push(t.await.expect("a login of the burst"));
            }
            answers
        })
        .await
        .expect("the burst of logins is answered within 120 s")
    }

    /// Logs in; the raw answer.
    pub async fn try_login(&self, user: &str, password: &str) -> Answer {
        self.post(
            "/login",
            None,
            &[("user", user), ("password", password), ("next", "/")],
        )
        .await
    }

    /// Logs in and returns the `name=value` cookie to send back.
    pub async fn login(&self, (user, password): (&str, &str)) -> String {
        let a = self.try_login(user, password).await;
        assert_eq!(a.status, 303, "login as {user}: {}", a.body);
        assert_eq!(a.header(LOCATION.as_str()), "/");
        let set = a.header(SET_COOKIE.as_str());
        set.split(';').next().unwrap_or_default().to_owned()
    }
}
