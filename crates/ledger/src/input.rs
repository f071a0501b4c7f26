//! What comes into the ledger, one type per road a fact takes, each with
//! what the ledger answers for it: new deliveries (the worker's group), an
//! order the shop creates or cancels, references a gateway told us, orders
//! an older release wrote. Plain values: the roads themselves are
//! `roads`'.

use oncehook_pipeline::Delivery;

use crate::store::books::GatewayRef;
use crate::store::shop::ShopOrder;

/// New deliveries: the pipeline's group, claimed with the advisory locks
/// the ledger names for them (`Effect::locks`), which the road therefore
/// does not take again. The answer is each one's outcome, for the pipeline
/// to record.
#[derive(Debug, Clone, Copy)]
pub struct Deliveries<'a>(pub &'a [&'a Delivery]);

/// The shop creates this order (its items and gateway references), in the
/// caller's transaction: the references' locks first (a webhook that came
/// before the order — the customer paid while the call was in flight —
/// and parked waits for them), then the order, then the events that
/// waited for it, applied with their outcomes recorded. The answer says
/// how it ended (on anything but [`Creation::Created`], roll back).
#[derive(Debug, Clone, Copy)]
pub struct Create<'a> {
    pub order: &'a ShopOrder,
}

/// What [`Create`] did.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Creation {
    /// The order is created; this many waiting events were applied to it.
    Created { applied: usize },
    /// An order with this reference exists.
    RefTaken,
    /// A gateway reference is registered for another order.
    GatewayRefTaken(GatewayRef),
}

/// A gateway told us its own references for an existing order (the
/// reconciler found Razorpay orders whose `receipt` is the order's
/// reference): they are registered with the order, after their advisory
/// locks, and the events that waited for them come in, as for a creation.
/// A reference another order has already stays with it. The answer is what
/// became of each reference, and how many waiting events were applied.
#[derive(Debug, Clone, Copy)]
pub struct Known<'a> {
    pub order_ref: &'a str,
    pub gateway_refs: &'a [GatewayRef],
}

/// What [`Known`] did.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Registered {
    pub refs: Vec<crate::store::gateway_refs::RefRegistration>,
    /// Waiting events applied to the order.
    pub applied: usize,
}

/// The shop cancels this order, on behalf of `by`; what it causes joins
/// the trace `trace_parent` (the caller's request). The answer is what
/// cancelling did.
#[derive(Debug, Clone, Copy)]
pub struct Cancel<'a> {
    pub order_ref: &'a str,
    pub by: &'a str,
    pub reason: &'a str,
    pub trace_parent: Option<&'a str>,
}

/// Orders whose facts an older release's binary recorded (while a release
/// rolled out): each is recomputed from all its facts through the one
/// tail, as if a fact had just come for it (`catch_up`). The answer is how
/// many of the orders it found.
#[derive(Debug, Clone, Copy)]
pub struct CatchUp<'a> {
    pub order_refs: &'a [String],
}
