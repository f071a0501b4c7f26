//! The order ledger's state function (docs/ledger.md), as pure code: the
//! facts recorded for one order in, the order's state out. The ledger reads
//! the facts of every order a group touched, calls [`compute`] for each and
//! writes the results in the same transaction that recorded the new facts,
//! so the books depend only on the *set* of facts, never on the order in
//! which events arrived.

use std::collections::BTreeMap;

/// Flags on captured `payments` rows, for operators.
pub const FLAG_NEEDS_REFUND: &str = "needs_refund";
/// A flagged payment (extra or mismatched) whose money went back.
pub const FLAG_REFUNDED: &str = "refunded";
pub const FLAG_AMOUNT_MISMATCH: &str = "amount_mismatch";

pub use oncehook_common::refund::{
    REASON_AMOUNT_MISMATCH, REASON_CANCELLED_ORDER, REASON_DUPLICATE_CAPTURE,
};

/// A capture the books say is owed back, whole: what a refund intent is
/// minted from (docs/refunds.md). A function of the set of facts, like
/// every other part of the state.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RefundDue {
    pub provider: String,
    pub payment_id: String,
    /// The capture's amount.
    pub amount_minor: i64,
    /// The capture's currency (the order's when the capture names none).
    pub currency: String,
    /// One of `oncehook_common::refund::REASONS`.
    pub reason: &'static str,
    /// What the refund facts show returned of this payment so far.
    pub refunded_minor: i64,
}

#[cfg(test)]
impl RefundDue {
    /// What is still owed.
    pub fn outstanding(&self) -> i64 {
        self.amount_minor.saturating_sub(self.refunded_minor).max(0)
    }
}

/// The order's terms: what a capture must match.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Terms {
    pub amount_minor: i64,
    pub currency: String,
    /// The shop cancelled the order: nothing pays it any more.
    pub cancelled: bool,
}

/// A `captured` payment fact.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Capture {
    pub provider: String,
    pub payment_id: String,
    pub amount_minor: Option<i64>,
    pub currency: Option<String>,
}

impl Capture {
    /// `provider:payment_id`, what `orders.paid_by` shows.
    pub fn payer(&self) -> String {
        format!("{}:{}", self.provider, self.payment_id)
    }

    fn matches(&self, terms: &Terms) -> bool {
        self.amount_minor.is_none_or(|a| a == terms.amount_minor)
            && self
                .currency
                .as_deref()
                .is_none_or(|c| c.eq_ignore_ascii_case(&terms.currency))
    }
}

/// A refund fact: one refund, or (`cumulative`) a payment's refunded total.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RefundFact {
    pub provider: String,
    pub payment_id: Option<String>,
    pub amount_minor: i64,
    pub cumulative: bool,
}

/// What the facts say about the order.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct OrderState {
    /// `pending`, `paid`, `partially_refunded`, `refunded` or `cancelled`.
    pub status: &'static str,
    pub refunded_minor: i64,
    /// The primary payment (`provider:payment_id`), if any valid capture exists.
    pub paid_by: Option<String>,
    /// The flag of every captured payment, keyed by `(provider, payment_id)`.
    pub flags: BTreeMap<(String, String), Option<&'static str>>,
    /// Every capture that is not the primary payment, with what it is owed:
    /// [`FLAG_NEEDS_REFUND`] (a payment to return) or
    /// [`FLAG_AMOUNT_MISMATCH`] — whether or not it was refunded since, so
    /// the order events it causes depend only on the set of facts.
    pub owed: BTreeMap<(String, String), &'static str>,
    /// Every owed capture whose amount is known, with what was refunded of
    /// it: the refund intents the order has (settled ones included).
    pub refunds_due: Vec<RefundDue>,
    /// A capture covering the order (its amount, its currency) exists,
    /// cancelled or not: what `order.paid` tells the shop.
    pub covered: bool,
}

impl OrderState {
    /// Whether stock moves and a confirmation is due (monotone in the facts).
    pub fn is_paid(&self) -> bool {
        self.paid_by.is_some()
    }
}

/// Refunded amount per payment: max(largest total, sum of single refunds);
/// refunds that name no payment are summed under `None`.
fn refunded_per_payment(refunds: &[RefundFact]) -> BTreeMap<(String, Option<String>), i64> {
    let mut totals: BTreeMap<(String, Option<String>), (i64, i64)> = BTreeMap::new();
    for r in refunds {
        let entry = totals
            .entry((r.provider.clone(), r.payment_id.clone()))
            .or_default();
        if r.cumulative {
            entry.0 = entry.0.max(r.amount_minor);
        } else {
            entry.1 = entry.1.saturating_add(r.amount_minor);
        }
    }
    totals
        .into_iter()
        .map(|(k, (total, sum))| (k, total.max(sum)))
        .collect()
}

/// The state function of docs/ledger.md.
///
/// A cancelled order has no primary payment: every capture of it is owed
/// back (`needs_refund`, or `refunded` once its refunds cover it), every
/// refund counts, and its status is `cancelled` — whether the cancellation
/// came before or after the payments.
pub fn compute(terms: &Terms, captures: &[Capture], refunds: &[RefundFact]) -> OrderState {
    let primary = captures
        .iter()
        .filter(|c| !terms.cancelled && c.matches(terms))
        .min_by(|a, b| (&a.provider, &a.payment_id).cmp(&(&b.provider, &b.payment_id)));
    let refunded = refunded_per_payment(refunds);
    let refunded_of = |c: &Capture| {
        refunded
            .get(&(c.provider.clone(), Some(c.payment_id.clone())))
            .copied()
            .unwrap_or(0)
    };

    let mut flags = BTreeMap::new();
    let mut owed = BTreeMap::new();
    let mut refunds_due = Vec::new();
    for c in captures {
        let is_primary =
            primary.is_some_and(|p| p.provider == c.provider && p.payment_id == c.payment_id);
        if !is_primary {
            let kind = if c.matches(terms) {
                FLAG_NEEDS_REFUND
            } else {
                FLAG_AMOUNT_MISMATCH
            };
            owed.insert((c.provider.clone(), c.payment_id.clone()), kind);
            refunds_due.extend(refund_due(terms, c, kind, refunded_of(c)));
        }
        let flag = if is_primary {
            None
        } else if c.amount_minor.is_some_and(|a| refunded_of(c) >= a) {
            Some(FLAG_REFUNDED)
        } else if c.matches(terms) {
            Some(FLAG_NEEDS_REFUND)
        } else {
            Some(FLAG_AMOUNT_MISMATCH)
        };
        flags.insert((c.provider.clone(), c.payment_id.clone()), flag);
    }

    // Refunds of extra or mismatched captures do not count for the order.
    let not_for_order = |(provider, payment_id): &(String, Option<String>)| {
        payment_id.as_ref().is_some_and(|p| {
            flags
                .get(&(provider.clone(), p.clone()))
                .is_some_and(Option::is_some)
        })
    };
    let order_refunds = refunded
        .iter()
        .filter(|(k, _)| terms.cancelled || !not_for_order(k))
        .fold(0i64, |sum, (_, v)| sum.saturating_add(*v));

    let status = match primary {
        None if terms.cancelled => "cancelled",
        None => "pending",
        Some(_) if order_refunds >= terms.amount_minor && order_refunds > 0 => "refunded",
        Some(_) if order_refunds > 0 => "partially_refunded",
        Some(_) => "paid",
    };
    OrderState {
        status,
        refunded_minor: order_refunds,
        paid_by: primary.map(Capture::payer),
        flags,
        owed,
        refunds_due,
        covered: captures.iter().any(|c| c.matches(terms)),
    }
}

/// The refund owed for a capture that is not the order's payment, when its
/// amount is known (a capture without one waits for a person).
fn refund_due(terms: &Terms, c: &Capture, kind: &str, refunded: i64) -> Option<RefundDue> {
    let reason = if kind == FLAG_AMOUNT_MISMATCH {
        REASON_AMOUNT_MISMATCH
    } else if terms.cancelled {
        REASON_CANCELLED_ORDER
    } else {
        REASON_DUPLICATE_CAPTURE
    };
    Some(RefundDue {
        provider: c.provider.clone(),
        payment_id: c.payment_id.clone(),
        amount_minor: c.amount_minor?,
        currency: c
            .currency
            .clone()
            .unwrap_or_else(|| terms.currency.clone())
            .to_ascii_uppercase(),
        reason,
        refunded_minor: refunded,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn terms() -> Terms {
        Terms {
            amount_minor: 500,
            currency: "INR".into(),
            cancelled: false,
        }
    }

    fn cap(p: &str, amount: i64) -> Capture {
        Capture {
            provider: "razorpay".into(),
            payment_id: p.into(),
            amount_minor: Some(amount),
            currency: Some("INR".into()),
        }
    }

    fn refund(p: Option<&str>, amount: i64, cumulative: bool) -> RefundFact {
        RefundFact {
            provider: "razorpay".into(),
            payment_id: p.map(str::to_owned),
            amount_minor: amount,
            cumulative,
        }
    }

    fn flag(s: &OrderState, p: &str) -> Option<&'static str> {
        s.flags
            .get(&("razorpay".to_owned(), p.to_owned()))
            .copied()
            .flatten()
    }

    #[test]
    fn no_facts_is_pending() {
        let s = compute(&terms(), &[], &[]);
        assert_eq!(
            (s.status, s.refunded_minor, s.paid_by),
            ("pending", 0, None)
        );
    }

    #[test]
    fn a_refund_before_its_capture_is_not_forgotten() {
        let refunds = [refund(Some("pay_1"), 500, false)];
        let before = compute(&terms(), &[], &refunds);
        assert_eq!((before.status, before.refunded_minor), ("pending", 500));
        let after = compute(&terms(), &[cap("pay_1", 500)], &refunds);
        assert_eq!((after.status, after.refunded_minor), ("refunded", 500));
        assert!(after.is_paid());
    }

    #[test]
    fn cumulative_totals_take_the_largest_not_the_sum() {
        let refunds = [
            refund(Some("pay_1"), 100, true),
            refund(Some("pay_1"), 250, true),
        ];
        let s = compute(&terms(), &[cap("pay_1", 500)], &refunds);
        assert_eq!((s.status, s.refunded_minor), ("partially_refunded", 250));
        // Single refunds and totals of one payment: the larger view wins.
        let mixed = [
            refund(Some("pay_1"), 100, false),
            refund(Some("pay_1"), 150, false),
            refund(Some("pay_1"), 100, true),
        ];
        assert_eq!(
            compute(&terms(), &[cap("pay_1", 500)], &mixed).refunded_minor,
            250
        );
    }

    #[test]
    fn the_primary_payment_does_not_depend_on_arrival() {
        let a = compute(&terms(), &[cap("pay_b", 500), cap("pay_a", 500)], &[]);
        let b = compute(&terms(), &[cap("pay_a", 500), cap("pay_b", 500)], &[]);
        assert_eq!(a, b);
        assert_eq!(a.paid_by.as_deref(), Some("razorpay:pay_a"));
        assert_eq!(flag(&a, "pay_b"), Some(FLAG_NEEDS_REFUND));
        assert_eq!(flag(&a, "pay_a"), None);
    }

    #[test]
    fn refunding_the_extra_payment_settles_its_flag_and_leaves_the_order() {
        let s = compute(
            &terms(),
            &[cap("pay_a", 500), cap("pay_b", 500)],
            &[refund(Some("pay_b"), 500, false)],
        );
        assert_eq!(flag(&s, "pay_b"), Some(FLAG_REFUNDED));
        assert_eq!((s.status, s.refunded_minor), ("paid", 0));
    }

    #[test]
    fn a_mismatched_capture_leaves_the_order_pending() {
        let s = compute(&terms(), &[cap("pay_1", 400)], &[]);
        assert_eq!(s.status, "pending");
        assert_eq!(flag(&s, "pay_1"), Some(FLAG_AMOUNT_MISMATCH));
        let mut wrong_currency = cap("pay_2", 500);
        wrong_currency.currency = Some("USD".into());
        let s = compute(&terms(), &[wrong_currency], &[]);
        assert_eq!(s.status, "pending");
    }

    #[test]
    fn refunds_without_a_payment_count_for_the_order() {
        let s = compute(
            &terms(),
            &[cap("pay_1", 500)],
            &[refund(None, 200, false), refund(None, 300, false)],
        );
        assert_eq!((s.status, s.refunded_minor), ("refunded", 500));
    }

    #[test]
    fn a_zero_amount_order_is_paid_not_refunded() {
        let t = Terms {
            amount_minor: 0,
            currency: "INR".into(),
            cancelled: false,
        };
        assert_eq!(compute(&t, &[cap("pay_1", 0)], &[]).status, "paid");
    }

    #[test]
    fn a_cancelled_order_owes_back_every_capture_whenever_it_came() {
        let cancelled = Terms {
            cancelled: true,
            ..terms()
        };
        let s = compute(&cancelled, &[cap("pay_1", 500)], &[]);
        assert_eq!((s.status, s.paid_by.as_deref()), ("cancelled", None));
        assert_eq!(flag(&s, "pay_1"), Some(FLAG_NEEDS_REFUND));
        assert!(!s.is_paid(), "no stock is taken for a cancelled order");
        // Refunded back: squared, and every refund counts.
        let s = compute(
            &cancelled,
            &[cap("pay_1", 500)],
            &[refund(Some("pay_1"), 500, false)],
        );
        assert_eq!(flag(&s, "pay_1"), Some(FLAG_REFUNDED));
        assert_eq!((s.status, s.refunded_minor), ("cancelled", 500));
        // A mismatched capture stays a mismatch.
        let s = compute(&cancelled, &[cap("pay_2", 400)], &[]);
        assert_eq!(flag(&s, "pay_2"), Some(FLAG_AMOUNT_MISMATCH));
        assert_eq!(compute(&cancelled, &[], &[]).status, "cancelled");
    }

    fn due(s: &OrderState) -> Vec<(&str, &str, i64, i64)> {
        s.refunds_due
            .iter()
            .map(|d| {
                (
                    d.payment_id.as_str(),
                    d.reason,
                    d.amount_minor,
                    d.refunded_minor,
                )
            })
            .collect()
    }

    #[test]
    fn a_second_capture_is_owed_back_whole_whatever_came_first() {
        let a = compute(&terms(), &[cap("pay_b", 500), cap("pay_a", 500)], &[]);
        let b = compute(&terms(), &[cap("pay_a", 500), cap("pay_b", 500)], &[]);
        assert_eq!(due(&a), vec![("pay_b", REASON_DUPLICATE_CAPTURE, 500, 0)]);
        assert_eq!(a.refunds_due, b.refunds_due);
        assert_eq!(a.refunds_due[0].outstanding(), 500);
        // Refunded from elsewhere (or by the refunder): still the same
        // intent, nothing outstanding.
        let s = compute(
            &terms(),
            &[cap("pay_a", 500), cap("pay_b", 500)],
            &[refund(Some("pay_b"), 500, false)],
        );
        assert_eq!(due(&s), vec![("pay_b", REASON_DUPLICATE_CAPTURE, 500, 500)]);
        assert_eq!(s.refunds_due[0].outstanding(), 0);
        // The order's own payment is never owed back.
        assert!(
            compute(&terms(), &[cap("pay_a", 500)], &[])
                .refunds_due
                .is_empty()
        );
    }

    #[test]
    fn cancelled_and_mismatched_captures_name_their_reason() {
        let cancelled = Terms {
            cancelled: true,
            ..terms()
        };
        let s = compute(&cancelled, &[cap("pay_a", 500), cap("pay_b", 400)], &[]);
        assert_eq!(
            due(&s),
            vec![
                ("pay_a", REASON_CANCELLED_ORDER, 500, 0),
                ("pay_b", REASON_AMOUNT_MISMATCH, 400, 0)
            ]
        );
        let mut no_amount = cap("pay_c", 0);
        no_amount.amount_minor = None;
        let s = compute(&terms(), &[cap("pay_a", 500), no_amount], &[]);
        assert!(
            s.refunds_due.is_empty(),
            "an unknown amount waits for a person"
        );
    }
}
