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
        (rzp.mode, rzp.max_refund_minor, rzp.max_daily_minor),
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
