//! Random event sets for the confluence test: per order, a plan of payment
//! attempts, captures, refunds and links over one of the five gateways,
//! instantiated twice ("twins": same amounts, ids differing only by the twin
//! tag) as (a) the abstract facts [`crate::ledger_model`] takes and (b)
//! concrete sample deliveries signed with the test secrets.
//!
//! Deterministic for a seed: a small splitmix64 generator of our own.
//!
//! Rules the generator keeps so that every set is confluent *by the spec*:
//! - distinct events have distinct delivery identities (PayU: one event per
//!   `(txnid, status)`, its identity), duplicates are the same bytes;
//! - two events giving one fact give it with the same contents (a Razorpay
//!   `payment.captured` and `order.paid`, a Stripe intent and its Checkout
//!   session carry the same amount and currency);
//! - every payment id is linked to its order by at least one event of the
//!   set that carries both (otherwise its events would be dead-lettered
//!   after `ONCEHOOK_UNLINKED_TTL`);
//! - about one order in seven is also cancelled by the shop (a
//!   [`Fact::Cancel`], applied by the runner through the ledger's
//!   `cancel`, as `POST /v1/orders/{ref}/cancel` does).

use oncehook_gateways::Gateway;
use oncehook_gateways::sample::SampleSpec;

use crate::ledger_model::{AttemptStatus, Fact, ModelOrder};

/// splitmix64: tiny, fast, good enough for test data, and stable forever.
#[derive(Debug, Clone)]
pub struct Rng(u64);

impl Rng {
    pub fn new(seed: u64) -> Rng {
        Rng(seed)
    }

    pub fn next_u64(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    }

    /// Uniform in `0..n` (`n > 0`).
    pub fn below(&mut self, n: u64) -> u64 {
        // Multiply-shift: no modulo bias worth caring about for test data.
        ((u128::from(self.next_u64()) * u128::from(n.max(1))) >> 64) as u64
    }

    /// Uniform in `lo..=hi`.
    pub fn range(&mut self, lo: i64, hi: i64) -> i64 {
        lo + self.below((hi - lo + 1) as u64) as i64
    }

    /// True with probability `percent`/100.
    pub fn chance(&mut self, percent: u64) -> bool {
        self.below(100) < percent
    }

    pub fn pick<'a, T>(&mut self, items: &'a [T]) -> &'a T {
        &items[self.below(items.len() as u64) as usize]
    }

    /// Fisher–Yates.
    pub fn shuffle<T>(&mut self, items: &mut [T]) {
        for i in (1..items.len()).rev() {
            let j = self.below(i as u64 + 1) as usize;
            items.swap(i, j);
        }
    }
}

/// What one planned event is.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Kind {
    /// A payment attempt event (`name` is the sample event name).
    Attempt(AttemptStatus),
    /// One refund of `amount`.
    Refund,
    /// A Stripe `charge.refunded` with the cumulative total `amount`.
    RefundTotal,
}

/// One event of an order's plan, before ids are given.
#[derive(Debug, Clone)]
struct PlannedEvent {
    name: &'static str,
    kind: Kind,
    /// Index of the payment in the order's plan.
    payment: usize,
    amount: i64,
    currency: String,
    /// Whether the event carries the order reference.
    with_ref: bool,
}

/// One order's plan; [`OrderPlan::twin`] turns it into concrete events.
#[derive(Debug, Clone)]
pub struct OrderPlan {
    pub index: usize,
    pub gateway: Gateway,
    pub model: ModelOrder,
    events: Vec<PlannedEvent>,
    /// The shop cancels the order, somewhere among its events.
    pub cancel: bool,
}

/// A concrete event of one twin.
#[derive(Debug, Clone)]
pub struct GenEvent {
    pub gateway: Gateway,
    /// The sample event name passed to `sample::build`.
    pub name: &'static str,
    /// The spec (timestamp filled in when the batch is signed).
    pub spec: SampleSpec,
    /// A short description for failure output.
    pub label: String,
}

/// One twin of one order: where it lives, its events and its facts.
#[derive(Debug, Clone)]
pub struct GenOrder {
    pub index: usize,
    /// `'A'` or `'B'`.
    pub twin: char,
    pub order_ref: String,
    pub sku: String,
    pub model: ModelOrder,
    pub events: Vec<GenEvent>,
    pub facts: Vec<Fact>,
    /// The shop cancels it (a [`Fact::Cancel`] among `facts`).
    pub cancel: bool,
}

/// The token every id of twin `twin` of order `index` contains, and that
/// [`normalise`] rewrites.
pub fn twin_token(index: usize, twin: char) -> String {
    format!("n{index}t{twin}")
}

/// `s` with twin `twin`'s token of order `index` replaced by a neutral one,
/// so that the twins' states can be compared.
pub fn normalise(s: &str, index: usize, twin: char) -> String {
    s.replace(&twin_token(index, twin), &format!("n{index}tX"))
}

/// Gateways that can sign an `authorized` event.
fn has_authorized(g: Gateway) -> bool {
    matches!(g, Gateway::Razorpay | Gateway::Stripe | Gateway::Standard)
}

/// Gateways whose events may leave the order reference out (carry only a
/// payment id). Cashfree always names the order; PayU's `udf1` falls back
/// to the `txnid`, which is the payment id, so it never leaves it out.
fn may_omit_ref(g: Gateway) -> bool {
    matches!(g, Gateway::Razorpay | Gateway::Stripe | Gateway::Standard)
}

fn captured_name(g: Gateway, rng: &mut Rng) -> &'static str {
    match g {
        Gateway::Razorpay if rng.chance(50) => "order.paid",
        Gateway::Razorpay => "payment.captured",
        Gateway::Cashfree => "PAYMENT_SUCCESS_WEBHOOK",
        Gateway::Payu => "success",
        Gateway::Stripe => "payment_intent.succeeded",
        Gateway::Standard => "payment.succeeded",
        other => unknown(other),
    }
}

fn failed_names(g: Gateway) -> &'static [&'static str] {
    match g {
        Gateway::Razorpay => &["payment.failed"],
        Gateway::Cashfree => &["PAYMENT_FAILED_WEBHOOK", "PAYMENT_USER_DROPPED_WEBHOOK"],
        Gateway::Payu => &["failure", "pending"],
        Gateway::Stripe => &["payment_intent.payment_failed"],
        Gateway::Standard => &["payment.failed"],
        other => unknown(other),
    }
}

fn authorized_name(g: Gateway) -> &'static str {
    match g {
        Gateway::Razorpay => "payment.authorized",
        Gateway::Stripe => "payment_intent.amount_capturable_updated",
        _ => "payment.authorized",
    }
}

fn refund_name(g: Gateway) -> Option<&'static str> {
    match g {
        Gateway::Razorpay => Some("refund.processed"),
        Gateway::Cashfree => Some("REFUND_STATUS_WEBHOOK"),
        Gateway::Payu => None,
        Gateway::Stripe => Some("refund.created"),
        Gateway::Standard => Some("payment.refunded"),
        other => unknown(other),
    }
}

/// A gateway this generator has no events for (one added to the registry
/// after it): add its names to the functions above.
fn unknown(g: Gateway) -> ! {
    panic!("the ledger generator knows no events of gateway {g}")
}

/// Splits `total` into `n` positive parts (`total >= n`).
fn split(rng: &mut Rng, total: i64, n: usize) -> Vec<i64> {
    let n = n.max(1).min(total.max(1) as usize);
    let mut cuts: Vec<i64> = (0..n - 1).map(|_| rng.range(1, total - 1)).collect();
    cuts.sort_unstable();
    cuts.dedup();
    let mut parts = Vec::new();
    let mut prev = 0;
    for c in cuts {
        parts.push(c - prev);
        prev = c;
    }
    parts.push(total - prev);
    parts
}

/// Plans order `index`.
pub fn plan(rng: &mut Rng, index: usize) -> OrderPlan {
    let gateway = *rng.pick(&Gateway::ALL);
    let currency = if gateway == Gateway::Payu || rng.chance(60) {
        "INR"
    } else {
        *rng.pick(&["USD", "EUR", "JPY"])
    }
    .to_owned();
    let amount = rng.range(100, 500_000);
    let qty = rng.range(1, 3) as i32;
    let stock = if rng.chance(20) {
        rng.range(0, i64::from(qty) - 1) as i32
    } else {
        rng.range(i64::from(qty), i64::from(qty) + 5) as i32
    };
    let model = ModelOrder {
        amount_minor: amount,
        currency: currency.clone(),
        stock,
        qty,
    };

    let mut events: Vec<PlannedEvent> = Vec::new();
    let mut payments = 0usize;
    let mut new_payment = || {
        payments += 1;
        payments - 1
    };
    let ev = |name, kind, payment, amount, currency: &str| PlannedEvent {
        name,
        kind,
        payment,
        amount,
        currency: currency.to_owned(),
        with_ref: true,
    };

    // Failed attempts before the one that works.
    for _ in 0..rng.below(3) {
        let p = new_payment();
        if has_authorized(gateway) && rng.chance(30) {
            let e = ev(
                authorized_name(gateway),
                Kind::Attempt(AttemptStatus::Authorized),
                p,
                amount,
                &currency,
            );
            events.push(e);
        }
        let names = failed_names(gateway);
        let e = ev(
            *rng.pick(names),
            Kind::Attempt(AttemptStatus::Failed),
            p,
            amount,
            &currency,
        );
        events.push(e);
    }

    // The captures: usually one, sometimes two (the customer paid twice),
    // sometimes none; any of them may carry a wrong amount or currency.
    let captures = if rng.chance(12) {
        0
    } else if rng.chance(15) {
        2
    } else {
        1
    };
    let mut captured: Vec<(usize, i64)> = Vec::new();
    for _ in 0..captures {
        let p = new_payment();
        let (mut cap_amount, mut cap_currency) = (amount, currency.clone());
        if rng.chance(10) {
            if gateway != Gateway::Payu && rng.chance(30) {
                cap_currency = if currency == "INR" { "USD" } else { "INR" }.to_owned();
            } else {
                cap_amount = if rng.chance(50) && amount > 1 {
                    amount - rng.range(1, amount - 1)
                } else {
                    amount + rng.range(1, 10_000)
                };
            }
        }
        // Stripe Checkout: the intent names no order, the session does.
        let checkout = gateway == Gateway::Stripe && rng.chance(40);
        if has_authorized(gateway) && rng.chance(25) {
            let mut e = ev(
                authorized_name(gateway),
                Kind::Attempt(AttemptStatus::Authorized),
                p,
                cap_amount,
                &cap_currency,
            );
            e.with_ref = !checkout;
            events.push(e);
        }
        let mut e = ev(
            captured_name(gateway, rng),
            Kind::Attempt(AttemptStatus::Captured),
            p,
            cap_amount,
            &cap_currency,
        );
        e.with_ref = !checkout;
        let cap_name = e.name;
        events.push(e);
        if checkout {
            let names: &[&'static str] = if rng.chance(25) {
                &[
                    "checkout.session.completed",
                    "checkout.session.async_payment_succeeded",
                ]
            } else if rng.chance(50) {
                &["checkout.session.completed"]
            } else {
                &["checkout.session.async_payment_succeeded"]
            };
            for name in names {
                events.push(ev(
                    name,
                    Kind::Attempt(AttemptStatus::Captured),
                    p,
                    cap_amount,
                    &cap_currency,
                ));
            }
        } else if gateway == Gateway::Razorpay && rng.chance(30) {
            // payment.captured and order.paid: one fact from two events.
            let other = if cap_name == "order.paid" {
                "payment.captured"
            } else {
                "order.paid"
            };
            events.push(ev(
                other,
                Kind::Attempt(AttemptStatus::Captured),
                p,
                cap_amount,
                &cap_currency,
            ));
        }
        // A late failure of the same payment never unpays.
        if rng.chance(10) {
            let mut e = ev(
                *rng.pick(failed_names(gateway)),
                Kind::Attempt(AttemptStatus::Failed),
                p,
                cap_amount,
                &cap_currency,
            );
            e.with_ref = !checkout;
            events.push(e);
        }
        captured.push((p, cap_amount));
    }

    // Refunds of captured payments (PayU has no refund webhooks).
    if let Some(refund_name) = refund_name(gateway) {
        for &(p, cap_amount) in &captured {
            if rng.chance(45) || cap_amount < 2 {
                continue;
            }
            let full = rng.chance(35);
            let total = if full {
                cap_amount
            } else {
                rng.range(1, cap_amount - 1)
            };
            let n = rng.range(1, 3) as usize;
            let parts = split(rng, total, n);
            let stripe = gateway == Gateway::Stripe;
            let mut cumulative = 0;
            let mut any = false;
            for (i, part) in parts.iter().enumerate() {
                cumulative += part;
                let last = i + 1 == parts.len();
                let single = !stripe || rng.chance(60);
                let total_event = stripe && (rng.chance(60) || (last && !any && !single));
                if single {
                    let mut e = ev(refund_name, Kind::Refund, p, *part, &currency);
                    e.with_ref = !may_omit_ref(gateway) || rng.chance(50);
                    events.push(e);
                    any = true;
                }
                if total_event {
                    let mut e = ev(
                        "charge.refunded",
                        Kind::RefundTotal,
                        p,
                        cumulative,
                        &currency,
                    );
                    e.with_ref = rng.chance(50);
                    events.push(e);
                    any = true;
                }
            }
        }
        // Rarely: a refund whose capture never reaches us (a lost webhook).
        if rng.chance(4) {
            let p = new_payment();
            events.push(ev(
                refund_name,
                Kind::Refund,
                p,
                rng.range(1, amount),
                &currency,
            ));
        }
    }

    // Payment-id-only events: on gateways that allow it, some attempt
    // events leave the order out, as long as another event of the same
    // payment names it.
    if may_omit_ref(gateway) {
        for p in 0..payments {
            let idx: Vec<usize> = (0..events.len())
                .filter(|&i| events[i].payment == p && events[i].with_ref)
                .collect();
            if idx.len() > 1 && rng.chance(40) {
                let keep = *rng.pick(&idx);
                for i in idx {
                    if i != keep && matches!(events[i].kind, Kind::Attempt(_)) && rng.chance(60) {
                        events[i].with_ref = false;
                    }
                }
            }
        }
    }
    // Every payment linked by at least one event (and never dead-lettered).
    for p in 0..payments {
        if !events.iter().any(|e| e.payment == p && e.with_ref)
            && let Some(e) = events.iter_mut().find(|e| e.payment == p)
        {
            e.with_ref = true;
        }
    }
    if gateway == Gateway::Payu {
        // PayU's identity is (txnid, status): one event per status name.
        let mut seen = std::collections::BTreeSet::new();
        events.retain(|e| seen.insert((e.payment, e.name)));
    }
    // One order in seven is cancelled by the shop, at a random place
    // among its events (the runner shuffles it in with them).
    let cancel = rng.chance(15);
    OrderPlan {
        index,
        gateway,
        model,
        events,
        cancel,
    }
}

impl OrderPlan {
    /// The twin `twin` (`'A'` or `'B'`) of this order: its ids carry
    /// [`twin_token`], everything else is the plan's.
    pub fn twin(&self, twin: char) -> GenOrder {
        let g = self.gateway;
        let tok = twin_token(self.index, twin);
        let order_ref = format!("ord_{tok}");
        let payment_id = |p: usize| match g {
            Gateway::Razorpay => format!("pay_{tok}p{p}"),
            Gateway::Cashfree => format!("cf{tok}p{p}"),
            Gateway::Payu => format!("txn{tok}p{p}"),
            Gateway::Stripe => format!("pi_{tok}p{p}"),
            Gateway::Standard => format!("pmt_{tok}p{p}"),
            other => unknown(other),
        };
        let provider = g.as_str().to_owned();
        let mut events = Vec::new();
        let mut facts = Vec::new();
        for (j, pe) in self.events.iter().enumerate() {
            let pid = payment_id(pe.payment);
            let spec = SampleSpec {
                order_ref: if pe.with_ref {
                    order_ref.clone()
                } else {
                    String::new()
                },
                payment_id: pid.clone(),
                event_id: format!("ev_{tok}e{j}"),
                amount_minor: pe.amount,
                currency: pe.currency.clone(),
                email: format!("{order_ref}@example.com"),
                timestamp: 0,
                merchant_key: None,
            };
            let fact = match pe.kind {
                Kind::Attempt(status) => Fact::Attempt {
                    provider: provider.clone(),
                    payment_id: pid.clone(),
                    status,
                    amount_minor: Some(pe.amount),
                    currency: Some(pe.currency.to_ascii_uppercase()),
                },
                Kind::Refund => Fact::Refund {
                    provider: provider.clone(),
                    refund_id: spec.refund_id(g),
                    payment_id: Some(pid.clone()),
                    amount_minor: pe.amount,
                },
                Kind::RefundTotal => Fact::RefundTotal {
                    provider: provider.clone(),
                    payment_id: pid.clone(),
                    charge: format!("ch_{}", pid.strip_prefix("pi_").unwrap_or(&pid)),
                    total_minor: pe.amount,
                },
            };
            facts.push(fact);
            if pe.with_ref {
                facts.push(Fact::Link {
                    provider: provider.clone(),
                    payment_id: pid.clone(),
                });
            }
            let label = format!(
                "{g} {name} {pid} {amount} {cur}{noref} [{eid}]",
                name = pe.name,
                amount = pe.amount,
                cur = pe.currency,
                noref = if pe.with_ref { "" } else { " (no order ref)" },
                eid = spec.event_id,
            );
            events.push(GenEvent {
                gateway: g,
                name: pe.name,
                spec,
                label,
            });
        }
        if self.cancel {
            facts.push(Fact::Cancel);
        }
        GenOrder {
            index: self.index,
            twin,
            sku: format!("sku_{tok}"),
            order_ref,
            model: self.model.clone(),
            events,
            facts,
            cancel: self.cancel,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ledger_model::expected;

    #[test]
    fn plans_are_deterministic_and_valid_model_input() {
        let (mut a, mut b) = (Rng::new(7), Rng::new(7));
        for i in 0..500 {
            let (pa, pb) = (plan(&mut a, i), plan(&mut b, i));
            let (ta, tb) = (pa.twin('A'), pb.twin('A'));
            assert_eq!(ta.facts, tb.facts);
            let twin_b = pa.twin('B');
            let sa = expected(&ta.model, &ta.facts).expect("consistent facts");
            let sb = expected(&twin_b.model, &twin_b.facts).expect("consistent facts");
            assert_eq!(sa.status, sb.status);
            assert_eq!(sa.refunded_minor, sb.refunded_minor);
            assert_eq!(
                sa.paid_by.map(|p| normalise(&p, i, 'A')),
                sb.paid_by.map(|p| normalise(&p, i, 'B'))
            );
        }
    }

    #[test]
    fn every_payment_is_linked_and_every_event_id_is_unique() {
        let mut rng = Rng::new(42);
        let mut ids = std::collections::BTreeSet::new();
        for i in 0..500 {
            let o = plan(&mut rng, i).twin('A');
            for e in &o.events {
                let linked = o.events.iter().any(|x| {
                    x.spec.payment_id == e.spec.payment_id && !x.spec.order_ref.is_empty()
                });
                assert!(linked, "{}: {} is never linked", o.order_ref, e.label);
                let identity = if e.gateway == Gateway::Payu {
                    format!("{}:{}", e.spec.payment_id, e.name)
                } else {
                    e.spec.event_id.clone()
                };
                assert!(ids.insert((e.gateway.as_str(), identity)), "{}", e.label);
            }
        }
    }

    /// Every generated event, signed and parsed back by the gateways crate,
    /// says what the facts say it says.
    #[test]
    fn every_event_parses_to_its_fact() {
        use oncehook_gateways::EventKind;
        let mut rng = Rng::new(3);
        for i in 0..300 {
            let o = plan(&mut rng, i).twin('B');
            let facts: Vec<&Fact> = o
                .facts
                .iter()
                .filter(|f| !matches!(f, Fact::Link { .. } | Fact::Cancel))
                .collect();
            assert_eq!(facts.len(), o.events.len());
            for (e, fact) in o.events.iter().zip(facts) {
                let d =
                    oncehook_gateways::sample::build(e.gateway, e.name, &e.spec, "whsec_c2VjcmV0")
                        .expect("build");
                let n = oncehook_gateways::parse(e.gateway, &d.headers, &d.body).expect("parse");
                let what = format!("{}: {n:?}", e.label);
                assert_eq!(
                    n.payment_id.as_deref(),
                    Some(e.spec.payment_id.as_str()),
                    "{what}"
                );
                let want_ref = (!e.spec.order_ref.is_empty()).then(|| o.order_ref.clone());
                assert_eq!(n.order_ref, want_ref, "{what}");
                match fact {
                    Fact::Attempt {
                        status,
                        amount_minor,
                        currency,
                        ..
                    } => {
                        let kind = match status {
                            AttemptStatus::Captured => EventKind::Captured,
                            AttemptStatus::Failed => EventKind::Failed,
                            AttemptStatus::Authorized => EventKind::Authorized,
                        };
                        assert_eq!(n.kind, kind, "{what}");
                        assert_eq!(n.amount_minor, *amount_minor, "{what}");
                        assert_eq!(n.currency, *currency, "{what}");
                    }
                    Fact::Refund { amount_minor, .. } => {
                        assert_eq!(n.kind, EventKind::Refunded, "{what}");
                        assert!(!n.cumulative_refund, "{what}");
                        assert_eq!(n.amount_minor, Some(*amount_minor), "{what}");
                        assert_eq!(n.refund_id, fact.refund_id(), "{what}");
                    }
                    Fact::RefundTotal { total_minor, .. } => {
                        assert_eq!(n.kind, EventKind::Refunded, "{what}");
                        assert!(n.cumulative_refund, "{what}");
                        assert_eq!(n.amount_minor, Some(*total_minor), "{what}");
                        assert_eq!(n.refund_id, fact.refund_id(), "{what}");
                    }
                    Fact::Link { .. } | Fact::Cancel => unreachable!(),
                }
            }
        }
    }

    #[test]
    fn the_generator_covers_the_interesting_cases() {
        let mut rng = Rng::new(1);
        let (mut extra, mut mismatch, mut totals, mut unlinked, mut oversold, mut refunded) =
            (0, 0, 0, 0, 0, 0);
        for i in 0..1000 {
            let o = plan(&mut rng, i).twin('A');
            let s = expected(&o.model, &o.facts).expect("consistent");
            for flag in s.payments.values().flatten() {
                match flag {
                    crate::ledger_model::Flag::NeedsRefund => extra += 1,
                    crate::ledger_model::Flag::AmountMismatch => mismatch += 1,
                    crate::ledger_model::Flag::Refunded => {}
                }
            }
            totals += o
                .events
                .iter()
                .filter(|e| e.name == "charge.refunded")
                .count();
            unlinked += o
                .events
                .iter()
                .filter(|e| e.spec.order_ref.is_empty())
                .count();
            oversold += usize::from(s.oversold);
            refunded += usize::from(s.status == "refunded");
        }
        for (what, n) in [
            ("extra", extra),
            ("mismatch", mismatch),
            ("totals", totals),
            ("unlinked", unlinked),
            ("oversold", oversold),
            ("refunded", refunded),
        ] {
            assert!(n > 10, "{what}: only {n} in 1000 orders");
        }
    }
}
