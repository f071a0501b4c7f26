//! The operators' console in a real browser (Debian's headless chromium via
//! chromedriver): log in, see a dead letter produced through the real
//! pipeline, open it, see a Replay whose form lost its CSRF token refused,
//! fix the cause and replay it, see the order paid in its trace; a viewer
//! sees the letters but no way to replay them; logout ends the session. And
//! a list that is behind the queue says so and catches up by itself, its
//! content swapped in by the page's script. Each page is screenshotted into
//! `target/console-screenshots/` (and into `docs/console/` when
//! `ONCEHOOK_UPDATE_SCREENSHOTS=1`, to refresh the guide's pictures).

use std::path::{Path, PathBuf};
use std::time::Duration;

use oncehook_common::dead_letter::DeadLetterKind as Kind;
use oncehook_e2e::console::{Console, OPERATOR, VIEWER};
use oncehook_e2e::webdriver::Browser;
use oncehook_e2e::{Shop, TestEnv, broker, eventually, shop};
use oncehook_gateways::Gateway;

const WAIT: Duration = Duration::from_secs(30);

fn shots() -> Vec<PathBuf> {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("..");
    let mut dirs = vec![root.join("target/console-screenshots")];
    if std::env::var("ONCEHOOK_UPDATE_SCREENSHOTS").is_ok_and(|v| v == "1") {
        dirs.push(root.join("docs/console"));
    }
    dirs
}

async fn shoot(browser: &Browser, name: &str) {
    for dir in shots() {
        browser.screenshot(&dir.join(format!("{name}.png"))).await;
    }
}

async fn log_in(browser: &Browser, base: &str, (user, password): (&str, &str)) {
    browser.goto(&format!("{base}/")).await;
    assert!(
        browser.url().await.contains("/login"),
        "sent to the login page"
    );
    browser.type_into("input[name=user]", user).await;
    browser.type_into("input[name=password]", password).await;
    browser.click("form.login button").await;
    browser.wait_for(&format!("{user} (")).await;
    assert!(browser.source().await.contains("<h1>Overview</h1>"));
}

#[tokio::test]
async fn an_operator_fixes_and_replays_a_dead_letter_in_the_browser() {
    let mut env = TestEnv::new().await;
    let (_ingest, url) = env.start_ingest().await;
    let _worker = env.start_worker().await;
    let console = Console::start(&mut env, &[]).await;
    let base = console.base.clone();

    // Two authentic captures for orders that do not exist yet.
    for (order, payment, event) in [
        ("order_browser", "pay_B1", "evt_B1"),
        ("order_later", "pay_B2", "evt_B2"),
    ] {
        let d = env.sign(
            Gateway::Razorpay,
            "payment.captured",
            &env.spec(order, payment, event, 50_000),
        );
        let (status, body) = env.post(&url, "razorpay", &d).await;
        assert_eq!(status, 200, "{body}");
    }
    let dead = format!("{}.dead", env.prefix);
    eventually("two dead letters", WAIT, || async {
        (broker::depth(&dead).await == Some(2)).then_some(())
    })
    .await;

    let browser = Browser::start(&env.dir).await;
    browser.goto(&format!("{base}/letters")).await;
    shoot(&browser, "login").await;
    log_in(&browser, &base, OPERATOR).await;
    shoot(&browser, "overview").await;

    // The dead letters, then the one for order_browser.
    browser.goto(&format!("{base}/letters")).await;
    let list = browser.source().await;
    assert!(
        list.contains("evt_B1")
            && list.contains(&format!(
                "<span class=\"kind\">{}</span>",
                Kind::UnknownOrder
            )),
        "{list}"
    );
    shoot(&browser, "dead-letters").await;
    let links = browser.all("table.letters tbody tr").await;
    assert_eq!(links.len(), 2);
    browser
        .goto(&format!("{base}/letters?kind=unknown_order"))
        .await;
    let id = {
        let page = browser.source().await;
        let start = page.find("evt_B1").expect("evt_B1 listed");
        let row_start =
            page[..start].rfind("href=\"/letters/").expect("its link") + "href=\"/letters/".len();
        page[row_start..]
            .split('"')
            .next()
            .unwrap_or_default()
            .to_owned()
    };
    browser.click(&format!("a[href='/letters/{id}']")).await;
    let detail = browser.wait_for("What failed").await;
    assert!(
        detail.contains("order_browser") && detail.contains("masked"),
        "{detail}"
    );
    shoot(&browser, "dead-letter").await;

    // The same Replay button with the form's CSRF token taken out (as a
    // forged cross-site form would be): refused, and nothing happens.
    let removed = browser
        .execute(
            "var f = document.querySelector('div.actions form[action=\"/letters/replay\"] input[name=csrf]');\n\
             if (!f) return false; f.remove(); return true;",
        )
        .await;
    assert_eq!(
        removed,
        serde_json::Value::Bool(true),
        "the replay form had a token"
    );
    browser.click("div.actions button.replay").await;
    let refused = browser.wait_for("Forbidden").await;
    assert!(refused.contains("security token is missing"), "{refused}");
    assert_eq!(broker::depth(&dead).await, Some(2), "nothing was replayed");
    browser.goto(&format!("{base}/letters/{id}")).await;
    browser.wait_for("What failed").await;

    // Fix the cause, replay from the letter's page.
    Shop::own_product("order_browser").seed(&env.pool).await;
    browser.click("div.actions button.replay").await;
    let done = browser.wait_for("replayed").await;
    assert!(done.contains("replayed 1, failed 0"), "{done}");
    shoot(&browser, "replayed").await;
    shop::wait_paid(&env.pool, "order_browser").await;

    // Its trace says paid.
    browser.goto(&format!("{base}/trace")).await;
    browser.type_into("input[name=q]", "order_browser").await;
    browser.click("form.filters button").await;
    let trace = browser.wait_for("Order order_browser:").await;
    assert!(
        trace.contains("paid") && trace.contains("evt_B1"),
        "{trace}"
    );
    shoot(&browser, "trace").await;
    browser.goto(&format!("{base}/events")).await;
    shoot(&browser, "events").await;
    browser.goto(&format!("{base}/audit")).await;
    let audit = browser.source().await;
    assert!(audit.contains(&id) && audit.contains(OPERATOR.0), "{audit}");
    shoot(&browser, "audit").await;

    // Logout ends the session: the next page asks for a login again.
    browser.click("form.logout button").await;
    browser.wait_for("Log in").await;
    browser.goto(&format!("{base}/letters")).await;
    assert!(browser.url().await.contains("/login"), "logged out");

    // A viewer reads the letters but is offered no replay or purge.
    log_in(&browser, &base, VIEWER).await;
    browser.goto(&format!("{base}/letters")).await;
    let list = browser.source().await;
    assert!(list.contains("evt_B2"), "{list}");
    assert!(browser.all("div.bulk button").await.is_empty());
    browser.click("table.letters a").await;
    browser.wait_for("order_later").await;
    assert!(
        browser.all("button.replay").await.is_empty(),
        "no replay for a viewer"
    );
    assert!(
        browser.all("button.purge").await.is_empty(),
        "no purge for a viewer"
    );
    shoot(&browser, "viewer-dead-letter").await;
    browser.click("form.logout button").await;
    browser.wait_for("Log in").await;
    browser.goto(&format!("{base}/")).await;
    assert!(browser.url().await.contains("/login"));
    assert_eq!(
        broker::depth(&dead).await,
        Some(1),
        "the viewer changed nothing"
    );
    browser.quit().await;
}

#[tokio::test]
async fn a_dead_letter_list_that_is_behind_the_queue_catches_up_without_a_reload() {
    let mut env = TestEnv::new().await;
    let (_ingest, url) = env.start_ingest().await;
    let _worker = env.start_worker().await;
    let console = Console::start(&mut env, &[]).await;
    let base = console.base.clone();
    let dead = format!("{}.dead", env.prefix);
    let dead_letter = |order: &'static str, event: &'static str, depth: u32| {
        let (env, url, dead) = (&env, &url, &dead);
        async move {
            let d = env.sign(
                Gateway::Razorpay,
                "payment.captured",
                &env.spec(order, &format!("pay_{event}"), event, 10_000),
            );
            let (status, body) = env.post(url, "razorpay", &d).await;
            assert_eq!(status, 200, "{body}");
            eventually("the dead letter", WAIT, || async {
                (broker::depth(dead).await == Some(depth)).then_some(())
            })
            .await;
        }
    };

    dead_letter("order_live_a", "evt_LA", 1).await;
    let browser = Browser::start(&env.dir).await;
    log_in(&browser, &base, VIEWER).await;
    browser.goto(&format!("{base}/letters")).await;
    let first = browser.wait_for("evt_LA").await;
    assert!(
        !first.contains("data-refresh"),
        "a current list stays as it is"
    );

    // Another letter arrives. The next page is served from the console's
    // last read of the queue, says so, and asks its script to fetch it again.
    dead_letter("order_live_b", "evt_LB", 2).await;
    browser.goto(&format!("{base}/letters")).await;
    let behind = browser.wait_for("evt_LA").await;
    assert!(!behind.contains("evt_LB"), "{behind}");
    assert!(behind.contains("a fresh read is on its way"), "{behind}");
    // A mark on the document: a full reload would lose it.
    browser
        .execute("document.body.setAttribute('data-mark', 'kept'); return true;")
        .await;
    browser.wait_for("evt_LB").await;
    let kept = browser
        .execute("return document.body.getAttribute('data-mark');")
        .await;
    assert_eq!(
        kept,
        serde_json::json!("kept"),
        "the content was swapped in, not reloaded"
    );
    // Current again: the page stops fetching itself.
    let still = browser
        .execute("return document.querySelector('main').hasAttribute('data-refresh');")
        .await;
    assert_eq!(still, serde_json::json!(false));
    browser.quit().await;
}
