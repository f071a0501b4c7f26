//! The operators' console over HTTP, through the real binary: every page
//! needs a login; forged, expired and logged-out sessions are refused;
//! wrong passwords are throttled; viewers cannot act; actions need the
//! session's CSRF token; and an operator replays a dead letter produced
//! through the real pipeline, which is written to the audit table.

use std::time::Duration;

use oncehook_common::dead_letter::DeadLetterKind as Kind;
use oncehook_e2e::console::{Console, OPERATOR, VIEWER};
use oncehook_e2e::{Shop, TestEnv, broker, eventually, shop};
use oncehook_gateways::Gateway;

const WAIT: Duration = Duration::from_secs(30);

fn assert_security_headers(a: &oncehook_e2e::console::Answer) {
    let csp = a.header("content-security-policy");
    assert!(
        csp.contains("default-src 'self'") && csp.contains("frame-ancestors 'none'"),
        "{csp}"
    );
    assert!(!csp.contains("unsafe-inline"), "{csp}");
    assert_eq!(a.header("x-frame-options"), "DENY");
    assert_eq!(a.header("x-content-type-options"), "nosniff");
    assert!(!a.header("referrer-policy").is_empty());
}

#[tokio::test]
async fn every_page_needs_a_live_session() {
    let mut env = TestEnv::new().await;
    let console = Console::start(&mut env, &[]).await;

    // No cookie: every page and action sends the browser to the login page.
    for path in [
        "/",
        "/letters",
        "/letters/0123456789ab",
        "/events",
        "/trace?q=x",
        "/audit",
    ] {
        let a = console.get(path, None).await;
        assert_eq!(a.status, 303, "{path}");
        assert!(
            a.header("location").starts_with("/login?next="),
            "{path}: {}",
            a.header("location")
        );
        assert_security_headers(&a);
    }
    let a = console
        .post("/letters/replay", None, &[("ids", "x"), ("confirm", "yes")])
        .await;
    assert_eq!(a.status, 303);
    let login = console.get("/login", None).await;
    assert_eq!(login.status, 200);
    assert_security_headers(&login);
    assert!(!login.body.contains("<script>"), "no inline script");

    // The session cookie: HttpOnly, SameSite=Strict, an expiry.
    let a = console.try_login(VIEWER.0, VIEWER.1).await;
    assert_eq!(a.status, 303, "{}", a.body);
    let set = a.header("set-cookie");
    for attr in ["HttpOnly", "SameSite=Strict", "Max-Age=", "Path=/"] {
        assert!(set.contains(attr), "{attr} in {set}");
    }
    let cookie = set.split(';').next().unwrap_or_default().to_owned();
    let page = console.get("/events", Some(&cookie)).await;
    assert_eq!(page.status, 200, "{}", page.body);
    assert!(page.body.contains("Events") && page.body.contains(VIEWER.0));
    assert_security_headers(&page);

    // A forged cookie (another user's name under the same signature) is refused.
    let (name, value) = cookie.split_once('=').expect("name=value");
    let mut parts: Vec<String> = value.split('.').map(str::to_owned).collect();
    parts[2] = "b2xnYQ".to_owned(); // "olga", base64url
    let forged = format!("{name}={}", parts.join("."));
    assert_eq!(console.get("/events", Some(&forged)).await.status, 303);
    let garbage = format!("{name}=abc.def.ghi.jkl");
    assert_eq!(console.get("/events", Some(&garbage)).await.status, 303);

    // Logout (a POST with the CSRF token) ends the session for good.
    let csrf = page.csrf();
    let out = console
        .post("/logout", Some(&cookie), &[("csrf", &csrf)])
        .await;
    assert_eq!(out.status, 303);
    assert_eq!(out.header("location"), "/login");
    assert!(out.header("set-cookie").contains("Max-Age=0"));
    assert_eq!(console.get("/events", Some(&cookie)).await.status, 303);
    // The login and the logout are in the audit trail.
    let trail: Vec<(String, String, bool)> =
        sqlx::query_as("SELECT actor, action, ok FROM console_audit ORDER BY id")
            .fetch_all(&env.pool)
            .await
            .expect("audit rows");
    let viewer = VIEWER.0.to_owned();
    assert_eq!(
        trail,
        vec![
            (viewer.clone(), "login".to_owned(), true),
            (viewer, "logout".to_owned(), true)
        ]
    );

    // An expired session is refused (a console whose sessions last 2 s).
    let short = Console::start(&mut env, &[("ONCEHOOK_CONSOLE_SESSION_TTL", "2s")]).await;
    let cookie = short.login(VIEWER).await;
    assert_eq!(short.get("/events", Some(&cookie)).await.status, 200);
    tokio::time::sleep(Duration::from_millis(2_500)).await;
    assert_eq!(short.get("/events", Some(&cookie)).await.status, 303);
}

#[tokio::test]
async fn wrong_passwords_are_throttled_per_account_and_address() {
    let mut env = TestEnv::new().await;
    let console = Console::start(&mut env, &[]).await;
    for i in 0..5 {
        let a = console.try_login(OPERATOR.0, "not-the-password").await;
        assert_eq!(a.status, 401, "attempt {i}");
        assert!(a.body.contains("Wrong name or password"));
        assert!(a.header("set-cookie").is_empty());
    }
    // The sixth try is refused before the password is looked at — even the right one.
    for password in ["not-the-password", OPERATOR.1] {
        let a = console.try_login(OPERATOR.0, password).await;
        assert_eq!(a.status, 429, "{}", a.body);
        let retry: u64 = a
            .header("retry-after")
            .parse()
            .expect("Retry-After seconds");
        assert!(retry > 0 && retry <= 15 * 60, "{retry}");
        assert!(a.header("set-cookie").is_empty());
    }
    // The address is locked out too: another account from it waits as well.
    let a = console.try_login(VIEWER.0, VIEWER.1).await;
    assert_eq!(a.status, 429);

    // Every attempt is in the audit trail: five wrong passwords, two refusals.
    let attempts: Vec<(String, bool, String)> = sqlx::query_as(
        "SELECT actor, ok, result FROM console_audit WHERE action = 'login' ORDER BY id",
    )
    .fetch_all(&env.pool)
    .await
    .expect("audit rows");
    let of = |who: &str, result: &str| {
        attempts
            .iter()
            .filter(|(a, ok, r)| a == who && !ok && r.contains(result))
            .count()
    };
    assert_eq!(of(OPERATOR.0, "wrong name or password"), 5, "{attempts:?}");
    assert_eq!(of(OPERATOR.0, "too many"), 2, "{attempts:?}");
    assert_eq!(of(VIEWER.0, "too many"), 1, "{attempts:?}");
    assert_eq!(attempts.len(), 8, "{attempts:?}");
}

#[tokio::test]
async fn actions_need_the_operator_role_and_the_sessions_csrf_token() {
    let mut env = TestEnv::new().await;
    let console = Console::start(&mut env, &[]).await;
    let viewer = console.login(VIEWER).await;
    let operator = console.login(OPERATOR).await;
    let viewer_csrf = console.get("/audit", Some(&viewer)).await.csrf();
    let operator_csrf = console.get("/audit", Some(&operator)).await.csrf();
    assert_ne!(viewer_csrf, operator_csrf, "tokens are per session");

    let replay = |csrf: &str| {
        vec![
            ("ids".to_owned(), "0123456789ab".to_owned()),
            ("confirm".to_owned(), "yes".to_owned()),
            ("csrf".to_owned(), csrf.to_owned()),
        ]
    };
    let post = |cookie: String, form: Vec<(String, String)>, path: &'static str| {
        let console = &console;
        async move {
            let form: Vec<(&str, &str)> =
                form.iter().map(|(k, v)| (k.as_str(), v.as_str())).collect();
            console.post(path, Some(&cookie), &form).await
        }
    };
    // A viewer may not replay or purge, even with a valid token.
    for path in ["/letters/replay", "/letters/purge", "/letters/preview"] {
        let a = post(viewer.clone(), replay(&viewer_csrf), path).await;
        assert_eq!(a.status, 403, "{path}: {}", a.body);
        assert!(a.body.contains("operator role"), "{}", a.body);
    }
    // An operator without the token, with a wrong one, or with another session's: 403.
    let no_token = vec![
        ("ids".to_owned(), "0123456789ab".to_owned()),
        ("confirm".to_owned(), "yes".to_owned()),
    ];
    assert_eq!(
        post(operator.clone(), no_token, "/letters/replay")
            .await
            .status,
        403
    );
    assert_eq!(
        post(operator.clone(), replay("00ff"), "/letters/replay")
            .await
            .status,
        403
    );
    assert_eq!(
        post(operator.clone(), replay(&viewer_csrf), "/letters/replay")
            .await
            .status,
        403
    );
    // Logout needs the token too.
    assert_eq!(post(operator.clone(), vec![], "/logout").await.status, 403);
    assert_eq!(console.get("/audit", Some(&operator)).await.status, 200);
    // No action reached the audit table; the two logins did.
    assert_eq!(
        env.count("SELECT count(*) FROM console_audit WHERE action NOT IN ('login', 'logout')")
            .await,
        0
    );
    assert_eq!(
        env.count("SELECT count(*) FROM console_audit WHERE action = 'login' AND ok")
            .await,
        2
    );
    // A name that is no account is not written down (it may be a password
    // typed into the wrong field).
    let typo = console.try_login("hunter2-typed-as-a-name", "x").await;
    assert_eq!(typo.status, 401);
    let actors: Vec<(String,)> = sqlx::query_as("SELECT actor FROM console_audit WHERE NOT ok")
        .fetch_all(&env.pool)
        .await
        .expect("audit rows");
    assert_eq!(actors, vec![("(no such account)".to_owned(),)]);
}

#[tokio::test]
async fn an_operator_replays_a_dead_letter_from_the_pipeline_and_it_is_audited() {
    let mut env = TestEnv::new().await;
    let (_ingest, url) = env.start_ingest().await;
    let _worker = env.start_worker().await;
    let console = Console::start(&mut env, &[]).await;

    // An authentic capture for an order that does not exist yet: dead-lettered.
    let capture = env.sign(
        Gateway::Razorpay,
        "payment.captured",
        &env.spec("order_console", "pay_C1", "evt_C1", 50_000),
    );
    let (status, body) = env.post(&url, "razorpay", &capture).await;
    assert_eq!(status, 200, "{body}");
    let dead = format!("{}.dead", env.prefix);
    eventually("one dead letter", WAIT, || async {
        (broker::depth(&dead).await == Some(1)).then_some(())
    })
    .await;

    let cookie = console.login(OPERATOR).await;
    let list = console
        .get("/letters?gateway=razorpay", Some(&cookie))
        .await;
    assert_eq!(list.status, 200, "{}", list.body);
    assert!(
        list.body.contains("evt_C1") && list.body.contains(&kind_cell(&Kind::UnknownOrder)),
        "{}",
        list.body
    );
    // The kind filter offers every kind, not only those in the queue.
    for kind in Kind::KNOWN {
        let option = format!("<option value=\"{kind}\">");
        assert!(list.body.contains(&option), "{option}: {}", list.body);
    }
    let id = list
        .letter_ids()
        .into_iter()
        .next()
        .expect("a link to the dead letter");

    // The detail page masks the gateway's signature.
    let detail = console.get(&format!("/letters/{id}"), Some(&cookie)).await;
    assert_eq!(detail.status, 200, "{}", detail.body);
    let signature = capture
        .headers
        .get("x-razorpay-signature")
        .expect("signed")
        .to_owned();
    assert!(!detail.body.contains(&signature), "the signature is masked");
    assert!(detail.body.contains("masked"), "{}", detail.body);
    assert!(detail.body.contains("order_console"));

    // Filtered by failure time too (the CLI's --since).
    let recent = console
        .get(
            &format!("/letters?within=1h&kind={}", Kind::UnknownOrder),
            Some(&cookie),
        )
        .await;
    assert!(recent.body.contains("evt_C1"), "{}", recent.body);

    // The bulk path counts first (a dry run) and changes nothing.
    let csrf = detail.csrf();
    let preview = console
        .post(
            "/letters/preview",
            Some(&cookie),
            &[
                ("csrf", &csrf),
                ("action", "replay"),
                ("kind", Kind::UnknownOrder.as_str()),
                ("within", "1h"),
            ],
        )
        .await;
    assert_eq!(preview.status, 200, "{}", preview.body);
    assert!(
        preview.body.contains("Dry run") && preview.body.contains(&id),
        "{}",
        preview.body
    );
    assert!(
        preview
            .body
            .contains(&format!("--error-kind {} --since 1h", Kind::UnknownOrder)),
        "{}",
        preview.body
    );
    assert_eq!(broker::depth(&dead).await, Some(1));
    // Without the confirmation nothing happens.
    let unconfirmed = console
        .post(
            "/letters/replay",
            Some(&cookie),
            &[("csrf", &csrf), ("ids", &id)],
        )
        .await;
    assert_eq!(unconfirmed.status, 400);
    assert_eq!(broker::depth(&dead).await, Some(1));

    // Fix the cause, then replay it from the console.
    Shop::own_product("order_console").seed(&env.pool).await;
    let done = console
        .post(
            "/letters/replay",
            Some(&cookie),
            &[("csrf", &csrf), ("ids", &id), ("confirm", "yes")],
        )
        .await;
    assert_eq!(done.status, 200, "{}", done.body);
    assert!(done.body.contains("replayed 1, failed 0"), "{}", done.body);
    shop::wait_paid(&env.pool, "order_console").await;
    assert_eq!(broker::depth(&dead).await, Some(0));

    // The audit row: who, what, which letter, the result.
    let row: (String, String, Vec<String>, bool, String) = sqlx::query_as(
        "SELECT actor, action, letters, ok, result FROM console_audit WHERE action = 'replay'",
    )
    .fetch_one(&env.pool)
    .await
    .expect("one audit row");
    assert_eq!((row.0.as_str(), row.1.as_str()), (OPERATOR.0, "replay"));
    assert_eq!(row.2, vec![id.clone()]);
    assert!(row.3, "{row:?}");
    assert!(row.4.contains("replayed 1"), "{}", row.4);
    let audit = console.get("/audit", Some(&cookie)).await;
    assert!(audit.body.contains(&id) && audit.body.contains(OPERATOR.0));

    // The trace shows the order paid, found by order ref and by event id.
    for q in ["order_console", "evt_C1", "pay_C1"] {
        let t = console.get(&format!("/trace?q={q}"), Some(&cookie)).await;
        assert_eq!(t.status, 200, "{}", t.body);
        assert!(t.body.contains("paid"), "{q}: {}", t.body);
    }
    // The overview and the events page show it too.
    let events = console.get("/events?outcome=applied", Some(&cookie)).await;
    assert!(events.body.contains("evt_C1"), "{}", events.body);
    let overview = console.get("/", Some(&cookie)).await;
    assert_eq!(overview.status, 200, "{}", overview.body);
    assert!(overview.body.contains("razorpay"), "{}", overview.body);
}

/// Posts a capture for `order` (which does not exist yet) and waits until
/// the dead-letter queue holds `depth` letters.
async fn dead_letter_for(env: &TestEnv, ingest: &str, order: &str, depth: u32) {
    let capture = env.sign(
        Gateway::Razorpay,
        "payment.captured",
        &env.spec(
            order,
            &format!("pay_{order}"),
            &format!("evt_{order}"),
            20_000,
        ),
    );
    let (status, body) = env.post(ingest, "razorpay", &capture).await;
    assert_eq!(status, 200, "{body}");
    let dead = format!("{}.dead", env.prefix);
    eventually("the dead letter", WAIT, || async {
        (broker::depth(&dead).await == Some(depth)).then_some(())
    })
    .await;
}

#[tokio::test]
async fn a_letter_that_arrives_after_the_page_was_read_shows_up_on_its_own() {
    let mut env = TestEnv::new().await;
    let (_ingest, url) = env.start_ingest().await;
    let _worker = env.start_worker().await;
    let console = Console::start(&mut env, &[]).await;
    let cookie = console.login(VIEWER).await;

    dead_letter_for(&env, &url, "order_early", 1).await;
    let first = console.get("/letters", Some(&cookie)).await;
    assert!(first.body.contains("evt_order_early"), "{}", first.body);
    assert!(
        !first.body.contains("data-refresh"),
        "a fresh list does not reload itself"
    );

    // A second letter: the next page says the list is behind and reloads
    // itself; within a few seconds the list has it.
    dead_letter_for(&env, &url, "order_late", 2).await;
    let behind = console.get("/letters", Some(&cookie)).await;
    assert_eq!(behind.status, 200);
    if !behind.body.contains("evt_order_late") {
        assert!(
            behind.body.contains("a fresh read is on its way")
                && behind.body.contains("data-refresh"),
            "{}",
            behind.body
        );
    }
    eventually("the list shows the new letter", WAIT, || async {
        let page = console.get("/letters", Some(&cookie)).await;
        (page.body.contains("evt_order_late") && page.body.contains("evt_order_early"))
            .then_some(())
    })
    .await;
    // Its detail page too, with the body.
    let page = console.get("/letters", Some(&cookie)).await;
    for id in page.letter_ids() {
        let d = console.get(&format!("/letters/{id}"), Some(&cookie)).await;
        assert_eq!(d.status, 200, "{}", d.body);
        assert!(d.body.contains("order_"), "{}", d.body);
    }
}

#[tokio::test]
async fn two_operators_replaying_the_same_letters_at_once_lose_and_double_nothing() {
    let mut env = TestEnv::new().await;
    let (_ingest, url) = env.start_ingest().await;
    let _worker = env.start_worker().await;
    let console = Console::start(&mut env, &[]).await;
    let orders = ["order_twin_a", "order_twin_b", "order_twin_c"];
    for (i, order) in orders.iter().enumerate() {
        dead_letter_for(&env, &url, order, i as u32 + 1).await;
    }
    let first = console.login(OPERATOR).await;
    let second = console.login(OPERATOR).await;
    let page = console.get("/letters", Some(&first)).await;
    let ids = page.letter_ids();
    assert_eq!(ids.len(), 3, "{}", page.body);

    // The cause fixed, both sessions replay all three at the same moment.
    orders
        .iter()
        .fold(Shop::new().product("SKU_twin", 10), |shop, order| {
            shop.order_of(order, 20_000, "INR", &[("SKU_twin", 1)])
        })
        .seed(&env.pool)
        .await;
    let replay = |cookie: String| {
        let (console, ids) = (&console, ids.clone());
        async move {
            let csrf = console.get("/letters", Some(&cookie)).await.csrf();
            let mut form: Vec<(&str, &str)> = vec![("csrf", &csrf), ("confirm", "yes")];
            form.extend(ids.iter().map(|id| ("ids", id.as_str())));
            console.post("/letters/replay", Some(&cookie), &form).await
        }
    };
    let (a, b) = tokio::join!(replay(first), replay(second));
    // The summary line: "replayed N, failed F[, not found M]".
    let replayed = |body: &str| -> usize {
        body.split("replayed ")
            .filter_map(|rest| rest.split_once(", failed "))
            .filter_map(|(n, _)| n.trim().parse().ok())
            .next()
            .unwrap_or(0)
    };
    // Each letter was replayed by exactly one of them; the other found it gone.
    assert_eq!(
        replayed(&a.body) + replayed(&b.body),
        3,
        "first:\n{}\nsecond:\n{}",
        a.body,
        b.body
    );
    for order in orders {
        shop::wait_paid(&env.pool, order).await;
    }
    assert_eq!(
        broker::depth(&format!("{}.dead", env.prefix)).await,
        Some(0)
    );
    assert_eq!(
        env.count("SELECT count(*) FROM payments").await,
        3,
        "one payment per order"
    );
    assert_eq!(
        env.count("SELECT sum(deliveries) FROM processed_webhooks")
            .await,
        3,
        "each capture delivered once after the replays"
    );
    assert_eq!(
        env.count("SELECT count(*) FROM console_audit WHERE action = 'replay'")
            .await,
        2
    );
}

#[tokio::test]
async fn the_events_page_pages_by_keyset_and_filters_by_outcome_and_age() {
    let mut env = TestEnv::new().await;
    // 120 processed events, one a minute back from now; every 10th parked.
    sqlx::query(
        "INSERT INTO processed_webhooks
             (provider, source, event_id, body_sha256, event_type, outcome, received_at,
              processed_at, last_seen_at)
         SELECT 'payu', 'payu', 'evt_page_' || i, md5(i::text), 'payment.captured',
                CASE WHEN i % 10 = 0 THEN 'parked' ELSE 'applied' END, t, t, t
         FROM generate_series(1, 120) AS i,
              LATERAL (SELECT now() - i * interval '1 minute' AS t) AS x",
    )
    .execute(&env.pool)
    .await
    .expect("seed events");
    let console = Console::start(&mut env, &[]).await;
    let cookie = console.login(VIEWER).await;
    let events_on = |body: &str| -> Vec<String> {
        body.split("<code>evt_page_")
            .skip(1)
            .filter_map(|rest| rest.split('<').next())
            .map(|n| format!("evt_page_{n}"))
            .collect()
    };

    // Newest first, 50 a page, every event once across the pages.
    let mut seen = Vec::new();
    let mut at = "/events".to_owned();
    for page in 1..=3 {
        let a = console.get(&at, Some(&cookie)).await;
        assert_eq!(a.status, 200, "{}", a.body);
        let ids = events_on(&a.body);
        assert_eq!(ids.len(), if page < 3 { 50 } else { 20 }, "page {page}");
        seen.extend(ids);
        match a.older_link() {
            Some(next) => at = next,
            None => assert_eq!(page, 3, "an older link on every page but the last"),
        }
    }
    let expected: Vec<String> = (1..=120).map(|i| format!("evt_page_{i}")).collect();
    assert_eq!(seen, expected);

    // Filters: only the parked ones; only the last hour.
    let parked = console.get("/events?outcome=parked", Some(&cookie)).await;
    let ids = events_on(&parked.body);
    assert_eq!(ids.len(), 12, "{}", parked.body);
    assert!(ids.iter().all(|id| id.ends_with('0')), "{ids:?}");
    let hour = console.get("/events?within=1h", Some(&cookie)).await;
    assert_eq!(events_on(&hour.body).len(), 50);
    let hour_next = hour.older_link().expect("a second page in the last hour");
    assert!(hour_next.contains("within=1h"), "{hour_next}");
    let rest = console.get(&hour_next, Some(&cookie)).await;
    assert_eq!(events_on(&rest.body).len(), 9, "{}", rest.body);
}

/// A letter row's kind cell, as the list renders it.
fn kind_cell(kind: &Kind) -> String {
    format!("<span class=\"kind\">{kind}</span>")
}
