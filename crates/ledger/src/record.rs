//! Recording a group's facts: the links its events make, the attempts and
//! refunds of the events that found their order, and the facts of the
//! parked events their links adopted — all in one statement — and which of
//! them were new (the first of two equal facts in the group counts as the
//! new one, as when they come one by one).

use std::collections::HashSet;

use crate::store::books::{NewAttempt, NewFacts, NewRefund, OrderRow, PaymentKey, Written};

use super::facts::{Event, Fact};
use super::parking::Adopted;
use super::plan::{Place, Plan};

/// Where a fact sits in [`NewFacts`].
#[derive(Debug, Clone, Copy)]
enum Slot {
    Attempt(usize),
    Refund(usize),
}

/// A group's facts to record, and whose they are.
#[derive(Debug, Default)]
pub struct Recording {
    pub facts: NewFacts,
    /// Per event: its fact's slot (none for an event recording nothing).
    events: Vec<Option<Slot>>,
    /// Per adopted event: its fact's slot and its order.
    adopted: Vec<(Slot, i64)>,
}

/// Which facts were new.
#[derive(Debug, Default)]
pub struct Fresh {
    /// Per event: its fact was new.
    pub events: Vec<bool>,
    /// Per adopted event: its fact was new.
    pub adopted: Vec<bool>,
}

impl Recording {
    pub fn new(events: &[Event<'_>], plan: &Plan, adopted: &[Adopted]) -> Recording {
        let mut r = Recording {
            facts: NewFacts {
                links: plan.links.clone(),
                ..NewFacts::default()
            },
            ..Recording::default()
        };
        for (ev, place) in events.iter().zip(&plan.places) {
            let slot = match (&ev.fact, place) {
                (Some(fact), Place::Order(order_id)) => Some(r.push(ev.event, fact, *order_id)),
                _ => None,
            };
            r.events.push(slot);
        }
        for a in adopted {
            let order_id = plan
                .links
                .iter()
                .find(|l| l.payment == a.payment)
                .map(|l| l.order_id);
            if let Some(order_id) = order_id {
                let slot = r.push(&a.event, &a.fact, order_id);
                r.adopted.push((slot, order_id));
            }
        }
        r
    }

    fn push(
        &mut self,
        event: &oncehook_gateways::NormalizedEvent,
        fact: &Fact,
        order_id: i64,
    ) -> Slot {
        match fact {
            Fact::Attempt { status, payment_id } => {
                self.facts.attempts.push(NewAttempt {
                    payment: PaymentKey {
                        provider: event.provider.as_str().to_owned(),
                        payment_id: payment_id.clone(),
                    },
                    order_id,
                    status: (*status).to_owned(),
                    amount_minor: event.amount_minor,
                    currency: event.currency.clone(),
                    event_id: event.event_id.clone(),
                });
                Slot::Attempt(self.facts.attempts.len() - 1)
            }
            Fact::Refund { refund_id, amount } => {
                self.facts.refunds.push(NewRefund {
                    provider: event.provider.as_str().to_owned(),
                    refund_id: refund_id.clone(),
                    payment_id: event.payment_id.clone(),
                    order_id,
                    amount_minor: *amount,
                    currency: event.currency.clone(),
                    event_id: event.event_id.clone(),
                    cumulative: event.cumulative_refund,
                });
                Slot::Refund(self.facts.refunds.len() - 1)
            }
        }
    }

    /// Which facts `written` says were new.
    pub fn fresh(&self, written: &Written) -> Fresh {
        let attempts: HashSet<(&PaymentKey, &str)> = written
            .attempts
            .iter()
            .map(|(p, s)| (p, s.as_str()))
            .collect();
        let refunds: HashSet<(&str, &str)> = written
            .refunds
            .iter()
            .map(|(p, r)| (p.as_str(), r.as_str()))
            .collect();
        let mut new_attempt = vec![false; self.facts.attempts.len()];
        let mut seen = HashSet::new();
        for (i, a) in self.facts.attempts.iter().enumerate() {
            let key = (&a.payment, a.status.as_str());
            new_attempt[i] = attempts.contains(&key) && seen.insert(key);
        }
        let mut new_refund = vec![false; self.facts.refunds.len()];
        let mut seen = HashSet::new();
        for (i, r) in self.facts.refunds.iter().enumerate() {
            let key = (r.provider.as_str(), r.refund_id.as_str());
            new_refund[i] = refunds.contains(&key) && seen.insert(key);
        }
        let is_new = |slot: Slot| match slot {
            Slot::Attempt(i) => new_attempt[i],
            Slot::Refund(i) => new_refund[i],
        };
        Fresh {
            events: self.events.iter().map(|s| s.is_some_and(is_new)).collect(),
            adopted: self.adopted.iter().map(|(s, _)| is_new(*s)).collect(),
        }
    }

    /// The orders whose state new facts may change, in the order the group
    /// first touched them.
    pub fn touched<'p>(&self, plan: &'p Plan, fresh: &Fresh) -> Vec<&'p OrderRow> {
        let moves = |slot: Slot| match slot {
            Slot::Attempt(i) => self.facts.attempts[i].status == "captured",
            Slot::Refund(_) => true,
        };
        let from_events = self
            .events
            .iter()
            .zip(&fresh.events)
            .filter_map(|(slot, new)| slot.filter(|_| *new));
        let from_adopted = self
            .adopted
            .iter()
            .zip(&fresh.adopted)
            .filter(|(_, new)| **new)
            .map(|((slot, _), _)| *slot);
        let mut seen = HashSet::new();
        from_events
            .chain(from_adopted)
            .filter(|slot| moves(*slot))
            .map(|slot| self.order_of(slot))
            .filter(|id| seen.insert(*id))
            .filter_map(|id| plan.orders.get(&id))
            .collect()
    }

    /// The slots of the facts recorded new (the group's, then the adopted).
    fn new_slots<'a>(&'a self, fresh: &'a Fresh) -> impl Iterator<Item = Slot> + 'a {
        self.events
            .iter()
            .zip(&fresh.events)
            .map(|(slot, new)| (*slot, *new))
            .chain(
                self.adopted
                    .iter()
                    .zip(&fresh.adopted)
                    .map(|((slot, _), new)| (Some(*slot), *new)),
            )
            .filter_map(|(slot, new)| slot.filter(|_| new))
    }

    /// The orders a new fact was recorded for (each once), whether or not
    /// the fact can change their state: their version grows.
    pub fn orders_of_new_facts(&self, fresh: &Fresh) -> Vec<i64> {
        let mut seen = HashSet::new();
        self.new_slots(fresh)
            .map(|slot| self.order_of(slot))
            .filter(|id| seen.insert(*id))
            .collect()
    }

    /// The order a recorded fact belongs to.
    fn order_of(&self, slot: Slot) -> i64 {
        match slot {
            Slot::Attempt(i) => self.facts.attempts[i].order_id,
            Slot::Refund(i) => self.facts.refunds[i].order_id,
        }
    }

    /// The refunds recorded new, for their emails and order events.
    pub fn new_refunds<'a>(&'a self, fresh: &'a Fresh) -> impl Iterator<Item = &'a NewRefund> {
        self.new_slots(fresh).filter_map(move |slot| match slot {
            Slot::Refund(i) => self.facts.refunds.get(i),
            Slot::Attempt(_) => None,
        })
    }

    /// The failed attempts recorded new, for their order events.
    pub fn new_failures<'a>(&'a self, fresh: &'a Fresh) -> impl Iterator<Item = &'a NewAttempt> {
        self.new_slots(fresh).filter_map(move |slot| match slot {
            Slot::Attempt(i) => self.facts.attempts.get(i).filter(|a| a.status == "failed"),
            Slot::Refund(_) => None,
        })
    }
}
