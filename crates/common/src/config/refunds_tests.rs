use std::time::Duration;

use super::*;
use crate::config::testing::{load, load_env, refused};

const SOURCES: &str = "[[source]]\nname = \"rzp\"\ngateway = \"razorpay\"\nsecrets = [\"s\"]\n\
                       [[source]]\nname = \"st\"\ngateway = \"stripe\"\nsecrets = [\"whsec_x\"]\n";

#[test]
fn off_by_default_with_conservative_ceilings() {
    let c = load_env(&[]).expect("defaults").refunds;
    assert_eq!(c.default.mode, RefundMode::Off);
    assert!(!c.any_on());
    assert_eq!(
        (c.interval, c.lease),
        (Duration::from_secs(10), Duration::from_secs(60))
    );
    assert_eq!(
        c.default.auto_reasons,
        ["duplicate_capture", "cancelled_order"]
    );
    assert_eq!(c.policy("anything"), &c.default);
}

#[test]
fn a_source_overrides_the_default_and_keeps_what_it_leaves_out() {
    let toml = format!(
        "{SOURCES}[refunds]\nmode = \"propose\"\nmax_refund_minor = 500\n\
         [refunds.source.rzp]\nmode = \"auto\"\nmax_daily_minor = 900\n"
    );
    let c = load(&toml, &[]).expect("file").refunds;
    assert_eq!(c.policy("st").mode, RefundMode::Propose);
    let rzp = c.policy("rzp");
    assert_eq!(
        (
            rzp.mode,
            rzp.ceilings.max_refund_minor,
            rzp.ceilings.max_daily_minor
        ),
        (RefundMode::Auto, 500, 900)
    );
    let c = load(
        &toml,
        &[(ENV_REFUNDS_MODE, "off"), (ENV_REFUNDS_INTERVAL, "2s")],
    )
    .expect("env")
    .refunds;
    assert_eq!(
        (c.default.mode, c.interval),
        (RefundMode::Off, Duration::from_secs(2))
    );
    assert!(c.any_on(), "rzp still refunds automatically");
}

#[test]
fn unknown_modes_reasons_sources_and_negative_ceilings_are_refused_by_name() {
    let text = refused(&format!("{SOURCES}[refunds]\nmode = \"yes\"\n"), &[]);
    assert!(text.contains("refunds.mode"), "{text}");
    let text = refused(
        &format!("{SOURCES}[refunds]\nauto_reasons = [\"because\"]\n"),
        &[],
    );
    assert!(
        text.contains("refunds.auto_reasons") && text.contains("duplicate_capture"),
        "{text}"
    );
    let text = refused(
        &format!("{SOURCES}[refunds.source.nope]\nmode = \"auto\"\n"),
        &[],
    );
    assert!(
        text.contains("refunds.source.nope") && text.contains("rzp"),
        "{text}"
    );
    let text = refused(
        &format!("{SOURCES}[refunds.source.st]\nmax_refund_minor = -1\n"),
        &[],
    );
    assert!(
        text.contains("refunds.source.st.max_refund_minor"),
        "{text}"
    );
}

#[test]
fn the_flat_ceilings_hold_for_every_currency_as_before() {
    let toml = format!("{SOURCES}[refunds]\nmax_refund_minor = 500\nmax_daily_minor = 900\n");
    let c = load(&toml, &[]).expect("file").refunds;
    let flat = Ceilings {
        max_refund_minor: 500,
        max_daily_minor: 900,
    };
    for currency in ["INR", "USD", "inr"] {
        assert_eq!(c.policy("rzp").ceilings(currency), flat, "{currency}");
    }
    assert!(c.default.currencies.is_empty());
    let c = load_env(&[
        (ENV_REFUNDS_MAX_REFUND_MINOR, "7"),
        (ENV_REFUNDS_MAX_DAILY_MINOR, "8"),
    ])
    .expect("env")
    .refunds;
    assert_eq!(
        c.policy("any").ceilings("EUR"),
        Ceilings {
            max_refund_minor: 7,
            max_daily_minor: 8
        }
    );
}

#[test]
fn a_currency_table_sets_that_currencys_ceilings_and_a_source_its_own() {
    let toml = format!(
        "{SOURCES}[refunds]\nmax_refund_minor = 500000\nmax_daily_minor = 5000000\n\
         [refunds.currency.USD]\nmax_refund_minor = 10000\nmax_daily_minor = 50000\n\
         [refunds.currency.JPY]\nmax_daily_minor = 20000\n\
         [refunds.source.st]\nmax_daily_minor = 9000000\n\
         [refunds.source.st.currency.USD]\nmax_daily_minor = 80000\n"
    );
    let c = load(&toml, &[]).expect("file").refunds;
    let ceilings = |source: &str, currency: &str| {
        let p = c.policy(source).ceilings(currency);
        (p.max_refund_minor, p.max_daily_minor)
    };
    // [refunds]: INR has the flat keys, USD its table, JPY its table over the flat keys.
    assert_eq!(ceilings("rzp", "INR"), (500_000, 5_000_000));
    assert_eq!(ceilings("rzp", "USD"), (10_000, 50_000));
    assert_eq!(ceilings("rzp", "JPY"), (500_000, 20_000));
    // A source: its own USD table over [refunds]' USD table; its flat keys
    // for a currency no table names.
    assert_eq!(ceilings("st", "USD"), (10_000, 80_000));
    assert_eq!(ceilings("st", "JPY"), (500_000, 20_000));
    assert_eq!(ceilings("st", "INR"), (500_000, 9_000_000));
}

#[test]
fn a_currency_that_is_no_iso_code_is_refused_by_name() {
    for bad in ["usd", "US", "DOLLAR"] {
        let text = refused(
            &format!("{SOURCES}[refunds.currency.{bad}]\nmax_refund_minor = 1\n"),
            &[],
        );
        assert!(
            text.contains("refunds.currency") && text.contains("ISO 4217"),
            "{text}"
        );
    }
    let text = refused(
        &format!("{SOURCES}[refunds.source.rzp.currency.inr]\nmax_refund_minor = 1\n"),
        &[],
    );
    assert!(text.contains("refunds.source.rzp.currency"), "{text}");
    let text = refused(
        &format!("{SOURCES}[refunds.currency.USD]\nmax_monthly_minor = 1\n"),
        &[],
    );
    assert!(text.contains("max_monthly_minor"), "{text}");
}

#[test]
fn a_lease_shorter_than_one_send_is_refused_naming_both_values() {
    use crate::config::ENV_RECONCILE_TIMEOUT;
    // The defaults: a 1m lease outlasts three calls of 10s.
    let on = [(ENV_REFUNDS_MODE, "auto")];
    let c = load_env(&on).expect("defaults with refunds on");
    assert_eq!(c.refunds.lease, Duration::from_secs(60));
    assert_eq!(c.reconcile.timeout, Duration::from_secs(10));
    // 3 calls of 2s: 6s; a lease of 3s is refused, one of 7s is not.
    let text = refused(
        "",
        &[
            (ENV_REFUNDS_MODE, "auto"),
            (ENV_REFUNDS_LEASE, "3s"),
            (ENV_RECONCILE_TIMEOUT, "2s"),
        ],
    );
    for words in [
        "refunds.lease (ONCEHOOK_REFUNDS_LEASE)",
        "\"3s\"",
        "reconcile.limits.timeout (ONCEHOOK_RECONCILE_TIMEOUT) = 2s",
        "6s in all",
    ] {
        assert!(text.contains(words), "{words:?} in {text}");
    }
    let text = refused(
        "",
        &[
            (ENV_REFUNDS_MODE, "propose"),
            (ENV_REFUNDS_LEASE, "6s"),
            (ENV_RECONCILE_TIMEOUT, "2s"),
        ],
    );
    assert!(
        text.contains("refunds.lease"),
        "exactly one send is too short: {text}"
    );
    let c = load_env(&[
        (ENV_REFUNDS_MODE, "auto"),
        (ENV_REFUNDS_LEASE, "7s"),
        (ENV_RECONCILE_TIMEOUT, "2s"),
    ])
    .expect("a lease longer than one send");
    assert_eq!(c.refunds.lease, Duration::from_secs(7));
    // Refunds off everywhere: nothing is sent, nothing to check.
    load_env(&[(ENV_REFUNDS_LEASE, "1s"), (ENV_RECONCILE_TIMEOUT, "30s")]).expect("refunds off");
    // A source that refunds is enough.
    let text = refused(
        &format!("{SOURCES}[refunds]\nlease = \"20s\"\n[refunds.source.rzp]\nmode = \"auto\"\n"),
        &[(ENV_RECONCILE_TIMEOUT, "10s")],
    );
    assert!(text.contains("30s in all"), "{text}");
}
