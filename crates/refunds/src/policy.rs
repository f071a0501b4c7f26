//! The policy: whether an intent the ledger minted may be sent without a
//! person (docs/refunds.md). Pure: the intent, its source's policy, what
//! the policy already let go for that source today in the intent's
//! currency, and whether oncehook
//! can refund through that source at all, in; approve or hold (with the
//! reason an operator reads), out.

#[cfg(test)]
use oncehook_common::config::Ceilings;
use oncehook_common::config::{RefundMode, RefundPolicy};
use oncehook_ledger::store::refund_intents::Intent;

/// What the policy does with an `owed` intent.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Decision {
    /// Approve it: the refunder sends it.
    Approve,
    /// It waits for an operator, for this reason.
    Hold(String),
}

/// Why a source cannot refund an intent, if it cannot.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Reach {
    /// The source is configured with an API oncehook can refund through.
    Refundable,
    /// No delivery recorded which source took the payment.
    UnknownSource,
    /// The source has no `[source.api]`.
    NoApi,
    /// The gateway has no refund API oncehook speaks.
    NoRefundApi,
}

/// The policy's decision on `intent`.
pub fn decide(intent: &Intent, policy: &RefundPolicy, reach: Reach, today_minor: i64) -> Decision {
    let source = intent.source.as_deref().unwrap_or("?");
    let hold = |why: String| Decision::Hold(why);
    match reach {
        Reach::Refundable => {}
        Reach::UnknownSource => {
            return hold(
                "no delivery says which source took the payment: refund it at the gateway by hand"
                    .into(),
            );
        }
        Reach::NoApi => {
            return hold(format!(
                "source {source} has no [source.api]: oncehook cannot refund through it"
            ));
        }
        Reach::NoRefundApi => {
            return hold(format!(
                "{}'s refund API is not one oncehook speaks: refund it at the gateway by hand",
                intent.provider
            ));
        }
    }
    let amount = intent.sent_minor.unwrap_or_else(|| intent.outstanding());
    let currency = &intent.currency;
    let ceilings = policy.ceilings(currency);
    match policy.mode {
        RefundMode::Off => hold(format!("refunds are off for source {source}")),
        RefundMode::Propose => hold(format!(
            "source {source} proposes: waits for an operator's approval"
        )),
        RefundMode::Auto if !policy.auto_reasons.contains(&intent.reason) => hold(format!(
            "{} is not among the reasons refunded automatically",
            intent.reason
        )),
        RefundMode::Auto if amount > ceilings.max_refund_minor => hold(format!(
            "{amount} {currency} is over the per-refund ceiling of {} {currency} (max_refund_minor)",
            ceilings.max_refund_minor
        )),
        RefundMode::Auto if today_minor.saturating_add(amount) > ceilings.max_daily_minor => {
            hold(format!(
                "{amount} {currency} more would pass source {source}'s daily ceiling of {} {currency} ({today_minor} {currency} refunded automatically today)",
                ceilings.max_daily_minor
            ))
        }
        RefundMode::Auto => Decision::Approve,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn intent(amount: i64, reason: &str) -> Intent {
        crate::sample_intent(amount, reason)
    }

    fn auto() -> RefundPolicy {
        RefundPolicy {
            mode: RefundMode::Auto,
            ceilings: Ceilings {
                max_refund_minor: 1_000,
                max_daily_minor: 1_500,
            },
            currencies: [(
                "JPY".to_owned(),
                Ceilings {
                    max_refund_minor: 10,
                    max_daily_minor: 15,
                },
            )]
            .into(),
            auto_reasons: vec!["duplicate_capture".into()],
        }
    }

    fn held(d: Decision) -> String {
        match d {
            Decision::Hold(why) => why,
            Decision::Approve => panic!("approved"),
        }
    }

    #[test]
    fn auto_approves_within_the_ceilings_and_reasons_only() {
        let p = auto();
        assert_eq!(
            decide(
                &intent(1_000, "duplicate_capture"),
                &p,
                Reach::Refundable,
                500
            ),
            Decision::Approve
        );
        assert!(
            held(decide(
                &intent(1_001, "duplicate_capture"),
                &p,
                Reach::Refundable,
                0
            ))
            .contains("per-refund ceiling")
        );
        assert!(
            held(decide(
                &intent(1_000, "duplicate_capture"),
                &p,
                Reach::Refundable,
                501
            ))
            .contains("daily ceiling")
        );
        assert!(
            held(decide(
                &intent(10, "amount_mismatch"),
                &p,
                Reach::Refundable,
                0
            ))
            .contains("amount_mismatch")
        );
    }

    #[test]
    fn the_ceilings_are_the_intents_currencys() {
        let p = auto();
        let yen = |amount| Intent {
            currency: "JPY".into(),
            ..intent(amount, "duplicate_capture")
        };
        assert_eq!(
            decide(&yen(10), &p, Reach::Refundable, 5),
            Decision::Approve
        );
        let over = held(decide(&yen(11), &p, Reach::Refundable, 0));
        assert!(
            over.contains("per-refund ceiling of 10 JPY"),
            "JPY's own ceiling, not every currency's: {over}"
        );
        let daily = held(decide(&yen(10), &p, Reach::Refundable, 6));
        assert!(daily.contains("daily ceiling of 15 JPY"), "{daily}");
        // A currency without ceilings of its own has every currency's.
        let euros = Intent {
            currency: "EUR".into(),
            ..intent(1_000, "duplicate_capture")
        };
        assert_eq!(
            decide(&euros, &p, Reach::Refundable, 500),
            Decision::Approve
        );
    }

    #[test]
    fn propose_and_off_always_wait_and_an_unreachable_source_says_why() {
        let mut p = auto();
        p.mode = RefundMode::Propose;
        assert!(
            held(decide(
                &intent(1, "duplicate_capture"),
                &p,
                Reach::Refundable,
                0
            ))
            .contains("approval")
        );
        p.mode = RefundMode::Off;
        assert!(
            held(decide(
                &intent(1, "duplicate_capture"),
                &p,
                Reach::Refundable,
                0
            ))
            .contains("off")
        );
        let p = auto();
        for (reach, words) in [
            (Reach::UnknownSource, "which source"),
            (Reach::NoApi, "[source.api]"),
            (Reach::NoRefundApi, "refund API"),
        ] {
            assert!(held(decide(&intent(1, "duplicate_capture"), &p, reach, 0)).contains(words));
        }
    }
}
