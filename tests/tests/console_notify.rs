//! The console's Notifications page over HTTP, through the real binary,
//! on delivery rows written straight into the database (no notifier runs,
//! so a replayed row stays as the replay left it): a viewer sees the
//! endpoints and the failed deliveries but may not act; an operator's
//! replay needs the session's CSRF token, makes the failed rows due again
//! and is audited; a disabled endpoint's rows are not replayed (the page
//! says to enable it first), and enabling it is a step of its own.

use oncehook_e2e::console::{Answer, Console, OPERATOR, VIEWER};
use oncehook_e2e::{Shop, TestEnv};

const EVENT: &str = "evt_console_notify";
const ORDER: &str = "order_console_notify";

/// An order, one of its events, the endpoint `shop` and the event's
/// delivery to it, failed after 8 attempts.
async fn seed(env: &TestEnv) {
    Shop::basket(ORDER).seed(&env.pool).await;
    for sql in [
        "INSERT INTO order_events (id, type, order_id)
         SELECT 'evt_console_notify', 'order.paid', id FROM orders
         WHERE order_ref = 'order_console_notify'",
        "INSERT INTO notify_endpoints (name) VALUES ('shop')",
        "INSERT INTO notify_deliveries (event_id, endpoint, status, attempts, last_error)
         VALUES ('evt_console_notify', 'shop', 'failed', 8, 'answered 500')",
    ] {
        sqlx::query(sql).execute(&env.pool).await.expect(sql);
    }
}

/// The delivery's status and attempts.
async fn delivery(env: &TestEnv) -> (String, i32) {
    sqlx::query_as("SELECT status, attempts FROM notify_deliveries WHERE event_id = $1")
        .bind(EVENT)
        .fetch_one(&env.pool)
        .await
        .expect("the delivery row")
}

/// The console's audit rows of notification actions: (actor, action,
/// scope, ok, result), oldest first.
async fn audit(env: &TestEnv) -> Vec<(String, String, Option<String>, bool, String)> {
    sqlx::query_as(
        "SELECT actor, action, scope, ok, result FROM console_audit
         WHERE action LIKE 'notify %' ORDER BY id",
    )
    .fetch_all(&env.pool)
    .await
    .expect("audit rows")
}

async fn post(console: &Console, path: &str, cookie: &str, form: &[(&str, &str)]) -> Answer {
    console.post(path, Some(cookie), form).await
}

#[tokio::test]
async fn a_viewer_sees_the_endpoints_and_failed_deliveries_but_may_not_act() {
    let mut env = TestEnv::new().await;
    seed(&env).await;
    let console = Console::start(&mut env, &[]).await;
    assert_eq!(console.get("/notifications", None).await.status, 303);
    let viewer = console.login(VIEWER).await;

    let page = console.get("/notifications", Some(&viewer)).await;
    assert_eq!(page.status, 200, "{}", page.body);
    let b = &page.body;
    assert!(
        b.contains("href=\"/notifications\">Notifications</a>"),
        "in the navigation: {b}"
    );
    for shown in [
        "href=\"/notifications?endpoint=shop\">shop</a>",
        "enabled",
        EVENT,
        "order.paid",
        "href=\"/trace?q=order_console_notify\"",
        "<td class=\"status failed\">failed</td>",
        "<td>8</td>",
        "answered 500",
        " UTC",
    ] {
        assert!(b.contains(shown), "{shown} in: {b}");
    }
    assert!(
        !b.contains("/notifications/replay") && !b.contains("/notifications/enable"),
        "no buttons for a viewer: {b}"
    );

    // The filters: by endpoint and status, by event; a bad value is 400.
    let failed = console
        .get("/notifications?endpoint=shop&status=failed", Some(&viewer))
        .await;
    assert!(failed.body.contains(EVENT), "{}", failed.body);
    let delivered = console
        .get("/notifications?status=delivered", Some(&viewer))
        .await;
    assert_eq!(delivered.status, 200);
    assert!(!delivered.body.contains(EVENT), "{}", delivered.body);
    let other = console
        .get("/notifications?event=evt_other", Some(&viewer))
        .await;
    assert!(!other.body.contains(EVENT) && other.body.contains("match the filter"));
    for bad in ["status=gone", "endpoint=a%20b", "event=evt%0A1"] {
        let a = console
            .get(&format!("/notifications?{bad}"), Some(&viewer))
            .await;
        assert_eq!(a.status, 400, "{bad}: {}", a.body);
    }

    // A viewer's replay and enable, even with a valid token: refused as a
    // dead-letter replay is, and nothing changes.
    let csrf = page.csrf();
    for path in ["/notifications/replay", "/notifications/enable"] {
        let a = post(
            &console,
            path,
            &viewer,
            &[("csrf", &csrf), ("endpoint", "shop")],
        )
        .await;
        assert_eq!(a.status, 403, "{path}: {}", a.body);
        assert!(a.body.contains("operator role"), "{}", a.body);
    }
    assert_eq!(delivery(&env).await, ("failed".to_owned(), 8));
    assert!(audit(&env).await.is_empty());
}

#[tokio::test]
async fn an_operators_replay_needs_the_csrf_token_and_is_audited() {
    let mut env = TestEnv::new().await;
    seed(&env).await;
    let console = Console::start(&mut env, &[]).await;
    let operator = console.login(OPERATOR).await;
    let page = console.get("/notifications", Some(&operator)).await;
    assert_eq!(page.status, 200, "{}", page.body);
    assert!(page.body.contains("Replay 1 failed"), "{}", page.body);
    let csrf = page.csrf();

    // Without the token, or with a wrong one: 403, nothing changes.
    let none = post(
        &console,
        "/notifications/replay",
        &operator,
        &[("endpoint", "shop")],
    )
    .await;
    assert_eq!(none.status, 403, "{}", none.body);
    let wrong = [("csrf", "00ff"), ("endpoint", "shop")];
    let wrong = post(&console, "/notifications/replay", &operator, &wrong).await;
    assert_eq!(wrong.status, 403);
    assert_eq!(delivery(&env).await, ("failed".to_owned(), 8));
    // A replay names an endpoint or an event.
    let unscoped = post(
        &console,
        "/notifications/replay",
        &operator,
        &[("csrf", &csrf)],
    )
    .await;
    assert_eq!(unscoped.status, 400, "{}", unscoped.body);
    assert!(audit(&env).await.is_empty());

    // With it: the failed row is due again with a fresh schedule.
    let form = [("csrf", csrf.as_str()), ("endpoint", "shop")];
    let done = post(&console, "/notifications/replay", &operator, &form).await;
    assert_eq!(done.status, 200, "{}", done.body);
    assert!(
        done.body
            .contains("1 failed delivery(ies) of --endpoint shop due again now"),
        "{}",
        done.body
    );
    assert!(
        done.body
            .contains("<td class=\"status pending\">pending</td>"),
        "{}",
        done.body
    );
    assert_eq!(delivery(&env).await, ("pending".to_owned(), 0));

    let trail = audit(&env).await;
    assert_eq!(trail.len(), 1, "{trail:?}");
    let (actor, action, scope, ok, result) = &trail[0];
    assert_eq!(
        (actor.as_str(), action.as_str()),
        (OPERATOR.0, "notify replay")
    );
    assert_eq!(scope.as_deref(), Some("--endpoint shop"));
    assert!(ok, "{result}");
    assert!(result.contains("due again"), "{result}");
    let shown = console.get("/audit", Some(&operator)).await;
    assert!(shown.body.contains("notify replay"), "{}", shown.body);

    // Nothing failed any more: a second replay finds nothing to do.
    let again = [("csrf", csrf.as_str()), ("event", EVENT)];
    let again = post(&console, "/notifications/replay", &operator, &again).await;
    assert_eq!(again.status, 200, "{}", again.body);
    assert!(again.body.contains("No failed delivery"), "{}", again.body);
}

#[tokio::test]
async fn a_disabled_endpoint_is_not_replayed_until_it_is_enabled() {
    let mut env = TestEnv::new().await;
    seed(&env).await;
    sqlx::query(
        "UPDATE notify_endpoints SET disabled_at = now(), disabled_reason = 'answered 410'",
    )
    .execute(&env.pool)
    .await
    .expect("disable the endpoint");
    let console = Console::start(&mut env, &[]).await;
    let operator = console.login(OPERATOR).await;
    let page = console.get("/notifications", Some(&operator)).await;
    assert_eq!(page.status, 200, "{}", page.body);
    for shown in [
        "disabled",
        "answered 410",
        "/notifications/enable",
        "enable it first",
    ] {
        assert!(page.body.contains(shown), "{shown} in: {}", page.body);
    }
    // Its failed row offers no Replay, only the way to it.
    assert!(page.body.contains("enable shop first"), "{}", page.body);
    assert!(
        !page.body.contains("class=\"replay\">Replay<"),
        "{}",
        page.body
    );
    let csrf = page.csrf();

    // A replay by endpoint or by event leaves the row failed and says why.
    for scope in [("endpoint", "shop"), ("event", EVENT)] {
        let form = [("csrf", csrf.as_str()), scope];
        let a = post(&console, "/notifications/replay", &operator, &form).await;
        assert_eq!(a.status, 409, "{scope:?}: {}", a.body);
        assert!(
            a.body.contains("the endpoint is disabled") && a.body.contains("enable it first"),
            "{scope:?}: {}",
            a.body
        );
        assert_eq!(delivery(&env).await, ("failed".to_owned(), 8));
    }

    // Enabling clears the mark and replays nothing by itself.
    let form = [("csrf", csrf.as_str()), ("endpoint", "shop")];
    let enabled = post(&console, "/notifications/enable", &operator, &form).await;
    assert_eq!(enabled.status, 200, "{}", enabled.body);
    assert!(enabled.body.contains("shop enabled") && enabled.body.contains("separate step"));
    assert_eq!(
        env.count("SELECT count(*) FROM notify_endpoints WHERE disabled_at IS NULL AND disabled_reason IS NULL")
            .await,
        1
    );
    assert_eq!(delivery(&env).await, ("failed".to_owned(), 8));
    let unknown = [("csrf", csrf.as_str()), ("endpoint", "nobody")];
    let unknown = post(&console, "/notifications/enable", &operator, &unknown).await;
    assert_eq!(unknown.status, 404, "{}", unknown.body);

    // Now the replay goes through.
    let done = post(&console, "/notifications/replay", &operator, &form).await;
    assert_eq!(done.status, 200, "{}", done.body);
    assert_eq!(delivery(&env).await, ("pending".to_owned(), 0));

    let trail: Vec<(String, bool)> = audit(&env)
        .await
        .into_iter()
        .map(|(_, action, _, ok, _)| (action, ok))
        .collect();
    let row = |action: &str, ok| (action.to_owned(), ok);
    assert_eq!(
        trail,
        vec![
            row("notify replay", false),
            row("notify replay", false),
            row("notify enable", true),
            row("notify enable", false),
            row("notify replay", true),
        ]
    );
}
