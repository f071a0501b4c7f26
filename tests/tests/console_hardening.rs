//! The console's login and pages against hostile input, through the real
//! binary: a burst of logins cannot outrun the throttle, password checks
//! are bounded across the whole console, the page after a login never
//! leaves the console (and a hostile one never answers 500), and bad filter
//! values or a failing query never put database error text into a page.

use std::net::{IpAddr, Ipv4Addr};

use oncehook_e2e::TestEnv;
use oncehook_e2e::console::{Answer, Console, OPERATOR, VIEWER};

/// Failed logins the throttle allows per account and per address.
const ALLOWANCE: usize = 5;
/// How many logins a burst fires at once.
const BURST: usize = 24;

/// How many answers of `answers` have `status`.
fn count(answers: &[Answer], status: u16) -> usize {
    answers.iter().filter(|a| a.status == status).count()
}

/// The statuses, for failure messages.
fn statuses(answers: &[Answer]) -> Vec<u16> {
    answers.iter().map(|a| a.status).collect()
}

/// A refusal says when to come back, and opens no session.
fn assert_refusal(a: &Answer) {
    let retry: u64 = a
        .header("retry-after")
        .parse()
        .unwrap_or_else(|_| panic!("{} without Retry-After seconds: {}", a.status, a.body));
    assert!(retry > 0 && retry <= 15 * 60, "Retry-After {retry}");
    assert!(a.header("set-cookie").is_empty(), "{}", a.body);
    assert!(a.body.contains("Try again"), "{}", a.body);
}

/// The `n`th loopback address of a test's own range (the whole 127/8 is
/// this machine; the console sees each as another client address).
fn loopback(n: usize) -> IpAddr {
    let n = u32::try_from(n).unwrap_or(u32::MAX) % 60_000;
    IpAddr::V4(Ipv4Addr::new(127, 1, (n / 250) as u8, (n % 250 + 2) as u8))
}

#[tokio::test]
async fn a_burst_of_wrong_passwords_for_one_account_is_checked_at_most_the_allowance() {
    let mut env = TestEnv::new().await;
    let console = Console::start(&mut env, &[]).await;
    let burst: Vec<(String, String, Option<IpAddr>)> = (0..BURST)
        .map(|i| (OPERATOR.0.to_owned(), format!("wrong-password-{i}"), None))
        .collect();
    let answers = console.login_burst(&burst).await;

    // Only the throttle's allowance reached a password check; the rest were
    // refused before (the check of a few may have been refused as busy,
    // and those count as attempts too).
    let (checked, busy, throttled) = (
        count(&answers, 401),
        count(&answers, 503),
        count(&answers, 429),
    );
    assert_eq!(
        checked + busy + throttled,
        BURST,
        "{:?}",
        statuses(&answers)
    );
    assert!(checked >= 1, "{:?}", statuses(&answers));
    assert!(checked + busy <= ALLOWANCE, "{:?}", statuses(&answers));
    for a in answers.iter().filter(|a| a.status != 401) {
        assert_refusal(a);
    }
    assert!(answers.iter().all(|a| a.header("set-cookie").is_empty()));

    // Locked out now, as documented: even the right password waits.
    let after = console.try_login(OPERATOR.0, OPERATOR.1).await;
    assert_eq!(after.status, 429, "{}", after.body);
    assert_refusal(&after);

    // The audit trail has exactly the checked ones as wrong passwords.
    let wrong = env
        .count(
            "SELECT count(*) FROM console_audit
             WHERE action = 'login' AND NOT ok AND result = 'wrong name or password'",
        )
        .await;
    assert_eq!(wrong, checked as i64);
}

#[tokio::test]
async fn a_burst_over_many_accounts_from_one_address_is_held_to_the_addresss_allowance() {
    let mut env = TestEnv::new().await;
    let console = Console::start(&mut env, &[]).await;
    let burst: Vec<(String, String, Option<IpAddr>)> = (0..BURST)
        .map(|i| (format!("nobody-{i}"), "not-a-password".to_owned(), None))
        .collect();
    let answers = console.login_burst(&burst).await;
    let (checked, busy, throttled) = (
        count(&answers, 401),
        count(&answers, 503),
        count(&answers, 429),
    );
    assert_eq!(
        checked + busy + throttled,
        BURST,
        "{:?}",
        statuses(&answers)
    );
    assert!(checked + busy <= ALLOWANCE, "{:?}", statuses(&answers));
    for a in answers.iter().filter(|a| a.status != 401) {
        assert_refusal(a);
    }
    // Unknown names are answered like wrong passwords.
    for a in answers.iter().filter(|a| a.status == 401) {
        assert!(a.body.contains("Wrong name or password"), "{}", a.body);
    }
}

#[tokio::test]
async fn password_checks_across_many_addresses_are_bounded_console_wide() {
    let mut env = TestEnv::new().await;
    let console = Console::start(&mut env, &[]).await;
    // Each login from an address and for a name of its own, so no throttle
    // applies: only the console-wide bound on password checks can refuse.
    // A few bursts at most, in case one arrives too slowly to overlap.
    let mut seen_busy = None;
    let mut all = Vec::new();
    for round in 0..4 {
        let burst: Vec<(String, String, Option<IpAddr>)> = (0..BURST)
            .map(|i| {
                let n = round * BURST + i;
                (
                    format!("nobody-{n}"),
                    "not-a-password".to_owned(),
                    Some(loopback(n)),
                )
            })
            .collect();
        let answers = console.login_burst(&burst).await;
        all.extend(statuses(&answers));
        for a in &answers {
            assert!(
                a.status == 401 || a.status == 503,
                "only wrong-password or busy answers: {} {}",
                a.status,
                a.body
            );
        }
        if let Some(busy) = answers.into_iter().find(|a| a.status == 503) {
            seen_busy = Some(busy);
            break;
        }
    }
    let busy = seen_busy.unwrap_or_else(|| {
        panic!("no burst of {BURST} concurrent logins was told the console is busy: {all:?}")
    });
    assert_refusal(&busy);
    assert!(busy.body.contains("busy"), "{}", busy.body);

    // Once the burst is over, a login goes through again.
    let a = console
        .login_burst(&[(
            VIEWER.0.to_owned(),
            VIEWER.1.to_owned(),
            Some(loopback(59_999)),
        )])
        .await;
    assert_eq!(a[0].status, 303, "{}", a[0].body);
    assert_eq!(a[0].header("location"), "/");
}

#[tokio::test]
async fn the_page_after_a_login_is_a_path_of_the_console_or_the_overview() {
    let mut env = TestEnv::new().await;
    let console = Console::start(&mut env, &[]).await;
    let login = |next: &str| format!("user={}&password={}&next={next}", VIEWER.0, VIEWER.1);
    // `next` as the form carries it (percent-encoded), each a way off the
    // console or into a broken header.
    let hostile = [
        "%2F%09%2Fevil.example%2F",      // "/\t/evil.example/"
        "%2F%0A%2Fevil.example%2F",      // LF
        "%2F%0D%2Fevil.example%2F",      // CR
        "%2F%0B%2Fevil.example%2F",      // VT
        "%2Fevents%0D%0ASet-Cookie:x=1", // a header injection
        "%2F%00",                        // NUL
        "%2F%2Fevil.example%2F",         // "//evil.example/"
        "%2F%2F%2Fevil.example",         // "///evil.example"
        "%2F%5Cevil.example",            // "/\evil.example"
        "%2F%5C%2Fevil.example",         // "/\/evil.example"
        "%2F%252F%252Fevil.example",     // "/%2F%2Fevil.example"
        "%2F%255Cevil.example",          // "/%5Cevil.example"
        "https%3A%2F%2Fevil.example%2F",
        "%20%2F%2Fevil.example", // " //evil.example"
        "javascript%3Aalert(1)",
        "%2F%E2%80%8B%2Fevil.example", // a zero-width space
        "%2Fevents%3Fq%3Da%20b",       // whitespace in the query
        "%2Fevents%23%2F%2Fevil",      // a fragment
        "evil.example",
        "",
    ];
    let mut wrong = Vec::new();
    for next in hostile {
        let a = console.post_raw("/login", None, &login(next)).await;
        let location = a.header("location");
        let session = a.header("set-cookie");
        if a.status != 303 || location != "/" || !session.starts_with("oncehook_console=") {
            wrong.push(format!(
                "next={next}: {} Location {location:?} ({})",
                a.status, a.body
            ));
        }
    }
    assert!(
        wrong.is_empty(),
        "hostile next values:\n{}",
        wrong.join("\n")
    );

    // The pages of the console are kept, query and all.
    for (sent, kept) in [
        ("%2Fevents%3Foutcome%3Dapplied", "/events?outcome=applied"),
        (
            "%2Fletters%3Fgateway%3Dpayu%26within%3D1h",
            "/letters?gateway=payu&within=1h",
        ),
        ("%2Ftrace%3Fq%3Devt%252F1", "/trace?q=evt%2F1"),
        ("%2Fletters%2F0123456789ab", "/letters/0123456789ab"),
    ] {
        let a = console.post_raw("/login", None, &login(sent)).await;
        assert_eq!(a.status, 303, "{sent}: {}", a.body);
        assert_eq!(a.header("location"), kept, "{sent}");
    }

    // The login page does not carry a hostile `next` into its form either.
    let page = console
        .get("/login?next=%2F%09%2Fevil.example%2F", None)
        .await;
    assert_eq!(page.status, 200, "{}", page.body);
    assert!(!page.body.contains("evil.example"), "{}", page.body);
}

/// Text of a database error or of SQL that must never be in a page.
const LEAKS: [&str; 9] = [
    "invalid byte sequence",
    "0x00",
    "error returned from database",
    "SELECT",
    "processed_webhooks",
    "console_audit",
    "does not exist",
    "relation",
    "syntax",
];

fn assert_no_leak(path: &str, a: &Answer) {
    for leak in LEAKS {
        assert!(!a.body.contains(leak), "{path} shows {leak:?}:\n{}", a.body);
    }
}

#[tokio::test]
async fn bad_filter_values_are_refused_and_database_errors_stay_in_the_log() {
    let mut env = TestEnv::new().await;
    let console = Console::start(&mut env, &[]).await;
    let cookie = console.login(VIEWER).await;

    for path in [
        "/events?outcome=%00",
        "/events?outcome=bogus",
        "/events?gateway=%00",
        "/events?gateway=pay%27u",
        "/events?source=%00",
        "/events?source=a%20b",
        "/events?within=99y",
        "/events?at=2026-01-01T00:00:00Z&src=payu&id=%00",
        "/events?at=yesterday&src=payu&id=evt_1",
        "/events?at=2026-01-01T00:00:00Z&src=%00&id=evt_1",
        "/trace?q=%00",
        "/trace?q=evt%0A1",
        "/letters?kind=%00",
        "/letters?gateway=%3Cscript%3E",
        "/letters?within=forever",
        "/?since=%00",
        "/?since=forever",
        "/?since=99999999999d",
    ] {
        let a = console.get(path, Some(&cookie)).await;
        assert_eq!(a.status, 400, "{path}: {}", a.body);
        assert!(a.body.contains("class=\"error\""), "{path}: {}", a.body);
        assert_no_leak(path, &a);
    }
    // Good values still work.
    for path in [
        "/events?outcome=applied",
        "/events?gateway=payu&source=payu&within=1h",
        "/trace?q=evt_nothing",
    ] {
        let a = console.get(path, Some(&cookie)).await;
        assert_eq!(a.status, 200, "{path}: {}", a.body);
    }

    // A query that fails in the database: the page says so in short and
    // the details go to the console's log.
    sqlx::query("ALTER TABLE console_audit RENAME TO console_audit_away")
        .execute(&env.pool)
        .await
        .expect("hide the audit table");
    sqlx::query("ALTER TABLE processed_webhooks RENAME TO processed_webhooks_away")
        .execute(&env.pool)
        .await
        .expect("hide the events table");
    for path in ["/audit", "/events", "/trace?q=evt_1"] {
        let a = console.get(path, Some(&cookie)).await;
        assert_eq!(a.status, 502, "{path}: {}", a.body);
        assert!(a.body.contains("database"), "{path}: {}", a.body);
        assert_no_leak(path, &a);
    }
    let log = std::fs::read_to_string(&console.proc.log).unwrap_or_default();
    assert!(
        log.contains("does not exist"),
        "the cause is logged:\n{log}"
    );
    sqlx::query("ALTER TABLE console_audit_away RENAME TO console_audit")
        .execute(&env.pool)
        .await
        .expect("bring the audit table back");
    sqlx::query("ALTER TABLE processed_webhooks_away RENAME TO processed_webhooks")
        .execute(&env.pool)
        .await
        .expect("bring the events table back");
}
