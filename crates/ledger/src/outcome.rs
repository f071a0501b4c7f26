//! The outcome recorded for each event of a group, with the one line an
//! operator reads in `oncehookctl trace` (`processed_webhooks.detail`).
//! Pure: everything was decided and written before.

use std::collections::BTreeMap;

use crate::store::books::OrderRow;

use super::emails::money;
use super::facts::{Event, Fact};
use super::parking::Adopted;
use super::plan::{Place, Plan};
use super::record::Fresh;
use super::state::{FLAG_AMOUNT_MISMATCH, FLAG_NEEDS_REFUND, OrderState};
use oncehook_pipeline::{Applied, Effects, Outcome};

/// Every event's outcome, and those of the parked events its links applied.
pub fn tell(
    events: &[Event<'_>],
    plan: &Plan,
    adopted: &[Adopted],
    fresh: &Fresh,
    states: &BTreeMap<i64, OrderState>,
) -> Effects {
    let mut effects = Effects::default();
    for (i, ev) in events.iter().enumerate() {
        let place = plan.places[i];
        let order = plan.order(place);
        let adopted_here = adopted
            .iter()
            .zip(&fresh.adopted)
            .filter(|(a, new)| **new && plan.linked_by.get(&a.payment) == Some(&i))
            .count();
        let told = Told {
            ev,
            place,
            fresh: fresh.events[i],
            adopted: adopted_here,
            order,
            state: order.and_then(|o| states.get(&o.id)),
        };
        effects.applied.push(told.applied());
    }
    for a in adopted {
        let Some(&by) = plan.linked_by.get(&a.payment) else {
            continue;
        };
        let Place::Order(order_id) = plan.places[by] else {
            continue;
        };
        tracing::info!(event_id = %a.event.event_id, linked_by = %events[by].event.event_id, "parked event applied");
        effects.completed_earlier.push((
            a.parked.key.clone(),
            adopted_detail(&events[by], plan, order_id),
        ));
    }
    effects
}

/// What one event did.
struct Told<'a> {
    ev: &'a Event<'a>,
    place: Place,
    /// Its fact was new.
    fresh: bool,
    /// How many parked facts its link applied.
    adopted: usize,
    order: Option<&'a OrderRow>,
    /// The order's recomputed state, if the group recomputed it.
    state: Option<&'a OrderState>,
}

impl Told<'_> {
    /// The order and the fact the event recorded, or the outcome of an
    /// event that recorded none (parked, linking only, not acted on).
    fn recorded(&self) -> Result<(&OrderRow, &Fact), Applied> {
        let event = self.ev.event;
        let payment_id = event.payment_id.as_deref().unwrap_or("-");
        match (self.place, self.order, &self.ev.fact) {
            (Place::AwaitingOrder, ..) => Err(Applied::new(
                Outcome::Parked,
                format!(
                    "order {} does not exist yet; parked until it is created (or ONCEHOOK_UNLINKED_TTL passes)",
                    event.order_ref.as_deref().unwrap_or("-")
                ),
            )),
            (Place::Parked, ..) => Err(Applied::new(
                Outcome::Parked,
                format!(
                    "payment {payment_id} is not linked to an order yet; parked until an event links it"
                ),
            )),
            (_, Some(order), Some(fact)) => Ok((order, fact)),
            (_, Some(order), None) if self.adopted > 0 => Err(Applied::new(
                Outcome::Applied,
                format!(
                    "{} linked payment {payment_id} to order {}: {} parked fact(s) applied; order is {}",
                    event.event_type,
                    order.order_ref,
                    self.adopted,
                    self.status(order)
                ),
            )),
            _ => Err(Applied::new(
                Outcome::Ignored,
                format!("event type {} is not acted on", event.event_type),
            )),
        }
    }

    fn applied(&self) -> Applied {
        let (order, fact) = match self.recorded() {
            Ok(recorded) => recorded,
            Err(applied) => return applied,
        };
        if !self.fresh && self.adopted == 0 {
            return Applied::new(
                Outcome::Ignored,
                format!("{} was already recorded", fact.describe()),
            );
        }
        if !fact.moves_the_order() && self.adopted == 0 {
            return Applied::new(
                Outcome::Applied,
                format!(
                    "{} recorded; order {} stays {}",
                    fact.describe(),
                    order.order_ref,
                    self.status(order)
                ),
            );
        }
        let summary = self.summary(order);
        match (fact, self.flag(fact)) {
            (Fact::Attempt { payment_id, .. }, Some(flag)) => Applied::new(
                Outcome::Flagged,
                format!(
                    "captured payment {payment_id} flagged {flag} (paid by {}); {summary}",
                    self.state.and_then(|s| s.paid_by.as_deref()).unwrap_or("-")
                ),
            ),
            (
                Fact::Attempt {
                    status: "captured",
                    payment_id,
                },
                None,
            ) => Applied::new(
                Outcome::Applied,
                format!("captured payment {payment_id} recorded; {summary}"),
            ),
            _ => Applied::new(
                Outcome::Applied,
                format!("{} recorded; {summary}", fact.describe()),
            ),
        }
    }

    fn status<'o>(&'o self, order: &'o OrderRow) -> &'o str {
        self.state.map_or(order.status.as_str(), |s| s.status)
    }

    fn summary(&self, order: &OrderRow) -> String {
        let refunded = self
            .state
            .map_or(order.refunded_minor, |s| s.refunded_minor);
        let adopted = if self.adopted > 0 {
            format!(" ({} parked fact(s) applied)", self.adopted)
        } else {
            String::new()
        };
        format!(
            "order {} is {} (refunded {}){adopted}",
            order.order_ref,
            self.status(order),
            money(refunded, &order.currency)
        )
    }

    /// A captured payment's flag that needs a human.
    fn flag(&self, fact: &Fact) -> Option<&'static str> {
        let Fact::Attempt {
            status: "captured",
            payment_id,
        } = fact
        else {
            return None;
        };
        let key = (
            self.ev.event.provider.as_str().to_owned(),
            payment_id.clone(),
        );
        match self.state?.flags.get(&key).copied().flatten() {
            Some(flag @ (FLAG_NEEDS_REFUND | FLAG_AMOUNT_MISMATCH)) => Some(flag),
            _ => None,
        }
    }
}

/// The outcome of a parked event applied when `ev`'s link arrived.
fn adopted_detail(ev: &Event<'_>, plan: &Plan, order_id: i64) -> Applied {
    let order_ref = plan
        .orders
        .get(&order_id)
        .map_or("-", |o| o.order_ref.as_str());
    Applied::new(
        Outcome::Applied,
        format!(
            "applied when {} linked payment {} to order {order_ref}",
            ev.event.event_id,
            ev.event.payment_id.as_deref().unwrap_or("-")
        ),
    )
}
