use super::*;
use crate::config::testing::{load, load_env, refused, refused_env};
use crate::rate::Limit;

fn tenant(id: &str) -> TenantId {
    TenantId::parse(id).expect("tenant")
}

#[test]
fn every_source_has_the_default_rate_and_a_share_of_the_main_lane() {
    let c = load_env(&[]).expect("defaults").ingest;
    let rate = c
        .rate_limits
        .for_source("shop", &TenantId::default_tenant(), None);
    assert_eq!(rate, Some(Rate::new(1000, 2000)));
    assert_eq!(c.fairness.share, Rate::new(20, 100));
}

#[test]
fn a_sources_own_rate_wins_over_its_tenants_which_wins_over_the_default() {
    let text = r#"
[ingest.rate_limit]
per_second = 50
[[ingest.rate_limit.tenant]]
tenant = "acme"
per_second = 10
burst = 15
[[ingest.rate_limit.tenant]]
tenant = "globex"
per_second = 0
[[ingest.rate_limit.source]]
source = "acme-stripe"
per_second = 5
"#;
    let limits = load(text, &[]).expect("limits").ingest.rate_limits;
    assert_eq!(
        limits.for_source("other", &tenant("default"), None),
        Some(Rate::new(50, 100)),
        "burst 0 is twice the rate"
    );
    assert_eq!(
        limits.for_source("acme-razorpay", &tenant("acme"), None),
        Some(Rate::new(10, 15))
    );
    assert_eq!(
        limits.for_source("acme-stripe", &tenant("acme"), None),
        Some(Rate::new(5, 10))
    );
    assert_eq!(
        limits.for_source("globex-payu", &tenant("globex"), None),
        None,
        "0: no limit"
    );
    // A tenant's rate set at runtime wins over the file's for the tenant,
    // not over a source's own.
    let runtime = Some(Limit::At(Rate::new(3, 3)));
    assert_eq!(
        limits.for_source("acme-razorpay", &tenant("acme"), runtime),
        Some(Rate::new(3, 3))
    );
    assert_eq!(
        limits.for_source("acme-stripe", &tenant("acme"), runtime),
        Some(Rate::new(5, 10))
    );
    assert_eq!(
        limits.for_source("other", &tenant("default"), Some(Limit::Off)),
        None
    );
}

#[test]
fn the_rates_come_from_the_environment_too() {
    let c = load_env(&[
        (ENV_RATE_PER_SECOND, "0"),
        (ENV_SHARE_PER_SECOND, "7"),
        (ENV_SHARE_BURST, "9"),
    ])
    .expect("env");
    assert_eq!(c.ingest.rate_limits.default, None);
    assert_eq!(c.ingest.fairness.share, Rate::new(7, 9));
    let text = refused_env(&[(ENV_RATE_BURST, "many")]);
    assert!(
        text.contains(ENV_RATE_BURST) && text.contains("ingest.rate_limit.burst"),
        "{text}"
    );
}

#[test]
fn a_bad_tenant_a_name_given_twice_or_no_share_is_refused_by_key() {
    let text = refused(
        "[[ingest.rate_limit.tenant]]\ntenant = \"Acme Shop\"\nper_second = 1\n",
        &[],
    );
    assert!(
        text.contains("ingest.rate_limit.tenant.tenant") && text.contains("Acme Shop"),
        "{text}"
    );
    let twice = "[[ingest.rate_limit.source]]\nsource = \"a\"\nper_second = 1\n\
                 [[ingest.rate_limit.source]]\nsource = \"a\"\nper_second = 2\n";
    assert!(refused(twice, &[]).contains("named twice"));
    let text = refused_env(&[(ENV_SHARE_PER_SECOND, "0")]);
    assert!(text.contains("ingest.fairness.share_per_second"), "{text}");
}
