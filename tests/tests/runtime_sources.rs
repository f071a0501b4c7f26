//! Sources and keys made at runtime (docs/tenants.md, "Onboarding a
//! merchant"), through every binary: a platform admin creates a tenant, its
//! Razorpay source and its API key through the admin API; ingest takes the
//! source's signed webhooks within two seconds, verifies with the old and
//! the new secret while a secret rotates, refuses a retired one, answers 503
//! while the source or its tenant is disabled — no binary restarted. The
//! shop's key works within two seconds and is refused within two seconds of
//! its revocation. No secret or key is ever in an answer, a log,
//! `oncehookctl`'s output or a `pg_dump` of the database.

use std::time::{Duration, Instant};

use oncehook_common::sealed::KeyRing;
use oncehook_e2e::api::{Answer, Api, FULL_KEY, order_body};
use oncehook_e2e::ops::{ctl_input, ctl_json};
use oncehook_e2e::{Proc, TestEnv, eventually};
use oncehook_gateways::Gateway;
use oncehook_gateways::sample::{self, SignedDelivery};
use serde_json::{Value, json};
use sha2::{Digest, Sha256};

const ADMIN_KEY: &str = "ohk_admin_test_0123456789abcdefghijklmnopqrstuv";
const FEED_KEY: &str = "ohk_feed_test_0123456789abcdefghijklmnopqrstuvwx";
const S1: &str = "rzp_runtime_secret_one_4f1c9a77e2";
const S2: &str = "rzp_runtime_secret_two_8b2d7e13c9";
/// What the issue asks: a change served within two seconds.
const SOON: Duration = Duration::from_secs(2);

fn admin_entries() -> String {
    let entry = |name: &str, key: &str, scope: &str| {
        let hash = hex::encode(Sha256::digest(key.as_bytes()));
        format!(
            "\n[[api.admin_key]]\nname = \"{name}\"\nhash = \"{hash}\"\nscopes = [\"{scope}\"]\n"
        )
    };
    entry("platform", ADMIN_KEY, "admin") + &entry("ingest-feed", FEED_KEY, "sources:feed")
}

struct Stack {
    env: TestEnv,
    api: Api,
    ingest: Proc,
    url: String,
    ring: String,
    _worker: Proc,
}

/// The API with the admin keys, ingest reading its feed, a worker; every
/// binary with the same key ring.
async fn stack() -> Stack {
    let mut env = TestEnv::new().await;
    env.append_config(&admin_entries());
    let ring = KeyRing::generate_key_line("t1").expect("a key line");
    let api = Api::start(&mut env, &[("ONCEHOOK_SECRET_KEYS", ring.as_str())]).await;
    let (ingest, url) = env.spawn_ingest(&[
        ("ONCEHOOK_INGEST_SOURCES_FEED_URL", api.base.as_str()),
        ("ONCEHOOK_INGEST_SOURCES_FEED_KEY", FEED_KEY),
        ("ONCEHOOK_SECRET_KEYS", ring.as_str()),
    ]);
    env.wait_ready(ingest.metrics_url(), "/readyz").await;
    let worker = env.start_worker().await;
    Stack {
        env,
        api,
        ingest,
        url,
        ring,
        _worker: worker,
    }
}

/// The status ingest answers a capture of `o-rt` to `acme-rzp`, signed
/// with `secret`.
async fn hook(env: &TestEnv, url: &str, secret: &str, event: &str) -> u16 {
    env.post(url, "acme-rzp", &capture(env, secret, "o-rt", event))
        .await
        .0
}

fn capture(env: &TestEnv, secret: &str, order: &str, event: &str) -> SignedDelivery {
    let spec = env.spec(order, &format!("pay_{event}"), event, 25_000);
    sample::build(Gateway::Razorpay, "payment.captured", &spec, secret).expect("a sample")
}

/// Ingest's whole answer to `d` posted to `acme-rzp` (status and headers).
async fn answer(env: &TestEnv, url: &str, d: &SignedDelivery) -> reqwest::Response {
    let mut req = env
        .http
        .post(format!("{url}/webhooks/acme-rzp"))
        .body(d.body.clone());
    for (name, value) in d.headers.iter() {
        req = req.header(name, value);
    }
    req.send().await.expect("ingest answers")
}

/// Polls `check` every 50 ms until it holds; fails unless it did within
/// [`SOON`] of `since`.
async fn within_soon<F, Fut>(what: &str, since: Instant, mut check: F)
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = bool>,
{
    loop {
        if check().await {
            let took = since.elapsed();
            assert!(took <= SOON, "{what}: took {took:?}, more than {SOON:?}");
            return;
        }
        assert!(
            since.elapsed() <= SOON + Duration::from_secs(8),
            "{what}: not within {SOON:?} (nor 8 s more)"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

async fn admin(api: &Api, method: &str, path: &str, body: Option<Value>) -> Answer {
    let body = body.map(|b| b.to_string());
    api.call(method, path, Some(ADMIN_KEY), body.as_deref(), &[])
        .await
}

fn no_secret_in(what: &str, text: &str, secrets: &[&str]) {
    for s in secrets {
        assert!(!text.contains(s), "{what} shows a secret:\n{text}");
    }
}

#[tokio::test]
async fn a_source_and_a_key_made_through_the_admin_api_are_served_rotated_and_disabled_without_a_restart()
 {
    let s = stack().await;
    let (env, api, url) = (&s.env, &s.api, s.url.as_str());
    // Before it exists, the source is unknown (once the feed was read).
    eventually("ingest read its feed", Duration::from_secs(10), || async {
        let (status, _) = env
            .post(url, "acme-rzp", &capture(env, S1, "o-rt", "evt_0"))
            .await;
        (status == 404).then_some(())
    })
    .await;
    // Keys stay in their lanes.
    let denied = [
        api.call("GET", "/v1/admin/tenants", Some(FULL_KEY), None, &[])
            .await,
        api.call("GET", "/v1/admin/tenants", None, None, &[]).await,
        api.call("GET", "/v1/orders", Some(ADMIN_KEY), None, &[])
            .await,
    ];
    for a in &denied {
        assert_eq!(a.status, 401, "{a:?}");
    }
    let feed_on_admin = api
        .call("GET", "/v1/admin/tenants", Some(FEED_KEY), None, &[])
        .await;
    assert_eq!(feed_on_admin.status, 403, "{feed_on_admin:?}");
    let admin_on_feed = admin(api, "GET", "/v1/admin/feed/sources", None).await;
    assert_eq!(admin_on_feed.status, 403, "{admin_on_feed:?}");

    let t = admin(
        api,
        "POST",
        "/v1/admin/tenants",
        Some(json!({"id": "acme", "name": "Acme"})),
    )
    .await;
    assert_eq!(t.status, 201, "{t:?}");
    for (body, status) in [
        (
            json!({"name": "acme-rzp", "tenant": "acme", "gateway": "nope", "secret": S1}),
            422,
        ),
        (
            json!({"name": "acme rzp", "tenant": "acme", "gateway": "razorpay", "secret": S1}),
            422,
        ),
        (
            json!({"name": "acme-rzp", "tenant": "acme", "gateway": "razorpay", "secret": ""}),
            422,
        ),
        (
            json!({"name": "acme-rzp", "tenant": "nobody", "gateway": "razorpay", "secret": S1}),
            400,
        ),
    ] {
        let a = admin(api, "POST", "/v1/admin/sources", Some(body.clone())).await;
        assert_eq!(a.status, status, "{body}: {a:?}");
        no_secret_in("a refusal", &a.json.to_string(), &[S1]);
    }
    let made = admin(
        api,
        "POST",
        "/v1/admin/sources",
        Some(json!({"name": "acme-rzp", "tenant": "acme", "gateway": "razorpay", "secret": S1})),
    )
    .await;
    let created = Instant::now();
    assert_eq!(made.status, 201, "{made:?}");
    assert_eq!(made.json["webhook_path"], "/webhooks/acme-rzp");
    assert_eq!(made.json["secrets"][0]["no"], 1);
    no_secret_in("the created source", &made.json.to_string(), &[S1]);
    let again = admin(
        api,
        "POST",
        "/v1/admin/sources",
        Some(json!({"name": "acme-rzp", "tenant": "acme", "gateway": "razorpay", "secret": S2})),
    )
    .await;
    assert_eq!(again.status, 409, "{again:?}");

    let issued = admin(
        api,
        "POST",
        "/v1/admin/tenants/acme/keys",
        Some(json!({"name": "shop", "scopes": ["orders:write", "orders:read", "products:write"]})),
    )
    .await;
    let issued_at = Instant::now();
    assert_eq!(issued.status, 201, "{issued:?}");
    let shop_key = issued.json["key"]
        .as_str()
        .expect("the key, once")
        .to_owned();
    let key_id = issued.json["id"].as_str().expect("an id").to_owned();
    let listed = admin(api, "GET", "/v1/admin/tenants/acme/keys", None).await;
    no_secret_in("the key list", &listed.json.to_string(), &[&shop_key]);
    within_soon("the issued key works", issued_at, || async {
        api.get("/v1/orders", &shop_key).await.status == 200
    })
    .await;

    // The shop's order, paid through the runtime source signed with S1.
    let put = api
        .call(
            "PUT",
            "/v1/products/MUG",
            Some(&shop_key),
            Some(r#"{"name": "Mug", "stock": 5}"#),
            &[],
        )
        .await;
    assert_eq!(put.status, 201, "{put:?}");
    let order = api
        .call(
            "POST",
            "/v1/orders",
            Some(&shop_key),
            Some(&order_body("o-rt", "MUG", 1)),
            &[("Idempotency-Key", "k-rt")],
        )
        .await;
    assert_eq!(order.status, 201, "{order:?}");
    within_soon("the new source takes a signed webhook", created, || async {
        hook(env, url, S1, "evt_1").await == 200
    })
    .await;
    eventually("the order paid", Duration::from_secs(30), || async {
        (api.get("/v1/orders/o-rt", &shop_key).await.json["status"] == "paid").then_some(())
    })
    .await;
    // The default tenant's key does not see acme's order.
    assert_eq!(api.get("/v1/orders/o-rt", FULL_KEY).await.status, 404);

    // Rotation: both verify, then the old one is retired.
    let rotated = admin(
        api,
        "POST",
        "/v1/admin/sources/acme-rzp/secrets",
        Some(json!({"secret": S2})),
    )
    .await;
    let rotated_at = Instant::now();
    assert_eq!(rotated.status, 201, "{rotated:?}");
    no_secret_in("the rotated source", &rotated.json.to_string(), &[S1, S2]);
    within_soon("the new secret verifies", rotated_at, || async {
        hook(env, url, S2, "evt_2").await == 200
    })
    .await;
    assert_eq!(hook(env, url, S1, "evt_3").await, 200);
    let retired = admin(
        api,
        "POST",
        "/v1/admin/sources/acme-rzp/secrets/1/retire",
        None,
    )
    .await;
    let retired_at = Instant::now();
    assert_eq!(retired.status, 200, "{retired:?}");
    within_soon("the retired secret is refused", retired_at, || async {
        hook(env, url, S1, "evt_4").await == 401
    })
    .await;
    assert_eq!(hook(env, url, S2, "evt_5").await, 200);
    let last = admin(
        api,
        "POST",
        "/v1/admin/sources/acme-rzp/secrets/2/retire",
        None,
    )
    .await;
    assert_eq!(last.status, 409, "{last:?}");

    // A disabled source, then a disabled tenant: 503 with Retry-After.
    for (off, on) in [
        (
            "/v1/admin/sources/acme-rzp/disable",
            "/v1/admin/sources/acme-rzp/enable",
        ),
        (
            "/v1/admin/tenants/acme/disable",
            "/v1/admin/tenants/acme/enable",
        ),
    ] {
        let a = admin(api, "POST", off, None).await;
        let at = Instant::now();
        assert_eq!(a.status, 200, "{off}: {a:?}");
        within_soon(&format!("{off} refuses"), at, || async {
            let r = answer(env, url, &capture(env, S2, "o-rt", "evt_off")).await;
            r.status().as_u16() == 503 && r.headers().contains_key("retry-after")
        })
        .await;
        let a = admin(api, "POST", on, None).await;
        let at = Instant::now();
        assert_eq!(a.status, 200, "{on}: {a:?}");
        within_soon(&format!("{on} serves again"), at, || async {
            hook(env, url, S2, "evt_on").await == 200
        })
        .await;
    }

    // The feed carries the secrets sealed only.
    let feed = api.get("/v1/admin/feed/sources?since=0", FEED_KEY).await;
    assert_eq!(feed.status, 200, "{feed:?}");
    let sealed = feed.json["sources"][0]["secrets"][0]["sealed"]
        .as_str()
        .unwrap_or("");
    assert!(sealed.starts_with("v1.t1."), "{feed:?}");
    no_secret_in("the feed", &feed.json.to_string(), &[S1, S2]);

    let revoked = admin(
        api,
        "POST",
        &format!("/v1/admin/keys/{key_id}/revoke"),
        None,
    )
    .await;
    let revoked_at = Instant::now();
    assert_eq!(revoked.status, 200, "{revoked:?}");
    within_soon("the revoked key is refused", revoked_at, || async {
        api.get("/v1/orders", &shop_key).await.status == 401
    })
    .await;

    // Nothing in the clear: the logs and a dump of the database.
    let secrets = [S1, S2, shop_key.as_str()];
    no_secret_in("the API's log", &s.api.proc.log_text(), &secrets);
    no_secret_in("ingest's log", &s.ingest.log_text(), &secrets);
    let dump = pg_dump(env).await;
    assert!(dump.contains("v1.t1."), "the dump has the sealed secrets");
    no_secret_in("pg_dump", &dump, &secrets);
    assert!(!s.ring.is_empty());
}

async fn pg_dump(env: &TestEnv) -> String {
    let out = tokio::process::Command::new("pg_dump")
        .args(["--data-only", "--dbname", &env.database_url])
        .output()
        .await
        .expect("run pg_dump");
    assert!(
        out.status.success(),
        "pg_dump: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).into_owned()
}

#[tokio::test]
async fn oncehookctl_adds_rotates_retires_and_disables_sources_and_issues_keys_without_showing_a_secret()
 {
    let env = TestEnv::new().await;
    let ring = KeyRing::generate_key_line("t1").expect("a key line");
    let with_ring = [("ONCEHOOK_SECRET_KEYS", ring.as_str())];
    let run = |args: Vec<&'static str>, input: &'static str| {
        let env = &env;
        async move {
            let mut all = vec!["--json"];
            all.extend(args);
            let (code, out, err) = ctl_input(env, &all, &with_ring, input).await;
            no_secret_in("oncehookctl's output", &(out.clone() + &err), &[S1, S2]);
            (code, out, err)
        }
    };
    ctl_json(&env, &["tenants", "create", "acme", "--name", "Acme"]).await;
    let (code, out, err) = run(
        vec![
            "sources",
            "add",
            "acme-rzp",
            "--tenant",
            "acme",
            "--gateway",
            "razorpay",
        ],
        S1,
    )
    .await;
    assert_eq!(code, 0, "{out}{err}");
    let added: Value = serde_json::from_str(&out).expect("json");
    assert_eq!(added["source"]["tenant"], "acme");
    // Refusals name what is wrong.
    for (args, input, says) in [
        (
            vec![
                "sources",
                "add",
                "acme-rzp",
                "--tenant",
                "acme",
                "--gateway",
                "razorpay",
            ],
            S2,
            "already exists",
        ),
        (
            vec![
                "sources",
                "add",
                "x",
                "--tenant",
                "nobody",
                "--gateway",
                "razorpay",
            ],
            S2,
            "no tenant nobody",
        ),
        (
            vec![
                "sources",
                "add",
                "x",
                "--tenant",
                "acme",
                "--gateway",
                "razorpay",
            ],
            "",
            "no signing secret on stdin",
        ),
        (
            vec!["sources", "retire", "acme-rzp", "1"],
            "",
            "last live one",
        ),
        (vec!["sources", "rotate", "nobody"], S2, "no source nobody"),
    ] {
        let (code, out, err) = run(args.clone(), input).await;
        assert_ne!(code, 0, "{args:?}: {out}");
        assert!(err.contains(says), "{args:?}: {err}");
    }
    let (code, _, err) = ctl_input(
        &env,
        &[
            "sources",
            "add",
            "y",
            "--tenant",
            "acme",
            "--gateway",
            "razorpay",
        ],
        &[],
        S1,
    )
    .await;
    assert_ne!(code, 0);
    assert!(err.contains("secrets.keys"), "without a key ring: {err}");

    let (code, out, _) = run(vec!["sources", "rotate", "acme-rzp"], S2).await;
    assert_eq!(code, 0);
    let rotated: Value = serde_json::from_str(&out).expect("json");
    assert_eq!(
        rotated["source"]["secrets"].as_array().map(Vec::len),
        Some(2)
    );
    let (code, out, _) = run(vec!["sources", "retire", "acme-rzp", "1"], "").await;
    assert_eq!(code, 0);
    let retired: Value = serde_json::from_str(&out).expect("json");
    assert_eq!(retired["source"]["secrets"][0]["no"], 2);
    let (code, out, _) = run(vec!["sources", "disable", "acme-rzp"], "").await;
    assert_eq!(code, 0);
    assert!(out.contains("\"disabled\""), "{out}");
    let (code, out, _) = run(vec!["sources", "list", "--tenant", "acme"], "").await;
    assert_eq!(code, 0);
    assert!(out.contains("acme-rzp"), "{out}");

    let issued = ctl_json(
        &env,
        &[
            "keys",
            "issue",
            "acme",
            "--name",
            "shop",
            "--scope",
            "orders:read",
        ],
    )
    .await;
    let key = issued["issued"]["secret"]
        .as_str()
        .expect("the key, once")
        .to_owned();
    assert!(key.starts_with("ohk_"), "{issued}");
    let listed = ctl_json(&env, &["keys", "list", "acme"]).await;
    no_secret_in("keys list", &listed.to_string(), &[&key]);
    let id = issued["issued"]["id"].as_str().expect("id");
    let revoked = ctl_json(&env, &["keys", "revoke", id]).await;
    assert!(revoked["key"]["revoked_at"].is_string(), "{revoked}");
    let (code, _, err) = env
        .ctl(&["keys", "issue", "acme", "--name", "x", "--scope", "admin"])
        .await;
    assert_ne!(code, 0);
    assert!(err.contains("unknown scope"), "{err}");
    let dump = pg_dump(&env).await;
    no_secret_in("pg_dump", &dump, &[S1, S2, &key]);
}

/// Posts `n` distinct captures to `acme-rzp` one after the other: how many
/// were answered 429 (each with a `Retry-After`).
async fn limited_of(env: &TestEnv, url: &str, n: usize, tag: &str) -> usize {
    let mut limited = 0;
    for i in 0..n {
        let r = answer(
            env,
            url,
            &capture(env, S1, "o-rate", &format!("evt_{tag}_{i}")),
        )
        .await;
        match r.status().as_u16() {
            200 => {}
            429 => {
                assert!(
                    r.headers().contains_key("retry-after"),
                    "429 without Retry-After"
                );
                limited += 1;
            }
            other => panic!("{other} for a capture of acme-rzp"),
        }
    }
    limited
}

#[tokio::test]
async fn a_tenants_rate_set_with_oncehookctl_holds_its_runtime_sources_within_two_seconds() {
    let s = stack().await;
    let (env, api, url) = (&s.env, &s.api, s.url.as_str());
    let t = admin(
        api,
        "POST",
        "/v1/admin/tenants",
        Some(json!({"id": "acme", "name": "Acme"})),
    )
    .await;
    assert_eq!(t.status, 201, "{t:?}");
    let made = admin(
        api,
        "POST",
        "/v1/admin/sources",
        Some(json!({"name": "acme-rzp", "tenant": "acme", "gateway": "razorpay", "secret": S1})),
    )
    .await;
    assert_eq!(made.status, 201, "{made:?}");
    eventually("the source served", Duration::from_secs(10), || async {
        (hook(env, url, S1, "evt_first").await == 200).then_some(())
    })
    .await;
    // The file's default rate (1,000 a second) lets ten through.
    assert_eq!(limited_of(env, url, 10, "before").await, 0);

    let (code, out, err) = env
        .ctl(&[
            "tenants",
            "limits",
            "acme",
            "--per-second",
            "1",
            "--burst",
            "2",
        ])
        .await;
    assert_eq!(code, 0, "{out}{err}");
    assert!(out.contains("1/s (burst 2)"), "{out}");
    let shown = ctl_json(env, &["tenants", "show", "acme"]).await;
    assert_eq!(shown["tenant"]["rate"]["per_second"], 1, "{shown}");
    let at = Instant::now();
    within_soon("the tenant's rate served", at, || async {
        limited_of(env, url, 6, "during").await >= 3
    })
    .await;

    // Back to the file's: ten go through again.
    let (code, out, err) = env.ctl(&["tenants", "limits", "acme", "--default"]).await;
    assert_eq!(code, 0, "{out}{err}");
    assert!(out.contains("(file)"), "{out}");
    let at = Instant::now();
    within_soon("the file's rate again", at, || async {
        limited_of(env, url, 10, "after").await == 0
    })
    .await;
    // A refusal names what is wrong.
    let (code, _, err) = env
        .ctl(&["tenants", "limits", "nobody", "--per-second", "5"])
        .await;
    assert_ne!(code, 0);
    assert!(err.contains("no tenant nobody"), "{err}");
}
