//! Where each event of a group belongs: its order by reference (the shop's
//! `order_ref`, or a gateway's own reference registered with the order,
//! such as Razorpay's `order_…` id), else the order its payment is linked to — by a link already recorded, or by one
//! an earlier event of the same group makes — else nowhere yet (parked).
//! Pure: the orders were locked, with the group's links, before.

use std::collections::{BTreeMap, HashMap};

use crate::store::books::{GatewayRef, LockedOrder, NewLink, OrderRow, PaymentKey};

use super::facts::Event;

/// Where one event belongs.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Place {
    /// This order (by id).
    Order(i64),
    /// Its payment is linked to no order yet: it waits, parked.
    Parked,
    /// It names an order no order has as its reference yet: it waits,
    /// parked, for the order's creation.
    AwaitingOrder,
    /// An event type not acted on, naming no order oncehook knows.
    Ignored,
}

/// The group's orders, each event's place and the links the group makes.
#[derive(Debug, Default)]
pub struct Plan {
    /// The locked orders, by id.
    pub orders: BTreeMap<i64, OrderRow>,
    /// One per event, in the group's order.
    pub places: Vec<Place>,
    /// New payment → order links, each made by the first event naming both.
    pub links: Vec<NewLink>,
    /// Which event (by index) makes the new link of a payment.
    pub linked_by: HashMap<PaymentKey, usize>,
}

impl Plan {
    /// Places every event; an event that records a fact for an order
    /// reference no order has waits for that order.
    pub fn new(events: &[Event<'_>], locked: Vec<LockedOrder>) -> Plan {
        let mut plan = Plan::default();
        let mut by_ref: HashMap<String, i64> = HashMap::new();
        let mut links: HashMap<PaymentKey, i64> = HashMap::new();
        let mut by_gateway_ref: HashMap<GatewayRef, i64> = HashMap::new();
        for LockedOrder {
            order,
            linked,
            known_as,
        } in locked
        {
            by_ref.insert(order.order_ref.clone(), order.id);
            for name in known_as {
                by_gateway_ref.insert(name, order.id);
            }
            for payment in linked {
                links.insert(payment, order.id);
            }
            plan.orders.insert(order.id, order);
        }
        plan.places = vec![Place::Ignored; events.len()];
        // Events naming their order first: their links serve the others.
        for (i, ev) in events.iter().enumerate() {
            let Some(order_ref) = ev.order_ref() else {
                continue;
            };
            let found = by_ref
                .get(order_ref)
                .or_else(|| by_gateway_ref.get(&gateway_ref(ev)?));
            let Some(&id) = found else {
                if ev.fact.is_some() {
                    plan.places[i] = Place::AwaitingOrder;
                }
                continue;
            };
            plan.places[i] = Place::Order(id);
            if let Some(payment) = &ev.payment
                && !links.contains_key(payment)
            {
                links.insert(payment.clone(), id);
                plan.linked_by.insert(payment.clone(), i);
                plan.links.push(NewLink {
                    payment: payment.clone(),
                    order_id: id,
                    event_id: ev.event.event_id.clone(),
                });
            }
        }
        for (i, ev) in events.iter().enumerate() {
            if ev.order_ref().is_some() || ev.fact.is_none() {
                continue;
            }
            plan.places[i] = match ev.payment.as_ref().and_then(|p| links.get(p)) {
                Some(&id) => Place::Order(id),
                None => Place::Parked,
            };
        }
        plan
    }

    pub fn order(&self, place: Place) -> Option<&OrderRow> {
        match place {
            Place::Order(id) => self.orders.get(&id),
            Place::Parked | Place::AwaitingOrder | Place::Ignored => None,
        }
    }
}

/// The event's order reference read as its gateway's own reference.
pub fn gateway_ref(ev: &Event<'_>) -> Option<GatewayRef> {
    Some(GatewayRef {
        gateway: ev.event.provider.as_str().to_owned(),
        gateway_ref: ev.order_ref()?.to_owned(),
    })
}
