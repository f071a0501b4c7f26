//! The console's Refunds page over HTTP, through the real binary, on refund
//! intents the ledger minted from real webhooks: two orders each paid twice
//! through Razorpay (ingest and a worker; refunds are off, so no refunder
//! touches them), so each second capture is owed back. An operator sees
//! them `owed`, approves one (audited under their name), cancels it once
//! approved, and is refused (409, nothing changes) on an intent already
//! settled; an action needs the CSRF token and a well-formed intent id. A
//! viewer sees the intents and whether refunds are paused, has no buttons
//! and may not act (403); the operator's pause flips `refund_control`.

use oncehook_e2e::console::{Answer, Console, OPERATOR, VIEWER};
use oncehook_e2e::{PipelineSpec, Shop, TestEnv, WAIT, eventually};

/// The order whose intent is approved, then cancelled.
const FIRST: &str = "ord_rf_first";
/// The order whose intent is settled before anyone acts on it.
const SECOND: &str = "ord_rf_second";
/// Well-formed, and no intent's.
const UNKNOWN: &str = "ri_000000000000000000000000";

/// One order's intent as the database has it.
#[derive(Debug, Clone, PartialEq, sqlx::FromRow)]
struct Row {
    id: String,
    payment_id: String,
    reason: String,
    state: String,
    approved_by: Option<String>,
}

async fn intent(env: &TestEnv, order_ref: &str) -> Row {
    sqlx::query_as(
        "SELECT i.id, i.payment_id, i.reason, i.state, i.approved_by
         FROM refund_intents i JOIN orders o ON o.id = i.order_id WHERE o.order_ref = $1",
    )
    .bind(order_ref)
    .fetch_one(&env.pool)
    .await
    .expect("the order's refund intent")
}

/// Both orders paid twice through Razorpay; waits for the ledger's two
/// intents, then stops the pipeline (the console needs only the database).
async fn seed(env: &mut TestEnv) -> (Row, Row) {
    Shop::mugs(10, &[FIRST, SECOND]).seed(&env.pool).await;
    let app = env
        .pipeline_with(PipelineSpec::default().without_mailer())
        .await;
    for (order, tag) in [(FIRST, "a"), (SECOND, "b")] {
        for n in 1..=2 {
            let d = env.captured(
                order,
                &format!("pay_rf_{tag}{n}"),
                &format!("evt_rf_{tag}{n}"),
            );
            env.post_ok(&app.url, "razorpay", &d).await;
        }
    }
    eventually("the ledger mints one intent per order", WAIT, || async {
        (env.count("SELECT count(*) FROM refund_intents").await == 2).then_some(())
    })
    .await;
    drop(app);
    (intent(env, FIRST).await, intent(env, SECOND).await)
}

async fn paused(env: &TestEnv) -> bool {
    sqlx::query_scalar("SELECT paused FROM refund_control")
        .fetch_one(&env.pool)
        .await
        .expect("refund_control")
}

/// The console's audit rows of refund actions: (actor, action, scope, ok,
/// result), oldest first.
async fn audit(env: &TestEnv) -> Vec<(String, String, Option<String>, bool, String)> {
    sqlx::query_as(
        "SELECT actor, action, scope, ok, result FROM console_audit
         WHERE action LIKE 'refund%' ORDER BY id",
    )
    .fetch_all(&env.pool)
    .await
    .expect("audit rows")
}

async fn act(console: &Console, path: &str, cookie: &str, form: &[(&str, &str)]) -> Answer {
    console.post(path, Some(cookie), form).await
}

fn has(a: &Answer, status: u16, words: &[&str]) {
    assert_eq!(a.status, status, "{}", a.body);
    for w in words {
        assert!(a.body.contains(w), "{w:?} in: {}", a.body);
    }
}

#[tokio::test]
async fn an_operator_approves_and_cancels_intents_and_a_settled_one_is_refused() {
    let mut env = TestEnv::new().await;
    let (first, second) = seed(&mut env).await;
    assert_eq!(
        (first.reason.as_str(), first.state.as_str()),
        ("duplicate_capture", "owed")
    );
    let console = Console::start(&mut env, &[]).await;
    assert_eq!(console.get("/refunds", None).await.status, 303);
    let operator = console.login(OPERATOR).await;

    let page = console.get("/refunds", Some(&operator)).await;
    let payment = format!("razorpay:{}", first.payment_id);
    has(
        &page,
        200,
        &[
            "href=\"/refunds\">Refunds</a>",
            "Refunds are running",
            &first.id,
            &second.id,
            "href=\"/trace?q=ord_rf_first\"",
            &payment,
            "500.00 INR",
            "duplicate_capture",
            "<td class=\"state owed\">owed</td>",
            "/refunds/approve",
            "/refunds/cancel",
            "/refunds/pause",
        ],
    );
    let csrf = page.csrf();

    // Without the token: 403; a malformed or missing id: 400; an unknown
    // one: 404. Nothing changes.
    let no_token = act(
        &console,
        "/refunds/approve",
        &operator,
        &[("intent", &first.id)],
    )
    .await;
    assert_eq!(no_token.status, 403, "{}", no_token.body);
    for bad in [
        "ri_XYZ",
        "ri_0123",
        "order_1",
        "ri_0123456789ABCDEF01234567",
    ] {
        let a = act(
            &console,
            "/refunds/approve",
            &operator,
            &[("csrf", &csrf), ("intent", bad)],
        )
        .await;
        has(&a, 400, &["ri_ and 24 lowercase hex digits"]);
    }
    let missing = act(&console, "/refunds/cancel", &operator, &[("csrf", &csrf)]).await;
    has(&missing, 400, &["names a refund intent"]);
    assert_eq!(intent(&env, FIRST).await, first);
    assert!(audit(&env).await.is_empty());
    let unknown = act(
        &console,
        "/refunds/approve",
        &operator,
        &[("csrf", &csrf), ("intent", UNKNOWN)],
    )
    .await;
    has(&unknown, 404, &["No refund intent has the id"]);

    // Approve: the state, the approver and the audit row.
    let form = [("csrf", csrf.as_str()), ("intent", first.id.as_str())];
    let approved = act(&console, "/refunds/approve", &operator, &form).await;
    has(
        &approved,
        200,
        &[
            "approved: the refunder",
            "<td class=\"state approved\">approved</td>",
            "by olga@console",
        ],
    );
    let now = intent(&env, FIRST).await;
    assert_eq!(
        (now.state.as_str(), now.approved_by.as_deref()),
        ("approved", Some("olga@console"))
    );
    let trail = audit(&env).await;
    let (actor, action, scope, ok, result) = trail.last().expect("an audit row");
    assert_eq!(
        (actor.as_str(), action.as_str()),
        (OPERATOR.0, "refund approve")
    );
    assert_eq!(scope.as_deref(), Some(first.id.as_str()));
    assert!(ok, "{result}");
    let shown = console.get("/audit", Some(&operator)).await;
    has(&shown, 200, &["refund approve", &first.id]);

    // Approved already: a second approval is refused and says why.
    let again = act(&console, "/refunds/approve", &operator, &form).await;
    has(
        &again,
        409,
        &["is approved (it is approved already", "Nothing was changed"],
    );

    // Cancel the approved one: nothing will be sent for it.
    let cancelled = act(&console, "/refunds/cancel", &operator, &form).await;
    has(
        &cancelled,
        200,
        &[
            "cancelled (it was approved)",
            "<td class=\"state cancelled\">cancelled</td>",
        ],
    );
    assert_eq!(intent(&env, FIRST).await.state, "cancelled");

    // The books show the second one refunded: cancel and approve refused, 409.
    sqlx::query("UPDATE refund_intents SET state = 'settled' WHERE id = $1")
        .bind(&second.id)
        .execute(&env.pool)
        .await
        .expect("settle the second intent");
    let settled = intent(&env, SECOND).await;
    let form = [("csrf", csrf.as_str()), ("intent", second.id.as_str())];
    for path in ["/refunds/cancel", "/refunds/approve"] {
        let refused = act(&console, path, &operator, &form).await;
        has(
            &refused,
            409,
            &[
                "is settled (the books show the payment refunded)",
                "Nothing was changed",
            ],
        );
        assert_eq!(intent(&env, SECOND).await, settled, "{path}");
    }

    let trail: Vec<(String, bool)> = audit(&env)
        .await
        .into_iter()
        .map(|(actor, action, _, ok, _)| {
            assert_eq!(actor, OPERATOR.0);
            (action, ok)
        })
        .collect();
    let row = |action: &str, ok| (action.to_owned(), ok);
    assert_eq!(
        trail,
        vec![
            row("refund approve", false),
            row("refund approve", true),
            row("refund approve", false),
            row("refund cancel", true),
            row("refund cancel", false),
            row("refund approve", false),
        ]
    );

    // The filters: by state, by intent or order; a bad value is 400.
    let by_state = console.get("/refunds?state=settled", Some(&operator)).await;
    assert!(by_state.body.contains(&second.id) && !by_state.body.contains(&first.id));
    let by_order = console
        .get(&format!("/refunds?q={FIRST}"), Some(&operator))
        .await;
    assert!(by_order.body.contains(&first.id) && !by_order.body.contains(&second.id));
    let none = console
        .get(&format!("/refunds?q={FIRST}&state=owed"), Some(&operator))
        .await;
    has(&none, 200, &["match the filter"]);
    for bad in ["state=gone", "q=a%0Ab"] {
        let a = console
            .get(&format!("/refunds?{bad}"), Some(&operator))
            .await;
        assert_eq!(a.status, 400, "{bad}: {}", a.body);
    }
}

#[tokio::test]
async fn a_viewer_sees_the_intents_but_may_not_act_and_the_operator_pauses_refunds() {
    let mut env = TestEnv::new().await;
    let (first, second) = seed(&mut env).await;
    let console = Console::start(&mut env, &[]).await;
    let viewer = console.login(VIEWER).await;

    let page = console.get("/refunds", Some(&viewer)).await;
    has(
        &page,
        200,
        &[
            &first.id,
            &second.id,
            "<td class=\"state owed\">owed</td>",
            "Refunds are running",
            "need the operator role",
        ],
    );
    for button in [
        "/refunds/approve",
        "/refunds/cancel",
        "/refunds/pause",
        "/refunds/resume",
    ] {
        assert!(
            !page.body.contains(button),
            "no {button} for a viewer: {}",
            page.body
        );
    }

    // A viewer's change, even with a valid token: refused, nothing changes.
    let csrf = page.csrf();
    let form = [("csrf", csrf.as_str()), ("intent", first.id.as_str())];
    for path in [
        "/refunds/approve",
        "/refunds/cancel",
        "/refunds/pause",
        "/refunds/resume",
    ] {
        let a = act(&console, path, &viewer, &form).await;
        has(&a, 403, &["operator role"]);
    }
    assert_eq!(intent(&env, FIRST).await, first);
    assert!(!paused(&env).await);
    assert!(audit(&env).await.is_empty());

    // The operator's pause, without the token: refused.
    let operator = console.login(OPERATOR).await;
    let page = console.get("/refunds", Some(&operator)).await;
    let no_token = act(&console, "/refunds/pause", &operator, &[]).await;
    assert_eq!(no_token.status, 403, "{}", no_token.body);
    assert!(!paused(&env).await);

    // With it: paused in the database and on the page, for everyone.
    let csrf = page.csrf();
    let form = [("csrf", csrf.as_str())];
    let done = act(&console, "/refunds/pause", &operator, &form).await;
    has(
        &done,
        200,
        &["Refunds paused", "Refunds are paused", "/refunds/resume"],
    );
    assert!(paused(&env).await);
    let seen = console.get("/refunds", Some(&viewer)).await;
    has(&seen, 200, &["Refunds are paused"]);
    assert!(!seen.body.contains("/refunds/resume"), "{}", seen.body);

    let done = act(&console, "/refunds/resume", &operator, &form).await;
    has(
        &done,
        200,
        &["Refunds resumed", "Refunds are running", "/refunds/pause"],
    );
    assert!(!done.body.contains("Refunds are paused"), "{}", done.body);
    assert!(!paused(&env).await);

    let trail: Vec<(String, String, Option<String>, bool)> = audit(&env)
        .await
        .into_iter()
        .map(|(actor, action, scope, ok, _)| (actor, action, scope, ok))
        .collect();
    let row = |action: &str| {
        (
            OPERATOR.0.to_owned(),
            action.to_owned(),
            Some("every refunder".to_owned()),
            true,
        )
    };
    assert_eq!(trail, vec![row("refunds pause"), row("refunds resume")]);
}
