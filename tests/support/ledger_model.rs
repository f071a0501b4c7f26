//! A pure reference model of `docs/ledger.md`: the expected books of one
//! order as a function of the *set* of facts recorded for it.
//!
//! No I/O, no clock, no randomness: the confluence test
//! (`tests/tests/confluence.rs`) feeds it the abstract facts of a generated
//! event set and compares its answer with what the real ingest and workers
//! wrote to Postgres. Facts are identified exactly as the ledger identifies
//! them (see [`Fact::identity`]); two facts with one identity are one fact.
//!
//! Readings of the spec the model commits to (each the order-independent one):
//! - `refunded(p)` is keyed by `(provider, payment_id)`; refunds without a
//!   payment id form one group of their own per provider.
//! - a mismatched capture whose amount is unknown (currency mismatch only)
//!   never becomes `refunded`: "refunded(p) ≥ its amount" cannot be decided.
//! - stock is decremented by the order's quantity once there is a valid
//!   capture; `oversold` is "the stock after that decrement is below zero".
//! - the order events `order.paid` and `order.oversold` ([`told`]) are
//!   functions of the facts for every order, cancelled ones too: paid iff a
//!   capture covering the order exists; oversold iff, besides, taking the
//!   order's items from the stock before it takes a product below zero.

use std::collections::{BTreeMap, BTreeSet};

/// What the model needs to know about an order (one product line).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ModelOrder {
    pub amount_minor: i64,
    /// ISO 4217, upper case.
    pub currency: String,
    /// The product's stock before any event.
    pub stock: i32,
    /// Units of the product the order holds.
    pub qty: i32,
}

/// A payment attempt's status as the ledger records it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum AttemptStatus {
    Authorized,
    Captured,
    Failed,
}

impl AttemptStatus {
    pub fn as_str(self) -> &'static str {
        match self {
            AttemptStatus::Authorized => "authorized",
            AttemptStatus::Captured => "captured",
            AttemptStatus::Failed => "failed",
        }
    }
}

/// One abstract fact about an order.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Fact {
    /// A payment attempt (`payments`), identity `(provider, payment_id, status)`.
    Attempt {
        provider: String,
        payment_id: String,
        status: AttemptStatus,
        amount_minor: Option<i64>,
        currency: Option<String>,
    },
    /// A refund naming one refund (`refunds`, `cumulative = false`),
    /// identity `(provider, refund_id)`.
    Refund {
        provider: String,
        refund_id: String,
        payment_id: Option<String>,
        amount_minor: i64,
    },
    /// A Stripe-style cumulative refund total of a charge (`cumulative =
    /// true`), identity `(provider, "{charge}:refunded:{total}")`.
    RefundTotal {
        provider: String,
        payment_id: String,
        charge: String,
        total_minor: i64,
    },
    /// A payment linked to the order (`payment_links`). Links do not change
    /// the books; they are part of the set so that the model's input is the
    /// ledger's.
    Link {
        provider: String,
        payment_id: String,
    },
    /// The shop cancelled the order (`order_cancellations`, one per order).
    Cancel,
}

/// The identity under which the ledger stores a fact.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum FactId {
    Attempt(String, String, AttemptStatus),
    Refund(String, String),
    Link(String, String),
    Cancel,
}

impl Fact {
    pub fn identity(&self) -> FactId {
        match self {
            Fact::Attempt {
                provider,
                payment_id,
                status,
                ..
            } => FactId::Attempt(provider.clone(), payment_id.clone(), *status),
            Fact::Refund {
                provider,
                refund_id,
                ..
            } => FactId::Refund(provider.clone(), refund_id.clone()),
            Fact::RefundTotal { provider, .. } => {
                FactId::Refund(provider.clone(), self.refund_id().unwrap_or_default())
            }
            Fact::Link {
                provider,
                payment_id,
            } => FactId::Link(provider.clone(), payment_id.clone()),
            Fact::Cancel => FactId::Cancel,
        }
    }

    /// The refund id a refund fact is stored under (and its email keyed by).
    pub fn refund_id(&self) -> Option<String> {
        match self {
            Fact::Refund { refund_id, .. } => Some(refund_id.clone()),
            Fact::RefundTotal {
                charge,
                total_minor,
                ..
            } => Some(format!("{charge}:refunded:{total_minor}")),
            _ => None,
        }
    }
}

/// The flag of a captured payment row.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Flag {
    NeedsRefund,
    AmountMismatch,
    Refunded,
}

impl Flag {
    pub fn as_str(self) -> &'static str {
        match self {
            Flag::NeedsRefund => "needs_refund",
            Flag::AmountMismatch => "amount_mismatch",
            Flag::Refunded => "refunded",
        }
    }

    pub fn parse(s: &str) -> Option<Flag> {
        match s {
            "needs_refund" => Some(Flag::NeedsRefund),
            "amount_mismatch" => Some(Flag::AmountMismatch),
            "refunded" => Some(Flag::Refunded),
            _ => None,
        }
    }
}

/// The books of one order: what the model expects and what the test reads
/// back from the database, in one comparable shape.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LedgerState {
    pub status: String,
    pub refunded_minor: i64,
    /// `provider:payment_id` of the primary payment.
    pub paid_by: Option<String>,
    pub stock: i32,
    pub oversold: bool,
    /// Every `payments` row: (provider, payment_id, status) → flag (captured
    /// rows only carry flags; other rows map to `None`).
    pub payments: BTreeMap<(String, String, String), Option<Flag>>,
    /// Confirmation emails written for the order (0 or 1). For a cancelled
    /// order it depends on whether a capture came before the cancellation
    /// (emails cannot be unsent): the model says 0, and the comparison
    /// takes the actual count as it is, if it is 0 or 1.
    pub confirmations: usize,
    /// `dedup_key`s of the order's refund emails.
    pub refund_emails: BTreeSet<String>,
    /// The refund intents (docs/refunds.md), by owed payment
    /// `(provider, payment_id)`: with no refunder running, each one the
    /// ledger mints is `owed`, or `cancelled` once refunds cover it.
    pub refund_intents: BTreeMap<(String, String), Intent>,
}

/// A refund intent as the books show it (no refunder running).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Intent {
    pub id: String,
    pub reason: String,
    pub amount_minor: i64,
    pub refunded_minor: i64,
    pub state: String,
}

/// Why a fact set is not a valid model input.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Inconsistent(pub String);

/// Collapses facts with one identity; two facts with one identity but
/// different contents are an input error (the ledger's `ON CONFLICT DO
/// NOTHING` would then keep whichever came first: not confluent by design,
/// so a generator must never produce them).
pub fn dedup(facts: &[Fact]) -> Result<Vec<Fact>, Inconsistent> {
    let mut seen: BTreeMap<FactId, &Fact> = BTreeMap::new();
    for f in facts {
        match seen.get(&f.identity()) {
            Some(prev) if *prev != f => {
                return Err(Inconsistent(format!(
                    "two different facts with identity {:?}: {prev:?} and {f:?}",
                    f.identity()
                )));
            }
            Some(_) => {}
            None => {
                seen.insert(f.identity(), f);
            }
        }
    }
    Ok(seen.into_values().cloned().collect())
}

/// The payment a refund fact is for: `(provider, Some(payment_id))`, or
/// `(provider, None)` for refunds that name no payment.
type PaymentKey = (String, Option<String>);

/// The expected books of `order` after `facts` (a set; duplicates allowed).
pub fn expected(order: &ModelOrder, facts: &[Fact]) -> Result<LedgerState, Inconsistent> {
    let facts = dedup(facts)?;
    // A cancelled order has no primary payment: every capture is owed back
    // and every refund counts (docs/ledger.md, Cancellation).
    let cancelled = facts.contains(&Fact::Cancel);
    let a = order.amount_minor;
    let c = order.currency.to_ascii_uppercase();

    // refunded(p) = max(largest total, sum of singles).
    let mut singles: BTreeMap<PaymentKey, i64> = BTreeMap::new();
    let mut totals: BTreeMap<PaymentKey, i64> = BTreeMap::new();
    let mut refund_emails = BTreeSet::new();
    for f in &facts {
        match f {
            Fact::Refund {
                provider,
                payment_id,
                amount_minor,
                ..
            } => {
                *singles
                    .entry((provider.clone(), payment_id.clone()))
                    .or_default() += amount_minor;
            }
            Fact::RefundTotal {
                provider,
                payment_id,
                total_minor,
                ..
            } => {
                let t = totals
                    .entry((provider.clone(), Some(payment_id.clone())))
                    .or_default();
                *t = (*t).max(*total_minor);
            }
            _ => continue,
        }
        let provider = match f {
            Fact::Refund { provider, .. } | Fact::RefundTotal { provider, .. } => provider,
            _ => unreachable!(),
        };
        refund_emails.insert(format!(
            "refund:{provider}:{}",
            f.refund_id().unwrap_or_default()
        ));
    }
    let mut refunded: BTreeMap<PaymentKey, i64> = BTreeMap::new();
    for (k, v) in singles.iter().chain(totals.iter()) {
        let r = refunded.entry(k.clone()).or_default();
        *r = (*r).max(*v);
    }
    let refunded_of = |provider: &str, payment_id: &str| {
        refunded
            .get(&(provider.to_owned(), Some(payment_id.to_owned())))
            .copied()
            .unwrap_or(0)
    };

    // Captures: valid or mismatched; the primary is the smallest valid key.
    struct Capture {
        provider: String,
        payment_id: String,
        amount: Option<i64>,
        valid: bool,
    }
    let captures: Vec<Capture> = facts
        .iter()
        .filter_map(|f| match f {
            Fact::Attempt {
                provider,
                payment_id,
                status: AttemptStatus::Captured,
                amount_minor,
                currency,
            } => {
                let amount_ok = amount_minor.is_none_or(|x| x == a);
                let currency_ok = currency
                    .as_deref()
                    .is_none_or(|x| x.eq_ignore_ascii_case(&c));
                Some(Capture {
                    provider: provider.clone(),
                    payment_id: payment_id.clone(),
                    amount: *amount_minor,
                    valid: amount_ok && currency_ok,
                })
            }
            _ => None,
        })
        .collect();
    let primary: Option<String> = captures
        .iter()
        .filter(|c| c.valid && !cancelled)
        .map(|c| format!("{}:{}", c.provider, c.payment_id))
        .min();
    let excluded: BTreeSet<PaymentKey> = captures
        .iter()
        .filter(|c| primary.as_deref() != Some(&format!("{}:{}", c.provider, c.payment_id)))
        .map(|c| (c.provider.clone(), Some(c.payment_id.clone())))
        .collect();
    let order_refunds: i64 = refunded
        .iter()
        .filter(|(k, _)| cancelled || !excluded.contains(*k))
        .map(|(_, v)| *v)
        .sum();

    let refund_intents = captures
        .iter()
        .filter(|c| primary.as_deref() != Some(&format!("{}:{}", c.provider, c.payment_id)))
        .filter_map(|c| {
            let amount_minor = c.amount?;
            let refunded_minor = refunded_of(&c.provider, &c.payment_id);
            let reason = if !c.valid {
                "amount_mismatch"
            } else if cancelled {
                "cancelled_order"
            } else {
                "duplicate_capture"
            };
            let state = if refunded_minor >= amount_minor {
                "cancelled"
            } else {
                "owed"
            };
            let intent = Intent {
                id: oncehook_ledger::intent_id(&c.provider, &c.payment_id),
                reason: reason.to_owned(),
                amount_minor,
                refunded_minor,
                state: state.to_owned(),
            };
            Some(((c.provider.clone(), c.payment_id.clone()), intent))
        })
        .collect();

    let mut payments = BTreeMap::new();
    for f in &facts {
        if let Fact::Attempt {
            provider,
            payment_id,
            status,
            ..
        } = f
        {
            payments.insert(
                (
                    provider.clone(),
                    payment_id.clone(),
                    status.as_str().to_owned(),
                ),
                None,
            );
        }
    }
    for cap in &captures {
        let key = format!("{}:{}", cap.provider, cap.payment_id);
        let settled = cap
            .amount
            .is_some_and(|amt| refunded_of(&cap.provider, &cap.payment_id) >= amt);
        let flag = if primary.as_deref() == Some(key.as_str()) {
            None
        } else if settled {
            Some(Flag::Refunded)
        } else if cap.valid {
            Some(Flag::NeedsRefund)
        } else {
            Some(Flag::AmountMismatch)
        };
        payments.insert(
            (
                cap.provider.clone(),
                cap.payment_id.clone(),
                "captured".into(),
            ),
            flag,
        );
    }

    let paid = primary.is_some();
    let status = if cancelled {
        "cancelled"
    } else if !paid {
        "pending"
    } else if order_refunds == 0 {
        "paid"
    } else if order_refunds < a {
        "partially_refunded"
    } else {
        "refunded"
    };
    let stock = if paid {
        order.stock - order.qty
    } else {
        order.stock
    };
    Ok(LedgerState {
        status: status.to_owned(),
        refunded_minor: order_refunds,
        paid_by: primary,
        stock,
        oversold: paid && stock < 0,
        payments,
        confirmations: usize::from(paid),
        refund_emails,
        refund_intents,
    })
}

/// The order events whose presence is not one per fact (docs/ledger.md,
/// Order events): what the shop is told about the order as a whole.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Told {
    /// `order.paid`: a capture covering the order (its amount, its
    /// currency) exists, whether the shop cancelled the order or not.
    pub paid: bool,
    /// `order.oversold`: the order is covered and its items, taken from the
    /// stock they had, take a product below zero (for a cancelled order,
    /// whether or not the cancellation came first and the items stayed).
    pub oversold: bool,
}

/// What `order.paid` and `order.oversold` say of `order` after `facts`.
pub fn told(order: &ModelOrder, facts: &[Fact]) -> Told {
    let covered = facts.iter().any(|f| match f {
        Fact::Attempt {
            status: AttemptStatus::Captured,
            amount_minor,
            currency,
            ..
        } => {
            amount_minor.is_none_or(|x| x == order.amount_minor)
                && currency
                    .as_deref()
                    .is_none_or(|x| x.eq_ignore_ascii_case(&order.currency))
        }
        _ => false,
    });
    Told {
        paid: covered,
        oversold: covered && order.stock - order.qty < 0,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn order() -> ModelOrder {
        ModelOrder {
            amount_minor: 50_000,
            currency: "INR".into(),
            stock: 10,
            qty: 2,
        }
    }

    fn cap(provider: &str, p: &str, amount: i64) -> Fact {
        Fact::Attempt {
            provider: provider.into(),
            payment_id: p.into(),
            status: AttemptStatus::Captured,
            amount_minor: Some(amount),
            currency: Some("INR".into()),
        }
    }

    fn attempt(p: &str, status: AttemptStatus) -> Fact {
        Fact::Attempt {
            provider: "razorpay".into(),
            payment_id: p.into(),
            status,
            amount_minor: Some(50_000),
            currency: Some("INR".into()),
        }
    }

    fn refund(id: &str, p: Option<&str>, amount: i64) -> Fact {
        Fact::Refund {
            provider: "razorpay".into(),
            refund_id: id.into(),
            payment_id: p.map(Into::into),
            amount_minor: amount,
        }
    }

    fn total(p: &str, t: i64) -> Fact {
        Fact::RefundTotal {
            provider: "stripe".into(),
            payment_id: p.into(),
            charge: format!("ch_{}", p.trim_start_matches("pi_")),
            total_minor: t,
        }
    }

    fn flag_of(s: &LedgerState, provider: &str, p: &str) -> Option<Flag> {
        s.payments[&(provider.to_owned(), p.to_owned(), "captured".to_owned())]
    }

    #[test]
    fn a_cancelled_order_owes_back_its_captures_takes_no_stock_and_counts_every_refund() {
        let facts = [
            cap("razorpay", "pay_1", 50_000),
            Fact::Cancel,
            refund("rfnd_1", Some("pay_1"), 20_000),
        ];
        let s = expected(&order(), &facts).expect("valid");
        assert_eq!((s.status.as_str(), s.refunded_minor), ("cancelled", 20_000));
        assert_eq!(s.paid_by, None);
        assert_eq!((s.stock, s.oversold, s.confirmations), (10, false, 0));
        assert_eq!(flag_of(&s, "razorpay", "pay_1"), Some(Flag::NeedsRefund));
        let refunded = [
            facts[0].clone(),
            Fact::Cancel,
            refund("rfnd_2", Some("pay_1"), 50_000),
        ];
        let s = expected(&order(), &refunded).expect("valid");
        assert_eq!(flag_of(&s, "razorpay", "pay_1"), Some(Flag::Refunded));
        assert_eq!(
            expected(&order(), &[Fact::Cancel]).expect("valid").status,
            "cancelled"
        );
    }

    #[test]
    fn no_facts_is_pending_and_untouched() {
        let s = expected(&order(), &[]).expect("valid");
        assert_eq!(s.status, "pending");
        assert_eq!(s.refunded_minor, 0);
        assert_eq!(s.paid_by, None);
        assert_eq!(s.stock, 10);
        assert!(!s.oversold);
        assert_eq!(s.confirmations, 0);
        assert!(s.payments.is_empty());
    }

    #[test]
    fn one_capture_pays_once_and_duplicates_change_nothing() {
        let facts = [
            cap("razorpay", "pay_1", 50_000),
            cap("razorpay", "pay_1", 50_000),
        ];
        let s = expected(&order(), &facts).expect("valid");
        assert_eq!(s.status, "paid");
        assert_eq!(s.paid_by.as_deref(), Some("razorpay:pay_1"));
        assert_eq!(s.stock, 8);
        assert_eq!(s.confirmations, 1);
        assert_eq!(flag_of(&s, "razorpay", "pay_1"), None);
    }

    #[test]
    fn failed_and_authorized_attempts_never_change_the_order() {
        let s = expected(
            &order(),
            &[
                attempt("pay_0", AttemptStatus::Failed),
                attempt("pay_1", AttemptStatus::Authorized),
            ],
        )
        .expect("valid");
        assert_eq!(s.status, "pending");
        assert_eq!(s.payments.len(), 2);
        // A late failure never unpays.
        let s = expected(
            &order(),
            &[
                cap("razorpay", "pay_1", 50_000),
                attempt("pay_1", AttemptStatus::Failed),
            ],
        )
        .expect("valid");
        assert_eq!(s.status, "paid");
        assert_eq!(s.paid_by.as_deref(), Some("razorpay:pay_1"));
    }

    #[test]
    fn the_primary_is_the_smallest_valid_capture_and_the_other_needs_refund() {
        let facts = [
            cap("razorpay", "pay_b", 50_000),
            cap("razorpay", "pay_a", 50_000),
        ];
        let s = expected(&order(), &facts).expect("valid");
        assert_eq!(s.paid_by.as_deref(), Some("razorpay:pay_a"));
        assert_eq!(flag_of(&s, "razorpay", "pay_a"), None);
        assert_eq!(flag_of(&s, "razorpay", "pay_b"), Some(Flag::NeedsRefund));
        assert_eq!(s.stock, 8, "stock is decremented once");
        assert_eq!(s.confirmations, 1);

        // Refunding the extra settles it and leaves the order paid.
        let mut facts = facts.to_vec();
        facts.push(refund("rfnd_1", Some("pay_b"), 50_000));
        let s = expected(&order(), &facts).expect("valid");
        assert_eq!(s.status, "paid");
        assert_eq!(s.refunded_minor, 0);
        assert_eq!(flag_of(&s, "razorpay", "pay_b"), Some(Flag::Refunded));
        assert_eq!(
            s.refund_emails,
            BTreeSet::from(["refund:razorpay:rfnd_1".to_owned()])
        );
    }

    #[test]
    fn a_mismatched_capture_does_not_pay() {
        let s = expected(&order(), &[cap("razorpay", "pay_1", 40_000)]).expect("valid");
        assert_eq!(s.status, "pending");
        assert_eq!(s.paid_by, None);
        assert_eq!(s.stock, 10);
        assert_eq!(s.confirmations, 0);
        assert_eq!(flag_of(&s, "razorpay", "pay_1"), Some(Flag::AmountMismatch));
        let s = expected(
            &order(),
            &[
                cap("razorpay", "pay_1", 40_000),
                refund("rfnd_1", Some("pay_1"), 40_000),
            ],
        )
        .expect("valid");
        assert_eq!(flag_of(&s, "razorpay", "pay_1"), Some(Flag::Refunded));
        assert_eq!(
            s.refunded_minor, 0,
            "a mismatched capture's refund is not the order's"
        );
        // A wrong currency is a mismatch too.
        let wrong = Fact::Attempt {
            provider: "stripe".into(),
            payment_id: "pi_1".into(),
            status: AttemptStatus::Captured,
            amount_minor: Some(50_000),
            currency: Some("USD".into()),
        };
        let s = expected(&order(), &[wrong]).expect("valid");
        assert_eq!(s.status, "pending");
        assert_eq!(flag_of(&s, "stripe", "pi_1"), Some(Flag::AmountMismatch));
    }

    #[test]
    fn partial_then_full_refunds() {
        let mut facts = vec![
            cap("razorpay", "pay_1", 50_000),
            refund("rfnd_1", Some("pay_1"), 20_000),
        ];
        let s = expected(&order(), &facts).expect("valid");
        assert_eq!(s.status, "partially_refunded");
        assert_eq!(s.refunded_minor, 20_000);
        facts.push(refund("rfnd_2", Some("pay_1"), 30_000));
        let s = expected(&order(), &facts).expect("valid");
        assert_eq!(s.status, "refunded");
        assert_eq!(s.refunded_minor, 50_000);
        assert_eq!(s.stock, 8, "refunds never restock");
        assert_eq!(s.refund_emails.len(), 2);
        assert_eq!(
            flag_of(&s, "razorpay", "pay_1"),
            None,
            "the primary has no flag"
        );
    }

    #[test]
    fn a_refund_before_any_capture_counts_and_the_capture_still_pays() {
        let r = refund("rfnd_1", Some("pay_1"), 50_000);
        let s = expected(&order(), std::slice::from_ref(&r)).expect("valid");
        assert_eq!(s.status, "pending");
        assert_eq!(s.refunded_minor, 50_000);
        assert_eq!(s.refund_emails.len(), 1);
        let s = expected(&order(), &[r, cap("razorpay", "pay_1", 50_000)]).expect("valid");
        assert_eq!(s.status, "refunded");
        assert_eq!(s.paid_by.as_deref(), Some("razorpay:pay_1"));
        assert_eq!(s.stock, 8);
        assert_eq!(s.confirmations, 1);
    }

    #[test]
    fn a_refund_of_a_capture_that_turns_out_extra_stops_counting() {
        let facts = [
            refund("rfnd_1", Some("pay_b"), 10_000),
            cap("razorpay", "pay_a", 50_000),
        ];
        let s = expected(&order(), &facts).expect("valid");
        assert_eq!(s.status, "partially_refunded");
        assert_eq!(s.refunded_minor, 10_000);
        let mut facts = facts.to_vec();
        facts.push(cap("razorpay", "pay_b", 50_000));
        let s = expected(&order(), &facts).expect("valid");
        assert_eq!(s.status, "paid");
        assert_eq!(s.refunded_minor, 0);
        assert_eq!(flag_of(&s, "razorpay", "pay_b"), Some(Flag::NeedsRefund));
    }

    #[test]
    fn stripe_totals_take_the_max_with_the_singles() {
        let mut facts = vec![
            cap("stripe", "pi_1", 50_000),
            total("pi_1", 10_000),
            total("pi_1", 30_000),
        ];
        let s = expected(&order(), &facts).expect("valid");
        assert_eq!(s.refunded_minor, 30_000, "totals are not summed");
        assert_eq!(
            s.refund_emails,
            BTreeSet::from([
                "refund:stripe:ch_1:refunded:10000".to_owned(),
                "refund:stripe:ch_1:refunded:30000".to_owned(),
            ])
        );
        facts.push(Fact::Refund {
            provider: "stripe".into(),
            refund_id: "re_1".into(),
            payment_id: Some("pi_1".into()),
            amount_minor: 10_000,
        });
        facts.push(Fact::Refund {
            provider: "stripe".into(),
            refund_id: "re_2".into(),
            payment_id: Some("pi_1".into()),
            amount_minor: 25_000,
        });
        let s = expected(&order(), &facts).expect("valid");
        assert_eq!(
            s.refunded_minor, 35_000,
            "singles sum beyond the largest total"
        );
        assert_eq!(s.status, "partially_refunded");
        assert_eq!(s.refund_emails.len(), 4);
    }

    #[test]
    fn refunds_without_a_payment_id_are_summed_on_their_own() {
        let facts = [
            cap("razorpay", "pay_1", 50_000),
            refund("rfnd_1", None, 5_000),
            refund("rfnd_2", None, 5_000),
            refund("rfnd_3", Some("pay_1"), 5_000),
        ];
        let s = expected(&order(), &facts).expect("valid");
        assert_eq!(s.refunded_minor, 15_000);
    }

    #[test]
    fn oversell_marks_the_order_and_the_payment_stands() {
        let o = ModelOrder {
            stock: 1,
            ..order()
        };
        let s = expected(&o, &[cap("razorpay", "pay_1", 50_000)]).expect("valid");
        assert_eq!(s.status, "paid");
        assert_eq!(s.stock, -1);
        assert!(s.oversold);
        let s = expected(&o, &[cap("razorpay", "pay_1", 40_000)]).expect("valid");
        assert!(!s.oversold, "no valid capture, no decrement");
        assert_eq!(s.stock, 1);
    }

    #[test]
    fn the_answer_does_not_depend_on_the_order_of_the_facts() {
        let facts = vec![
            cap("razorpay", "pay_b", 50_000),
            refund("rfnd_1", Some("pay_a"), 20_000),
            cap("razorpay", "pay_a", 50_000),
            cap("razorpay", "pay_c", 1),
            refund("rfnd_2", Some("pay_b"), 50_000),
            attempt("pay_a", AttemptStatus::Failed),
        ];
        let first = expected(&order(), &facts).expect("valid");
        let mut reversed = facts.clone();
        reversed.reverse();
        assert_eq!(expected(&order(), &reversed).expect("valid"), first);
        assert_eq!(first.paid_by.as_deref(), Some("razorpay:pay_a"));
        assert_eq!(first.status, "partially_refunded");
        assert_eq!(flag_of(&first, "razorpay", "pay_b"), Some(Flag::Refunded));
        assert_eq!(
            flag_of(&first, "razorpay", "pay_c"),
            Some(Flag::AmountMismatch)
        );
    }

    #[test]
    fn conflicting_facts_with_one_identity_are_rejected() {
        let err = expected(
            &order(),
            &[
                cap("razorpay", "pay_1", 50_000),
                cap("razorpay", "pay_1", 1),
            ],
        );
        assert!(err.is_err());
    }
}
