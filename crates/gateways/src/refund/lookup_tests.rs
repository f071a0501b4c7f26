use super::*;
use crate::{EventKind, Gateway, NormalizedEvent};

fn fact(refund_id: &str) -> NormalizedEvent {
    NormalizedEvent {
        provider: Gateway::Razorpay,
        event_id: format!("reconciliation:{refund_id}:processed"),
        event_type: "refund.processed".into(),
        kind: EventKind::Refunded,
        payment_id: Some("pay_1".into()),
        order_ref: None,
        amount_minor: Some(100),
        currency: Some("INR".into()),
        email: None,
        refund_id: Some(refund_id.into()),
        cumulative_refund: false,
    }
}

fn accepted(refund_id: &str, facts: Vec<NormalizedEvent>) -> RefundOutcome {
    RefundOutcome::Accepted {
        refund_id: refund_id.into(),
        facts,
    }
}

fn failed(refund_id: &str) -> RefundOutcome {
    RefundOutcome::Failed {
        refund_id: refund_id.into(),
        code: "refund_failed".into(),
        message: format!("{refund_id} failed"),
    }
}

fn read(outcomes: Vec<RefundOutcome>, absent: RefundOutcome) -> RefundOutcome {
    attempts_refund(outcomes, absent, |o| o)
}

#[test]
fn none_of_the_attempts_is_what_the_page_says_without_it() {
    assert_eq!(
        read(vec![], RefundOutcome::NotFound),
        RefundOutcome::NotFound
    );
    let full = RefundOutcome::FullPage {
        listed: 100,
        last: Some("rfnd_last".into()),
    };
    assert_eq!(read(vec![], full.clone()), full);
}

#[test]
fn the_first_accepted_is_the_attempts_refund_with_every_accepted_ones_facts() {
    let outcomes = vec![
        failed("rfnd_0"),
        accepted("rfnd_a", vec![fact("rfnd_a")]),
        accepted("rfnd_p", vec![]),
        accepted("rfnd_b", vec![fact("rfnd_b")]),
    ];
    assert_eq!(
        read(outcomes, RefundOutcome::NotFound),
        accepted("rfnd_a", vec![fact("rfnd_a"), fact("rfnd_b")])
    );
}

#[test]
fn without_an_accepted_one_the_first_outcome_is_the_answer() {
    let refused = RefundOutcome::Refused {
        code: "payment_mismatch".into(),
        message: "of another payment".into(),
    };
    assert_eq!(
        read(
            vec![failed("rfnd_0"), refused.clone()],
            RefundOutcome::NotFound
        ),
        failed("rfnd_0")
    );
    assert_eq!(
        read(
            vec![refused.clone(), failed("rfnd_0")],
            RefundOutcome::NotFound
        ),
        refused
    );
}
